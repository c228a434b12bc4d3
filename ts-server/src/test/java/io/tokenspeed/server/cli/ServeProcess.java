package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.metrics.PrometheusText;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A {@code tokenspeed serve} (or {@code router}) process of the shaded jar, as operators run it:
 * started on a free port, waited for until {@code /ready} answers 200, stopped with SIGTERM.
 */
final class ServeProcess implements AutoCloseable {
  private static final Pattern LISTENING = Pattern.compile("listening on http://[^:]+:(\\d+)");

  final Process process;
  final Path stderr;
  final int port;
  final HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

  /** The launcher's descendants seen so far (see {@link #noteDescendants}). */
  private final List<ProcessHandle> descendants = new ArrayList<>();

  private ServeProcess(Process process, Path stderr, int port) {
    this.process = process;
    this.stderr = stderr;
    this.port = port;
  }

  /** Starts {@code serve ARGS --port 0} and waits until it is ready (at most the timeout). */
  static ServeProcess start(Path workDir, List<String> args, long timeoutSeconds)
      throws IOException, InterruptedException {
    return start(workDir, List.of(), args, timeoutSeconds);
  }

  /**
   * Starts {@code WRAPPER java -jar tokenspeed.jar serve --port 0 ARGS}: the wrapper (a command
   * that ends by exec'ing its arguments, such as {@code unshare}) keeps the server's pid the
   * process's own.
   */
  static ServeProcess start(
      Path workDir, List<String> wrapper, List<String> args, long timeoutSeconds)
      throws IOException, InterruptedException {
    return start(workDir, wrapper, Map.of(), "serve", args, 0, timeoutSeconds);
  }

  /**
   * Starts {@code java -jar tokenspeed.jar COMMAND --port 0 ARGS} with {@code env} added to this
   * process's environment (a secret, say), and waits until its {@code /ready} answers 200: {@code
   * serve}, or {@code router}, which is ready once every role has a ready backend.
   */
  static ServeProcess start(
      Path workDir,
      Map<String, String> env,
      String subcommand,
      List<String> args,
      long timeoutSeconds)
      throws IOException, InterruptedException {
    return start(workDir, List.of(), env, subcommand, args, 0, timeoutSeconds);
  }

  /**
   * {@link #start(Path, Map, String, List, long)} on {@code port} rather than a free one: a process
   * restarted where its clients (a router's backend list) know it.
   */
  static ServeProcess start(
      Path workDir,
      Map<String, String> env,
      String subcommand,
      List<String> args,
      int port,
      long timeoutSeconds)
      throws IOException, InterruptedException {
    return start(workDir, List.of(), env, subcommand, args, port, timeoutSeconds);
  }

  private static ServeProcess start(
      Path workDir,
      List<String> wrapper,
      Map<String, String> env,
      String subcommand,
      List<String> args,
      int fixedPort,
      long timeoutSeconds)
      throws IOException, InterruptedException {
    Path jar = Path.of(System.getProperty("tokenspeed.jar", "target/tokenspeed.jar"));
    assertTrue(Files.isRegularFile(jar), () -> "no executable jar at " + jar.toAbsolutePath());
    List<String> command = new ArrayList<>(wrapper);
    command.addAll(
        List.of(
            Path.of(System.getProperty("java.home"), "bin", "java").toString(),
            "--add-modules",
            "jdk.incubator.vector",
            "-jar",
            jar.toAbsolutePath().toString(),
            subcommand,
            "--port",
            Integer.toString(fixedPort)));
    command.addAll(args);
    Path out = Files.createTempFile(workDir, "serve-out", ".txt");
    Path err = Files.createTempFile(workDir, "serve-err", ".txt");
    ProcessBuilder builder =
        new ProcessBuilder(command)
            .directory(workDir.toFile())
            .redirectOutput(out.toFile())
            .redirectError(err.toFile());
    builder.environment().putAll(env);
    Process p = builder.start();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
    int port = -1;
    while (port < 0) {
      if (!p.isAlive()) {
        throw new AssertionError(
            subcommand + " exited with " + p.exitValue() + ": " + Files.readString(err));
      }
      if (System.nanoTime() > deadline) {
        kill(p, p.descendants().toList());
        throw new AssertionError(subcommand + " did not start listening: " + Files.readString(err));
      }
      Matcher m = LISTENING.matcher(Files.readString(err, StandardCharsets.UTF_8));
      if (m.find()) {
        port = Integer.parseInt(m.group(1));
      } else {
        Thread.sleep(50);
      }
    }
    ServeProcess s = new ServeProcess(p, err, port);
    while (!s.ready()) {
      if (!p.isAlive() || System.nanoTime() > deadline) {
        String exited = p.isAlive() ? "" : " (it exited with " + p.exitValue() + ")";
        s.close();
        throw new AssertionError(subcommand + " did not turn ready" + exited + ": " + s.stderr());
      }
      Thread.sleep(50);
    }
    return s;
  }

  /**
   * Whether {@code /ready} answers 200; false when nothing answers because the server is exiting (a
   * start-up failure closes the listener before the process ends).
   */
  private boolean ready() throws InterruptedException {
    try {
      return get("/ready").statusCode() == 200;
    } catch (UncheckedIOException e) {
      if (process.waitFor(30, TimeUnit.SECONDS)) {
        return false;
      }
      throw e;
    }
  }

  URI uri(String path) {
    return URI.create("http://127.0.0.1:" + port + path);
  }

  HttpResponse<String> get(String path) {
    return send(HttpRequest.newBuilder(uri(path)).GET().build());
  }

  /** A scrape of {@code /metrics}, parsed (it must answer 200). */
  Map<String, PrometheusText.Family> metrics() {
    HttpResponse<String> r = get("/metrics");
    assertEquals(200, r.statusCode(), r.body());
    return PrometheusText.parse(r.body());
  }

  HttpResponse<String> post(String path, String json) {
    return send(
        HttpRequest.newBuilder(uri(path))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(json))
            .build());
  }

  HttpResponse<String> send(HttpRequest r) {
    try {
      return client.send(r, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  String stderr() {
    try {
      return Files.readString(stderr, StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Sends SIGTERM and waits for the exit; returns the exit code. */
  int terminate(long timeoutSeconds) throws InterruptedException {
    noteDescendants();
    process.destroy();
    if (!process.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
      kill(process, descendants);
      throw new AssertionError("serve did not stop after SIGTERM: " + stderr());
    }
    return process.exitValue();
  }

  /**
   * Kills the process with SIGKILL, as a crash or the OOM killer would: no shutdown hook runs, the
   * kernel closes its sockets. Returns once it has exited (at most 10 s).
   */
  void crash() throws InterruptedException {
    noteDescendants();
    process.destroyForcibly();
    if (!process.waitFor(10, TimeUnit.SECONDS)) {
      throw new AssertionError("pid " + process.pid() + " outlived SIGKILL by 10 s");
    }
  }

  /**
   * Stops the server with SIGTERM (SIGKILL after 30 s), then kills whatever of its descendants (the
   * rank processes of {@code --tp N}) outlived it, so that no test leaves them running.
   */
  @Override
  public void close() throws InterruptedException {
    noteDescendants();
    if (process.isAlive()) {
      process.destroy();
      if (!process.waitFor(30, TimeUnit.SECONDS)) {
        process.destroyForcibly();
      }
    }
    kill(process, descendants);
  }

  /**
   * Remembers the launcher's descendants while it lives: once it has exited, its orphans are no
   * longer its descendants.
   */
  private void noteDescendants() {
    process.descendants().filter(h -> !descendants.contains(h)).forEach(descendants::add);
  }

  /** Kills {@code p}, then {@code descendants} (taken before it died) and any it still has. */
  private static void kill(Process p, List<ProcessHandle> descendants) {
    List<ProcessHandle> all = new ArrayList<>(descendants);
    p.descendants().forEach(all::add);
    p.destroyForcibly();
    for (ProcessHandle h : all) {
      h.destroyForcibly();
    }
    for (ProcessHandle h : all) {
      h.onExit().completeOnTimeout(h, 10, TimeUnit.SECONDS).join();
    }
  }

  /** Waits {@code d} (for polls). */
  static void pause(Duration d) throws InterruptedException {
    Thread.sleep(d.toMillis());
  }
}

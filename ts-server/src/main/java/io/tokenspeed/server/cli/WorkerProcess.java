package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestMetrics;
import io.tokenspeed.model.sampling.SamplingParams;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * A worker JVM of a command that runs several processes (the demo, the TTFT benchmark): the {@code
 * java} and classpath of this JVM, the Vector API and native access enabled, this jar's main class
 * with {@code args}. Each line it prints on stdout is one JSON object handed to the caller; its
 * stderr is relayed line by line, prefixed with its role (the JVM's notice of the incubator module
 * left out, its own or, at {@code --tp N}, a rank's).
 */
final class WorkerProcess {
  private static final ObjectMapper JSON = new ObjectMapper();

  private WorkerProcess() {}

  /**
   * The command line of a JVM of this process's java, flags and classpath running {@code tokenspeed
   * args}.
   */
  static List<String> command(List<String> args) {
    List<String> cmd = new ArrayList<>();
    cmd.add(
        ProcessHandle.current()
            .info()
            .command()
            .orElse(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
    cmd.add("--add-modules");
    cmd.add("jdk.incubator.vector");
    cmd.add("--enable-native-access=ALL-UNNAMED");
    cmd.add("-cp");
    cmd.add(System.getProperty("java.class.path"));
    cmd.add(TokenSpeedCli.class.getName());
    cmd.addAll(args);
    return cmd;
  }

  /**
   * Runs the worker to its end.
   *
   * @throws WorkerFailedException when it exits with a non-zero status
   */
  static void run(String role, List<String> args, Consumer<JsonNode> onLine, PrintWriter err)
      throws IOException, InterruptedException {
    Process p = new ProcessBuilder(command(args)).start();
    p.getOutputStream().close();
    Thread relay =
        Thread.ofPlatform()
            .daemon(true)
            .start(
                () -> {
                  try (BufferedReader r =
                      new BufferedReader(
                          new InputStreamReader(p.getErrorStream(), StandardCharsets.UTF_8))) {
                    for (String line; (line = r.readLine()) != null; ) {
                      if (!line.replaceFirst("^\\[rank [0-9]+\\] ", "")
                          .startsWith("WARNING: Using incubator modules")) {
                        synchronized (err) {
                          err.println("  " + role + ": " + line);
                          err.flush();
                        }
                      }
                    }
                  } catch (IOException e) {
                    throw new UncheckedIOException(e);
                  }
                });
    try (BufferedReader r =
        new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
      for (String line; (line = r.readLine()) != null; ) {
        onLine.accept(JSON.readTree(line));
      }
    }
    int rc = p.waitFor();
    relay.join();
    if (rc != 0) {
      throw new WorkerFailedException(role, rc);
    }
  }

  /**
   * A worker that exited with a non-zero status. Its own error lines have been relayed already, so
   * the command reports this in one line and exits with the worker's status.
   */
  static final class WorkerFailedException extends RuntimeException {
    private final int exitCode;

    WorkerFailedException(String role, int exitCode) {
      super(
          "the "
              + role
              + " process failed with exit code "
              + exitCode
              + " (its errors are above, prefixed with its role)");
      this.exitCode = exitCode;
    }

    /** The worker's exit status. */
    int exitCode() {
      return exitCode;
    }
  }

  /** Serves {@code prompt} greedily for {@code tokens} tokens on {@code e}; a failure throws. */
  static GenerationResult serve(Engine e, int[] prompt, int tokens) throws Exception {
    GenerationResult r =
        e.submit(prompt, SamplingParams.greedy(tokens)).result().get(30, TimeUnit.MINUTES);
    if (r.failure().isPresent()) {
      throw new IllegalStateException("a worker's request failed: " + r.error());
    }
    return r;
  }

  /**
   * Waits until {@code e}'s published figures, taken at {@code sinceNs} ({@link System#nanoTime})
   * or later, show it idle with no storage work left: its write-through done (on a replica, every
   * rank's writes completed and agreed). Returns false when {@code timeoutNs} passed first.
   */
  static boolean awaitStorageIdle(Engine e, long sinceNs, long timeoutNs)
      throws InterruptedException {
    long deadline = System.nanoTime() + timeoutNs;
    while (true) {
      EngineMetrics m = e.metrics();
      if (m.timeNs() - sinceNs >= 0
          && m.idle()
          && m.storage().map(s -> !s.pending()).orElse(true)) {
        return true;
      }
      if (System.nanoTime() - deadline >= 0) {
        return false;
      }
      Thread.sleep(5);
    }
  }

  /**
   * Adds one served request to {@code line}: its cohort and index, the figures of {@link
   * RequestMetrics} in milliseconds and tokens, and the generated ids.
   */
  static ObjectNode requestLine(ObjectNode line, String cohort, int index, GenerationResult r) {
    RequestMetrics m = r.metrics();
    line.put("cohort", cohort);
    line.put("index", index);
    line.put("prompt_tokens", m.promptTokens());
    line.put("queue_ms", m.queueNs() / 1e6);
    line.put("ttft_ms", m.ttftNs() / 1e6);
    line.put("reused_device_tokens", m.reusedDeviceTokens());
    line.put("reused_host_tokens", m.reusedHostTokens());
    line.put("reused_storage_tokens", m.reusedStorageTokens());
    line.put("computed_tokens", m.computedTokens());
    var ids = line.putArray("tokens");
    for (int t : r.tokens()) {
      ids.add(t);
    }
    return line;
  }
}

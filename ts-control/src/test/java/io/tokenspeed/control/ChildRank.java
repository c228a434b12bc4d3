package io.tokenspeed.control;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A {@link ControlChild} in its own JVM: its standard output is collected line by line, its
 * standard error goes to a file every failure message quotes, its standard input stays open until
 * {@link #release()}, and every wait on it is bounded (an overrunning child is destroyed).
 */
final class ChildRank implements AutoCloseable {

  private static final String END = "\u0000end";

  final int rank;
  private final Process process;
  private final Path stderr;
  private final OutputStream stdin;
  private final BlockingQueue<String> pending = new LinkedBlockingQueue<>();
  private final List<String> lines = new ArrayList<>();

  private ChildRank(int rank, Process process, Path stderr) {
    this.rank = rank;
    this.process = process;
    this.stderr = stderr;
    this.stdin = process.getOutputStream();
    Thread.ofPlatform().daemon().name("child-rank-" + rank).start(this::readLines);
  }

  static ChildRank start(Path workDir, int rank, List<String> args) throws IOException {
    List<String> command = new ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    command.addAll(List.of("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx128m"));
    command.addAll(List.of("-cp", classpath(), ControlChild.class.getName()));
    command.addAll(args);
    Path stderr = workDir.resolve("rank" + rank + ".stderr");
    Process process = new ProcessBuilder(command).redirectError(stderr.toFile()).start();
    return new ChildRank(rank, process, stderr);
  }

  /** The locations of ts-control, its tests and ts-core first, then the runner's classpath. */
  private static String classpath() {
    Set<String> entries = new LinkedHashSet<>();
    entries.add(location(RelayExchange.class));
    entries.add(location(ControlChild.class));
    entries.add(location(io.tokenspeed.core.storage.StorageDone.class));
    for (String entry : System.getProperty("java.class.path").split(File.pathSeparator)) {
      if (!entry.isEmpty()) {
        entries.add(entry);
      }
    }
    return String.join(File.pathSeparator, entries);
  }

  private static String location(Class<?> type) {
    try {
      return Path.of(type.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
    } catch (URISyntaxException e) {
      throw new IllegalStateException("no code source for " + type, e);
    }
  }

  long pid() {
    return process.pid();
  }

  /** Sends one line to the child's standard input. */
  void send(String line) throws IOException {
    stdin.write((line + "\n").getBytes(StandardCharsets.UTF_8));
    stdin.flush();
  }

  /** Closes the child's standard input: a child holding after a failure may now exit. */
  void release() {
    try {
      stdin.close();
    } catch (IOException ignored) {
      // The child is gone already.
    }
  }

  /** Waits for a line starting with {@code prefix}; fails when the child ends or time runs out. */
  String awaitLine(String prefix, Duration timeout) throws InterruptedException {
    long deadlineNs = System.nanoTime() + timeout.toNanos();
    while (true) {
      long leftNs = deadlineNs - System.nanoTime();
      String line = leftNs < 0 ? null : pending.poll(leftNs, TimeUnit.NANOSECONDS);
      if (line == null || line.equals(END)) {
        String state = describe();
        close();
        throw new AssertionError(
            "rank " + rank + " printed no '" + prefix + "' within " + timeout + "\n" + state);
      }
      if (line.startsWith(prefix)) {
        return line;
      }
      if (line.startsWith("error ") || line.startsWith("protocol ")) {
        String state = describe();
        close();
        throw new AssertionError(
            "rank " + rank + " failed while '" + prefix + "' was awaited\n" + state);
      }
    }
  }

  /** Waits for the child to exit; destroys it on timeout. */
  int finish(Duration timeout) throws InterruptedException {
    if (!process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
      String state = describe();
      close();
      throw new AssertionError("rank " + rank + " did not exit within " + timeout + "\n" + state);
    }
    return process.exitValue();
  }

  /** Stops the child with SIGSTOP: it stays connected but never answers again. */
  void freeze() throws IOException, InterruptedException {
    Process kill = new ProcessBuilder("kill", "-STOP", Long.toString(pid())).start();
    if (!kill.waitFor(10, TimeUnit.SECONDS) || kill.exitValue() != 0) {
      throw new IllegalStateException("kill -STOP " + pid() + " failed");
    }
  }

  /** Kills the child at once (SIGKILL). */
  void kill() throws InterruptedException {
    process.destroyForcibly();
    process.waitFor(10, TimeUnit.SECONDS);
  }

  @Override
  public void close() {
    release();
    if (process.isAlive()) {
      process.destroyForcibly();
      try {
        process.waitFor(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  String describe() {
    synchronized (lines) {
      return "rank "
          + rank
          + " stdout:\n"
          + String.join("\n", lines)
          + "\nstderr:\n"
          + stderrText();
    }
  }

  private void readLines() {
    try (BufferedReader in =
        new BufferedReader(
            new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
      String line;
      while ((line = in.readLine()) != null) {
        synchronized (lines) {
          lines.add(line);
        }
        pending.add(line);
      }
    } catch (IOException e) {
      synchronized (lines) {
        lines.add("(stdout unreadable: " + e + ")");
      }
    } finally {
      pending.add(END);
    }
  }

  private String stderrText() {
    try {
      return Files.exists(stderr) ? Files.readString(stderr) : "";
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}

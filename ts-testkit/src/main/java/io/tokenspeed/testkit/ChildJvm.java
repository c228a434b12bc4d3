package io.tokenspeed.testkit;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
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
 * A {@code main} class running in its own JVM for a multi-process test: the {@code java} of this
 * JVM's {@code java.home}, this JVM's test classpath, standard output collected line by line,
 * standard error in a file that every failure message quotes, and every wait bounded (a child that
 * overruns is destroyed forcibly).
 *
 * <p>The classpath is the code sources of the given classes first, then {@code java.class.path}
 * whatever form the runner gave it (a manifest-only booter jar included: its manifest names the
 * rest).
 */
public final class ChildJvm implements AutoCloseable {

  private static final String END = "\u0000end";

  /** What a finished child left: its exit status, its output lines and its error text. */
  public record Finished(String name, int exitStatus, List<String> lines, String stderr) {

    /** The lines starting with {@code prefix + " "}, parsed as integers after the prefix. */
    public Set<Integer> numbers(String prefix) {
      Set<Integer> numbers = new LinkedHashSet<>();
      for (String line : lines) {
        if (line.startsWith(prefix + " ")) {
          numbers.add(Integer.parseInt(line.substring(prefix.length() + 1).trim()));
        }
      }
      return numbers;
    }

    /** The text after {@code prefix + " "} of the first line that starts so, or null. */
    public String value(String prefix) {
      for (String line : lines) {
        if (line.startsWith(prefix + " ")) {
          return line.substring(prefix.length() + 1);
        }
      }
      return null;
    }

    /** Name, exit status, output and error text, for an assertion message. */
    public String describe() {
      return name
          + " exit="
          + exitStatus
          + "\nstdout:\n"
          + String.join("\n", lines)
          + "\nstderr:\n"
          + stderr;
    }
  }

  private final String name;
  private final Process process;
  private final Path stderr;
  private final BlockingQueue<String> pending = new LinkedBlockingQueue<>();
  private final List<String> lines = new ArrayList<>();
  private final Thread reader;

  private ChildJvm(String name, Process process, Path stderr) {
    this.name = name;
    this.process = process;
    this.stderr = stderr;
    this.reader = Thread.ofPlatform().daemon().name("child-" + name).start(this::readLines);
  }

  /**
   * Starts {@code mainClass args...} in a new JVM; {@code workDir} receives its standard error as
   * {@code name.stderr}.
   */
  public static ChildJvm start(Path workDir, String name, Class<?> mainClass, List<String> args)
      throws IOException {
    List<String> command = new ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    command.addAll(List.of("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m"));
    command.addAll(List.of("-cp", classpath(mainClass), mainClass.getName()));
    command.addAll(args);
    Path stderr = workDir.resolve(name + ".stderr");
    Process process =
        new ProcessBuilder(command)
            .redirectError(stderr.toFile())
            .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
            .start();
    return new ChildJvm(name, process, stderr);
  }

  /** The code sources of {@code anchors} first, then this JVM's {@code java.class.path}. */
  public static String classpath(Class<?>... anchors) {
    Set<String> entries = new LinkedHashSet<>();
    for (Class<?> anchor : anchors) {
      entries.add(location(anchor));
    }
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

  /** The child's process id. */
  public long pid() {
    return process.pid();
  }

  /** Waits for the line {@code expected}; fails when the child ends or the timeout passes. */
  public void awaitLine(String expected, Duration timeout) throws InterruptedException {
    long deadlineNs = System.nanoTime() + timeout.toNanos();
    while (true) {
      long leftNs = deadlineNs - System.nanoTime();
      String line = leftNs < 0 ? null : pending.poll(leftNs, TimeUnit.NANOSECONDS);
      if (line == null || line.equals(END)) {
        close();
        throw new AssertionError(
            name + " never printed '" + expected + "' within " + timeout + "\n" + describeNow());
      }
      if (line.equals(expected)) {
        return;
      }
    }
  }

  /** Waits for the child to exit and for its output to end; destroys it on timeout. */
  public Finished finish(Duration timeout) throws InterruptedException {
    if (!process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
      close();
      throw new AssertionError(name + " did not exit within " + timeout + "\n" + describeNow());
    }
    reader.join(timeout);
    synchronized (lines) {
      return new Finished(name, process.exitValue(), List.copyOf(lines), stderrText());
    }
  }

  /** Destroys the child if it still runs. */
  @Override
  public void close() throws InterruptedException {
    if (process.isAlive()) {
      process.destroyForcibly();
      process.waitFor(10, TimeUnit.SECONDS);
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

  private String describeNow() {
    synchronized (lines) {
      return name + "\nstdout:\n" + String.join("\n", lines) + "\nstderr:\n" + stderrText();
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

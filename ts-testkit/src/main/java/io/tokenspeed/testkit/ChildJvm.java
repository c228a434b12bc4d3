package io.tokenspeed.testkit;

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
import java.util.function.Predicate;

/**
 * A {@code main} class running in its own JVM for a multi-process test: the {@code java} of this
 * JVM's {@code java.home}, this JVM's test classpath, standard output collected line by line,
 * standard error in a file that every failure message quotes, and every wait bounded (a child that
 * overruns is destroyed forcibly).
 *
 * <p>The classpath is the code sources of the main class (and of any {@link Launch#classpathFirst}
 * classes) first, then {@code java.class.path} whatever form the runner gave it (a manifest-only
 * booter jar included: its manifest names the rest).
 *
 * <p>{@link #start} reads standard input from {@code /dev/null}; a {@link #launch} with {@link
 * Launch#openInput()} keeps it open for {@link #send} until {@link #endInput()}.
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

  /**
   * How to start a child: its arguments, its heap limit, classes whose code sources lead the
   * classpath, whether its standard input stays open, and which output lines report a failure.
   */
  public static final class Launch {

    private final Class<?> mainClass;
    private final List<Class<?>> anchors = new ArrayList<>();
    private List<String> args = List.of();
    private String maxHeap = "256m";
    private boolean openInput;
    private List<String> failurePrefixes = List.of();
    private final java.util.Map<String, String> environment = new java.util.TreeMap<>();

    private Launch(Class<?> mainClass) {
      this.mainClass = mainClass;
    }

    /** The arguments of {@code main}; none by default. */
    public Launch args(List<String> args) {
      this.args = List.copyOf(args);
      return this;
    }

    /** The child's {@code -Xmx}, such as {@code 128m}; {@code 256m} by default. */
    public Launch maxHeap(String maxHeap) {
      this.maxHeap = maxHeap;
      return this;
    }

    /** Puts the code sources of {@code classes} right after the main class's on the classpath. */
    public Launch classpathFirst(Class<?>... classes) {
      anchors.addAll(List.of(classes));
      return this;
    }

    /** Keeps the child's standard input open for {@link #send} until {@link #endInput()}. */
    public Launch openInput() {
      this.openInput = true;
      return this;
    }

    /**
     * Output lines starting with one of {@code prefixes} report a failure: a wait for any other
     * line that meets one fails at once instead of running into its timeout.
     */
    public Launch failOn(String... prefixes) {
      this.failurePrefixes = List.of(prefixes);
      return this;
    }

    /**
     * Sets an environment variable of the child (for secrets, which must not appear on a command
     * line that other users of the host can read).
     */
    public Launch env(String name, String value) {
      environment.put(name, value);
      return this;
    }

    /** Starts the child; {@code workDir} receives its standard error as {@code name.stderr}. */
    public ChildJvm start(Path workDir, String name) throws IOException {
      List<Class<?>> leading = new ArrayList<>(List.of(mainClass));
      leading.addAll(anchors);
      List<String> command = new ArrayList<>();
      command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
      command.addAll(List.of("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx" + maxHeap));
      command.addAll(
          List.of("-cp", classpath(leading.toArray(Class<?>[]::new)), mainClass.getName()));
      command.addAll(args);
      Path stderr = workDir.resolve(name + ".stderr");
      ProcessBuilder builder = new ProcessBuilder(command).redirectError(stderr.toFile());
      builder.environment().putAll(environment);
      if (!openInput) {
        builder.redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
      }
      return new ChildJvm(name, builder.start(), stderr, openInput, failurePrefixes);
    }
  }

  private final String name;
  private final Process process;
  private final Path stderr;
  private final OutputStream stdin;
  private final List<String> failurePrefixes;
  private final BlockingQueue<String> pending = new LinkedBlockingQueue<>();
  private final List<String> lines = new ArrayList<>();
  private final Thread reader;

  private ChildJvm(
      String name, Process process, Path stderr, boolean openInput, List<String> failurePrefixes) {
    this.name = name;
    this.process = process;
    this.stderr = stderr;
    this.stdin = openInput ? process.getOutputStream() : null;
    this.failurePrefixes = failurePrefixes;
    this.reader = Thread.ofPlatform().daemon().name("child-" + name).start(this::readLines);
  }

  /**
   * Starts {@code mainClass args...} in a new JVM with the defaults of {@link Launch}; {@code
   * workDir} receives its standard error as {@code name.stderr}.
   */
  public static ChildJvm start(Path workDir, String name, Class<?> mainClass, List<String> args)
      throws IOException {
    return launch(mainClass).args(args).start(workDir, name);
  }

  /** A child of {@code mainClass} to configure, then {@link Launch#start}. */
  public static Launch launch(Class<?> mainClass) {
    return new Launch(mainClass);
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

  /**
   * Waits for the line {@code expected}; fails when the child ends, prints a failure line (see
   * {@link Launch#failOn}) or the timeout passes.
   */
  public void awaitLine(String expected, Duration timeout) throws InterruptedException {
    awaitLine(expected::equals, "'" + expected + "'", timeout);
  }

  /**
   * Waits for a line starting with {@code prefix} and returns it; fails when the child ends, prints
   * a failure line (see {@link Launch#failOn}) or the timeout passes.
   */
  public String awaitLineStartingWith(String prefix, Duration timeout) throws InterruptedException {
    return awaitLine(line -> line.startsWith(prefix), "a line starting '" + prefix + "'", timeout);
  }

  private String awaitLine(Predicate<String> wanted, String what, Duration timeout)
      throws InterruptedException {
    long deadlineNs = System.nanoTime() + timeout.toNanos();
    while (true) {
      long leftNs = deadlineNs - System.nanoTime();
      String line = leftNs < 0 ? null : pending.poll(leftNs, TimeUnit.NANOSECONDS);
      if (line == null || line.equals(END)) {
        close();
        throw new AssertionError(
            name + " never printed " + what + " within " + timeout + "\n" + describe());
      }
      if (wanted.test(line)) {
        return line;
      }
      for (String failure : failurePrefixes) {
        if (line.startsWith(failure)) {
          close();
          throw new AssertionError(
              name + " failed while " + what + " was awaited: " + line + "\n" + describe());
        }
      }
    }
  }

  /** Sends one line to the child's standard input (see {@link Launch#openInput()}). */
  public void send(String line) throws IOException {
    if (stdin == null) {
      throw new IllegalStateException(name + " reads its standard input from /dev/null");
    }
    stdin.write((line + "\n").getBytes(StandardCharsets.UTF_8));
    stdin.flush();
  }

  /** Closes the child's standard input, if open: a child that waits for its end may now exit. */
  public void endInput() {
    if (stdin == null) {
      return;
    }
    try {
      stdin.close();
    } catch (IOException ignored) {
      // The child is gone already.
    }
  }

  /** Waits for the child to exit and for its output to end; destroys it on timeout. */
  public Finished finish(Duration timeout) throws InterruptedException {
    if (!process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
      close();
      throw new AssertionError(name + " did not exit within " + timeout + "\n" + describe());
    }
    reader.join(timeout);
    synchronized (lines) {
      return new Finished(name, process.exitValue(), List.copyOf(lines), stderrText());
    }
  }

  /** Stops the child with SIGSTOP: it keeps its sockets and files open but runs no more. */
  public void freeze() throws IOException, InterruptedException {
    Process kill = new ProcessBuilder("kill", "-STOP", Long.toString(pid())).start();
    if (!kill.waitFor(10, TimeUnit.SECONDS) || kill.exitValue() != 0) {
      throw new IllegalStateException("kill -STOP " + pid() + " failed");
    }
  }

  /** Lets a frozen child run again (SIGCONT). */
  public void resume() throws IOException, InterruptedException {
    Process cont = new ProcessBuilder("kill", "-CONT", Long.toString(pid())).start();
    if (!cont.waitFor(10, TimeUnit.SECONDS) || cont.exitValue() != 0) {
      throw new IllegalStateException("kill -CONT " + pid() + " failed");
    }
  }

  /** The child's standard error so far (for log lines it wrote there). */
  public String stderrSoFar() {
    return stderrText();
  }

  /** Kills the child at once (SIGKILL) and waits for it to go. */
  public void kill() throws InterruptedException {
    process.destroyForcibly();
    process.waitFor(10, TimeUnit.SECONDS);
  }

  /** Ends the child's standard input and destroys the child if it still runs. */
  @Override
  public void close() throws InterruptedException {
    endInput();
    if (process.isAlive()) {
      kill();
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

  /** Name, output so far and error text, for an assertion message. */
  public String describe() {
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

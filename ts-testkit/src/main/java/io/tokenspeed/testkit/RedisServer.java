package io.tokenspeed.testkit;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * One real {@code redis-server} process on a loopback port, owned by a test: started in the
 * foreground ({@code --daemonize no}) so that its pid is the {@link Process}'s, and stopped by that
 * pid with SIGKILL, never by name.
 *
 * <pre>
 *   redis-server --port P --bind 127.0.0.1 --save "" --appendonly no --daemonize no
 *                --dir DIR [extra arguments]            stdout+stderr appended to DIR/redis-P.log
 *
 *   start ──PING answers PONG──▶ running ──kill()──▶ dead ──restart()──▶ running (same port, DIR)
 *                                   │  ▲
 *                         pause() ──┘  └── resume()      (SIGSTOP / SIGCONT: a hung server)
 * </pre>
 *
 * <p>Every wait is bounded; a server that does not answer in time is killed and the failure quotes
 * the end of its log. Nothing is persisted unless the extra arguments ask for it, so a restart
 * comes back empty by default.
 */
public final class RedisServer implements AutoCloseable {

  /** How long a start or restart may take before it is a failure. */
  public static final Duration START_TIMEOUT = Duration.ofSeconds(10);

  /** How long one harness command may take. */
  public static final Duration COMMAND_TIMEOUT = Duration.ofSeconds(5);

  private static final int LOG_TAIL_CHARS = 4000;

  private final Path binary;
  private final Path dir;
  private final int port;
  private final List<String> extraArgs;
  private final Path log;

  /** The running process, or null once killed. Guarded by this. */
  private Process process;

  private RedisServer(Path binary, Path dir, int port, List<String> extraArgs) {
    this.binary = binary;
    this.dir = dir;
    this.port = port;
    this.extraArgs = List.copyOf(extraArgs);
    this.log = dir.resolve("redis-" + port + ".log");
  }

  /** Starts a server on {@code port} and waits until it answers PING. */
  static RedisServer start(Path binary, Path dir, int port, List<String> extraArgs) {
    RedisServer server = new RedisServer(binary, dir, port, extraArgs);
    server.launch();
    return server;
  }

  /** The loopback port. */
  public int port() {
    return port;
  }

  /** {@code 127.0.0.1:port}. */
  public String hostAndPort() {
    return "127.0.0.1:" + port;
  }

  /** {@code redis://127.0.0.1:port}. */
  public String uri() {
    return "redis://" + hostAndPort();
  }

  /** The server's working directory. */
  public Path dir() {
    return dir;
  }

  /** The pid of the running process; fails when it is not running. */
  public synchronized long pid() {
    if (process == null) {
      throw new IllegalStateException("redis-server on port " + port + " is not running");
    }
    return process.pid();
  }

  /** Whether the process is alive (a paused process is alive). */
  public synchronized boolean isAlive() {
    return process != null && process.isAlive();
  }

  /** Kills the process with SIGKILL by its pid and waits for it to exit. Idempotent. */
  public synchronized void kill() {
    if (process == null) {
      return;
    }
    Process p = process;
    process = null;
    RedisServers.forget(this);
    p.destroyForcibly();
    try {
      if (!p.waitFor(START_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)) {
        throw new IllegalStateException(
            "redis-server pid=" + p.pid() + " on port " + port + " survived SIGKILL");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while killing redis-server pid=" + p.pid(), e);
    }
  }

  /** Starts the server again on the same port and directory (after {@link #kill}). */
  public synchronized void restart() {
    if (process != null) {
      throw new IllegalStateException("redis-server on port " + port + " is still running");
    }
    launch();
  }

  /** Stops the process with SIGSTOP: it keeps its sockets but answers nothing. */
  public void pause() {
    signal("STOP");
  }

  /** Continues a paused process with SIGCONT. */
  public void resume() {
    signal("CONT");
  }

  /** Sends one command and returns the decoded reply (see {@link RespConnection}). */
  public Object command(String... args) {
    try (RespConnection c = new RespConnection(port, COMMAND_TIMEOUT)) {
      return c.call(args);
    } catch (IOException e) {
      throw new UncheckedIOException(
          "redis-server on port " + port + " did not answer " + String.join(" ", args), e);
    }
  }

  /** Authenticates as {@code user} ({@code AUTH user password}), then sends one command. */
  public Object commandAs(String user, String password, String... args) {
    try (RespConnection c = new RespConnection(port, COMMAND_TIMEOUT)) {
      c.call("AUTH", user, password);
      return c.call(args);
    } catch (IOException e) {
      throw new UncheckedIOException(
          "redis-server on port " + port + " did not answer " + String.join(" ", args), e);
    }
  }

  /** Removes every key. */
  public void flushAll() {
    command("FLUSHALL", "SYNC");
  }

  /**
   * Creates (or resets) an ACL user that may run every command on the keys matching {@code
   * keyPattern} only ({@code ACL SETUSER name reset on >password ~keyPattern +@all}).
   */
  public void createAclUser(String user, String password, String keyPattern) {
    command("ACL", "SETUSER", user, "reset", "on", ">" + password, "~" + keyPattern, "+@all");
  }

  /** The last few thousand characters of the server's log. */
  public String logTail() {
    try {
      if (!Files.exists(log)) {
        return "(no log at " + log + ")";
      }
      String text = Files.readString(log, StandardCharsets.UTF_8);
      return text.length() <= LOG_TAIL_CHARS
          ? text
          : "..." + text.substring(text.length() - LOG_TAIL_CHARS);
    } catch (IOException e) {
      return "(log " + log + " unreadable: " + e + ")";
    }
  }

  /** Kills the process (see {@link #kill}). */
  @Override
  public void close() {
    kill();
  }

  @Override
  public String toString() {
    Process p;
    synchronized (this) {
      p = process;
    }
    return "redis-server " + hostAndPort() + (p == null ? " (stopped)" : " pid=" + p.pid());
  }

  private void launch() {
    List<String> command = new ArrayList<>();
    command.add(binary.toString());
    command.addAll(
        List.of(
            "--port",
            Integer.toString(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            dir.toString()));
    command.addAll(extraArgs);
    Process p;
    try {
      Files.createDirectories(dir);
      p =
          new ProcessBuilder(command)
              .directory(dir.toFile())
              .redirectErrorStream(true)
              .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
              .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
              .start();
    } catch (IOException e) {
      throw new UncheckedIOException("cannot start " + String.join(" ", command), e);
    }
    synchronized (this) {
      process = p;
    }
    RedisServers.remember(this);
    awaitPong(p);
  }

  private void awaitPong(Process p) {
    long deadlineNs = System.nanoTime() + START_TIMEOUT.toNanos();
    String last = "no attempt";
    while (true) {
      if (!p.isAlive()) {
        kill();
        throw new StartFailure(
            "redis-server on port "
                + port
                + " exited with status "
                + p.exitValue()
                + " while starting; its log:\n"
                + logTail());
      }
      try (RespConnection c = new RespConnection(port, Duration.ofMillis(500))) {
        Object reply = c.call("PING");
        if ("PONG".equals(reply)) {
          return;
        }
        last = "PING answered " + reply;
      } catch (RedisErrorReply e) {
        if (e.getMessage().startsWith("NOAUTH")) {
          return; // up, and guarded by a password (--requirepass)
        }
        last = e.toString();
      } catch (IOException e) {
        last = e.toString();
      }
      if (System.nanoTime() - deadlineNs > 0) {
        kill();
        throw new StartFailure(
            "redis-server on port "
                + port
                + " did not answer PING within "
                + START_TIMEOUT
                + " (last: "
                + last
                + "); its log:\n"
                + logTail());
      }
      LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(10));
    }
  }

  private void signal(String name) {
    long pid = pid();
    try {
      Process kill = new ProcessBuilder("kill", "-" + name, Long.toString(pid)).start();
      if (!kill.waitFor(COMMAND_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)
          || kill.exitValue() != 0) {
        kill.destroyForcibly();
        throw new IllegalStateException("kill -" + name + " " + pid + " failed");
      }
    } catch (IOException e) {
      throw new UncheckedIOException("cannot run kill -" + name + " " + pid, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while sending SIG" + name + " to " + pid, e);
    }
  }

  /** A server that could not be started; the message quotes its log. */
  static final class StartFailure extends IllegalStateException {
    StartFailure(String message) {
      super(message);
    }

    boolean portTaken() {
      return getMessage().contains("Address already in use");
    }
  }
}

package io.tokenspeed.server.cli;

import io.tokenspeed.control.ReplicaSecret;
import io.tokenspeed.cuda.Nccl;
import io.tokenspeed.model.parallel.SharedMemoryCollective;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The launcher of a tensor-parallel replica on one host: it starts one process per rank with the
 * command's own arguments and its rank's settings, and supervises them until they end.
 *
 * <pre>
 *   launcher ── secret (a 0600 file)       ─┬─► rank 0: stdout and stderr are the command's
 *            ── mesh: N free loopback ports ├─► rank 1: stderr as "[rank 1] ...", stdout dropped
 *            ── collective file (/dev/shm)  └─► rank N-1
 *   exit:  rank 0's status once every rank ended cleanly; otherwise non-zero, naming the first rank
 *          that failed (the others are stopped: SIGTERM, then SIGKILL 2 s later)
 * </pre>
 *
 * The ranks inherit the launcher's environment (the settings' variables, a PD secret of {@code
 * TOKENSPEED_PD_SECRET} or {@code TOKENSPEED_PD_SECRET_FILE}) and working directory, so each reads
 * its settings as the launcher read them. The replica's secret never appears on a command line; the
 * secret file and the collective file are removed when the replica ends. A SIGTERM to the launcher
 * is passed on to every rank.
 */
final class TpLauncher {
  /**
   * The variable that gives a rank its launcher's pid: a rank whose launcher is gone (killed) stops
   * rather than run on unsupervised.
   */
  static final String LAUNCHER_PID_ENV = "TOKENSPEED_TP_LAUNCHER_PID";

  /** How long ranks get to end after the first one ended, before they are stopped. */
  private static final Duration GRACE = Duration.ofSeconds(30);

  private final int size;
  private final PrintWriter err;

  /** The launcher was asked to stop: rank 0 ending on the SIGTERM it passed on is no failure. */
  private volatile boolean stopping;

  TpLauncher(int size, PrintWriter err) {
    this.size = size;
    this.err = err;
  }

  /** One rank's end. */
  private record Exit(int rank, int status) {}

  /** Starts the ranks with {@code args} (the command line as given) and supervises them. */
  int run(List<String> args) throws IOException, InterruptedException {
    Path secretDir = Files.createTempDirectory("tokenspeed-tp-");
    Path secretFile = secretDir.resolve("secret.hex");
    Path collective = collectiveFile();
    List<Process> ranks = new ArrayList<>();
    List<Thread> relays = new ArrayList<>();
    Thread hook =
        new Thread(
            () -> {
              stopping = true;
              stopGracefully(ranks);
            },
            "ts-tp-launcher-stop");
    try {
      ReplicaSecret.generate().writeTo(secretFile);
      List<String> mesh = freePorts(size);
      Runtime.getRuntime().addShutdownHook(hook);
      BlockingQueue<Exit> exits = new ArrayBlockingQueue<>(size);
      for (int r = 0; r < size; r++) {
        ProcessBuilder pb = new ProcessBuilder(command(args, r, mesh, collective));
        pb.environment().remove(ReplicaSecret.ENV);
        pb.environment().put(ReplicaSecret.FILE_ENV, secretFile.toString());
        pb.environment().put(LAUNCHER_PID_ENV, Long.toString(ProcessHandle.current().pid()));
        // ranks on GPUs sum through NCCL, with NVLink multicast off
        pb.environment().putAll(Nccl.REQUIRED_ENVIRONMENT);
        if (r == 0) {
          pb.inheritIO();
        } else {
          pb.redirectInput(ProcessBuilder.Redirect.INHERIT);
          pb.redirectOutput(ProcessBuilder.Redirect.DISCARD);
        }
        Process p = pb.start();
        ranks.add(p);
        int rank = r;
        if (r > 0) {
          relays.add(relay(p, rank));
        }
        p.onExit().thenAccept(done -> exits.add(new Exit(rank, done.exitValue())));
      }
      return supervise(ranks, exits);
    } finally {
      stopAll(ranks);
      awaitRelays(relays);
      try {
        Runtime.getRuntime().removeShutdownHook(hook);
      } catch (IllegalStateException ignored) {
        // the JVM is shutting down: the hook runs
      }
      Files.deleteIfExists(secretFile);
      Files.deleteIfExists(secretDir);
      SharedMemoryCollective.remove(collective);
    }
  }

  /**
   * Waits for the ranks: the first that ends with a non-zero status fails the replica (the others
   * are stopped); rank 0 ending cleanly ends it once the others have ended too.
   */
  private int supervise(List<Process> ranks, BlockingQueue<Exit> exits)
      throws InterruptedException {
    int ended = 0;
    Integer leaderStatus = null;
    long graceDeadline = Long.MAX_VALUE;
    while (ended < size) {
      long waitNs =
          graceDeadline == Long.MAX_VALUE ? Long.MAX_VALUE : graceDeadline - System.nanoTime();
      Exit e =
          waitNs == Long.MAX_VALUE
              ? exits.take()
              : exits.poll(Math.max(0, waitNs), TimeUnit.NANOSECONDS);
      if (e == null) {
        List<Integer> left = new ArrayList<>();
        for (int r = 0; r < size; r++) {
          if (ranks.get(r).isAlive()) {
            left.add(r);
          }
        }
        say("ranks " + left + " did not end within " + GRACE.toSeconds() + " s of rank 0: stopped");
        return 1;
      }
      ended++;
      boolean passedOn = stopping && e.rank() == 0 && e.status() == 128 + 15;
      if (e.status() != 0 && !passedOn) {
        say("rank " + e.rank() + " " + describe(e.status()) + "; stopping the other ranks");
        return e.status() > 0 && e.status() < 128 ? e.status() : CliErrors.EXIT_REPLICA;
      }
      if (e.rank() == 0) {
        leaderStatus = 0;
        graceDeadline = System.nanoTime() + GRACE.toNanos();
      }
    }
    return leaderStatus == null ? 0 : leaderStatus;
  }

  private static String describe(int status) {
    return status > 128
        ? "was killed by signal " + (status - 128) + " (exit status " + status + ")"
        : "exited with status " + status;
  }

  /**
   * The launcher was asked to stop (SIGTERM, SIGINT): rank 0 gets SIGTERM and ends the command as
   * it would alone (serve drains its requests), which stops the other ranks in the round that
   * agrees on it; whatever still runs after {@link #GRACE} is stopped.
   */
  private static void stopGracefully(List<Process> ranks) {
    if (ranks.isEmpty()) {
      return;
    }
    ranks.getFirst().destroy();
    long deadline = System.nanoTime() + GRACE.toNanos();
    for (Process p : ranks) {
      try {
        long left = deadline - System.nanoTime();
        if (left > 0) {
          p.waitFor(left, TimeUnit.NANOSECONDS);
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    stopAll(ranks);
  }

  /**
   * Stops every rank still running: SIGTERM, then SIGKILL 2 s later (a frozen rank never handles
   * SIGTERM).
   */
  private static void stopAll(List<Process> ranks) {
    for (Process p : ranks) {
      if (p.isAlive()) {
        p.destroy();
      }
    }
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
    for (Process p : ranks) {
      try {
        long left = deadline - System.nanoTime();
        if (left <= 0 || !p.waitFor(left, TimeUnit.NANOSECONDS)) {
          p.destroyForcibly();
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        p.destroyForcibly();
      }
    }
  }

  /**
   * Waits briefly for the relays to copy what the ranks wrote before they ended: a rank that failed
   * says why on its last line.
   */
  private static void awaitRelays(List<Thread> relays) {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
    for (Thread t : relays) {
      try {
        long left = deadline - System.nanoTime();
        if (left > 0) {
          t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
    }
  }

  /** Copies a follower's stderr to this process's, each line prefixed with its rank. */
  private Thread relay(Process p, int rank) {
    Thread t =
        new Thread(
            () -> {
              try (BufferedReader in =
                  new BufferedReader(
                      new InputStreamReader(p.getErrorStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = in.readLine()) != null; ) {
                  say("[rank " + rank + "] " + line);
                }
              } catch (IOException ignored) {
                // the rank ended
              }
            },
            "ts-tp-relay-" + rank);
    t.setDaemon(true);
    t.start();
    return t;
  }

  private synchronized void say(String line) {
    err.println(line);
    err.flush();
  }

  /** This JVM's command (its java, options and class path) running the CLI as rank {@code r}. */
  private List<String> command(List<String> args, int r, List<String> mesh, Path collective) {
    List<String> cmd = new ArrayList<>();
    cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    for (String option : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
      if (!option.startsWith("-agentlib:jdwp")) {
        cmd.add(option);
      }
    }
    cmd.add("-cp");
    cmd.add(System.getProperty("java.class.path"));
    cmd.add(TokenSpeedCli.class.getName());
    cmd.addAll(args);
    cmd.add("--tp-rank=" + r);
    cmd.add("--tp-mesh=" + String.join(",", mesh));
    cmd.add("--tp-collective=" + collective);
    return cmd;
  }

  /** The collective's file: in /dev/shm when the host has it (memory), else the temp folder. */
  private static Path collectiveFile() throws IOException {
    Path shm = Path.of("/dev/shm");
    String name = "tokenspeed-tp-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
    Path dir =
        Files.isDirectory(shm) && Files.isWritable(shm)
            ? shm
            : Path.of(System.getProperty("java.io.tmpdir"));
    return dir.resolve(name);
  }

  /** {@code n} free loopback ports as HOST:PORT. */
  private static List<String> freePorts(int n) throws IOException {
    List<ServerSocket> held = new ArrayList<>();
    try {
      List<String> out = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
        held.add(s);
        out.add(InetAddress.getLoopbackAddress().getHostAddress() + ":" + s.getLocalPort());
      }
      return out;
    } finally {
      for (ServerSocket s : held) {
        s.close();
      }
    }
  }
}

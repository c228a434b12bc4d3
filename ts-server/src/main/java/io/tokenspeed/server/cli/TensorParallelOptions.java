package io.tokenspeed.server.cli;

import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.control.ReplicaSecret;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.checkpoint.CheckpointException;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.parallel.SharedMemoryCollective;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * Tensor parallelism of the commands that run a model: {@code --tp N} runs the command as a replica
 * of N engine processes on this host, one per rank. Without {@code --tp-rank} the process is the
 * launcher ({@link TpLauncher}): it starts the ranks with the same command line and supervises
 * them. With {@code --tp-rank} (set by the launcher, or by hand with {@code --tp-mesh} and {@code
 * --tp-collective} to start ranks one by one) it is that rank: it loads its share of the
 * checkpoint, joins the collective (shared memory) and the control-plane mesh (TCP), and runs the
 * command's engine as that rank. Rank 0 leads and does what the command does; the other ranks
 * follow until the replica stops.
 */
final class TensorParallelOptions {

  /** Floats per rank and operation in the collective's file (larger transfers go in chunks). */
  static final int COLLECTIVE_MAX_FLOATS = 1 << 20;

  @Spec(Spec.Target.MIXEE)
  private CommandSpec spec;

  @Option(
      names = "--tp",
      paramLabel = "N",
      description =
          "Tensor-parallel ranks: N engine processes on this host, each holding 1/N of the"
              + " attention heads, MLP columns and vocabulary (default: ${DEFAULT-VALUE}).")
  private int size = 1;

  @Option(
      names = "--tp-kv",
      paramLabel = "SPLIT",
      converter = KvSplitConverter.class,
      description =
          "How full-history attention's KV splits over the ranks: heads (each rank its share of"
              + " the heads, every page) or pages (every head on every rank, each page on one"
              + " rank: page-cyclic, each rank attends over its own pages) (default: heads).")
  private Shard.KvSplit kvSplit = Shard.KvSplit.HEADS;

  /** Reads {@code heads} or {@code pages}. */
  static final class KvSplitConverter implements picocli.CommandLine.ITypeConverter<Shard.KvSplit> {
    @Override
    public Shard.KvSplit convert(String value) {
      return Shard.KvSplit.parse(value);
    }
  }

  @Option(
      names = "--tp-timeout",
      paramLabel = "SECONDS",
      description =
          "How long a rank waits for another in a round or a collective before the replica stops,"
              + " naming it (default: ${DEFAULT-VALUE}).")
  private double timeoutSeconds = 30;

  @Option(
      names = "--tp-rank",
      paramLabel = "R",
      description =
          "Run as rank R of the replica (set by the launcher; with --tp-mesh and"
              + " --tp-collective to start ranks by hand).")
  private Integer rank;

  @Option(
      names = "--tp-mesh",
      paramLabel = "HOST:PORT,...",
      split = ",",
      description = "Where each rank's control plane listens, in rank order (with --tp-rank).")
  private List<String> mesh;

  @Option(
      names = "--tp-collective",
      paramLabel = "FILE",
      description =
          "The replica's shared-memory collective file (with --tp-rank); the secret comes from"
              + " $TOKENSPEED_CONTROL_SECRET or the file named by"
              + " $TOKENSPEED_CONTROL_SECRET_FILE.")
  private Path collectiveFile;

  /** The replica's size. */
  int size() {
    return size;
  }

  /** How full-history attention's KV splits over the ranks ({@code --tp-kv}). */
  Shard.KvSplit kvSplit() {
    return kvSplit;
  }

  /** This process's rank (0 for a single rank or the launcher). */
  int rank() {
    return rank == null ? 0 : rank;
  }

  /** Whether this process is the launcher of several ranks. */
  boolean launcher() {
    check();
    return size > 1 && rank == null;
  }

  /** Whether this process is a rank of a replica of several. */
  boolean ranked() {
    check();
    return size > 1 && rank != null;
  }

  /** Whether this process is a follower rank (does the command's work through rank 0 only). */
  boolean follower() {
    return ranked() && rank != 0;
  }

  Duration timeout() {
    return Duration.ofMillis(Math.round(timeoutSeconds * 1000));
  }

  private void check() {
    if (size < 1 || size > ControlConfig.MAX_WORLD_SIZE) {
      throw usage("--tp=" + size + " must be in [1, " + ControlConfig.MAX_WORLD_SIZE + "]");
    }
    if (!(timeoutSeconds > 0) || timeoutSeconds > 86_400) {
      throw usage("--tp-timeout=" + timeoutSeconds + " must be in (0, 86400] seconds");
    }
    if (rank == null) {
      if (mesh != null || collectiveFile != null) {
        throw usage("--tp-mesh and --tp-collective go with --tp-rank");
      }
      return;
    }
    if (size == 1) {
      throw usage("--tp-rank needs --tp of 2 or more");
    }
    if (rank < 0 || rank >= size) {
      throw usage("--tp-rank=" + rank + " must be in [0, " + size + ")");
    }
    if (mesh == null || mesh.size() != size) {
      throw usage(
          "--tp-mesh must list "
              + size
              + " HOST:PORT addresses, one per rank"
              + (mesh == null ? "" : " (" + mesh.size() + " given)"));
    }
    if (collectiveFile == null) {
      throw usage("--tp-rank needs --tp-collective FILE");
    }
  }

  /**
   * This rank's share of the checkpoint of {@code folder}, computing with the others through the
   * replica's collective; a single rank loads the whole checkpoint.
   */
  CausalLm load(Path folder, String model) {
    if (ranked()) {
      watchLauncher();
    }
    if (!ranked()) {
      try {
        return CausalLm.load(folder);
      } catch (CheckpointException e) {
        throw new IllegalArgumentException("--model=" + model + ": " + e.getMessage(), e);
      }
    }
    Collective collective = openCollective();
    try {
      Path name = folder.toAbsolutePath().normalize().getFileName();
      return CausalLm.load(
          folder,
          name == null ? "model" : name.toString(),
          ModelIdentity.DEFAULT_WEIGHT_VERSION,
          collective,
          kvSplit);
    } catch (CheckpointException e) {
      collective.abort("rank " + rank + " cannot load " + folder);
      throw new IllegalArgumentException("--model=" + model + ": " + e.getMessage(), e);
    } catch (IllegalArgumentException e) {
      collective.abort("rank " + rank + ": " + e.getMessage());
      throw new IllegalArgumentException(
          "--model=" + model + " at --tp=" + size + ": " + e.getMessage(), e);
    }
  }

  /** This rank's collective of the replica (shared memory between the ranks' processes). */
  private Collective openCollective() {
    try {
      return SharedMemoryCollective.open(
          collectiveFile, rank, size, COLLECTIVE_MAX_FLOATS, timeout());
    } catch (IOException e) {
      throw new UncheckedIOException(
          "rank " + rank + ": the collective " + collectiveFile + " cannot be opened: " + e, e);
    }
  }

  /**
   * For a rank on a GPU: watches the launcher as {@link #load} does and opens this rank's host
   * collective, which the caller closes (the engine's round agrees through it; the GPUs sum through
   * their own).
   *
   * @throws IllegalStateException when this process is not a rank of a replica of several
   */
  Collective rankCollective() {
    if (!ranked()) {
      throw new IllegalStateException("not a rank of a tensor-parallel replica");
    }
    watchLauncher();
    return openCollective();
  }

  /**
   * A rank started by the launcher stops when the launcher is gone (killed before it could stop the
   * ranks), with status {@value CliErrors#EXIT_REPLICA}; a follower also leaves SIGINT to its
   * launcher (a terminal's Ctrl-C reaches every process of the group: rank 0 and the launcher end
   * the replica in order).
   */
  private void watchLauncher() {
    String pid = System.getenv(TpLauncher.LAUNCHER_PID_ENV);
    if (pid == null) {
      return; // started by hand
    }
    if (rank != 0) {
      try {
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), sun.misc.SignalHandler.SIG_IGN);
      } catch (IllegalArgumentException ignored) {
        // no SIGINT on this platform
      }
    }
    ProcessHandle launcher =
        ProcessHandle.of(Long.parseLong(pid))
            .orElseThrow(
                () ->
                    new IllegalStateException(
                        "rank " + rank + ": launcher pid " + pid + " is gone"));
    launcher
        .onExit()
        .thenRun(
            () -> {
              System.err.println(
                  "error: rank " + rank + ": the launcher (pid " + pid + ") is gone");
              Runtime.getRuntime().halt(CliErrors.EXIT_REPLICA);
            });
  }

  /** This rank's control-plane settings (ranked only). */
  ControlConfig control() {
    List<InetSocketAddress> addresses = new ArrayList<>();
    for (String a : mesh) {
      int colon = a.lastIndexOf(':');
      if (colon <= 0) {
        throw usage("--tp-mesh: " + a + " is not HOST:PORT");
      }
      try {
        addresses.add(
            new InetSocketAddress(a.substring(0, colon), Integer.parseInt(a.substring(colon + 1))));
      } catch (IllegalArgumentException e) {
        throw usage("--tp-mesh: " + a + " is not HOST:PORT: " + e.getMessage());
      }
    }
    ReplicaSecret secret;
    try {
      secret = ReplicaSecret.fromEnvironment();
    } catch (IOException e) {
      throw new UncheckedIOException("rank " + rank + ": the replica secret: " + e, e);
    }
    long ms = timeout().toMillis();
    return ControlConfig.of(0, rank, addresses, secret)
        .withTimeouts(ms, Math.max(ms, ControlConfig.DEFAULT_CONNECT_TIMEOUT_MS));
  }

  /**
   * A follower's part of the command: waits until the replica stops (rank 0 ends the command, or a
   * rank fails); 0 when it stopped cleanly, else 1 with the failure on stderr.
   */
  int follow(Engine engine) throws InterruptedException {
    while (!engine.stopped()) {
      Thread.sleep(20);
    }
    failIfStopped(engine);
    reportStorage(engine);
    return 0;
  }

  /**
   * On a rank with L3, one line on stderr with its own store traffic: every rank reads and writes
   * only its own objects, so the ranks' lines together are the replica's.
   */
  void reportStorage(Engine engine) {
    if (!ranked()) {
      return;
    }
    engine
        .storageExecutorMetrics()
        .ifPresent(
            m -> {
              PrintWriter err = spec.commandLine().getErr();
              err.println(
                  "rank "
                      + rank
                      + ": L3 GET ok keys "
                      + m.get().okKeys()
                      + ", PUT ok keys "
                      + m.put().okKeys()
                      + " (newly written "
                      + m.putsNewlyWritten()
                      + ")");
              err.flush();
            });
  }

  /**
   * On a replica whose engine stopped after a failure (a rank died, froze or failed), throws the
   * error that names it (exit status {@value CliErrors#EXIT_REPLICA}); otherwise nothing.
   */
  void failIfStopped(Engine engine) {
    if (ranked() && engine.failure().isPresent()) {
      Throwable t = engine.failure().get();
      throw new CliErrors.ReplicaFailedException(
          "rank " + rank + " of the --tp=" + size + " replica stopped: " + t.getMessage(), t);
    }
  }

  /** Runs the command's ranks as processes and supervises them; their exit status. */
  int launch() throws IOException, InterruptedException {
    List<String> args = spec.commandLine().getParseResult().originalArgs();
    return new TpLauncher(size, spec.commandLine().getErr()).run(args);
  }

  private ParameterException usage(String message) {
    return new ParameterException(spec.commandLine(), message);
  }
}

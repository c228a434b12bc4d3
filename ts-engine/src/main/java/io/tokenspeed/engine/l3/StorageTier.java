package io.tokenspeed.engine.l3;

import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.control.ControlPlaneException;
import io.tokenspeed.control.InFlightBound;
import io.tokenspeed.control.LocalRelayHub;
import io.tokenspeed.control.LocalReport;
import io.tokenspeed.control.RelayExchange;
import io.tokenspeed.control.ReplicaSecret;
import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageOp;
import io.tokenspeed.l3.CloseReport;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.l3.L3Poll;
import io.tokenspeed.scheduler.RoundInput;
import io.tokenspeed.scheduler.StorageConfig;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.function.LongSupplier;

/**
 * L3 under one engine (TP = 1): the executor over the store and the Host allocation, and the
 * replica's relay exchange. Each round the loop thread polls the executor, sends the poll through
 * the exchange once (idle rounds included) and hands the agreed facts to the scheduler; after the
 * scheduler plans, it submits the plan's storage commands in plan order. Only the loop thread calls
 * it.
 *
 * <p>At TP = 1 the exchange is a mesh of one rank on a loopback listener: the same agreement code
 * as a multi-rank replica, whose result arrives one round later.
 */
public final class StorageTier {
  private volatile StorageJobs jobs;
  private final L3Executor executor;
  private final RelayExchange exchange;
  private final Set<Long> unagreed = new HashSet<>();
  private long submitted;

  /** The latest exchange carried completions: their agreement comes back with the next one. */
  private boolean agreementDue;

  private long refused;

  /**
   * How a simulation of the engine runs L3 instead of worker threads and a loopback mesh: the
   * executor starts stepped ({@link L3Executor#startStepped}) and is handed to the simulation,
   * which runs its store calls on simulated time; a single rank's exchange goes through an
   * in-memory hub. Null in production.
   */
  public interface Stepping {
    /** Takes {@code executor}, started stepped with {@code config}, whose calls it will run. */
    void attach(L3Executor executor, L3ExecutorConfig config);
  }

  private StorageTier(StorageJobs jobs, L3Executor executor, RelayExchange exchange) {
    this.jobs = jobs;
    this.executor = executor;
    this.exchange = exchange;
  }

  /**
   * Checks what the rank will store ({@link StoragePayloads}), starts the executor over {@code
   * settings.store()} and {@code hostAllocation} (its job ages read {@code nanoClock}), and joins a
   * one-rank mesh on a loopback port, its agreement window sized from {@code credits} (the storage
   * settings fitted to the Host tier). On failure nothing is left running and the store is closed.
   */
  public static StorageTier start(
      L3Settings settings,
      StorageJobs jobs,
      MemorySegment hostAllocation,
      StorageConfig credits,
      LongSupplier nanoClock)
      throws Exception {
    return start(settings, jobs, hostAllocation, credits, nanoClock, null);
  }

  /**
   * {@link #start(L3Settings, StorageJobs, MemorySegment, StorageConfig, LongSupplier)}, run by a
   * simulation when {@code stepping} is not null: a stepped executor and an in-memory one-rank
   * exchange.
   */
  public static StorageTier start(
      L3Settings settings,
      StorageJobs jobs,
      MemorySegment hostAllocation,
      StorageConfig credits,
      LongSupplier nanoClock,
      Stepping stepping)
      throws Exception {
    L3Executor executor = startExecutor(settings, jobs, hostAllocation, 1, nanoClock, stepping);
    try {
      if (stepping != null) {
        ControlConfig control =
            ControlConfig.of(
                0,
                0,
                List.of(new InetSocketAddress(InetAddress.getLoopbackAddress(), 1)),
                ReplicaSecret.generate());
        return new StorageTier(
            jobs,
            executor,
            RelayExchange.connect(windowFor(control, credits), new LocalRelayHub(1)));
      }
      ServerSocketChannel listener =
          ServerSocketChannel.open()
              .bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
      InetSocketAddress address;
      try {
        address = (InetSocketAddress) listener.getLocalAddress();
      } catch (IOException e) {
        listener.close();
        throw e;
      }
      ControlConfig control = ControlConfig.of(0, 0, List.of(address), ReplicaSecret.generate());
      RelayExchange exchange = RelayExchange.connect(windowFor(control, credits), listener);
      return new StorageTier(jobs, executor, exchange);
    } catch (Exception e) {
      executor.close();
      throw e;
    }
  }

  /**
   * L3 under one rank of a tensor-parallel replica of {@code tpSize} ranks: the executor only,
   * whose polls the loop sends through the replica's exchange ({@link #poll}, {@link #input}). On
   * failure nothing is left running and the store is closed.
   */
  public static StorageTier onReplica(
      L3Settings settings,
      StorageJobs jobs,
      MemorySegment hostAllocation,
      int tpSize,
      LongSupplier nanoClock,
      Stepping stepping)
      throws Exception {
    return new StorageTier(
        jobs, startExecutor(settings, jobs, hostAllocation, tpSize, nanoClock, stepping), null);
  }

  /**
   * {@code control} with its agreement window sized for what {@code credits} let one rank have in
   * flight ({@link ControlConfig#withWindowFor}): {@code async.max_operations} operations and
   * {@link StorageConfig#maxKeysInFlight} keys.
   *
   * @throws IllegalArgumentException when {@code control} sets a smaller window explicitly, naming
   *     the credit settings, the window they need and the configured one
   */
  public static ControlConfig windowFor(ControlConfig control, StorageConfig credits) {
    return control.withWindowFor(
        new InFlightBound(
            credits.maxOperations(),
            "async.max_operations=" + credits.maxOperations(),
            credits.maxKeysInFlight(),
            "async.max_operations="
                + credits.maxOperations()
                + " x async.max_query_keys="
                + credits.maxQueryKeys()
                + " + async.max_host_blocks="
                + credits.maxHostBlocks()));
  }

  private static L3Executor startExecutor(
      L3Settings settings,
      StorageJobs jobs,
      MemorySegment hostAllocation,
      int tpSize,
      LongSupplier nanoClock,
      Stepping stepping)
      throws Exception {
    try {
      StoragePayloads.validate(jobs.layout(), tpSize, jobs.namespace(), settings.store());
    } catch (IllegalArgumentException e) {
      settings.store().close(); // nothing registered or started yet
      throw e;
    }
    if (stepping != null) {
      L3Executor executor =
          L3Executor.startStepped(
              settings.store(), settings.runtime().executor(), hostAllocation, nanoClock);
      stepping.attach(executor, settings.runtime().executor());
      return executor;
    }
    return L3Executor.start(
        settings.store(), settings.runtime().executor(), hostAllocation, nanoClock);
  }

  /** The translation of storage commands into this rank's jobs. */
  public StorageJobs jobs() {
    return jobs;
  }

  /**
   * Builds every later job under {@code namespace} (a rotation; jobs already submitted keep their
   * keys: no worker reads the namespace).
   */
  public void switchNamespace(io.tokenspeed.core.Namespace namespace) {
    jobs = jobs.withNamespace(namespace);
  }

  /**
   * The round's input: polls the executor, exchanges the poll, and returns the agreed tick,
   * pressure and completions (the clock and no completions before the first agreed round) with the
   * local cancellations and the permissions of the engine's control state.
   *
   * @throws ControlPlaneException when the exchange fails: the replica must stop
   */
  public RoundInput roundInput(
      long nowNs, List<Long> cancellations, boolean forwardPermitted, boolean storagePermitted)
      throws ControlPlaneException {
    L3Poll poll = poll();
    Optional<AgreedRound> agreed =
        exchange.exchange(LocalReport.of(nowNs, poll.pressure(), poll.completions()));
    return input(agreed, nowNs, cancellations, forwardPermitted, storagePermitted);
  }

  /**
   * Polls the executor: its new completion records and its pressure, for this round's report (on a
   * replica, the loop sends them through the replica's exchange).
   */
  public L3Poll poll() {
    L3Poll poll = executor.poll();
    agreementDue = !poll.completions().isEmpty();
    return poll;
  }

  /**
   * The scheduler's input from the agreed round (the clock and no completions before the first):
   * the agreed tick, pressure and completions with {@code cancellations} and the permissions of the
   * engine's control state. The completions enter whatever the permissions: a frozen round still
   * applies them.
   */
  public RoundInput input(
      Optional<AgreedRound> agreed,
      long nowNs,
      List<Long> cancellations,
      boolean forwardPermitted,
      boolean storagePermitted) {
    if (agreed.isEmpty()) {
      return new RoundInput(
          nowNs,
          PressureSnapshot.IDLE,
          cancellations,
          List.of(),
          forwardPermitted,
          storagePermitted);
    }
    AgreedRound round = agreed.get();
    for (AgreedCompletion c : round.completions()) {
      unagreed.remove(c.operationId());
    }
    return new RoundInput(
        round.tickNs(),
        round.pressure(),
        cancellations,
        round.completions(),
        forwardPermitted,
        storagePermitted);
  }

  /** Submits the plan's storage commands to the executor, in plan order. */
  public void dispatch(List<StorageOp> ops) {
    for (StorageOp op : ops) {
      if (op instanceof StorageOp.Cancel c) {
        executor.cancel(c.operationId());
        continue;
      }
      if (!executor.submit(jobs.job(op)).accepted()) {
        refused++; // its record still comes back through poll
      }
      submitted++;
      unagreed.add(op.operationId());
    }
  }

  /**
   * True when the latest round reported completions whose agreement the next round returns: that
   * round should run at once rather than after a wait.
   */
  public boolean agreementDue() {
    return agreementDue;
  }

  /**
   * Runs {@code listener} whenever the executor produces a completion record (on the producing
   * thread; it must return at once): the loop can wait for it instead of polling on a timer.
   */
  public void onCompletion(Runnable listener) {
    executor.onCompletion(listener);
  }

  /** True while an operation submitted to the executor has no agreed completion yet. */
  public boolean busy() {
    return !unagreed.isEmpty();
  }

  /** Operations submitted so far, and how many of them the executor refused at once. */
  public long submitted() {
    return submitted;
  }

  public long refused() {
    return refused;
  }

  /**
   * The executor's counters and gauges (one short lock, no store call, no health probe consumed).
   */
  public L3Metrics metrics() {
    return executor.metrics();
  }

  /** True once an unretired result has quarantined the executor. */
  public boolean quarantined() {
    return executor.quarantined();
  }

  /**
   * Closes the executor (its queued jobs are cancelled, its workers joined with a deadline, its
   * store closed unless native retirement is unknown) and the exchange. When the report says a
   * restart is required, the Host allocation must stay mapped for the life of the process.
   */
  public CloseReport close() {
    CloseReport report = executor.close();
    if (exchange != null) {
      exchange.close();
    }
    return report;
  }
}

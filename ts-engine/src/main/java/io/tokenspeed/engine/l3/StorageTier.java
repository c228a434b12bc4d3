package io.tokenspeed.engine.l3;

import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.control.InFlightBound;
import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageOp;
import io.tokenspeed.engine.memory.DeviceHandle;
import io.tokenspeed.l3.CloseReport;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.l3.L3Poll;
import io.tokenspeed.scheduler.RoundInput;
import io.tokenspeed.scheduler.StorageConfig;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.function.LongSupplier;

/**
 * L3 under one rank: the executor over the store and the Host allocation. Each round the loop
 * thread polls the executor ({@link #poll}), sends the poll through its replica's relay exchange
 * (idle rounds included; a single engine is a replica of one rank) and hands the agreed facts to
 * the scheduler ({@link #input}); after the scheduler plans, it submits the plan's storage commands
 * in plan order ({@link #dispatch}). Only the loop thread calls it.
 */
public final class StorageTier {
  private volatile StorageJobs jobs;
  private final L3Executor executor;
  private final Set<Long> unagreed = new HashSet<>();
  private long submitted;

  /** The latest poll carried completions, for a replica whose exchange agrees on them later. */
  private boolean agreementDue;

  private long refused;

  /** The early Device copies of GETs ({@link #copyEarly}), or null. */
  private EarlyCopies early;

  /**
   * How a simulation of the engine runs L3 instead of worker threads: the executor starts stepped
   * ({@link L3Executor#startStepped}) and is handed to the simulation, which runs its store calls
   * on simulated time. Null in production.
   */
  public interface Stepping {
    /** Takes {@code executor}, started stepped with {@code config}, whose calls it will run. */
    void attach(L3Executor executor, L3ExecutorConfig config);
  }

  private StorageTier(StorageJobs jobs, L3Executor executor) {
    this.jobs = jobs;
    this.executor = executor;
  }

  /**
   * L3 under one rank of a replica of {@code tpSize} ranks (1 for a single engine): checks what the
   * rank will store ({@link StoragePayloads}) and starts the executor over {@code settings.store()}
   * and {@code hostAllocation} (its job ages read {@code nanoClock}); stepped by a simulation when
   * {@code stepping} is not null. On failure nothing is left running and the store is closed.
   */
  public static StorageTier start(
      L3Settings settings,
      StorageJobs jobs,
      MemorySegment hostAllocation,
      int tpSize,
      LongSupplier nanoClock,
      Stepping stepping)
      throws Exception {
    return new StorageTier(
        jobs, startExecutor(settings, jobs, hostAllocation, tpSize, nanoClock, stepping));
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
   * Copies the rows of GETs that carry early Device destinations ({@code async.early_h2d}) to the
   * Device through {@code handle} as they land; call before the first dispatch.
   */
  public void copyEarly(DeviceHandle handle) {
    early = new EarlyCopies(handle);
    executor.onLanded(early);
  }

  /**
   * Polls the executor: its new completion records and its pressure, for this round's report, which
   * the loop sends through its replica's exchange. A GET's record with early Device copies comes
   * back once they have run (see {@link EarlyCopies#settle}).
   */
  public L3Poll poll() {
    L3Poll poll = executor.poll();
    if (early != null && !poll.completions().isEmpty()) {
      List<StorageDone> settled = new ArrayList<>(poll.completions().size());
      for (StorageDone d : poll.completions()) {
        settled.add(early.settle(d));
      }
      poll = new L3Poll(settled, poll.pressure());
    }
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
      if (early != null && op instanceof StorageOp.Get g) {
        early.register(g);
      }
      if (!executor.submit(jobs.job(op)).accepted()) {
        refused++; // its record still comes back through poll
      }
      submitted++;
      unagreed.add(op.operationId());
    }
  }

  /**
   * True when the latest poll carried completions: on a replica whose exchange agrees one round
   * late, the next round returns their agreement and should run at once rather than after a wait.
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

  /** The store's restore cost as this rank's executor measured it (no store call). */
  public io.tokenspeed.l3.RestoreEstimate restoreEstimate() {
    return executor.restoreEstimate();
  }

  /** True once an unretired result has quarantined the executor. */
  public boolean quarantined() {
    return executor.quarantined();
  }

  /**
   * Closes the executor (its queued jobs are cancelled, its workers joined with a deadline, its
   * store closed unless native retirement is unknown). When the report says a restart is required,
   * the Host allocation must stay mapped for the life of the process.
   */
  public CloseReport close() {
    if (early != null) {
      early.close();
    }
    return executor.close();
  }
}

package io.tokenspeed.engine;

import io.tokenspeed.cache.BlockCopy;
import io.tokenspeed.cache.BlockPool;
import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.TierCache;
import io.tokenspeed.control.ControlPlaneException;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.engine.l3.StorageTier;
import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.engine.memory.CopyFence;
import io.tokenspeed.engine.memory.DeviceHandle;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.scheduler.ExecutionPlan;
import io.tokenspeed.scheduler.RequestState;
import io.tokenspeed.scheduler.RoundInput;
import io.tokenspeed.scheduler.Scheduler;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * The engine's event loop: one thread that runs rounds (architecture §4) while there is work, and
 * sleeps until there is. One round:
 *
 * <pre>
 *   1. intake      administrative tasks, new requests, cancellations
 *   2. head        with L3: poll the executor, the relay exchange (idle rounds included), then the
 *                  agreed tick, pressure, cancellations and completions enter the scheduler
 *   3. plan        scheduler.round: forward batch, Device copies, demotions, storage commands
 *   4. dispatch    storage commands to the executor (beside the Device copies, never behind them);
 *                  the images of requests just retracted, then H2D loads and copy-on-write, which
 *                  the forward waits for; the D2H demotions and write-through, which copy while the
 *                  forward computes
 *   5. forward     the model over the Device pools ({@link ForwardStep})
 *   6. commit      Host publication of what was copied, scheduler.onForwardDone
 *   7. sample      the next tokens; finished requests end and their prefixes are written through
 *   8. resume      requests retracted after they generated tokens go back to the scheduler
 * </pre>
 *
 * <p>Rounds run while requests are active and, once they are not, until the background work is
 * done: a round after a request ends, rounds while demotions are planned, and, with L3, a round per
 * completion record or storage tick while storage operations are pending.
 *
 * <p>After every round the loop publishes its figures ({@link EngineStats}) and, when the
 * publication rule of {@link MetricsPublication} says so, a metrics snapshot ({@link
 * EngineMetrics}); other threads read both through volatile fields and never reach loop state.
 *
 * <p>The scheduler, the cache and every step are the loop thread's; other threads reach the loop
 * only through {@link Intake}, {@link #onLoop} and {@link #wake}.
 */
final class EventLoop {
  private static final long IDLE_WAIT_MS = 20;

  /**
   * On a tensor-parallel replica, the longest the leader lets the ranks wait in the exchange while
   * the replica idles: an idle round at least this often proves every rank alive.
   */
  static final long HEARTBEAT_MS = 100;

  /**
   * The longest wait between rounds while only L3 work is pending: a completion record wakes the
   * loop at once, so this only paces the ticks that expire soft deadlines.
   */
  static final long STORAGE_TICK_MS = 5;

  private final Engine engine;
  private final CacheLayout layout;
  private final CacheCoordinator cache;
  private final Scheduler scheduler;
  private final StorageTransferManager stm;
  private final StorageTier storage;
  private final Intake intake;
  private final DeviceHandle deviceHandle;
  private final Copies copies;
  private final ForwardStep forward;
  private final HostPublication publication;
  private final ReuseAccounting reuse;
  private final EngineObserver observer;
  private final Map<Long, ActiveRequest> active;

  /** The replica's exchange at TP > 1, null for a single rank. */
  private final Replica replica;

  private final java.util.OptionalInt eosId;

  /** On a replica: a stop was agreed, and this round is the last. */
  private boolean stopped;

  private long lastRoundNs = System.nanoTime();

  /** Permits for the loop's wait: released by submit, cancel, administration, close and L3. */
  private final Semaphore wake = new Semaphore(0);

  /** Administrative tasks for the loop thread, run before the next round. */
  private final ConcurrentLinkedQueue<AdminTask> admin = new ConcurrentLinkedQueue<>();

  private record AdminTask(Runnable run, CompletableFuture<?> result) {}

  private volatile boolean closing;
  private volatile Throwable fatal;
  private volatile long drainDeadlineNs;
  private volatile EngineStats stats = EngineStats.NONE;

  /** The latest metrics snapshot (null until {@link #publishInitialMetrics}). */
  private volatile EngineMetrics metrics;

  private final MetricsPublication metricsRule = new MetricsPublication();

  private long rounds;
  private long endedRequests;
  private long roundNanos;

  /** An idle round is due: a request ended or demotions are in progress (background work). */
  private boolean housekeeping;

  /** The last round planned no forward while storage work was pending: wait a little. */
  private boolean storageWait;

  /** Whether the loop said that quarantine stopped L3 (it says so once). */
  private boolean quarantineReported;

  /**
   * On a follower with L3: the executor figures of its latest metrics snapshot, which its next
   * report carries to the leader (then empty again: a status rides only the rounds that have one).
   */
  private RankStatus outgoingStatus = RankStatus.EMPTY;

  /** On the leader: the other ranks' executor figures, by rank, as last received. */
  private final Map<Integer, io.tokenspeed.l3.L3Metrics> otherRankExecutors =
      new java.util.TreeMap<>();

  private boolean unreadableFiguresReported;

  private static final System.Logger LOG = System.getLogger(EventLoop.class.getName());

  EventLoop(
      Engine engine,
      CacheLayout layout,
      CacheCoordinator cache,
      Scheduler scheduler,
      StorageTransferManager stm,
      StorageTier storage,
      Intake intake,
      DeviceHandle deviceHandle,
      Copies copies,
      ForwardStep forward,
      HostPublication publication,
      ReuseAccounting reuse,
      EngineObserver observer,
      Map<Long, ActiveRequest> active,
      Replica replica,
      java.util.OptionalInt eosId) {
    this.engine = engine;
    this.replica = replica;
    this.eosId = eosId;
    this.layout = layout;
    this.cache = cache;
    this.scheduler = scheduler;
    this.stm = stm;
    this.storage = storage;
    this.intake = intake;
    this.deviceHandle = deviceHandle;
    this.copies = copies;
    this.forward = forward;
    this.publication = publication;
    this.reuse = reuse;
    this.observer = observer;
    this.active = active;
  }

  // ---------------------------------------------------------------- other threads

  /** The figures of the latest round. */
  EngineStats stats() {
    return stats;
  }

  /** The latest metrics snapshot (a volatile read: no loop state is touched). */
  EngineMetrics metrics() {
    return metrics;
  }

  boolean closing() {
    return closing;
  }

  /** What ended the loop, or null. */
  Throwable fatal() {
    return fatal;
  }

  /**
   * Asks the loop to end: it cancels every request and lets pending L3 work finish until {@code
   * drainDeadlineNs}.
   */
  void close(long drainDeadlineNs) {
    this.drainDeadlineNs = drainDeadlineNs;
    closing = true;
    wake();
  }

  /** Runs {@code task} on the loop thread before its next round; completes with its result. */
  <T> CompletableFuture<T> onLoop(Supplier<T> task) {
    CompletableFuture<T> f = new CompletableFuture<>();
    if (closing) {
      f.completeExceptionally(new IllegalStateException("engine is closed"));
      return f;
    }
    admin.add(
        new AdminTask(
            () -> {
              try {
                f.complete(task.get());
              } catch (Throwable t) {
                f.completeExceptionally(t);
              }
            },
            f));
    wake();
    return f;
  }

  /** Fails the administrative tasks the loop did not run (after it ended). */
  void failPendingTasks() {
    for (AdminTask task; (task = admin.poll()) != null; ) {
      task.result().completeExceptionally(new IllegalStateException("engine closed"));
    }
  }

  /** Wakes the loop from its wait (any thread; never blocks). */
  void wake() {
    if (wake.availablePermits() == 0) {
      wake.release();
    }
  }

  // ---------------------------------------------------------------- the loop thread

  void run() {
    try {
      while (!stopped
          && (replica != null
              || !closing
              || !active.isEmpty()
              || intake.requestsPending()
              || draining())) {
        if (replica != null && !replica.leader()) {
          if (closing) {
            break; // a follower that stops alone leaves the mesh: the others stop, naming it
          }
          round(); // the leader paces the replica: the exchange waits for its report
          continue;
        }
        if (closing) {
          for (ActiveRequest a; (a = intake.poll()) != null; ) {
            a.handle.end(a.result("cancelled", "engine closed"));
          }
          for (long id : active.keySet()) {
            intake.cancel(id); // one round ends them all
          }
          if (replica != null && active.isEmpty() && !draining()) {
            replica.stop(); // every rank ends in the round that agrees on it
          }
        }
        boolean arrived =
            intake.pending()
                || !admin.isEmpty()
                || (replica != null && (replica.commandsPending() || replica.awaitingAgreement()));
        boolean agreementDue = storage != null && storage.agreementDue(); // next round returns it
        if (active.isEmpty() && !arrived && !housekeeping && !agreementDue) {
          boolean busy = storageBusy(); // L3 facts still to come: a round per event or tick
          long retryInNs = backupRetryInNs(); // a refused backup's next attempt, paced
          awaitWork(busy ? STORAGE_TICK_MS : idleWaitMs(retryInNs));
          boolean retryDue = backupRetryInNs() <= 0;
          boolean heartbeat =
              replica != null
                  && System.nanoTime() - lastRoundNs >= TimeUnit.MILLISECONDS.toNanos(HEARTBEAT_MS);
          if (!busy
              && !retryDue
              && !heartbeat
              && !intake.pending()
              && admin.isEmpty()
              && !(replica != null && replica.commandsPending())) {
            refreshIdleMetrics();
            continue;
          }
        } else if (storageWait && !arrived && !agreementDue) {
          awaitWork(STORAGE_TICK_MS); // nothing to compute until L3 answers
        }
        round();
      }
    } catch (Throwable t) {
      fatal = t;
      closing = true; // refuse new work: nothing would serve it
      if (replica != null) {
        engine.abortReplica("rank " + replica.rank() + " stopped: " + t);
        replica.failPending(t);
        for (ActiveRequest a : replica.unagreed()) {
          a.handle.end(a.result("error", "engine loop failed: " + t));
        }
      }
      for (ActiveRequest a : active.values()) {
        a.handle.end(a.result("error", "engine loop failed: " + t));
      }
      for (ActiveRequest a : intake.queued()) {
        a.handle.end(a.result("error", "engine loop failed: " + t));
      }
    }
    if (replica != null) {
      replica.failPending(new IllegalStateException("engine closed"));
    }
  }

  /** One round (see the class essay). */
  private void round() throws InterruptedException, ControlPlaneException {
    long roundStart = System.nanoTime();
    lastRoundNs = roundStart;
    List<Long> cancelled;
    ExecutionPlan plan;
    long now;
    long evictedBefore;
    if (replica == null) {
      cancelled = takeIntake();
      now = System.nanoTime();
      evictedBefore = scheduler.redundantEvictions();
      plan = plan(now, cancelled);
    } else {
      now = System.nanoTime();
      Replica.Agreed agreed = replicaHead(now);
      cancelled = agreed.cancellations();
      evictedBefore = scheduler.redundantEvictions();
      plan = replicaPlan(agreed, now);
    }
    // a round that demoted or freed blocks may have left more for the next one
    housekeeping =
        !plan.demotions().isEmpty()
            || scheduler.redundantEvictions() != evictedBefore
            || !cancelled.isEmpty()
            || publication.backupsPending();
    storageWait = storage != null && plan.forward().isEmpty() && storageBusy();
    endCancelled(cancelled);
    reuse.noteAdmissions(now);
    List<BlockTransfer> loads = new ArrayList<>();
    publication.saveRetractedImages(loads); // first: the retracted blocks may be reused below
    for (BlockCopy c : plan.deviceCopies()) {
      loads.add(BlockTransfer.of(c));
    }
    copies.await(loads);
    attachImages();
    // demotions copy cached blocks no request reads, so they run while the forward computes
    List<BlockTransfer> stores = new ArrayList<>();
    for (ExecutionPlan.Demotion d : plan.demotions()) {
      stores.add(BlockTransfer.of(d));
    }
    List<HostPublication.ImagePage> written = publication.writeThrough(stores);
    CopyFence demoted = copies.submit(stores);
    ForwardResult out = plan.forward().isEmpty() ? null : forward.forward(plan);
    if (demoted != null) {
      Copies.await(demoted);
    }
    publication.publish(written);
    scheduler.onForwardDone(plan);
    if (out != null) {
      List<ForwardStep.Finished> done = forward.sample(plan, out);
      notePlan(plan);
      finish(done);
    } else {
      notePlan(plan);
    }
    resumeRetracted();
    roundNanos += System.nanoTime() - roundStart;
    publishStats();
    publishMetricsAfterRound();
    observer.afterRound(engine);
  }

  /**
   * The head of a replica's round: local tasks, then the exchange (the leader's intake rides it),
   * then what the agreed round brings, in the leader's order: commands, new requests.
   */
  private Replica.Agreed replicaHead(long nowNs) throws ControlPlaneException {
    for (AdminTask task; (task = admin.poll()) != null; ) {
      task.run().run();
    }
    List<ActiveRequest> fresh = new ArrayList<>();
    List<Long> cancels = List.of();
    if (replica.leader()) {
      for (ActiveRequest a; (a = intake.poll()) != null; ) {
        fresh.add(a);
      }
      cancels = intake.drainCancellations();
    }
    Replica.Agreed agreed =
        replica.exchange(
            nowNs,
            storage == null ? null : storage.poll(),
            fresh,
            cancels,
            outgoingStatus,
            engine,
            eosId);
    outgoingStatus = RankStatus.EMPTY;
    noteOtherRanks(agreed);
    for (Replica.Command c : agreed.commands()) {
      if (c.kind() == Replica.Kind.STOP) {
        stopped = true;
      } else {
        engine.apply(c); // every rank, this round, before the round's new requests
      }
    }
    for (ActiveRequest a : agreed.newRequests()) {
      submitToScheduler(a);
    }
    return agreed;
  }

  /**
   * The leader keeps the executor figures the other ranks sent this round, for its next metrics
   * snapshot (figures this build cannot read are left out, once said).
   */
  private void noteOtherRanks(Replica.Agreed agreed) {
    if (!replica.leader()) {
      return;
    }
    for (int r = 1; r < replica.size(); r++) {
      RankStatus s = agreed.status(r);
      if (s.isEmpty()) {
        continue;
      }
      try {
        otherRankExecutors.put(r, ExecutorFigures.decode(s));
      } catch (IllegalArgumentException e) {
        if (!unreadableFiguresReported) {
          unreadableFiguresReported = true;
          LOG.log(
              System.Logger.Level.WARNING,
              "rank " + r + "'s L3 figures are unreadable and left out of /metrics: " + e);
        }
      }
    }
  }

  /**
   * The plan of a replica's round, from the agreed round only (before the first agreed round: a
   * round with nothing permitted at tick 0, the same on every rank).
   */
  private ExecutionPlan replicaPlan(Replica.Agreed agreed, long nowNs) {
    RoundInput input;
    if (agreed.round().isEmpty()) {
      input = new RoundInput(0, PressureSnapshot.IDLE, List.of(), List.of(), false, false);
    } else if (storage == null) {
      input = RoundInput.of(agreed.round().get(), true, false);
    } else {
      input = storage.input(agreed.round(), nowNs, agreed.cancellations());
    }
    long hostMark = cache.host().publications();
    ExecutionPlan plan = scheduler.round(input);
    rounds++;
    if (storage != null) {
      reuse.noteRestored(hostMark);
      storage.dispatch(plan.storage());
      noteQuarantine();
    }
    replica.commandsApplied(agreed.round());
    return plan;
  }

  /**
   * On a replica: the digest of the round's plan and of the tokens it sampled, which the next
   * round's report carries; the exchange stops the replica when the ranks' digests differ.
   */
  private void notePlan(ExecutionPlan plan) {
    if (replica == null) {
      return;
    }
    long h = mix(0x7470_6c61_6e00_0001L, plan.round());
    for (ExecutionPlan.ForwardItem f : plan.forward()) {
      h = mix(h, f.requestId());
      h = mix(h, ((long) f.startToken() << 32) | (f.numTokens() & 0xffffffffL));
      h = mix(h, f.decode() ? 1 : 0);
      ActiveRequest a = active.get(f.requestId());
      if (a != null && a.known > 0) {
        h = mix(h, ((long) a.known << 32) | (a.tokens[a.known - 1] & 0xffffffffL));
      }
    }
    // records of enums hash by identity, which differs between processes: their text does not
    h = mix(h, plan.deviceCopies().toString().hashCode());
    h = mix(h, plan.demotions().toString().hashCode());
    h = mix(h, plan.storage().toString().hashCode());
    replica.notePlan(h);
  }

  /** One step of a 64-bit mix (SplitMix64's finalizer over the running value and the next). */
  private static long mix(long h, long v) {
    long z = h ^ (v + 0x9e37_79b9_7f4a_7c15L + (h << 6) + (h >>> 2));
    z = (z ^ (z >>> 30)) * 0xbf58_476d_1ce4_e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d0_49bb_1331_11ebL;
    return z ^ (z >>> 31);
  }

  /** Runs the administrative tasks and takes new requests in; returns the cancellations. */
  private List<Long> takeIntake() {
    for (AdminTask task; (task = admin.poll()) != null; ) {
      task.run().run();
    }
    for (ActiveRequest a; (a = intake.poll()) != null; ) {
      submitToScheduler(a);
    }
    return intake.drainCancellations();
  }

  /**
   * The head and the plan: with L3, the executor's poll goes through the exchange and the agreed
   * round enters the scheduler; the plan's storage commands go to the executor at once.
   */
  private ExecutionPlan plan(long nowNs, List<Long> cancelled) throws ControlPlaneException {
    RoundInput input =
        storage == null
            ? new RoundInput(nowNs, PressureSnapshot.IDLE, cancelled, List.of(), true, false)
            : storage.roundInput(nowNs, cancelled);
    long hostMark = cache.host().publications();
    ExecutionPlan plan = scheduler.round(input);
    rounds++;
    if (storage != null) {
      reuse.noteRestored(hostMark); // inside a round, only agreed GETs publish on the Host
      storage.dispatch(plan.storage()); // beside the Device copies, never behind them
      noteQuarantine();
    }
    return plan;
  }

  private void endCancelled(List<Long> cancelled) {
    for (long id : cancelled) {
      ActiveRequest a = active.remove(id);
      if (a != null) {
        end(a, a.result("cancelled", null));
      }
    }
  }

  /** Ends the requests a sampled token finished; with L3 their prefixes are written through. */
  private void finish(List<ForwardStep.Finished> finished) {
    for (ForwardStep.Finished f : finished) {
      ActiveRequest a = f.request();
      housekeeping = true;
      if (storage != null) {
        publication.writeThroughLater(a);
      }
      scheduler.complete(a.id);
      active.remove(a.id);
      end(a, a.result(f.reason().wireName(), null));
    }
  }

  /**
   * Hands the images saved this round (their copies completed) to the scheduler, for requests
   * retracted during their prompt; those that generated tokens take theirs along when they are
   * resubmitted ({@link #resumeRetracted}).
   */
  private void attachImages() {
    for (ActiveRequest a : active.values()) {
      if (a.image != null && a.generated() == 0) {
        if (!scheduler.attachImage(a.id, a.image)) {
          publication.dropImage(a.image);
        }
        a.image = null;
      }
    }
  }

  /**
   * A request the scheduler retracted after it generated tokens is resubmitted with them as its
   * prompt (the scheduler knows only prompt keys), in Retracted: it resumes from its exact image,
   * or, when the Host could not hold one, recomputes through ordinary admission (exact too: the
   * forward pass does not depend on chunking). It never starts a fresh L3 preparation.
   */
  private void resumeRetracted() {
    for (Scheduler.RetractedBlocks rb : scheduler.retractedThisRound()) {
      ActiveRequest a = active.get(rb.requestId());
      if (a != null
          && a.generated() > 0
          && scheduler.state(a.id) instanceof RequestState.Retracted) {
        scheduler.complete(a.id);
        active.remove(a.id);
        submitToScheduler(a);
      }
    }
  }

  /** Submits a new or resumed request; a refused one ends with the refusal (its image dropped). */
  private void submitToScheduler(ActiveRequest a) {
    String refusal = Intake.submit(scheduler, layout, a);
    if (refusal == null) {
      active.put(a.id, a);
    } else {
      if (a.image != null) {
        publication.dropImage(a.image);
      }
      end(a, a.result("error", refusal));
    }
    a.image = null; // the scheduler's now, or dropped
  }

  /** Ends a request the loop served (counted in {@link EngineStats#endedRequests()}). */
  private void end(ActiveRequest a, GenerationResult r) {
    endedRequests++;
    a.handle.end(r);
  }

  /**
   * Accepted requests the loop holds that do not run yet: in the scheduler, and on a replica's
   * leader those sent to the other ranks and not yet agreed.
   */
  private int waitingInLoop() {
    int waiting = active.size() - Math.min(active.size(), scheduler.runningCount());
    return replica == null ? waiting : waiting + replica.unagreedCount();
  }

  private void publishStats() {
    intake.noteWaitingInLoop(waitingInLoop());
    stats =
        new EngineStats(
            rounds,
            active.size(),
            endedRequests,
            cache.device().cachedCount(),
            cache.host().cachedCount(),
            cache.device().pool().freeParents(),
            scheduler.retractions(),
            publication.imageBlocks(),
            deviceHandle.copiedBytes(),
            deviceHandle.copyNanos(),
            deviceHandle.loadedBytes(),
            deviceHandle.loadNanos(),
            roundNanos,
            forward.forwardNanos());
  }

  // ---------------------------------------------------------------- metrics snapshots

  /**
   * The snapshot of an engine whose loop has not run yet (on the constructing thread, before the
   * loop thread starts).
   */
  void publishInitialMetrics() {
    publishMetrics(System.nanoTime(), intake.queuedCount(), storagePending());
  }

  /**
   * After a round: a new snapshot when the publication rule ({@link MetricsPublication}) says so.
   */
  private void publishMetricsAfterRound() {
    int queued = intake.queuedCount();
    boolean pending = storagePending();
    long nowNs = System.nanoTime();
    if (metricsRule.dueAfterRound(nowNs, active.isEmpty() && queued == 0, pending)) {
      publishMetrics(nowNs, queued, pending);
    }
  }

  /** In an idle wait that ran no round: refreshes a snapshot the last rounds left stale. */
  private void refreshIdleMetrics() {
    long nowNs = System.nanoTime();
    if (metricsRule.dueWhileIdle(nowNs)) {
      publishMetrics(nowNs, intake.queuedCount(), storagePending());
    }
  }

  /**
   * Takes and publishes a snapshot: {@code queued} requests in the intake queue (read once, so that
   * the rule and the snapshot agree on whether the loop is idle).
   */
  private void publishMetrics(long nowNs, int queued, boolean pending) {
    int running = Math.min(active.size(), scheduler.runningCount());
    int waiting = queued + waitingInLoop();
    Optional<EngineMetrics.Storage> l3 = Optional.empty();
    if (storage != null) {
      io.tokenspeed.l3.L3Metrics executor = storage.metrics();
      if (replica != null && !replica.leader()) {
        outgoingStatus = ExecutorFigures.encode(executor); // to the leader, in the next round
      }
      l3 =
          Optional.of(
              new EngineMetrics.Storage(
                  pending, executor, EngineMetrics.Transfers.of(stm), otherRankExecutors));
    }
    EngineMetrics m =
        new EngineMetrics(nowNs, running, waiting, usage(cache.device()), usage(cache.host()), l3);
    metricsRule.published(nowNs, m.idle(), pending);
    metrics = m;
    observer.onMetrics(m);
  }

  private static EngineMetrics.TierUsage usage(TierCache tier) {
    BlockPool pool = tier.pool();
    return new EngineMetrics.TierUsage(
        pool.numParents(), pool.referencedParents(), pool.freeParents());
  }

  /**
   * Whether storage work is pending: {@link #storageBusy}, or refused backups waiting for their
   * retry. False without L3.
   */
  boolean storagePending() {
    return storageBusy() || (stm != null && stm.deferredCandidates() > 0);
  }

  /**
   * Waits up to {@code ms} for a reason to run a round: a request, a cancellation, an
   * administrative task, close, or an L3 completion record.
   */
  private void awaitWork(long ms) throws InterruptedException {
    wake.tryAcquire(ms, TimeUnit.MILLISECONDS);
    wake.drainPermits();
  }

  /**
   * Nanoseconds until a deferred backup candidate (a refused PUT's page) may be offered again:
   * {@link Long#MAX_VALUE} when there is none, at most 0 when it is due. The manager counts in
   * agreed ticks, which follow the clock by one round, so a due retry takes a round or two.
   */
  private long backupRetryInNs() {
    if (stm == null || stm.quarantined()) {
      return Long.MAX_VALUE;
    }
    long at = stm.nextBackupRetryNs();
    return at == Long.MAX_VALUE ? Long.MAX_VALUE : at - System.nanoTime();
  }

  /**
   * An idle wait: until the next backup retry, at least one storage tick, at most the idle wait.
   */
  private static long idleWaitMs(long retryInNs) {
    if (retryInNs == Long.MAX_VALUE) {
      return IDLE_WAIT_MS;
    }
    long ms = TimeUnit.NANOSECONDS.toMillis(Math.max(0, retryInNs));
    return Math.clamp(ms, STORAGE_TICK_MS, IDLE_WAIT_MS);
  }

  /** Says once that quarantine stopped L3: the engine serves on from the Device and the Host. */
  private void noteQuarantine() {
    if (!quarantineReported && stm.quarantined()) {
      quarantineReported = true;
      LOG.log(
          System.Logger.Level.WARNING,
          "L3 is quarantined: a storage operation's retirement is unproven, so its Host blocks stay"
              + " held and no new L3 work starts until the process restarts; requests are served"
              + " from the Device and Host tiers");
    }
  }

  /** L3 operations without an agreed completion, or backup candidates not yet written. */
  boolean storageBusy() {
    return storage != null
        && (storage.busy() || stm.queuedCandidates() > 0 || publication.backupsPending());
  }

  /**
   * Closing with L3 work left — refused backups waiting for their paced retry included, so that a
   * transient outage at shutdown does not cost the pages a short-lived process wrote through:
   * rounds go on until it is done or the drain deadline passes.
   */
  private boolean draining() {
    return (storageBusy() || (stm != null && stm.deferredCandidates() > 0))
        && System.nanoTime() < drainDeadlineNs;
  }
}

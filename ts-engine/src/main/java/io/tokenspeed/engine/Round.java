package io.tokenspeed.engine;

import io.tokenspeed.cache.BlockCopy;
import io.tokenspeed.cache.BlockPool;
import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.TierCache;
import io.tokenspeed.control.ControlPlaneException;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.engine.l3.StorageTier;
import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.engine.memory.CopyFence;
import io.tokenspeed.engine.memory.DeviceHandle;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.model.LayerGate;
import io.tokenspeed.model.device.SampledForward;
import io.tokenspeed.scheduler.ExecutionPlan;
import io.tokenspeed.scheduler.RequestState;
import io.tokenspeed.scheduler.RoundInput;
import io.tokenspeed.scheduler.Scheduler;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.TreeMap;
import java.util.function.Consumer;
import java.util.function.LongConsumer;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

/**
 * One round of the engine (architecture §4), called with the agreed clock: {@link #doWork} runs the
 * round's steps once and says what it did. It owns no thread, never waits for work and reads no
 * clock to decide anything: the tick, deadlines and admissions take the {@code nowNs} it is given;
 * only figures (how long the round and its forward took, when a token was sampled, when the round's
 * metrics snapshot was taken) read the settings' {@code nanoClock}, which a simulation replaces.
 * {@link LoopRunner} owns the thread, the idle policy and close.
 *
 * <pre>
 *   1. head        administrative tasks, then the replica's exchange: the leader's intake and
 *                  commands ride it and, with L3, every rank's executor poll; the agreed tick,
 *                  pressure, commands, new requests, cancellations and completions come back
 *   2. plan        scheduler.round: forward batch, Device copies, demotions, storage commands; the
 *                  storage commands go to the executor at once
 *   3. dispatch    the images of requests just retracted, then H2D loads and copy-on-write, which
 *                  the forward waits for; the D2H demotions and write-through, which copy while the
 *                  forward computes
 *   4. forward     the model over the Device pools, which also samples the next token of each
 *                  request whose known tokens it computes all of ({@link ForwardStep})
 *   5. commit      Host publication of what was copied, scheduler.onForwardDone
 *   6. sample      the sampled tokens are appended and streamed; finished requests end and their
 *                  prefixes are written through
 *   7. resume      requests retracted after they generated tokens go back to the scheduler
 *   8. publish     the round's KV events (one batch), its figures ({@link EngineStats}) and,
 *                  when the publication rule of {@link MetricsPublication} says so, a metrics
 *                  snapshot ({@link EngineMetrics})
 * </pre>
 *
 * <p>One head whatever the TP size: every rank, a single engine included (a replica of one rank),
 * goes through its {@link Replica}'s exchange, the one owner of the relay exchange, and gets one
 * {@link Head} back: the scheduler's input, the round's cancellations and the agreed round. Only
 * timing differs with the size: a replica of several ranks agrees on a round one exchange late, a
 * single rank in the round itself.
 *
 * <p>The scheduler, the cache and every step are the loop thread's; other threads read only the
 * published figures (volatile fields) and reach the loop through {@link LoopProxy} and {@link
 * Intake}.
 */
final class Round {
  private static final System.Logger LOG = System.getLogger(Round.class.getName());

  private final CacheLayout layout;
  private final CacheCoordinator cache;
  private final Scheduler scheduler;
  private final StorageTransferManager stm;
  private final StorageTier storage;
  private final Intake intake;
  private final LoopProxy loop;
  private final DeviceHandle deviceHandle;
  private final Copies copies;
  private final ForwardStep forward;
  private final HostPublication publication;
  private final ReuseAccounting reuse;
  private final EngineObserver observer;
  private final EngineView view;
  private final Map<Long, ActiveRequest> active;

  /** The replica's exchange (a single engine's: one rank's). */
  private final Replica replica;

  /** What an agreed administrative command does to this rank. */
  private final Consumer<Replica.Command> applyCommand;

  /** The control state the commands applied so far left: the round's permissions. */
  private final Supplier<ControlState> control;

  /** Closing: the drain was asked for (once). */
  private boolean drainAsked;

  /** Cancels a request by id (the handles of a follower's copies of the leader's requests). */
  private final LongConsumer cancel;

  /** Makes the replica's collective fail for every rank (this rank's loop stopped). */
  private final Consumer<String> abortReplica;

  private final OptionalInt eosId;
  private final LongSupplier nanoClock;

  /** The engine's part in disaggregated serving; null for a fused engine. */
  private final PdPort pd;

  /** The leader's cost measurements (null on a follower, without L3 or with the model off). */
  private final CostReporter costs;

  /** The KV block events (null without them, and on a follower). */
  private final KvEventRecorder kvEvents;

  private volatile EngineStats stats = EngineStats.NONE;

  /** The latest metrics snapshot (null until {@link #publishInitialMetrics}). */
  private volatile EngineMetrics metrics;

  private final MetricsPublication metricsRule = new MetricsPublication();

  private long rounds;
  private long endedRequests;
  private long roundNanos;

  /** This round leaves an idle round due (see {@link RoundResult#housekeeping}). */
  private boolean housekeeping;

  /** On a replica: a stop was agreed, and this round is the last. */
  private boolean stopped;

  /** Whether the loop said that quarantine stopped L3 (it says so once). */
  private boolean quarantineReported;

  /**
   * On a follower with L3: the executor figures of its latest metrics snapshot, which its next
   * report carries to the leader (then empty again: a status rides only the rounds that have one).
   */
  private RankStatus outgoingStatus = RankStatus.EMPTY;

  /** On the leader: the other ranks' executor figures, by rank, as last received. */
  private final Map<Integer, L3Metrics> otherRankExecutors = new TreeMap<>();

  private boolean unreadableFiguresReported;

  /** The agreed input of one round (see the class essay). */
  private record Head(RoundInput input, List<Long> cancelled, Optional<AgreedRound> agreed) {}

  /**
   * The copies dispatch started: the gate of the loads the forward reads, the Host pages written
   * through, the demotions' fence.
   */
  private record Dispatched(
      LayerGate loads, List<HostPublication.ImagePage> written, CopyFence demoted) {}

  Round(
      CacheLayout layout,
      CacheCoordinator cache,
      Scheduler scheduler,
      StorageTransferManager stm,
      StorageTier storage,
      Intake intake,
      LoopProxy loop,
      DeviceHandle deviceHandle,
      Copies copies,
      ForwardStep forward,
      HostPublication publication,
      ReuseAccounting reuse,
      EngineObserver observer,
      EngineView view,
      Map<Long, ActiveRequest> active,
      Replica replica,
      Consumer<Replica.Command> applyCommand,
      Supplier<ControlState> control,
      LongConsumer cancel,
      Consumer<String> abortReplica,
      OptionalInt eosId,
      LongSupplier nanoClock,
      PdPort pd,
      KvEventRecorder kvEvents) {
    this.layout = layout;
    this.cache = cache;
    this.scheduler = scheduler;
    this.stm = stm;
    this.storage = storage;
    this.intake = intake;
    this.loop = loop;
    this.deviceHandle = deviceHandle;
    this.copies = copies;
    this.forward = forward;
    this.publication = publication;
    this.reuse = reuse;
    this.observer = observer;
    this.view = view;
    this.active = active;
    this.replica = replica;
    this.applyCommand = applyCommand;
    this.control = control;
    this.cancel = cancel;
    this.abortReplica = abortReplica;
    this.eosId = eosId;
    this.nanoClock = nanoClock;
    this.pd = pd;
    this.kvEvents = kvEvents;
    if (pd != null) {
      pd.bind(
          copies,
          new PdPort.Ends() {
            @Override
            public void end(ActiveRequest a, GenerationResult r) {
              Round.this.end(a, r);
            }

            @Override
            public void cancel(long id) {
              cancel.accept(id);
            }

            @Override
            public void finished(
                ActiveRequest a, io.tokenspeed.model.sampling.FinishReason reason) {
              finish(List.of(new ForwardStep.Finished(a, reason)));
            }
          },
          loop::wake,
          nanoClock);
    }
    // with the cost model off nothing is sent: no command, no extra round, today's loop exactly
    this.costs =
        storage != null && replica.leader() && stm.costModel().enabled()
            ? new CostReporter(stm.costModel().attentionPairs())
            : null;
  }

  // ---------------------------------------------------------------- the round

  /** One round at {@code nowNs} (see the class essay); returns what it did. */
  RoundResult doWork(long nowNs) throws InterruptedException, ControlPlaneException {
    long endedBefore = endedRequests;
    Head head = head(nowNs);
    long evictedBefore = scheduler.redundantEvictions();
    ExecutionPlan plan = plan(head);
    // a round that demoted or freed blocks may have left more for the next one
    housekeeping =
        !plan.demotions().isEmpty()
            || scheduler.redundantEvictions() != evictedBefore
            || !head.cancelled().isEmpty()
            || publication.backupsPending();
    // nothing to compute until L3 or a PD peer answers: the runner waits for an event
    boolean storageWait =
        plan.forward().isEmpty()
            && ((storage != null && storageBusy()) || (pd != null && pd.waiting()));
    endCancelled(head.cancelled());
    if (pd != null) {
      // a closing engine's cancellations are its own (its peers' halves fail), else the clients'
      pd.afterPlan(head.cancelled(), control.get().draining());
    }
    reuse.noteAdmissions(nowNs);
    Dispatched dispatched = dispatch(plan);
    long forwardBefore = forward.forwardNanos();
    SampledForward out =
        plan.forward().isEmpty() ? null : forward.forward(plan, dispatched.loads());
    copies.finishStaged(out != null);
    if (out != null && costs != null) {
      costs.onForward(plan.forward(), forward.forwardNanos() - forwardBefore);
    }
    commit(plan, dispatched);
    sample(plan, out);
    resumeRetracted();
    publish(nowNs);
    return new RoundResult(
        !plan.forward().isEmpty(),
        Math.toIntExact(endedRequests - endedBefore),
        housekeeping,
        storageWait,
        stopped,
        !head.input().forwardPermitted());
  }

  /**
   * The head: administrative tasks, then the exchange (the leader's intake rides it), then what the
   * agreed round brings, in the leader's order: commands, new requests. The permissions are those
   * of the control state the round's commands left, the same on every rank; before a replica's
   * first agreed round: a round with nothing permitted at tick 0, the same on every rank.
   */
  private Head head(long nowNs) throws ControlPlaneException, InterruptedException {
    loop.runTasks();
    Replica.Agreed agreed;
    try {
      agreed = exchange(nowNs);
    } catch (ControlPlaneException e) {
      if (!plantedServesAlone) {
        throw e;
      }
      agreed = new Replica.Agreed(Optional.empty(), List.of(), List.of(), List.of());
    }
    noteOtherRanks(agreed);
    for (Replica.Command c : agreed.commands()) {
      if (c.kind() == Replica.Kind.STOP) {
        stopped = true;
      } else {
        applyCommand.accept(c); // every rank, this round, before the round's new requests
      }
    }
    for (ActiveRequest a : agreed.newRequests()) {
      if (pd != null && a.ticket != null && !replica.leader()) {
        pd.takenIn(a); // the leader opened its transport side at submission
      }
      submitToScheduler(a);
    }
    if (pd != null) {
      pd.agreed(agreed.events()); // what every rank's transfers did, agreed
      pd.head(); // this rank's transport events: ACKs, reservations, landings, fences
    }
    ControlState c = plantedIgnoresControl ? ControlState.NORMAL : control.get();
    RoundInput input;
    if (agreed.round().isEmpty()) {
      input = new RoundInput(0, PressureSnapshot.IDLE, List.of(), List.of(), false, false);
    } else if (storage == null) {
      AgreedRound round = agreed.round().get();
      input =
          new RoundInput(
              round.tickNs(),
              round.pressure(),
              agreed.cancellations(),
              List.of(),
              c.forwardPermitted(),
              false);
    } else {
      input =
          storage.input(
              agreed.round(),
              nowNs,
              agreed.cancellations(),
              c.forwardPermitted(),
              c.storagePermitted());
    }
    return new Head(input, agreed.cancellations(), agreed.round());
  }

  /** The replica's exchange: the leader sends its intake; every rank its poll and status. */
  private Replica.Agreed exchange(long nowNs) throws ControlPlaneException {
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
            pd == null ? RankEvents.EMPTY : pd.outgoing(),
            cancel,
            eosId);
    outgoingStatus = RankStatus.EMPTY;
    return agreed;
  }

  /**
   * The plan from the agreed input; the plan's storage commands go to the executor at once, beside
   * the Device copies, never behind them. On a replica's leader the commands of the agreed round
   * are then complete.
   */
  private ExecutionPlan plan(Head head) {
    long hostMark = cache.host().publications();
    ExecutionPlan plan = scheduler.round(head.input());
    rounds++;
    if (storage != null) {
      // inside a round, only agreed GETs publish on the Host (and with early copies, on the Device)
      reuse.noteRestored(hostMark, stm.drainEarlyPublished());
      storage.dispatch(plan.storage());
      noteQuarantine();
    }
    replica.commandsApplied(head.agreed());
    return plan;
  }

  /**
   * The copies of the plan: retraction images first, awaited (their blocks may be reused below),
   * then the loads and copy-on-write the forward reads, which the forward waits for layer by layer
   * when the engine stages its loads ({@link Copies#submitStaged}); the demotions copy cached
   * blocks no request reads, so they run while the forward computes.
   */
  private Dispatched dispatch(ExecutionPlan plan) throws InterruptedException {
    List<BlockTransfer> images = new ArrayList<>();
    publication.saveRetractedImages(images);
    copies.await(images);
    attachImages();
    List<BlockTransfer> loads = new ArrayList<>(plan.deviceCopies().size());
    for (BlockCopy c : plan.deviceCopies()) {
      loads.add(BlockTransfer.of(c));
    }
    LayerGate gate = copies.submitStaged(loads);
    List<BlockTransfer> stores = new ArrayList<>();
    for (ExecutionPlan.Demotion d : plan.demotions()) {
      stores.add(BlockTransfer.of(d));
    }
    List<HostPublication.ImagePage> written = publication.writeThrough(stores);
    return new Dispatched(gate, written, copies.submit(stores));
  }

  /** The Host publishes what the demotions copied; the scheduler learns the forward is done. */
  private void commit(ExecutionPlan plan, Dispatched dispatched) throws InterruptedException {
    if (dispatched.demoted() != null) {
      copies.awaitTimed(dispatched.demoted());
    }
    publication.publish(dispatched.written());
    scheduler.onForwardDone(plan);
  }

  /** Takes the sampled tokens (when the plan ran a forward) and ends the requests they finished. */
  private void sample(ExecutionPlan plan, SampledForward out) throws InterruptedException {
    if (out == null) {
      notePlan(plan);
      return;
    }
    List<ForwardStep.Finished> done = new ArrayList<>(forward.sample(plan, out));
    notePlan(plan);
    if (pd != null) {
      for (ActiveRequest a : pd.firstTokens(plan, done)) {
        sendPrefilled(a);
      }
    }
    finish(done);
  }

  /**
   * A prefill engine's request sampled its first token: its prefix is written through as a finished
   * one's, its KV and token go to the decode engine, and the scheduler lets it go (the transfer
   * sends from Host copies); its handle ends at the transfer's fence.
   */
  private void sendPrefilled(ActiveRequest a) throws InterruptedException {
    housekeeping = true;
    if (storage != null) {
      publication.writeThroughLater(a);
    }
    pd.send(a);
    scheduler.complete(a.id);
    active.remove(a.id);
  }

  /** The round's KV events and figures, a metrics snapshot when due, then the observer. */
  private void publish(long nowNs) {
    if (kvEvents != null) {
      kvEvents.flush(); // the round's events, as one batch
    }
    long endNs = nanoClock.getAsLong();
    roundNanos += endNs - nowNs;
    reportCosts(endNs);
    publishStats();
    publishMetricsAfterRound(endNs);
    observer.afterRound(view);
  }

  // ---------------------------------------------------------------- the steps' rules

  /**
   * The leader sends its newest cost figures when they moved ({@link CostReporter}): every rank's
   * scheduler takes them in the round that agrees on them.
   */
  private void reportCosts(long nowNs) {
    if (costs == null || stopped) {
      return;
    }
    io.tokenspeed.core.storage.CostFigures f = costs.due(storage.restoreEstimate(), nowNs);
    if (f != null) {
      replica.command(Replica.Command.costFigures(f));
    }
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
   * On a replica: the digest of the round's plan and of the tokens it sampled, which the next
   * round's report carries; the exchange stops the replica when the ranks' digests differ.
   */
  private void notePlan(ExecutionPlan plan) {
    if (replica.size() == 1) {
      return; // one rank has nobody to compare with
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
    String refusal = Intake.submit(scheduler, layout, a, kvEvents);
    if (refusal == null) {
      active.put(a.id, a);
    } else {
      if (a.image != null) {
        publication.dropImage(a.image);
      }
      if (pd != null && a.ticket != null) {
        pd.abandon(a.id); // its room on the transport ends with it
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

  // ---------------------------------------------------------------- figures and snapshots

  /**
   * Accepted requests the loop holds that do not run yet: in the scheduler, and on a replica's
   * leader those sent to the other ranks and not yet agreed.
   */
  private int waitingInLoop() {
    int waiting = active.size() - Math.min(active.size(), scheduler.runningCount());
    return waiting + replica.unagreedCount();
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
            deviceHandle.stagedLoadedBytes(),
            roundNanos,
            forward.forwardNanos(),
            copies.waitNanos());
  }

  /** The figures of the latest round (any thread). */
  EngineStats stats() {
    return stats;
  }

  /** The latest metrics snapshot (any thread: a volatile read, no loop state is touched). */
  EngineMetrics metrics() {
    return metrics;
  }

  /**
   * The snapshot of an engine whose loop has not run yet (on the constructing thread, before the
   * loop thread starts).
   */
  void publishInitialMetrics(long nowNs) {
    publishMetrics(nowNs, intake.queuedCount(), storagePending());
  }

  /** After a round: a new snapshot when the publication rule says so. */
  private void publishMetricsAfterRound(long nowNs) {
    int queued = intake.queuedCount();
    boolean pending = storagePending();
    if (metricsRule.dueAfterRound(nowNs, active.isEmpty() && queued == 0, pending)) {
      publishMetrics(nowNs, queued, pending);
    }
  }

  /** In an idle wait that ran no round: refreshes a snapshot the last rounds left stale. */
  void refreshIdleMetrics(long nowNs) {
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
      L3Metrics executor = storage.metrics();
      if (!replica.leader()) {
        outgoingStatus = ExecutorFigures.encode(executor); // to the leader, in the next round
      }
      l3 =
          Optional.of(
              new EngineMetrics.Storage(
                  pending,
                  executor,
                  EngineMetrics.Transfers.of(stm),
                  otherRankExecutors,
                  replica.lateCompletionReports()));
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

  // ---------------------------------------------------------------- for the runner (loop thread)

  /** Whether this rank is one of a tensor-parallel replica's (of more than one rank). */
  boolean replicated() {
    return replica.size() > 1;
  }

  /** Whether this rank follows a replica's leader (whose rounds pace it). */
  boolean follower() {
    return !replica.leader();
  }

  /** Whether the loop serves requests. */
  boolean hasActiveRequests() {
    return !active.isEmpty();
  }

  /** Whether requests wait in the intake queue, or cancellations to be taken in. */
  boolean requestsPending() {
    return intake.requestsPending();
  }

  /**
   * Whether work arrived for the next round's head: requests or cancellations, administrative
   * tasks, or, on a replica's leader, commands to send.
   */
  boolean workArrived() {
    return intake.pending()
        || loop.tasksPending()
        || replica.commandsPending()
        || (pd != null && pd.pending());
  }

  /** On a replica: requests or commands sent whose agreement the next exchange brings. */
  boolean awaitingAgreement() {
    return replica.awaitingAgreement();
  }

  /**
   * The latest round reported completions whose agreement the next round returns (a replica of
   * several ranks; a single rank's exchange agreed on them in that round).
   */
  boolean storageAgreementDue() {
    return storage != null && replica.deliversLate() && storage.agreementDue();
  }

  /** L3 operations without an agreed completion, or backup candidates not yet written. */
  boolean storageBusy() {
    return storage != null
        && (storage.busy() || stm.queuedCandidates() > 0 || publication.backupsPending());
  }

  /**
   * Whether storage work is pending: {@link #storageBusy}, or refused backups waiting for their
   * retry. False without L3.
   */
  boolean storagePending() {
    return storageBusy() || (stm != null && stm.deferredCandidates() > 0);
  }

  /**
   * Nanoseconds after {@code nowNs} until a deferred backup candidate (a refused PUT's page) may be
   * offered again: {@link Long#MAX_VALUE} when there is none, at most 0 when it is due. The manager
   * counts in agreed ticks, which follow the clock by one round, so a due retry takes a round or
   * two.
   */
  /**
   * Whether the leader holds cost figures it would send now ({@link CostReporter#pending}): the
   * idle loop then runs a round, which sends them.
   */
  boolean costsPending(long nowNs) {
    return costs != null && !stopped && costs.pending(storage.restoreEstimate(), nowNs);
  }

  long backupRetryInNs(long nowNs) {
    if (stm == null || stm.quarantined()) {
      return Long.MAX_VALUE;
    }
    long at = stm.nextBackupRetryNs();
    return at == Long.MAX_VALUE ? Long.MAX_VALUE : at - nowNs;
  }

  /**
   * Closing: the control state turns to draining (on a replica, every rank in the round that agrees
   * on it), queued requests end cancelled and every active one is cancelled (one round ends them
   * all); a replica's leader asks for the stop once nothing is left to serve or {@code draining}.
   */
  void cancelAll(boolean draining) {
    if (!drainAsked) {
      drainAsked = true;
      if (!replicated()) {
        applyCommand.accept(Replica.Command.DRAIN); // the loop thread, between rounds
      } else if (replica.leader()) {
        replica.command(Replica.Command.DRAIN);
      }
    }
    for (ActiveRequest a; (a = intake.poll()) != null; ) {
      a.handle.end(a.result("cancelled", "engine closed"));
    }
    for (long id : active.keySet()) {
      intake.cancel(id);
    }
    if (replicated() && active.isEmpty() && !draining) {
      replica.stop(); // every rank ends in the round that agrees on it
    }
  }

  /**
   * Planted bugs for the engine's simulation (never set outside its tests): a rank's round goes on
   * when its exchange fails; a failed loop leaves the requests it serves without an end.
   */
  private boolean plantedServesAlone;

  private boolean plantedLeavesActive;

  /** Plants the first bug above (the simulation's planted-bug tests only). */
  void plantServeAlone() {
    plantedServesAlone = true;
  }

  /** Plants the second bug above (the simulation's planted-bug tests only). */
  void plantLeaveActiveOnFailure() {
    plantedLeavesActive = true;
  }

  /** Planted: a round takes forward and storage as permitted whatever the control state says. */
  private boolean plantedIgnoresControl;

  /** Plants the bug above (the simulation's planted-bug tests only). */
  void plantIgnoreControlState() {
    plantedIgnoresControl = true;
  }

  /**
   * The loop failed with {@code t}: the replica's collective aborts, and every request the loop
   * knows of — unagreed on a replica's leader, active, queued — ends with the failure.
   */
  void fail(Throwable t) {
    if (replicated()) {
      abortReplica.accept("rank " + replica.rank() + " stopped: " + t);
    }
    replica.failPending(t);
    for (ActiveRequest a : replica.unagreed()) {
      a.handle.end(a.result("error", "engine loop failed: " + t));
    }
    for (ActiveRequest a : plantedLeavesActive ? List.<ActiveRequest>of() : active.values()) {
      a.handle.end(a.result("error", "engine loop failed: " + t));
    }
    for (ActiveRequest a : intake.queued()) {
      a.handle.end(a.result("error", "engine loop failed: " + t));
    }
    if (pd != null) {
      pd.endSent("engine loop failed: " + t);
    }
  }

  /** The loop ended: a replica's commands still waiting fail. */
  void ended() {
    replica.failPending(new IllegalStateException("engine closed"));
  }
}

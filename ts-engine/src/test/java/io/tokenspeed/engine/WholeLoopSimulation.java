package io.tokenspeed.engine;

import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.control.LocalRelayHub;
import io.tokenspeed.control.PlantedAgreement;
import io.tokenspeed.control.ReplicaSecret;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.engine.l3.StorageTier;
import io.tokenspeed.engine.sim.SimModel;
import io.tokenspeed.engine.sim.SimStore;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.LocalCollective;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.PlantedRules;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The whole-loop simulation: the production engine — one {@link Engine} per rank, its real {@link
 * Round}, scheduler, storage transfer manager, cache coordinator, {@link HostPublication}, {@link
 * StorageTier} and relay exchange — run on simulated time, over a seeded simulated store ({@link
 * SimStore}) and a model whose next token depends on every byte of the KV it reads ({@link
 * SimModel}). Nothing of the round is re-implemented here: the simulation only decides when a round
 * runs (the idle policy of {@link LoopRunner}, on the simulated clock), moves the clock, runs the
 * store's due calls, plays the frontend and checks.
 *
 * <pre>
 *   the driver thread, one step                     every rank, the same round
 *   ------------------------------------            ------------------------------------------
 *   frontend: arrivals, cancellations, deadlines,   Round.doWork(nowNs), all ranks at once (one
 *             clears, rotations, weight updates     thread each at TP > 1: the exchange is a
 *   a round due?  (LoopRunner's policy)      ─────► blocking collective over a LocalRelayHub);
 *   check every invariant                           at TP = 1 the storage exchange's own hub
 *   clock += the round's cost or the idle gap
 *   SimStore.step(): every due store call runs, on the driver thread, in due order
 * </pre>
 *
 * <p>Every choice comes from the seed and every thread's work is awaited before the next step, so a
 * seed replays exactly (the store's call log included): the exchange orders everything by rank, the
 * copies are awaited inside the round, and the store's calls run only on the driver thread. In a
 * round with a dead or stalled rank the clock moves only while every rank still in its round waits
 * on the hub ({@link LocalRelayHub#waiting()}), a round timeout at a time.
 *
 * <p><b>The cost model</b> is on in a third of the clean seeds. At TP 1 their forwards cost
 * simulated time (a fixed part and a part per token), which the engine measures and fits, so that
 * the model decides; their store's GETs turn slow now and then for a spell, so that restores chosen
 * under a fast store's figures are abandoned while they read.
 *
 * <p><b>Faults.</b> In three seeds of four the store is hostile ({@link SimStore.Faults#HOSTILE}):
 * slow calls past the soft deadline (reordered completions), hung calls until a restart, refusal
 * spells, short reads, rotted objects, outages, restarts; one seed in eight also answers unretired
 * now and then (quarantine). Every seed has idle gaps of up to 6 s, bursts over shared system
 * prompts, cancellations and request deadlines, and administrative calls at random points: full
 * clear, Device-only clear, namespace rotation, and the weight update (fence, wait until every
 * operation retired, delete the old namespace, switch). At TP > 1, every 2 to 40 s of simulated
 * time one rank, at random, dies (the hub kills it, half the time), stalls past the round timeout
 * (a quarter) or stalls for less (a quarter); the first two stop the replica, and a fresh one (new
 * engines, new hub, empty Device and Host tiers, the weight version the last one ended with) takes
 * over the store, while the old processes' store calls in flight are dropped with them.
 *
 * <p><b>Checked after every round</b> (the figures say how often each was exercised):
 *
 * <ul>
 *   <li>every rank's round ran: the exchange compares the ranks' plan digests and stops the replica
 *       when they differ, so a rank's failure, other than by the rank faults above, is a violation;
 *   <li>every request's tokens are the reference's (the same model over the tokens alone, which is
 *       what an engine without storage generates: {@code SimModelEngineTest}), and a request that
 *       ran to its length has all of them;
 *   <li>no request ends twice: the loop's count of ended requests never exceeds the requests that
 *       ended, and at the end of the run arrivals, faults and commands stop and the rounds go on
 *       until the replica is idle, when every request must have ended exactly once;
 *   <li>a round's soft timeouts are at most the requests submitted the soft deadline before its
 *       clock;
 *   <li>a key the store refused is not offered to it again before the manager's first backoff;
 *   <li>nothing is written under a namespace after its deletion returned;
 *   <li>every 16 rounds and in every idle round: the scheduler's, the manager's and the cache's own
 *       invariants (references balanced, credits conserved), and no copy batch is left over;
 *   <li>when the replica is idle: no store call in flight and no job in any executor (an idle
 *       replica calls the store no more), no Ready hold, operations and Host credits in use only by
 *       quarantined operations, no Device block held by a request, and an executor that quarantined
 *       means every rank's manager quarantined (nothing published without agreement);
 *   <li>every object a PUT writes, as the store writes it, and every Host block published in the
 *       round, on every rank, holds the reference bytes of its key on that rank ({@link
 *       ReferenceBlocks}: the rows the model writes for the prefix its hash names); the whole
 *       store's intact objects again whenever a replica stops and at the end of the run;
 *   <li>when a rank died or stalled past the round timeout: every rank's round fails (the stalled
 *       one, released, at the latest in the round after the one it had every report of), so no rank
 *       serves alone; a failed round's loop aborts the collective at once, as the loop thread does;
 *       every request the replica held has ended, with an error unless it ended before; a rank
 *       stalled for less than the round timeout holds the round up, and it goes on.
 * </ul>
 *
 * <p>A violation throws {@link Violation} with {@code seed=… tp=… round=… clock=…} and what broke.
 * {@link Planted} bugs switch one safety rule off each, to show that the checks can fail.
 */
final class WholeLoopSimulation implements AutoCloseable {

  /** A safety rule switched off (or a store bug), to show that the simulation notices. */
  enum Planted {
    NONE,
    /** A GET publishes the rows it failed to read (missing, short, rotted) as well. */
    PUBLISH_FAILED_GET,
    /** An operation counts as retired when any owner retired it (the retirement AND as OR). */
    RETIRED_BY_ANY_RANK,
    /** A refused backup is offered again without the store's hold. */
    REOFFER_WITHOUT_HOLD,
    /** A retracted victim keeps what it knew of its Device KV. */
    VICTIM_KEEPS_DEVICE_KV,
    /** The store lands a wrong byte now and then and answers OK. */
    STORE_LANDS_WRONG_BYTES,
    /** The store writes an object with a wrong byte now and then, which reads back OK. */
    STORE_WRITES_WRONG_BYTES,
    /** A rank's round goes on when its exchange fails (a peer died or stalled). */
    SERVES_ALONE,
    /** A failed loop does not end the requests it serves. */
    FAILED_LOOP_LEAVES_REQUESTS,
    /** A frozen round takes its permissions as granted: it computes and starts storage work. */
    FROZEN_ROUND_RUNS,
    /** A GET's early Device copies publish the rows it failed to read on the Device. */
    EARLY_PUBLISHES_FAILED_ROWS,
    /** A round's staged loads leave their last stage's layers uncopied, yet open its gate. */
    LOADS_SKIP_LAST_STAGE
  }

  /** An invariant failed: the message names the seed that replays it. */
  static final class Violation extends AssertionError {
    Violation(String message, Throwable cause) {
      super(message, cause);
    }
  }

  private static final long MS = 1_000_000L;
  private static final int VOCAB = 1021;
  private static final long STORAGE_TICK_NS = LoopRunner.STORAGE_TICK_MS * MS;
  private static final long SOFT_DEADLINE_MS = 200;
  private static final long RETIREMENT_WAIT_NS = 60_000 * MS;
  private static final int DRAIN_ROUNDS = 200_000;
  private static final long ROUND_TIMEOUT_MS = 2_000;
  private static final long ROUND_TIMEOUT_NS = ROUND_TIMEOUT_MS * MS;

  /** The most round timeouts a round with a dead or stalled rank may take to end on every rank. */
  private static final int MAX_TIMEOUTS_TO_STOP = 8;

  final long seed;
  final int tp;

  /** The engines' load stages in this run (1: whole loads). */
  private final int loadStages;

  final Planted planted;
  private final SplittableRandom rnd;

  /** The ranks' faults (deaths and stalls), apart from {@link #rnd}: TP 1 seeds draw none. */
  private final SplittableRandom rankFaults;

  /** The slow spells' generator and the next one's start ({@link #slowSpells}). */
  private final SplittableRandom spells;

  private long nextSlowSpellNs = Long.MAX_VALUE;

  private final AtomicLong clock = new AtomicLong(1_000 * MS);
  final SimStore store;
  private final ExecutorService rankThreads;
  private final int maxTokens;

  /** Whether this run's engines weigh restores with the cost model ({@code async.cost_model}). */
  private final boolean costModel;

  private final boolean earlyH2d;

  boolean costModel() {
    return costModel;
  }

  private final boolean faulty;

  // what every replica is built of
  private final int window;
  private final long modelSeed;
  private final EngineConfig config;
  private final StorageRuntimeConfig runtime;
  private final List<InetSocketAddress> addresses = new ArrayList<>();

  // the replica serving now: a fresh one takes over the store when one stops
  private final List<Engine> engines = new ArrayList<>();
  private final List<Round> rounds = new ArrayList<>();
  private final List<Integer> attached = new ArrayList<>();
  private SimModel reference;
  private LocalRelayHub hub;
  private ReferenceBlocks blocks;
  private long[] hostPublications;

  /** The requests submitted, by id, until they ended and were checked. */
  private final Map<Long, Req> open = new LinkedHashMap<>();

  private final List<int[]> systemPrompts = new ArrayList<>();

  // the frontend's pace
  private long nextArrivalNs;
  private long nextAdminNs;
  private boolean draining;
  private int version;
  private WeightUpdate update;

  // the round's start, for the frozen-round checks
  private long issuedBefore;
  private int inFlightBefore;

  // an administrative freeze: asked, lifted at unfreezeAtNs (each future completes once applied)
  private CompletableFuture<Void> freezing;
  private CompletableFuture<Void> unfreezing;
  private long unfreezeAtNs;

  // the leader's runner, whose idle policy the simulation asks, and the last round it ran
  private LoopRunner runner;
  private RoundResult last = RoundResult.NONE;

  /**
   * With the cost model on, a bypassed store is asked again after this much agreed time: the slow
   * spells end, and the seed's later restores are to be exercised too.
   */
  static final long COST_MODEL_EXPLORE_MS = 2_000;

  /**
   * What a forward costs in simulated time on a seed with the cost model at TP 1: a fixed part and
   * a part per token, so that recomputing a prefix of a few hundred tokens costs tens of
   * milliseconds, more than an ordinary restore (a few ms) and less than one in a slow spell.
   */
  static final long FORWARD_BASE_NS = 200_000;

  static final long FORWARD_TOKEN_NS = 100_000;

  // the checks' state
  private final Map<String, Long> refusedAt = new HashMap<>();
  private final List<String> deletedNamespaces = new ArrayList<>();
  private String storeViolation;
  private long endedBeforeReplica;
  private long retractionsBefore;
  private long nextRankFaultNs = Long.MAX_VALUE;

  // figures
  long roundsRun;
  long requestsSubmitted;
  long requestsEnded;
  long requestsFinished;
  long requestsCancelled;
  long softTimeouts;
  long restoresAbandoned;
  private long abandonedBefore;
  long clears;
  long rotations;
  long weightUpdates;
  long freezes;
  long frozenRounds;
  long frozenCompletions;
  long frozenSoftTimeouts;
  long frozenCancellations;
  long idleChecks;
  long quarantines;
  long requestsStopped;
  long replicaStops;
  long rankStalls;
  long objectsChecked;
  long hostBlocksChecked;

  private record Req(
      long id,
      RequestHandle handle,
      int[] prompt,
      int[] ref,
      int maxTokens,
      long submitNs,
      long deadlineNs) {}

  /** What befalls a rank at a seeded point (TP > 1). */
  private enum RankFault {
    /** Its process dies: the replica stops. */
    KILLED,
    /** It stalls past the round timeout: the replica stops. */
    STALLED,
    /** It stalls for less than the round timeout: the round waits for it and goes on. */
    SLOW
  }

  /** A weight update in progress: fenced, waiting for retirement, then deletion and switch. */
  private static final class WeightUpdate {
    final CompletableFuture<Void> fenced;
    final long startNs;
    final String oldNamespace;

    WeightUpdate(CompletableFuture<Void> fenced, long startNs, String oldNamespace) {
      this.fenced = fenced;
      this.startNs = startNs;
      this.oldNamespace = oldNamespace;
    }
  }

  WholeLoopSimulation(long seed, int tp, Planted planted) {
    this.seed = seed;
    this.tp = tp;
    this.planted = planted;
    this.rnd = new SplittableRandom(seed);
    this.rankFaults = new SplittableRandom(seed ^ 0x7A4B_D1E5_0C39_F286L);
    this.spells = new SplittableRandom(seed ^ 0x51_0E5B_E11L);
    this.faulty = seed % 4 != 0;
    SimStore.Faults faults = faulty ? SimStore.Faults.HOSTILE : SimStore.Faults.NONE;
    if (faulty && seed % 8 == 1) {
      faults = faults.with(SimStore.Fault.UNRETIRED, 0.005);
    }
    if (planted == Planted.STORE_LANDS_WRONG_BYTES) {
      faults = faults.with(SimStore.Fault.WRONG_BYTES, 0.01);
    }
    if (planted == Planted.RETIRED_BY_ANY_RANK) {
      faults = faults.with(SimStore.Fault.UNRETIRED, 0.01);
    }
    if (planted == Planted.STORE_WRITES_WRONG_BYTES) {
      faults = faults.with(SimStore.Fault.WRONG_WRITE, 0.01);
    }
    this.store = new SimStore(rnd.nextLong(), clock::get, faults);
    store.onPut(this::onPut);
    store.onWrite(this::onWrite);
    store.onDelete(deletedNamespaces::add);
    this.window = rnd.nextBoolean() ? 0 : 17 + rnd.nextInt(48);
    this.modelSeed = rnd.nextLong();
    int deviceParents = rnd.nextInt(3) == 0 ? 6 + rnd.nextInt(4) : 8 + rnd.nextInt(24);
    this.maxTokens = 1 + rnd.nextInt(64);
    this.config = new EngineConfig(32, 16, deviceParents, 1.0 + rnd.nextInt(3), 256, 8, 2, 1, 1024);
    // the cost model on in a third of the clean runs (its figures measured on the simulated
    // clock, agreed through the replica's commands); off where a bug is planted, since a restore
    // it skipped would leave the L3 paths the planted bugs live on unexercised
    this.costModel = planted == Planted.NONE && rnd.nextInt(3) == 0;
    // early Host-to-Device copies of GETs in half the clean runs and wherever a bug is planted
    boolean coin = rnd.nextBoolean();
    this.earlyH2d = planted != Planted.NONE || coin;
    // loads staged by layer (2 stages: the sim model's layers) in three runs of four, and wherever
    // a bug is planted; whole in the others, as the engine's default
    this.loadStages = planted != Planted.NONE || rnd.nextInt(4) != 0 ? 8 : 1;
    StorageConfig scheduling =
        StorageConfig.defaults()
            .withSoftDeadlineMs(SOFT_DEADLINE_MS)
            .withMinExtensionTokens(16)
            .withCostModel(
                costModel,
                StorageConfig.DEFAULT_COST_MODEL_MARGIN_PERCENT,
                COST_MODEL_EXPLORE_MS,
                0)
            .withEarlyH2d(earlyH2d);
    L3ExecutorConfig executor = new L3ExecutorConfig(2, 2, 2, 64, 64, 64, 128, 1_000, 0);
    this.runtime = new StorageRuntimeConfig(scheduling, executor);
    for (int r = 0; r < tp; r++) {
      addresses.add(new InetSocketAddress(InetAddress.getLoopbackAddress(), 1 + r));
    }
    this.rankThreads = tp == 1 ? null : Executors.newFixedThreadPool(tp, daemon());
    startReplica();
    int systems = 1 + rnd.nextInt(3);
    for (int i = 0; i < systems; i++) {
      systemPrompts.add(tokens(16 + rnd.nextInt(80)));
    }
    this.nextArrivalNs = clock.get();
    this.nextAdminNs = clock.get() + (200 + rnd.nextInt(3_000)) * MS;
    if (tp > 1) {
      this.nextRankFaultNs = clock.get() + nextRankFaultGapNs();
    }
  }

  /**
   * Starts a replica, one engine per rank, over the store: the first, or a fresh one (new
   * processes: empty Device and Host tiers, a new hub) taking over from one that stopped, under the
   * weight version the last one ended with.
   */
  private void startReplica() {
    engines.clear();
    rounds.clear();
    attached.clear();
    this.hub = tp == 1 ? null : new LocalRelayHub(tp, clock::get);
    Collective[] collectives =
        tp == 1 ? new Collective[] {Collective.single()} : LocalCollective.group(tp);
    ReplicaSecret secret = ReplicaSecret.generate();
    Simulation.Planting planting = planting(planted);
    StorageTier.Stepping stepping = (ex, cfg) -> attached.add(store.attach(ex, cfg));
    String weightVersion =
        version == 0 ? io.tokenspeed.model.ModelIdentity.DEFAULT_WEIGHT_VERSION : "v" + version;
    SimModel rank0 = null;
    try {
      for (int r = 0; r < tp; r++) {
        SimModel model = new SimModel(VOCAB, 2, window, modelSeed, collectives[r], weightVersion);
        if (costModel && tp == 1) {
          // the forward costs simulated time, which the engine measures: its cost model fits a
          // prefill and decides (at TP > 1 the ranks' threads would move the one clock each)
          model.onForward(t -> clock.addAndGet(FORWARD_BASE_NS + FORWARD_TOKEN_NS * t));
        }
        rank0 = rank0 == null ? model : rank0;
        Engine e =
            Engine.start(
                EngineSettings.of(model, config)
                    .l3(new L3Settings(store, runtime, SimModel.ATTENTION_BACKEND))
                    .control(
                        tp == 1
                            ? null
                            : ControlConfig.of(0, r, addresses, secret)
                                .withTimeouts(ROUND_TIMEOUT_MS, 10_000))
                    .nanoClock(clock::get)
                    .loadStages(loadStages)
                    .simulation(new Simulation(stepping, hub, planting))
                    .conclude());
        engines.add(e);
        rounds.add(e.round());
      }
    } catch (RuntimeException | Error e) {
      close();
      throw e;
    }
    if (reference == null) {
      this.reference = rank0;
      this.blocks = new ReferenceBlocks(rank0, engines.getFirst().layout(), tp);
    }
    this.hostPublications = new long[tp];
    this.freezing = null; // a fresh replica starts unfrozen
    this.unfreezing = null;
    this.runner = engines.getFirst().runner();
    this.runner.roundStarted(clock.get());
    this.last = RoundResult.NONE;
    this.endedBeforeReplica = requestsEnded;
  }

  private static java.util.concurrent.ThreadFactory daemon() {
    return r -> {
      Thread t = new Thread(r, "sim-rank");
      t.setDaemon(true);
      return t;
    };
  }

  /** Switches {@code planted}'s rule off in each owner as the engine builds it. */
  private static Simulation.Planting planting(Planted planted) {
    return switch (planted) {
      case NONE, STORE_LANDS_WRONG_BYTES, STORE_WRITES_WRONG_BYTES -> Simulation.Planting.NONE;
      case SERVES_ALONE ->
          new Simulation.Planting() {
            @Override
            public void round(Round round) {
              round.plantServeAlone();
            }
          };
      case FAILED_LOOP_LEAVES_REQUESTS ->
          new Simulation.Planting() {
            @Override
            public void round(Round round) {
              round.plantLeaveActiveOnFailure();
            }
          };
      case FROZEN_ROUND_RUNS ->
          new Simulation.Planting() {
            @Override
            public void round(Round round) {
              round.plantIgnoreControlState();
            }
          };
      case LOADS_SKIP_LAST_STAGE ->
          new Simulation.Planting() {
            @Override
            public void copies(Copies copies) {
              copies.plantSkipLastStage();
            }
          };
      case EARLY_PUBLISHES_FAILED_ROWS ->
          new Simulation.Planting() {
            @Override
            public void manager(StorageTransferManager stm) {
              PlantedRules.earlyPublishesFailedRows(stm);
            }
          };
      case PUBLISH_FAILED_GET ->
          new Simulation.Planting() {
            @Override
            public void manager(StorageTransferManager stm) {
              PlantedRules.publishFailedRows(stm);
            }
          };
      case REOFFER_WITHOUT_HOLD ->
          new Simulation.Planting() {
            @Override
            public void manager(StorageTransferManager stm) {
              PlantedRules.noBackupBackoff(stm);
            }
          };
      case RETIRED_BY_ANY_RANK ->
          new Simulation.Planting() {
            @Override
            public void exchange(io.tokenspeed.control.RelayExchange exchange) {
              PlantedAgreement.retiredByAnyRank(exchange);
            }
          };
      case VICTIM_KEEPS_DEVICE_KV ->
          new Simulation.Planting() {
            @Override
            public void publication(HostPublication publication) {
              publication.plantKeepVictimKv();
            }
          };
    };
  }

  // ---------------------------------------------------------------- the run

  /** Runs {@code maxRounds} rounds, then drains until the replica is idle; returns this. */
  WholeLoopSimulation run(long maxRounds) {
    try {
      while (roundsRun < maxRounds) {
        step();
      }
      drain();
    } catch (Violation v) {
      throw v;
    } catch (Throwable t) {
      throw violation("unexpected " + t, t);
    }
    return this;
  }

  /**
   * One step: the frontend, then LoopRunner's own idle policy ({@link LoopRunner#nextTurn}): its
   * wait moves the clock to its end or to the first event that would wake the loop (an arrival, an
   * administrative call, a store call's completion), then a round when the policy runs one.
   */
  private void step() throws Exception {
    frontend();
    slowSpells();
    LoopRunner.Turn turn = runner.nextTurn(last);
    long now = clock.get();
    if (turn.waitMs() > 0) {
      long until = Math.min(now + turn.waitMs() * MS, wakeNs());
      if (turn.idle()) {
        if (!turn.busy()) {
          checkIdle();
        }
        if (tp > 1) {
          until = Math.min(until, runner.heartbeatDueNs());
        }
      }
      advanceTo(Math.max(until, now + 1));
      now = clock.get();
    }
    if (turn.idle() && !runner.dueAfterIdle(turn, now)) {
      return;
    }
    runRound();
  }

  /**
   * The first event after now that wakes a waiting loop: an arrival, an administrative call, a
   * store call's completion, or a storage tick while a weight update or the drain polls the loop.
   */
  private long wakeNs() {
    long now = clock.get();
    long until = future(now, store.nextDueNs(), Long.MAX_VALUE);
    if (!draining) {
      until = future(now, nextArrivalNs, until);
      until = update == null ? future(now, nextAdminNs, until) : until;
    }
    if (freezing != null && unfreezing == null) {
      until = future(now, unfreezeAtNs, until);
    }
    if (update != null || draining) {
      until = Math.min(until, now + STORAGE_TICK_NS);
    }
    return until;
  }

  /** {@code min(until, at)} when {@code at} is after {@code now}; {@code until} otherwise. */
  private static long future(long now, long at, long until) {
    return at - now > 0 ? Math.min(until, at) : until;
  }

  private void advanceTo(long ns) {
    if (ns - clock.get() > 0) {
      clock.set(ns);
      if (hub != null) {
        hub.timeAdvanced();
      }
    }
    store.step();
    if (storeViolation != null) {
      throw violation(storeViolation, null);
    }
  }

  /** Every rank's round at the same clock; the round's cost moves the clock after it. */
  private void runRound() throws Exception {
    long now = clock.get();
    if (tp > 1 && !draining && now - nextRankFaultNs >= 0) {
      nextRankFaultNs = now + nextRankFaultGapNs();
      faultedRound(now);
      return;
    }
    runner.roundStarted(now);
    long softBefore = markRoundStart();
    RoundResult[] results = new RoundResult[tp];
    if (tp == 1) {
      results[0] = doWork(0, now);
    } else {
      List<Future<RoundResult>> others = new ArrayList<>();
      for (int r = 1; r < tp; r++) {
        int rank = r;
        others.add(rankThreads.submit(() -> doWork(rank, now)));
      }
      Throwable failed = null;
      try {
        results[0] = doWork(0, now);
      } catch (Violation v) {
        failed = v;
      }
      for (int r = 1; r < tp; r++) {
        try {
          results[r] = others.get(r - 1).get();
        } catch (ExecutionException e) {
          failed = failed == null ? e.getCause() : failed;
        }
      }
      if (failed instanceof Violation v) {
        throw v;
      }
      if (failed != null) {
        throw violation("a rank failed: " + failed, failed);
      }
    }
    roundDone(now, results[0], softBefore);
  }

  /** After a round every rank ran: the checks, then the round's cost moves the clock. */
  private void roundDone(long now, RoundResult leader, long softBefore) {
    roundsRun++;
    last = leader;
    long cancelledBefore = requestsCancelled;
    long soft = manager(0).counters().softTimeouts() - softBefore;
    restoresAbandoned += manager(0).counters().restoresAbandoned() - abandonedBefore;
    checkRound(now, soft);
    checkFrozen(leader, soft, cancelledBefore);
    boolean forward = last.forwardPlanned();
    advanceTo(now + (forward ? 50_000 + rnd.nextLong(1_000_000) : 5_000 + rnd.nextLong(20_000)));
  }

  /**
   * With the cost model on: every 2 to 12 s of simulated time the store's GETs turn slow for 0.5 to
   * 3 s (50 to 500 ms more a call), so that restores chosen under the figures of a fast store are
   * abandoned while they read, and queries answered meanwhile issue no GET. Its own generator: the
   * seeds without the cost model run exactly as before.
   */
  private void slowSpells() {
    if (!costModel) {
      return;
    }
    long now = clock.get();
    if (nextSlowSpellNs == Long.MAX_VALUE) {
      nextSlowSpellNs = now + (2_000 + spells.nextLong(10_000)) * MS;
    }
    if (now - nextSlowSpellNs >= 0) {
      store.slowGets((50 + spells.nextLong(450)) * MS, now + (500 + spells.nextLong(2_500)) * MS);
      nextSlowSpellNs = now + (2_000 + spells.nextLong(10_000)) * MS;
    }
  }

  /** Simulated time to the next rank's fault: 2 to 40 s. */
  private long nextRankFaultGapNs() {
    return (2_000 + rankFaults.nextLong(38_000)) * MS;
  }

  /**
   * A round in which one rank dies (the hub kills it) or stalls (the hub holds it), every rank's
   * round on its own thread. The simulated clock moves only when every rank still inside its round
   * waits on the hub, by a round timeout each time, so the round ends the same way in every run.
   *
   * <pre>
   *   killed    every rank's round fails at once: the victim's own exchange, the others on its
   *             end of stream; the replica stops
   *   stalled   the others wait a round timeout, settle, and fail; released, the victim finds
   *             their FINALs and fails too; the replica stops
   *   slow      released before the round timeout: the round goes on, nothing stops
   * </pre>
   *
   * When the replica stops: no rank's round may have gone on (no rank serves alone), every request
   * it held has ended (with an error when it had not ended before), and a fresh replica takes over
   * the store.
   */
  private void faultedRound(long now) throws Exception {
    RankFault fault = RankFault.values()[rankFaults.nextInt(4) % 3];
    int victim = rankFaults.nextInt(tp);
    long softBefore = markRoundStart();
    runner.roundStarted(now);
    if (fault == RankFault.KILLED) {
      hub.kill(victim);
    } else {
      hub.hold(victim);
    }
    List<Future<RoundResult>> ranks = new ArrayList<>();
    for (int r = 0; r < tp; r++) {
      int rank = r;
      ranks.add(rankThreads.submit(() -> rounds.get(rank).doWork(now)));
    }
    Throwable[] failures = new Throwable[tp];
    RoundResult[] results = new RoundResult[tp];
    if (fault == RankFault.SLOW) {
      rankStalls++;
      awaitParked(ranks);
      clock.set(now + (1 + rankFaults.nextLong(ROUND_TIMEOUT_MS - 1)) * MS);
      hub.timeAdvanced();
      hub.release(victim);
      awaitRanks(ranks, victim, fault, results, failures, true);
      for (int r = 0; r < tp; r++) {
        if (failures[r] != null) {
          throw violation(
              "rank "
                  + r
                  + "'s round failed though rank "
                  + victim
                  + " stalled for less than the round timeout: "
                  + failures[r],
              failures[r]);
        }
      }
      roundDone(now, results[0], softBefore);
      return;
    }
    awaitRanks(ranks, victim, fault, results, failures, fault == RankFault.KILLED);
    if (fault == RankFault.STALLED) {
      hub.release(victim); // the stalled process goes on: it must find the replica stopped
      awaitRanks(ranks, victim, fault, results, failures, true);
      if (failures[victim] == null) {
        // It had every report of the round it stalled in, which it completes; the others' FINALs
        // come after those reports, so its next exchange must fail.
        results[victim] = null;
        long at = clock.get();
        ranks.set(victim, rankThreads.submit(() -> rounds.get(victim).doWork(at)));
        awaitRanks(ranks, victim, fault, results, failures, true);
      }
    }
    for (int r = 0; r < tp; r++) {
      if (failures[r] == null) {
        throw violation(
            "rank "
                + r
                + "'s round went on after "
                + (r == victim ? "it" : "rank " + victim)
                + (fault == RankFault.KILLED ? " died" : " stalled past the round timeout")
                + ": it serves alone",
            null);
      }
    }
    replicaStopped();
  }

  /** Waits until every rank waits on the hub (none can go on before the clock moves). */
  private void awaitParked(List<Future<RoundResult>> ranks) {
    while (!parked(ranks)) {
      Thread.yield();
    }
  }

  /**
   * Whether every rank inside its round waits on the hub: only the clock or a release moves them
   * on. The ranks done before and after the hub's count are the same ranks (a rank that is done
   * stays done), so at the count every other rank was waiting.
   */
  private boolean parked(List<Future<RoundResult>> ranks) {
    int inRound = inRound(ranks);
    return inRound > 0 && hub.waiting() == inRound && inRound(ranks) == inRound;
  }

  /** Whether a rank awaited is still in its round: any but a held {@code victim}, or any. */
  private boolean awaited(List<Future<RoundResult>> ranks, int victim, boolean withVictim) {
    for (int r = 0; r < tp; r++) {
      if ((withVictim || r != victim) && !ranks.get(r).isDone()) {
        return true;
      }
    }
    return false;
  }

  private static int inRound(List<Future<RoundResult>> ranks) {
    int n = 0;
    for (Future<RoundResult> f : ranks) {
      n += f.isDone() ? 0 : 1;
    }
    return n;
  }

  /**
   * Waits for the rounds of every rank but a held {@code victim} ({@code withVictim}: of every
   * rank), moving the clock a round timeout whenever every rank inside its round waits on the hub.
   */
  private void awaitRanks(
      List<Future<RoundResult>> ranks,
      int victim,
      RankFault fault,
      RoundResult[] results,
      Throwable[] failures,
      boolean withVictim)
      throws InterruptedException {
    int timeouts = 0;
    while (awaited(ranks, victim, withVictim)) {
      // a rank still awaited after the count was waiting at the count (done ranks stay done)
      if (!parked(ranks) || !awaited(ranks, victim, withVictim)) {
        Thread.yield();
        continue;
      }
      if (++timeouts > MAX_TIMEOUTS_TO_STOP) {
        throw violation(
            "rank "
                + victim
                + " "
                + fault
                + ", and the ranks are still in their round after "
                + MAX_TIMEOUTS_TO_STOP
                + " round timeouts: a round hangs",
            null);
      }
      clock.addAndGet(ROUND_TIMEOUT_NS);
      hub.timeAdvanced();
    }
    for (int r = 0; r < tp; r++) {
      if (ranks.get(r).isDone() && results[r] == null && failures[r] == null) {
        try {
          results[r] = ranks.get(r).get();
        } catch (ExecutionException e) {
          failures[r] = e.getCause();
          // its loop thread would at once: the collective aborts, so a rank that goes on into a
          // forward finds it broken rather than waiting for this one
          engines.get(r).roundFailed(failures[r]);
        }
      }
    }
  }

  /**
   * The replica stopped (every rank's loop did what its failed round makes it do): every request
   * the replica held must have ended (with an error, unless it had ended before), the store holds
   * only reference bytes, and a fresh replica takes over the store. The old processes are gone:
   * their store calls in flight with them.
   */
  private void replicaStopped() {
    replicaStops++;
    for (Req q : open.values()) {
      if (!q.handle.result().isDone()) {
        throw violation(
            "request " + q.id + " has not ended though the replica stopped: its caller hangs",
            null);
      }
      checkEnded(q, true);
    }
    open.clear();
    retractionsBefore += engines.getFirst().stats().retractions();
    for (Engine e : engines) {
      try {
        e.close();
      } catch (RuntimeException ignored) {
        // a stopped replica's engine may leave its store calls behind: the store drops them below
      }
    }
    store.detach(attached);
    checkStore();
    update = null; // its caller saw the replica stop
    refusedAt.clear(); // the fresh processes know nothing of the old ones' refusals
    startReplica();
  }

  private RoundResult doWork(int rank, long now) {
    try {
      return rounds.get(rank).doWork(now);
    } catch (Throwable t) {
      throw violation("rank " + rank + "'s round failed: " + t, t);
    }
  }

  /** The final drain: no arrivals, faults or commands; rounds until every request ended. */
  private void drain() throws Exception {
    draining = true;
    long limit = roundsRun + DRAIN_ROUNDS;
    while (!settled()) {
      if (roundsRun > limit) {
        throw violation(
            "the replica did not settle within "
                + DRAIN_ROUNDS
                + " rounds: "
                + open.size()
                + " requests open, storage pending "
                + rounds.getFirst().storagePending(),
            null);
      }
      if (store.hungCalls() > 0 && rnd.nextInt(64) == 0) {
        store.restart(); // hung calls end only by a restart
      }
      step();
    }
    checkIdle();
    checkStore();
    if (requestsEnded != requestsSubmitted) {
      throw violation(
          requestsSubmitted + " requests submitted but " + requestsEnded + " ended", null);
    }
  }

  private boolean settled() {
    if (!open.isEmpty() || update != null || freezing != null) {
      return false;
    }
    for (Round r : rounds) {
      if (r.hasActiveRequests() || r.requestsPending() || r.storageBusy()) {
        return false;
      }
    }
    return !rounds.getFirst().workArrived() && !rounds.getFirst().awaitingAgreement();
  }

  // ---------------------------------------------------------------- the frontend

  private void frontend() throws Exception {
    long now = clock.get();
    if (!draining && now - nextArrivalNs >= 0) {
      int burst = 1 + rnd.nextInt(rnd.nextInt(4) == 0 ? 6 : 2);
      for (int i = 0; i < burst; i++) {
        submit(now);
      }
      long gap = rnd.nextInt(4) == 0 ? rnd.nextLong(6_000) * MS : rnd.nextLong(30) * MS;
      nextArrivalNs = now + gap;
    }
    for (Req q : open.values()) {
      if (q.handle.result().isDone()) {
        continue;
      }
      if (now - q.deadlineNs >= 0 || (!draining && rnd.nextInt(4_000) == 0)) {
        q.handle.cancel();
      }
    }
    if (freezing != null && unfreezing == null && now - unfreezeAtNs >= 0) {
      unfreezing = engines.getFirst().unfreeze();
    }
    if (update != null) {
      weightUpdate(now);
    } else if (!draining && now - nextAdminNs >= 0) {
      admin(now);
      nextAdminNs = now + (500 + rnd.nextInt(8_000)) * MS;
    }
  }

  private void submit(long now) {
    int[] system = systemPrompts.get(rnd.nextInt(systemPrompts.size()));
    int shared = rnd.nextInt(4) == 0 ? 0 : Math.min(system.length, 1 + rnd.nextInt(system.length));
    int length = Math.max(shared + 1, shared + rnd.nextInt(120));
    int[] prompt = Arrays.copyOf(system, length);
    for (int i = shared; i < length; i++) {
      prompt[i] = rnd.nextInt(VOCAB);
    }
    int tokens = Math.min(1 + rnd.nextInt(maxTokens), engines.getFirst().maxRequestTokens() / 2);
    int limit = engines.getFirst().maxRequestTokens() - tokens;
    if (prompt.length > limit) {
      prompt = Arrays.copyOf(prompt, Math.max(1, limit));
    }
    RequestHandle h = engines.getFirst().submit(prompt, SamplingParams.greedy(tokens));
    long deadline = rnd.nextInt(8) == 0 ? now + rnd.nextLong(2_000) * MS : Long.MAX_VALUE / 2;
    int[] ref = reference.reference(prompt, tokens);
    blocks.add(prompt, ref);
    open.put(h.id(), new Req(h.id(), h, prompt, ref, tokens, now, deadline));
    requestsSubmitted++;
  }

  /** An administrative call at a random point: full clear, Device-only clear, rotation, update. */
  private void admin(long now) {
    Engine leader = engines.getFirst();
    switch (rnd.nextInt(5)) {
      case 0 -> {
        leader.clearCache();
        clears++;
        refusedAt.clear(); // a PUT of an earlier generation is never retried
      }
      case 1 -> {
        leader.clearDeviceCache();
        clears++;
      }
      case 2 -> {
        leader.command(Replica.Command.rotate("v" + ++version));
        rotations++;
        refusedAt.clear();
      }
      case 3 -> {
        if (freezing == null) {
          freezing = leader.freeze();
          unfreezeAtNs = now + (20 + rnd.nextInt(4_000)) * MS;
          freezes++;
        }
      }
      default -> {
        String old = leader.storageNamespace().orElseThrow().toString();
        update = new WeightUpdate(leader.command(Replica.Command.FENCE_STORAGE), now, old);
      }
    }
  }

  /**
   * The weight update's steps on simulated time, as {@link EngineAdmin#updateWeights} takes them:
   * once fenced, wait until no operation is inside the store, delete the old namespace, switch; a
   * wait past the bound lifts the fence.
   */
  private void weightUpdate(long now) throws Exception {
    if (!update.fenced.isDone()) {
      return;
    }
    if (engines.getFirst().storageOperationsPending()) {
      if (now - update.startNs > RETIREMENT_WAIT_NS) {
        engines.getFirst().command(Replica.Command.LIFT_FENCE);
        update = null;
      }
      return;
    }
    try {
      store.purgeNamespace(update.oldNamespace);
    } catch (java.io.IOException e) {
      engines.getFirst().command(Replica.Command.LIFT_FENCE); // a failed deletion abandons it
      update = null;
      return;
    }
    engines.getFirst().command(Replica.Command.switchTo("v" + ++version));
    refusedAt.clear();
    weightUpdates++;
    update = null;
  }

  // ---------------------------------------------------------------- checks

  /**
   * After a round the freeze covered (from the round that applied the freeze to the one before the
   * round that applied the unfreeze): no forward and no storage operation started on any rank,
   * while completions, soft timeouts and cancellations go on (counted, for the test to see).
   */
  private void checkFrozen(RoundResult leader, long softThisRound, long cancelledBefore) {
    if (freezing == null || !freezing.isDone()) {
      return;
    }
    if (unfreezing != null && unfreezing.isDone()) {
      freezing = null; // this round applied the unfreeze: it was not frozen
      unfreezing = null;
      return;
    }
    frozenRounds++;
    if (leader.forwardPlanned()) {
      throw violation("a frozen round planned a forward", null);
    }
    long started = issuedOperations() - issuedBefore;
    if (started > 0) {
      throw violation("a frozen round started " + started + " storage operations", null);
    }
    if (manager(0).inFlightOperations() < inFlightBefore) {
      frozenCompletions++;
    }
    frozenSoftTimeouts += softThisRound;
    frozenCancellations += requestsCancelled - cancelledBefore;
  }

  /** Notes what the frozen-round checks compare with; returns the leader's soft timeouts so far. */
  private long markRoundStart() {
    issuedBefore = issuedOperations();
    inFlightBefore = manager(0).inFlightOperations();
    abandonedBefore = manager(0).counters().restoresAbandoned();
    return manager(0).counters().softTimeouts();
  }

  /** Whether GETs copy their rows to the Device as they land in this run. */
  boolean earlyH2d() {
    return earlyH2d;
  }

  /** Bytes every rank loaded to its Device in stages of layers while the forward computed. */
  long stagedLoadedBytes() {
    long n = 0;
    for (Engine e : engines) {
      n += e.stats().stagedLoadedBytes();
    }
    return n;
  }

  /** Device blocks every rank's GETs published through their early copies so far. */
  long earlyH2dBlocks() {
    long n = 0;
    for (int r = 0; r < tp; r++) {
      n += manager(r).counters().earlyH2dBlocks();
    }
    return n;
  }

  /** Storage operations every rank's manager issued so far. */
  private long issuedOperations() {
    long n = 0;
    for (int r = 0; r < tp; r++) {
      io.tokenspeed.scheduler.StorageCounters c = manager(r).counters();
      n += c.queriesIssued() + c.getsIssued() + c.putsIssued();
    }
    return n;
  }

  /** After every round. */
  private void checkRound(long now, long softThisRound) {
    if (softThisRound > 0) {
      softTimeouts += softThisRound;
      long waitedLongEnough = 0;
      for (Req q : open.values()) {
        if (now - q.submitNs >= SOFT_DEADLINE_MS * MS) {
          waitedLongEnough++;
        }
      }
      if (softThisRound > waitedLongEnough) {
        throw violation(
            softThisRound
                + " soft timeouts at clock "
                + now
                + " but only "
                + waitedLongEnough
                + " requests were submitted "
                + SOFT_DEADLINE_MS
                + " ms before",
            null);
      }
    }
    long endedByLoop = engines.getFirst().stats().endedRequests();
    for (var it = open.values().iterator(); it.hasNext(); ) {
      Req q = it.next();
      if (q.handle.result().isDone()) {
        checkEnded(q, false);
        it.remove();
      }
    }
    if (endedByLoop > requestsEnded - endedBeforeReplica) {
      throw violation(
          "the loop ended "
              + endedByLoop
              + " requests, but only "
              + (requestsEnded - endedBeforeReplica)
              + " ended",
          null);
    }
    checkHostPublications();
    if (roundsRun % 16 == 0) {
      checkOwners();
    }
  }

  /**
   * Every Host block published since the last round, on every rank, still published: it holds the
   * reference bytes of its key on that rank.
   */
  private void checkHostPublications() {
    for (int r = 0; r < tp; r++) {
      io.tokenspeed.cache.TierCache host = engines.get(r).view().cache().host();
      List<io.tokenspeed.core.CacheKey> keys = host.publishedSince(hostPublications[r]);
      hostPublications[r] = host.publications();
      if (keys == null) {
        continue; // more than the ring keeps: the next round checks again
      }
      for (io.tokenspeed.core.CacheKey key : keys) {
        int block = host.lookup(key);
        if (block == 0) {
          continue; // evicted or withdrawn since
        }
        hostBlocksChecked++;
        String wrong =
            blocks.check(key, r, engines.get(r).hostMemory().block(key.groupId(), block));
        if (wrong != null) {
          throw violation(
              "rank " + r + " published Host block " + block + " under " + key + ", but " + wrong,
              null);
        }
      }
    }
  }

  /** The request's tokens against the reference; an error only when the replica stopped. */
  private void checkEnded(Req q, boolean replicaStopped) {
    requestsEnded++;
    GenerationResult r = q.handle.result().join();
    int[] ref = q.ref;
    int n = r.tokens().length;
    if (n > q.maxTokens || !Arrays.equals(r.tokens(), Arrays.copyOf(ref, n))) {
      throw violation(
          "request "
              + q.id
              + " ("
              + r.finishReason()
              + ") generated "
              + Arrays.toString(r.tokens())
              + " but its reference is "
              + Arrays.toString(ref)
              + ": its KV is wrong",
          null);
    }
    switch (r.finishReason()) {
      case "length" -> {
        requestsFinished++;
        if (n != q.maxTokens) {
          throw violation("request " + q.id + " finished with " + n + " tokens", null);
        }
      }
      case "cancelled" -> requestsCancelled++;
      case "error" -> {
        if (!replicaStopped) {
          throw violation("request " + q.id + " ended error: " + r.error(), null);
        }
        requestsStopped++;
      }
      default ->
          throw violation(
              "request " + q.id + " ended " + r.finishReason() + ": " + r.error(), null);
    }
  }

  /** The owners' own invariants on every rank. */
  private void checkOwners() {
    for (int r = 0; r < tp; r++) {
      try {
        Checked.check(engines.get(r).view());
      } catch (Throwable t) {
        throw violation("rank " + r + ": " + t, t);
      }
    }
  }

  /**
   * An idle replica: back to baseline on every rank, and no store call in flight (it calls the
   * store no more).
   */
  private void checkIdle() {
    for (Round r : rounds) {
      if (r.hasActiveRequests() || r.requestsPending() || r.storageBusy()) {
        return;
      }
    }
    idleChecks++;
    checkOwners();
    boolean anyExecutorQuarantined = false;
    for (int r = 0; r < tp; r++) {
      L3Metrics m = engines.get(r).storageExecutorMetrics().orElseThrow();
      anyExecutorQuarantined |= m.quarantined();
    }
    if (store.inFlight() != 0) {
      throw violation("an idle replica has " + store.inFlight() + " store calls in flight", null);
    }
    for (int r = 0; r < tp; r++) {
      StorageTransferManager stm = manager(r);
      if (anyExecutorQuarantined && !stm.quarantined()) {
        throw violation(
            "an executor answered unretired, but rank "
                + r
                + "'s manager did not quarantine: an unretired operation was agreed retired",
            null);
      }
      if (stm.quarantined()) {
        quarantines++;
        continue;
      }
      if (stm.readyHolds() != 0 || stm.operationsInUse() != 0 || stm.hostCreditsInUse() != 0) {
        throw violation(
            "idle rank "
                + r
                + " holds "
                + stm.readyHolds()
                + " Ready holds, "
                + stm.operationsInUse()
                + " operations and "
                + stm.hostCreditsInUse()
                + " Host credits",
            null);
      }
      if (!engines.get(r).scheduler().heldBlocks().isEmpty()) {
        throw violation("idle rank " + r + " holds Device blocks for no request", null);
      }
    }
  }

  /** Every object a PUT writes holds the reference bytes of its key. */
  private void onWrite(String key, byte[] bytes) {
    objectsChecked++;
    String wrong = objectWrong(key, bytes);
    if (wrong != null && storeViolation == null) {
      storeViolation = "PUT " + key + " wrote an object, but " + wrong;
    }
  }

  /** What is wrong with the object {@code key} holding {@code bytes}, or null. */
  private String objectWrong(String key, byte[] bytes) {
    io.tokenspeed.core.ObjectKey k = io.tokenspeed.core.ObjectKey.parse(key);
    return blocks.check(
        k.cacheKey(), k.payloadReplica(), java.lang.foreign.MemorySegment.ofArray(bytes));
  }

  /** Every object in the store whose bytes are intact holds the reference bytes of its key. */
  private void checkStore() {
    store.forEachIntact(
        (key, bytes) -> {
          String wrong = objectWrong(key, bytes);
          if (wrong != null) {
            throw violation("the store holds " + key + ", but " + wrong, null);
          }
        });
  }

  /** Every PUT the store answered: backoff after refusals, nothing under a deleted namespace. */
  private void onPut(long nowNs, List<String> keys, List<Boolean> refused) {
    for (int i = 0; i < keys.size(); i++) {
      String key = keys.get(i);
      for (String ns : deletedNamespaces) {
        if (key.startsWith(ns + "_") && storeViolation == null) {
          storeViolation = "PUT " + key + " after namespace " + ns + " was deleted";
        }
      }
      Long at = refusedAt.get(key);
      long hold = StorageConfig.DEFAULT_BACKUP_RETRY_BACKOFF_MS * MS;
      if (at != null && nowNs - at < hold && storeViolation == null) {
        storeViolation =
            "key "
                + key
                + " offered again "
                + (nowNs - at) / 1_000
                + " us after its refusal, before its hold of "
                + hold / MS
                + " ms";
      }
      if (refused.get(i)) {
        refusedAt.put(key, nowNs);
      } else {
        refusedAt.remove(key);
      }
    }
  }

  private StorageTransferManager manager(int rank) {
    return engines.get(rank).storageTransferManager();
  }

  private int[] tokens(int n) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = rnd.nextInt(VOCAB);
    }
    return t;
  }

  private Violation violation(String what, Throwable cause) {
    return new Violation(
        "seed="
            + seed
            + " tp="
            + tp
            + " round="
            + roundsRun
            + " clock="
            + clock.get()
            + ": "
            + what,
        cause);
  }

  /** The leaders' retractions for lack of Device memory. */
  long retractions() {
    return retractionsBefore + engines.getFirst().stats().retractions();
  }

  /** The figures of the run, equal for two runs of one seed. */
  String figures() {
    return "seed="
        + seed
        + " tp="
        + tp
        + " rounds="
        + roundsRun
        + " clock="
        + clock.get()
        + " submitted="
        + requestsSubmitted
        + " finished="
        + requestsFinished
        + " cancelled="
        + requestsCancelled
        + " softTimeouts="
        + softTimeouts
        + " restoresAbandoned="
        + restoresAbandoned
        + (costModel
            ? " slowSpellGets="
                + store.slowSpellGets()
                + " slowerThanCompute="
                + manager(0).counters().bypasses(io.tokenspeed.scheduler.Bypass.SLOWER_THAN_COMPUTE)
                + " figures="
                + manager(0).costModel().figures()
            : "")
        + " clears="
        + clears
        + " rotations="
        + rotations
        + " weightUpdates="
        + weightUpdates
        + " freezes="
        + freezes
        + " frozenRounds="
        + frozenRounds
        + " frozenCompletions="
        + frozenCompletions
        + " frozenSoftTimeouts="
        + frozenSoftTimeouts
        + " frozenCancellations="
        + frozenCancellations
        + " idleChecks="
        + idleChecks
        + " quarantines="
        + quarantines
        + " retractions="
        + retractions()
        + " replicaStops="
        + replicaStops
        + " rankStalls="
        + rankStalls
        + " stopped="
        + requestsStopped
        + " objectsChecked="
        + objectsChecked
        + " hostBlocksChecked="
        + hostBlocksChecked
        + " store="
        + store.faultCounts()
        + " log="
        + Long.toHexString(store.logDigest());
  }

  @Override
  public void close() {
    for (Engine e : engines) {
      try {
        e.close();
      } catch (RuntimeException ignored) {
        // a violation's engine may not close cleanly; the violation is what matters
      }
    }
    if (rankThreads != null) {
      rankThreads.shutdownNow();
    }
  }
}

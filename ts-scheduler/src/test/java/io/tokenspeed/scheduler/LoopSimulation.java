package io.tokenspeed.scheduler;

import io.tokenspeed.cache.BlockCopy;
import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.CacheInvariants;
import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.control.Agreement;
import io.tokenspeed.control.ProtocolException;
import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.core.storage.StorageOp;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.l3.L3Poll;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * A deterministic simulation of the engine's loop on one thread and one seeded clock: a replica of
 * 1–4 ranks, each with its own cache coordinator, storage transfer manager and scheduler, its own
 * L3 executor (the real one, stepped: no worker threads) over one simulated store, and its own
 * owner agreement fed the same gathered records; the round runs in the engine loop's order (the
 * exchange's one-round-late agreement, commands before new requests, the plan, storage dispatch
 * beside the copies, loads before the forward, demotions and write-through copied while it
 * computes, publication after, sampling, resumption of retracted requests).
 *
 * <p>The model computes a KV row per token as a function of its token and of the row before it, as
 * read from the Device memory the block tables name, and samples each token from a digest of every
 * row of every rank: KV bytes that are wrong anywhere change the output. The reference is the same
 * function of the tokens alone.
 *
 * <p>Faults, all from the seed: store latency, stalls past the soft deadline, outages, store
 * restarts (every object lost), damaged objects (read back as invalid), capacity refusals and
 * refusals that never end, unretired results (quarantine), a rank that dies or stalls (the replica
 * stops; a fresh one takes over the store), idle gaps of every length, cancellations and deadlines
 * at random points, and the administrative commands (full clear, L1-only clear, namespace rotation,
 * weight update with its fence, retirement wait and deletion) at random points.
 *
 * <p>Checked after every round: ranks' plans are identical; every sampled token equals the
 * reference's; every published Device or Host block and every object written to the store holds the
 * reference bytes of its key; no request ends twice; quarantined Host blocks stay held and are
 * never read or written again; soft timeouts end only waits that lasted the soft deadline in agreed
 * time; after the store refused a PUT, no backup goes before the hold's end and then one page until
 * the store answers it; an idle replica's executors hold no work (so it makes no store call) and
 * its heartbeat rounds plan none; nothing is written under a namespace after its deletion returned;
 * when idle, Host credits, operations and Ready holds are back to baseline and no Device block is
 * held; and the cache's, scheduler's and manager's own invariants hold. At the end of the run
 * arrivals, faults and administrative commands stop and the loop runs until the replica is idle:
 * every request must have ended by then, so every request ends exactly once.
 *
 * <p>A violation throws {@link Violation} naming the seed and the round; the same seed replays the
 * same run exactly.
 */
final class LoopSimulation {

  /** A safety rule switched off, to show that the simulation notices. */
  enum Bug {
    NONE,
    /** Each rank publishes its own GET results at once, without the owners' agreement. */
    PUBLISH_UNAGREED_GET,
    /** Soft deadlines and Ready holds start at the round's (possibly stale) tick. */
    STALE_TICK_TIMERS,
    /** After a refusal, backups go on without the store's hold. */
    REOFFER_WITHOUT_BACKOFF,
    /** The store lands a wrong byte now and then and answers OK: KV restored wrong. */
    STORE_LANDS_WRONG_BYTES
  }

  /** An invariant failed: the message names the seed that replays it. */
  static final class Violation extends AssertionError {
    Violation(String message) {
      super(message);
    }
  }

  private static final long MS = 1_000_000L;
  private static final int BG = 16;
  private static final int VOCAB = 4_000;
  private static final long HEARTBEAT_NS = 100 * MS;
  private static final long STORAGE_TICK_NS = 5 * MS;
  private static final long ROUND_TIMEOUT_NS = 2_000 * MS;
  private static final long RETIREMENT_WAIT_NS = 60_000 * MS;

  /**
   * The most rounds the final drain may take: far more than any request needs (a request's tokens,
   * its L3 waits and a refused backup's five paced attempts take at most a few thousand).
   */
  private static final int DRAIN_ROUNDS = 100_000;

  /**
   * Full history, and with {@code window > 0} a sliding-window group beside it (a hybrid model):
   * one 8-byte row per token and group.
   */
  static CacheLayout layout(int window) {
    List<CacheGroupSpec> groups = new ArrayList<>();
    groups.add(
        new CacheGroupSpec(
            0, new GroupKind.FullHistory(), BG, List.of(new CacheField("kv", BG * 8)), null));
    if (window > 0) {
      groups.add(
          new CacheGroupSpec(
              1,
              new GroupKind.SlidingWindow(window),
              BG,
              List.of(new CacheField("kv", BG * 8)),
              null));
    }
    return new CacheLayout(BG, "bf16", groups);
  }

  // ---------------------------------------------------------------- configuration

  final long seed;
  final int numRanks;
  private final Bug bug;
  private final Random rnd;
  private final CacheLayout layout;

  /** The sliding window's tokens, or 0 without that group. */
  private final int window;

  private final int numGroups;
  private final StorageConfig storageConfig;
  private final Scheduler.Config schedulerConfig;
  private final int deviceParents;
  private final int hostParents;
  private final L3ExecutorConfig executorConfig;
  private final int[][] bases;
  private final boolean faulty;

  // ---------------------------------------------------------------- the world

  final SimStore store;
  private long clock = 1_000 * MS;
  private Replica replica;
  private int replicas;
  private int version;
  private final Map<Long, Req> requests = new LinkedHashMap<>();
  private long nextRequestId = 1;

  /** Expected bytes per (rank, key): the reference rows of a page, by the request that named it. */
  private final Map<CacheKey, PageSource> pageSources = new HashMap<>();

  private final Map<String, CacheKey> storeKeys = new HashMap<>();

  // the leader's frontend
  private final List<Req> arrivals = new ArrayList<>();
  private final List<Long> cancels = new ArrayList<>();
  private final List<Cmd> commands = new ArrayList<>();
  private long nextArrivalNs;
  private long nextAdminNs;
  private long nextFaultNs;
  private WeightUpdate update;

  /**
   * The final drain: no new requests, faults, random cancellations or administrative commands
   * (deadlines still cancel).
   */
  private boolean draining;

  /** The version a weight update switches to once its old namespace is deleted, else -1. */
  private int switchTo = -1;

  // fault state
  private long outageUntilNs;
  private long refuseUntilNs;
  private boolean refuseForever;
  private long slowUntilNs;

  // ---------------------------------------------------------------- figures

  long rounds;
  long idleWaits;
  long tokensSampled;
  long requestsEnded;
  long requestsFinished;
  long requestsCancelled;
  long requestsFailed;
  long restoredKeys;
  long softTimeouts;
  long refusedBackups;
  long replicaStops;
  long weightUpdates;
  long quarantines;
  long commandsApplied;
  long storeRestarts;

  private record PageSource(Req req, int page) {}

  private record Cmd(Kind kind, int version) {
    enum Kind {
      CLEAR_ALL,
      CLEAR_DEVICE,
      ROTATE,
      FENCE,
      SWITCH,
      LIFT
    }
  }

  /** The leader's weight update in progress: fence sent, then wait, delete, switch. */
  private static final class WeightUpdate {
    long fencedAtNs = -1;
  }

  /** A request: the simulation's truth about it, shared by every rank. */
  private static final class Req {
    final long id;
    int[] tokens;
    int known;
    final int promptLength;
    final int maxNew;
    int generated;
    long deadlineNs = Long.MAX_VALUE;
    long submittedNs;
    boolean sent;
    boolean submitted;
    String ended;
    PromptKeys keys;
    long[][][] ref; // per group and rank, the reference rows of every known token
    int refComputed;

    Req(long id, int[] prompt, int maxNew, int ranks, int groups) {
      this.id = id;
      this.tokens = Arrays.copyOf(prompt, prompt.length + maxNew);
      this.known = prompt.length;
      this.promptLength = prompt.length;
      this.maxNew = maxNew;
      this.ref = new long[groups][ranks][tokens.length];
    }

    /** Reference rows up to {@code end} (exclusive), from the tokens alone. */
    void extendReference(int end) {
      for (; refComputed < end; refComputed++) {
        int p = refComputed;
        for (int g = 0; g < ref.length; g++) {
          for (int r = 0; r < ref[g].length; r++) {
            long prev = p == 0 ? origin(r) : ref[g][r][p - 1];
            ref[g][r][p] = row(prev, tokens[p], r, g);
          }
        }
      }
    }
  }

  /** One rank: its owners, memories and executor. */
  private final class Rank {
    final int r;
    final CacheCoordinator cache;
    final StorageTransferManager stm;
    final Scheduler scheduler;
    final L3Executor executor;
    final Agreement agreement;
    final long[] device;
    final long[] hostRows;
    final MemorySegment host;
    final Set<Long> unagreed = new HashSet<>();
    final List<InFlight> inFlight = new ArrayList<>();
    final List<CacheKey> backups = new ArrayList<>();
    final Set<Long> fedEarly = new HashSet<>();
    final List<StorageDone> heldBack = new ArrayList<>();
    final Map<Long, StorageOp> dispatched = new HashMap<>();

    /** The manager's generation when each operation was dispatched (a clear starts a new one). */
    final Map<Long, Long> generations = new HashMap<>();

    final Set<Integer> quarantinedHost = new HashSet<>();
    final Set<Integer> quarantinedSources = new HashSet<>();
    boolean dead;

    Rank(int r) throws Exception {
      this.r = r;
      cache = new CacheCoordinator(layout, deviceParents, hostParents, 64);
      stm = new StorageTransferManager(StmFixture.fitted(storageConfig, hostParents), cache);
      if (bug == Bug.STALE_TICK_TIMERS) {
        stm.disableForTest(StorageTransferManager.SafetyRule.TIMERS_AT_NEXT_TICK);
      } else if (bug == Bug.REOFFER_WITHOUT_BACKOFF) {
        stm.disableForTest(StorageTransferManager.SafetyRule.BACKUP_BACKOFF);
      }
      scheduler = new Scheduler(cache, stm, schedulerConfig);
      device = new long[cache.device().pool().blockIdLimit() * BG];
      hostRows = new long[cache.host().pool().blockIdLimit() * BG];
      host = MemorySegment.ofArray(hostRows);
      executor = L3Executor.startStepped(store, executorConfig, host, () -> clock);
      // exactly what the credits let be in flight, as the engine sizes it: no margin
      agreement =
          new Agreement(numRanks, storageConfig.maxOperations(), storageConfig.maxKeysInFlight());
    }

    String key(CacheKey k) {
      String s =
          "v" + version + "/r" + r + "/" + k.groupId() + "/" + k.pageHash() + "/" + k.pageOffset();
      storeKeys.putIfAbsent(s, k);
      return s;
    }

    HostRange range(int hostBlock) {
      return new HostRange((long) hostBlock * BG * 8, BG * 8L);
    }
  }

  private record InFlight(Runnable call, long dueNs, StorageKind kind) {}

  /** The replica: its ranks and the exchange's held round. */
  private final class Replica {
    final Rank[] ranks = new Rank[numRanks];
    long exchangeRound;
    Delivered held;
    final Map<Long, Req> active = new LinkedHashMap<>();
    boolean housekeeping;
    long lastRoundNs;

    Replica() throws Exception {
      for (int r = 0; r < numRanks; r++) {
        ranks[r] = new Rank(r);
      }
    }

    Rank leader() {
      return ranks[0];
    }
  }

  /** What one exchange agreed, delivered a round later. */
  private record Delivered(
      long round,
      long tickNs,
      PressureSnapshot pressure,
      List<Req> arrivals,
      List<Long> cancels,
      List<Cmd> commands,
      List<AgreedCompletion> completions) {}

  /** The simulation's soft deadline (the default before it became 2 s). */
  static final long SOFT_DEADLINE_MS = 200;

  LoopSimulation(long seed, int numRanks, Bug bug) {
    this.seed = seed;
    this.numRanks = numRanks;
    this.bug = bug;
    this.rnd = new Random(seed);
    this.faulty = rnd.nextInt(4) != 0;
    this.window = rnd.nextBoolean() ? 0 : 17 + rnd.nextInt(48);
    this.layout = layout(window);
    this.numGroups = layout.numGroups();
    this.storageConfig =
        StorageConfig.defaults()
            .withMinExtensionTokens(BG)
            // below the simulated store's slow calls (up to 800 ms), so that waits end by their
            // deadline too: with the default, 2 s, none would
            .withSoftDeadlineMs(SOFT_DEADLINE_MS)
            .withCredits(2 + rnd.nextInt(12), 16 + rnd.nextInt(120))
            .withMaxBackupBackoffMs(List.of(400L, 2_000L, 10_000L).get((int) (seed & 1) * 2));
    this.schedulerConfig =
        new Scheduler.Config(32 + rnd.nextInt(200), 1 + rnd.nextInt(4), 16, rnd.nextInt(8));
    this.deviceParents = 12 + rnd.nextInt(40);
    this.hostParents = 16 + rnd.nextInt(80);
    this.executorConfig =
        new L3ExecutorConfig(
            1 + rnd.nextInt(2),
            1 + rnd.nextInt(3),
            1 + rnd.nextInt(2),
            4 + rnd.nextInt(64),
            4 + rnd.nextInt(64),
            4 + rnd.nextInt(64),
            32 + rnd.nextInt(256),
            100 + rnd.nextInt(2_000),
            0);
    this.bases = new int[4 + rnd.nextInt(4)][];
    for (int i = 0; i < bases.length; i++) {
      bases[i] = new int[BG * (2 + rnd.nextInt(10))];
      for (int j = 0; j < bases[i].length; j++) {
        bases[i][j] = rnd.nextInt(VOCAB);
      }
    }
    this.store = new SimStore(new Random(seed ^ 0x5707E), this::checkPut);
    store.landsWrongBytes = bug == Bug.STORE_LANDS_WRONG_BYTES;
    nextArrivalNs = clock;
    nextAdminNs = clock + (long) rnd.nextInt(3_000) * MS;
    nextFaultNs = clock + (long) rnd.nextInt(2_000) * MS;
  }

  // ---------------------------------------------------------------- the run

  /**
   * Runs {@code maxRounds} rounds, then drains (see {@link #drain}); stops at the first violation,
   * which it throws.
   */
  LoopSimulation run(int maxRounds) {
    try {
      replica = new Replica();
      replicas = 1;
      while (rounds < maxRounds) {
        step();
      }
      drain();
      return this;
    } catch (Violation v) {
      throw v;
    } catch (Exception | AssertionError e) {
      Violation v = fail("unexpected " + e);
      v.initCause(e);
      throw v;
    }
  }

  private Violation fail(String what) {
    return new Violation(
        "seed="
            + seed
            + " ranks="
            + numRanks
            + " bug="
            + bug
            + " round="
            + rounds
            + " clock="
            + clock / MS
            + " ms: "
            + what);
  }

  /**
   * The end of the run: no more arrivals, faults or administrative commands (those already sent are
   * delivered, and a weight update in progress finishes); rounds run until the replica is idle and
   * nothing is left to deliver, at most {@link #DRAIN_ROUNDS}. Every request must have ended by
   * then: one that never did is a liveness violation.
   */
  private void drain() throws Exception {
    draining = true;
    nextArrivalNs = Long.MAX_VALUE;
    nextAdminNs = Long.MAX_VALUE;
    nextFaultNs = Long.MAX_VALUE;
    long limit = rounds + DRAIN_ROUNDS;
    while (rounds < limit && !settled()) {
      long roundsBefore = rounds;
      long clockBefore = clock;
      step();
      if (rounds == roundsBefore && clock == clockBefore) {
        break; // nothing is due and no event is left to wake the loop
      }
    }
    List<String> open = new ArrayList<>();
    for (Req q : requests.values()) {
      if (q.ended == null) {
        RequestState state = q.submitted ? replica.leader().scheduler.state(q.id) : null;
        open.add(
            q.id
                + " ("
                + (state != null
                    ? state
                    : q.submitted ? "not in the scheduler" : q.sent ? "sent" : "not sent")
                + ")");
      }
    }
    if (!open.isEmpty()) {
      throw fail(
          open.size()
              + " of "
              + requests.size()
              + " requests never ended ("
              + (settled() ? "the replica is idle" : "the drain did not settle")
              + "): "
              + String.join(", ", open.subList(0, Math.min(open.size(), 20))));
    }
    checkIdle(replica);
  }

  /**
   * Nothing left to do: no request in the replica, nothing sent or to send, no weight update in
   * progress, no storage work, no refused backup waiting for its retry.
   */
  private boolean settled() {
    Replica rep = replica;
    if (!rep.active.isEmpty()
        || !arrivals.isEmpty()
        || !cancels.isEmpty()
        || !commands.isEmpty()
        || update != null
        || rep.housekeeping
        || storageBusy(rep)) {
      return false;
    }
    if (rep.held != null
        && (!rep.held.arrivals().isEmpty()
            || !rep.held.commands().isEmpty()
            || !rep.held.completions().isEmpty())) {
      return false;
    }
    for (Rank k : rep.ranks) {
      if (!k.inFlight.isEmpty() || k.stm.deferredCandidates() > 0 || !k.heldBack.isEmpty()) {
        return false;
      }
    }
    return true;
  }

  /** One decision of the loop: a round, or an idle wait to the next event. */
  private void step() throws Exception {
    frontend();
    injectFaults();
    Replica rep = replica;
    // sent requests and commands the exchange has not agreed yet (the engine loop's
    // awaitingAgreement): the next round delivers them
    boolean arrived =
        !arrivals.isEmpty()
            || !cancels.isEmpty()
            || !commands.isEmpty()
            || rep.held != null
                && (!rep.held.arrivals().isEmpty() || !rep.held.commands().isEmpty());
    boolean due =
        !rep.active.isEmpty()
            || arrived
            || rep.housekeeping
            || rep.held != null && !rep.held.completions().isEmpty()
            || anyRecords(rep);
    if (!due) {
      boolean busy = storageBusy(rep);
      if (busy) {
        advance(STORAGE_TICK_NS);
      } else {
        long retry = rep.leader().stm.nextBackupRetryNs();
        long wake = Math.min(nextArrivalNs, Math.min(nextAdminNs, nextFaultNs));
        if (retry != Long.MAX_VALUE && !rep.leader().stm.quarantined()) {
          wake = Math.min(wake, Math.max(clock + STORAGE_TICK_NS, retry + STORAGE_TICK_NS));
        }
        if (numRanks > 1) {
          wake = Math.min(wake, rep.lastRoundNs + HEARTBEAT_NS);
        }
        if (wake == Long.MAX_VALUE) {
          checkIdle(rep); // draining, and no event is left to wake the loop
          return;
        }
        checkNoStoreWork(rep); // so the wait makes no store call
        idleWaits++;
        advance(Math.max(0, wake - clock));
        boolean heartbeat = numRanks > 1 && clock - rep.lastRoundNs >= HEARTBEAT_NS;
        boolean retryDue = retry != Long.MAX_VALUE && clock - retry >= 0;
        if (!heartbeat && !retryDue) {
          checkIdle(rep);
          return;
        }
        ExecutionPlan plan = round(rep);
        if (!retryDue && !plan.storage().isEmpty()) {
          throw fail("an idle replica's heartbeat round plans storage work: " + plan.storage());
        }
        return;
      }
    }
    round(rep);
  }

  /**
   * An idle replica has no store call to make: every rank's executor holds no queued, running or
   * unpolled job and no call is in flight.
   */
  private void checkNoStoreWork(Replica rep) {
    for (Rank k : rep.ranks) {
      L3Metrics m = k.executor.metrics();
      for (L3Metrics.Kind kind : List.of(m.query(), m.get(), m.put())) {
        if (!(kind.queuedJobs() == 0 && kind.runningJobs() == 0 && kind.completedJobs() == 0)) {
          throw fail(
              "rank "
                  + k.r
                  + " is idle but its executor holds work: "
                  + kind.queuedJobs()
                  + " queued, "
                  + kind.runningJobs()
                  + " running, "
                  + kind.completedJobs()
                  + " unpolled ("
                  + m
                  + ")");
        }
      }
      if (!(k.inFlight.isEmpty())) {
        throw fail("rank " + k.r + " is idle with store calls in flight");
      }
    }
  }

  private boolean anyRecords(Replica rep) {
    for (Rank k : rep.ranks) {
      for (InFlight f : k.inFlight) {
        if (f.dueNs() - clock <= 0) {
          return true;
        }
      }
    }
    return false;
  }

  private boolean storageBusy(Replica rep) {
    for (Rank k : rep.ranks) {
      if (!k.unagreed.isEmpty() || k.stm.queuedCandidates() > 0 || !k.backups.isEmpty()) {
        return true;
      }
    }
    return false;
  }

  private void advance(long ns) {
    clock += ns;
  }

  // ---------------------------------------------------------------- the frontend and faults

  private void frontend() {
    while (clock - nextArrivalNs >= 0) {
      int burst = 1 + rnd.nextInt(3);
      for (int i = 0; i < burst; i++) {
        arrivals.add(newRequest());
      }
      int gap =
          switch (rnd.nextInt(10)) {
            case 0 -> 1_000 + rnd.nextInt(5_000); // an idle gap past every timer
            case 1, 2 -> 150 + rnd.nextInt(600); // around the soft deadline
            default -> rnd.nextInt(60);
          };
      nextArrivalNs = clock + gap * MS;
    }
    for (Req q : replica.active.values()) {
      if (clock - q.deadlineNs >= 0) {
        q.deadlineNs = Long.MAX_VALUE;
        cancels.add(q.id); // the deadline passed: the frontend cancels it
      }
    }
    if (!draining && !replica.active.isEmpty() && rnd.nextInt(60) == 0) {
      List<Long> ids = new ArrayList<>(replica.active.keySet());
      cancels.add(ids.get(rnd.nextInt(ids.size())));
    }
    if (!draining && !arrivals.isEmpty() && rnd.nextInt(80) == 0) {
      Req q = arrivals.remove(rnd.nextInt(arrivals.size())); // cancelled before it was sent
      end(q, "cancelled");
    }
    if (clock - nextAdminNs >= 0) {
      nextAdminNs = clock + (long) (200 + rnd.nextInt(6_000)) * MS;
      if (update == null) {
        switch (rnd.nextInt(4)) {
          case 0 -> commands.add(new Cmd(Cmd.Kind.CLEAR_ALL, 0));
          case 1 -> commands.add(new Cmd(Cmd.Kind.CLEAR_DEVICE, 0));
          case 2 -> commands.add(new Cmd(Cmd.Kind.ROTATE, version + 1));
          default -> {
            update = new WeightUpdate();
            commands.add(new Cmd(Cmd.Kind.FENCE, 0));
          }
        }
      }
    }
  }

  private Req newRequest() {
    int[] base = bases[rnd.nextInt(bases.length)];
    int shared = rnd.nextInt(base.length + 1);
    int length = Math.max(1, shared + rnd.nextInt(3 * BG));
    int[] prompt = new int[length];
    System.arraycopy(base, 0, prompt, 0, Math.min(shared, length));
    for (int i = shared; i < length; i++) {
      prompt[i] = rnd.nextInt(VOCAB);
    }
    Req q = new Req(nextRequestId++, prompt, 1 + rnd.nextInt(24), numRanks, numGroups);
    if (rnd.nextInt(8) == 0) {
      q.deadlineNs = clock + (long) rnd.nextInt(400) * MS;
    }
    requests.put(q.id, q);
    return q;
  }

  private void injectFaults() throws Exception {
    store.outage = clock - outageUntilNs < 0;
    store.refusePuts = refuseForever || clock - refuseUntilNs < 0;
    if (!faulty) {
      nextFaultNs = Long.MAX_VALUE;
      return;
    }
    if (clock - nextFaultNs < 0) {
      return;
    }
    nextFaultNs = clock + (long) (100 + rnd.nextInt(4_000)) * MS;
    int f = rnd.nextInt(100);
    if (f < 12) {
      outageUntilNs = clock + (long) (10 + rnd.nextInt(1_500)) * MS;
    } else if (f < 24) {
      slowUntilNs = clock + (long) (50 + rnd.nextInt(2_000)) * MS;
    } else if (f < 32) {
      store.restart();
      storeRestarts++;
    } else if (f < 45) {
      store.damageOne();
    } else if (f < 50) {
      refuseUntilNs = clock + (long) (50 + rnd.nextInt(3_000)) * MS;
    } else if (f < 51 && rnd.nextInt(4) == 0) {
      refuseForever = true; // a store that refuses every PUT from now on
    } else if (f < 58) {
      store.refuseChance = rnd.nextInt(2) == 0 ? 0 : rnd.nextDouble() * 0.3;
    } else if (f < 60) {
      store.nextUnretired = rnd.nextInt(4) == 0; // quarantine ends L3 for the replica
    } else if (f < 62) {
      store.nextDeleteFails = true;
    } else if (f < 70 && numRanks > 1) {
      stallOrKill();
    } else if (f < 85) {
      restartReplica("a restart of the replica's processes");
    }
  }

  /** A rank stalls: past the round timeout the replica stops, naming it; else the round waits. */
  private void stallOrKill() throws Exception {
    int victim = rnd.nextInt(numRanks);
    long stall = rnd.nextInt(3) == 0 ? ROUND_TIMEOUT_NS + MS : (long) rnd.nextInt(500) * MS;
    if (stall >= ROUND_TIMEOUT_NS || rnd.nextInt(3) == 0) {
      restartReplica("rank " + victim + " died or stalled past the round timeout");
    } else {
      advance(stall); // every rank waits in the exchange for the slow one
    }
  }

  /**
   * The replica stops (every request it holds ends with an error, once) and a fresh one, with empty
   * Device and Host tiers, takes over the store.
   */
  private void restartReplica(String why) throws Exception {
    replicaStops++;
    for (Req q : new ArrayList<>(replica.active.values())) {
      end(q, "error: " + why);
    }
    if (replica.held != null) {
      for (Req q : replica.held.arrivals()) {
        if (!q.submitted && q.ended == null) {
          end(q, "error: " + why); // sent, not yet agreed: the replica took it and stopped
        }
      }
    }
    // the processes are gone: their executors, and the store calls they had not made, with them
    if (switchTo >= 0) {
      version = switchTo; // the deletion returned: the new processes start with the new weights
      switchTo = -1;
    }
    replica = new Replica();
    replicas++;
    resetPace(); // the fresh processes know nothing of the old ones' refusals
    if (update != null) {
      update = null; // the update's caller saw the replica stop
    }
    commands.removeIf(c -> c.kind() != Cmd.Kind.CLEAR_ALL);
  }

  // ---------------------------------------------------------------- one round

  /** One round; returns its plan. */
  private ExecutionPlan round(Replica rep) throws Exception {
    rounds++;
    rep.lastRoundNs = clock;
    runDueCalls(rep);
    // the head: every rank polls its executor; the exchange agrees on this round's records and
    // delivers the round before
    long n = ++rep.exchangeRound;
    List<List<StorageDone>> records = new ArrayList<>(numRanks);
    PressureSnapshot pressure = PressureSnapshot.IDLE;
    for (Rank k : rep.ranks) {
      L3Poll poll = k.executor.poll();
      // a rank's report may carry its records a round late, and in any order
      List<StorageDone> report = new ArrayList<>(k.heldBack);
      k.heldBack.clear();
      report.addAll(poll.completions());
      if (numRanks > 1 && !report.isEmpty() && rnd.nextInt(8) == 0) {
        k.heldBack.add(report.remove(rnd.nextInt(report.size())));
      }
      java.util.Collections.shuffle(report, rnd);
      records.add(report);
      pressure = pressure.max(poll.pressure());
    }
    List<AgreedCompletion> agreed = null;
    for (Rank k : rep.ranks) {
      List<AgreedCompletion> mine;
      try {
        mine = k.agreement.apply(n, records);
      } catch (ProtocolException e) {
        throw fail("the agreement refused round " + n + ": " + e.getMessage());
      }
      if (!(agreed == null || agreed.equals(mine))) {
        throw fail("ranks agreed differently in round " + n);
      }
      agreed = mine;
    }
    for (Req q : arrivals) {
      q.sent = true;
    }
    Delivered now =
        new Delivered(
            n,
            clock,
            pressure,
            List.copyOf(arrivals),
            List.copyOf(cancels),
            List.copyOf(commands),
            agreed);
    arrivals.clear();
    cancels.clear();
    commands.clear();
    Delivered d = rep.held;
    rep.held = now;
    ExecutionPlan[] plans = new ExecutionPlan[numRanks];
    boolean frozen = rnd.nextInt(50) == 0; // a round without storage permission
    long softBefore = rep.leader().stm.counters().softTimeouts;
    List<Req> waiting = new ArrayList<>(); // on L3, before this round's tick
    for (Req q : rep.active.values()) {
      if (rep.leader().scheduler.state(q.id) instanceof RequestState.Prefetching) {
        waiting.add(q);
      }
    }
    for (Rank k : rep.ranks) {
      RoundInput input;
      if (d == null) {
        input = new RoundInput(0, PressureSnapshot.IDLE, List.of(), List.of(), false, false);
      } else {
        for (Cmd c : d.commands()) {
          apply(k, c);
        }
        for (Req q : d.arrivals()) {
          if (q.ended == null) {
            submit(rep, k, q);
          }
        }
        List<AgreedCompletion> completions = new ArrayList<>();
        if (bug == Bug.PUBLISH_UNAGREED_GET) {
          for (StorageDone own : records.get(k.r)) {
            if (own.kind() != StorageKind.GET) {
              continue;
            }
            completions.add(
                Agreement.reduce(own.operationId(), own.kind(), List.of(own))); // unagreed
            k.fedEarly.add(own.operationId());
          }
          completions.sort((a, b) -> Long.compare(a.operationId(), b.operationId()));
        }
        for (AgreedCompletion c : d.completions()) {
          if (!k.fedEarly.remove(c.operationId())) {
            completions.add(c);
          }
        }
        for (AgreedCompletion c : completions) {
          k.unagreed.remove(c.operationId());
          noteCompletion(k, c, d.tickNs());
        }
        List<Long> cancelled = new ArrayList<>();
        for (long id : d.cancels()) {
          if (rep.active.containsKey(id)) {
            cancelled.add(id);
          }
        }
        input = new RoundInput(d.tickNs(), d.pressure(), cancelled, completions, true, !frozen);
      }
      plans[k.r] = k.scheduler.round(input);
    }
    for (int r = 1; r < numRanks; r++) {
      if (!(plans[r].equals(plans[0]))) {
        throw fail(
            "rank "
                + r
                + "'s plan differs from rank 0's in round "
                + n
                + ": "
                + plans[r]
                + " vs "
                + plans[0]);
      }
    }
    ExecutionPlan plan = plans[0];
    if (d != null) {
      checkSoftTimeouts(rep, softBefore, d.tickNs(), waiting);
      for (long id : d.cancels()) {
        Req q = rep.active.remove(id);
        if (q != null) {
          end(q, "cancelled");
        }
      }
    }
    rep.housekeeping =
        !plan.demotions().isEmpty()
            || !plan.storage().isEmpty()
            || d != null && !d.cancels().isEmpty();
    for (Rank k : rep.ranks) {
      dispatch(k, plan.storage(), d == null ? clock : d.tickNs());
    }
    // loads and copy-on-write land before the forward
    for (Rank k : rep.ranks) {
      for (BlockCopy c : plan.deviceCopies()) {
        if (c.srcTier() == Tier.HOST) {
          if (k.quarantinedHost.contains(c.srcBlock())) {
            throw fail("a load reads quarantined Host block " + c.srcBlock());
          }
          System.arraycopy(k.hostRows, c.srcBlock() * BG, k.device, c.dstBlock() * BG, BG);
        } else {
          System.arraycopy(k.device, c.srcBlock() * BG, k.device, c.dstBlock() * BG, BG);
        }
      }
    }
    // demotions and write-through copy while the forward computes: before or after it
    boolean copiesFirst = rnd.nextBoolean();
    List<List<int[]>> pages = new ArrayList<>();
    for (Rank k : rep.ranks) {
      pages.add(writeThrough(k));
    }
    if (copiesFirst) {
      d2h(rep, plan, pages);
    }
    for (Rank k : rep.ranks) {
      forward(rep, k, plan);
    }
    if (!copiesFirst) {
      d2h(rep, plan, pages);
    }
    for (Rank k : rep.ranks) {
      publish(k, pages.get(k.r));
      k.scheduler.onForwardDone(plan); // publishes the demotions' Host blocks
    }
    sample(rep, plan);
    resumeRetracted(rep);
    for (Rank k : rep.ranks) {
      takeWork(k);
    }
    weightUpdate(rep);
    checkRound(rep, plan);
    advance(MS / 2 + (long) tokens(plan) * 20_000 + rnd.nextInt(1_000_000));
    return plan;
  }

  private static int tokens(ExecutionPlan plan) {
    int n = 0;
    for (ExecutionPlan.ForwardItem f : plan.forward()) {
      n += f.numTokens();
    }
    return n;
  }

  private void apply(Rank k, Cmd c) {
    if (k.r == 0) {
      commandsApplied++;
    }
    switch (c.kind()) {
      case CLEAR_ALL -> {
        k.scheduler.clearAll();
        k.backups.clear();
      }
      case CLEAR_DEVICE -> k.scheduler.clearDevice();
      case ROTATE -> rotate(k, c.version());
      case FENCE -> {
        k.scheduler.fenceStorage(true);
        if (k.r == 0 && update != null) {
          update.fencedAtNs = clock;
        }
      }
      case SWITCH -> {
        rotate(k, c.version());
        k.scheduler.fenceStorage(false);
        switchTo = -1;
      }
      case LIFT -> k.scheduler.fenceStorage(false);
    }
    // the manager's rejectAll (a full clear, a rotation, a fence, a switch's rotation) starts a new
    // generation, whose writes start open; a Device-only clear and a lifted fence keep the pace
    boolean resetsStorage =
        switch (c.kind()) {
          case CLEAR_ALL, ROTATE, FENCE, SWITCH -> true;
          case CLEAR_DEVICE, LIFT -> false;
        };
    if (k.r == 0 && resetsStorage) {
      resetPace(); // the leader's, before its round learns new refusals
    }
  }

  /** A new generation (or new processes): writes start open, PUTs in flight are stale. */
  private void resetPace() {
    paceEpoch++;
    paceLevel = 0;
    paceKeys = 0;
  }

  private void rotate(Rank k, int v) {
    k.scheduler.clearAll();
    k.backups.clear();
    if (k.r == numRanks - 1) {
      version = Math.max(version, v);
    }
  }

  /** The leader's weight update: once fenced and retired, delete the old namespace, then switch. */
  private void weightUpdate(Replica rep) {
    if (update == null || update.fencedAtNs < 0) {
      return;
    }
    if (!rep.leader().unagreed.isEmpty()) {
      if (clock - update.fencedAtNs > RETIREMENT_WAIT_NS) {
        commands.add(new Cmd(Cmd.Kind.LIFT, 0));
        update = null;
      }
      return;
    }
    try {
      store.deleteNamespace("v" + version);
      weightUpdates++;
      switchTo = version + 1;
      commands.add(new Cmd(Cmd.Kind.SWITCH, switchTo));
    } catch (Exception e) {
      commands.add(new Cmd(Cmd.Kind.LIFT, 0));
    }
    update = null;
  }

  private void submit(Replica rep, Rank k, Req q) {
    if (k.r == 0) {
      q.keys = PromptKeys.of(layout, Arrays.copyOf(q.tokens, q.known), List.of());
      for (int g = 0; g < numGroups; g++) {
        for (int page = 0; page < q.keys.numFullPages(); page++) {
          pageSources.putIfAbsent(
              q.keys.keyOf(g, page, q.keys.numFullPages() * BG), new PageSource(q, page));
        }
      }
    }
    try {
      if (q.generated == 0) {
        k.scheduler.submit(q.id, q.keys, q.maxNew - q.generated, false);
      } else {
        k.scheduler.resubmitRetracted(q.id, q.keys, q.maxNew - q.generated, null);
      }
      if (k.r == 0) {
        rep.active.put(q.id, q);
        q.submitted = true;
        q.submittedNs = rep.lastRoundNs; // the clock of the round that submits it
      }
    } catch (IllegalArgumentException tooLarge) {
      if (!(k.r == 0 || q.ended != null)) {
        throw fail("rank " + k.r + " refused what rank 0 took: " + tooLarge);
      }
      if (k.r == 0) {
        end(q, "error: " + tooLarge.getMessage());
      }
    }
  }

  private void end(Req q, String reason) {
    if (!(q.ended == null)) {
      throw fail("request " + q.id + " ended twice: " + q.ended + ", then " + reason);
    }
    q.ended = reason;
    requestsEnded++;
    if (reason.equals("length")) {
      requestsFinished++;
    } else if (reason.equals("cancelled")) {
      requestsCancelled++;
    } else {
      requestsFailed++;
    }
  }

  // ---------------------------------------------------------------- storage

  private void dispatch(Rank k, List<StorageOp> ops, long tickNs) {
    for (StorageOp op : ops) {
      if (op instanceof StorageOp.Cancel c) {
        k.executor.cancel(c.operationId());
        continue;
      }
      List<JobRow> rows = new ArrayList<>();
      StorageKind kind;
      switch (op) {
        case StorageOp.Query q -> {
          kind = StorageKind.QUERY;
          for (CacheKey key : q.keys()) {
            rows.add(JobRow.query(k.key(key)));
          }
        }
        case StorageOp.Get g -> {
          kind = StorageKind.GET;
          for (int i = 0; i < g.keys().size(); i++) {
            int b = g.hostBlocks().get(i);
            if (k.quarantinedHost.contains(b)) {
              throw fail("a GET lands in quarantined Host block " + b);
            }
            rows.add(JobRow.owned(k.key(g.keys().get(i)), k.range(b)));
          }
        }
        case StorageOp.Put p -> {
          kind = StorageKind.PUT;
          if (k.r == 0) {
            checkPace(p, tickNs);
          }
          for (int i = 0; i < p.keys().size(); i++) {
            int b = p.hostBlocks().get(i);
            if (k.quarantinedHost.contains(b)) {
              throw fail("a PUT reads quarantined Host block " + b);
            }
            CacheKey key = p.keys().get(i);
            rows.add(JobRow.owned(k.key(key), k.range(b)));
          }
        }
        case StorageOp.Cancel c -> throw new AssertionError();
      }
      k.dispatched.put(op.operationId(), op);
      k.generations.put(op.operationId(), k.stm.generation());
      k.unagreed.add(op.operationId());
      k.executor.submit(new StorageJob(op.operationId(), kind, rows));
    }
  }

  // The store's pace as the leader's manager must keep it (BackupPacer), rebuilt from the agreed
  // facts alone: after a fresh refusal (of a PUT sent since the last one) nothing goes before the
  // hold's end, the hold starting at the next tick; then one page until a fresh answer.

  /** Advanced by every fresh refusal and every reset: PUTs of an earlier epoch are stale. */
  private long paceEpoch;

  /** Consecutive fresh refusals: 0 once the store took a fresh PUT. */
  private int paceLevel;

  /** The agreed tick from which a PUT may go again after the last fresh refusal. */
  private long paceHoldUntilNs;

  /** Keys of PUTs of the current epoch whose facts are due. */
  private int paceKeys;

  /** The epoch each of the leader's PUTs was dispatched in. */
  private final Map<Long, Long> paceEpochOf = new HashMap<>();

  private void checkPace(StorageOp.Put p, long tickNs) {
    if (paceLevel > 0 && tickNs - paceHoldUntilNs < 0) {
      throw fail(
          "a backup PUT of "
              + p.keys().size()
              + " pages went "
              + Math.max(0, tickNs - (paceHoldUntilNs - backoffNs(paceLevel))) / MS
              + " ms after the store's refusal "
              + paceLevel
              + ", before its hold of "
              + backoffNs(paceLevel) / MS
              + " ms");
    }
    paceKeys += p.keys().size();
    if (paceLevel > 0 && paceKeys > BackupPacer.PROBE_KEYS) {
      throw fail(paceKeys + " pages sent to a store that refused, more than one probe");
    }
    paceEpochOf.put(p.operationId(), paceEpoch);
  }

  private long backoffNs(int level) {
    return BackupPacer.backoffNs(level, storageConfig.maxBackupBackoffMs());
  }

  private void noteCompletion(Rank k, AgreedCompletion c, long tickNs) {
    StorageOp op = k.dispatched.remove(c.operationId());
    Long generation = k.generations.remove(c.operationId());
    if (op == null) {
      return;
    }
    if (!c.retired()) {
      // a GET's destinations may still be written by the store: never read, published or reused;
      // a PUT's sources may still be read by it: never freed and written again
      switch (op) {
        case StorageOp.Get g -> k.quarantinedHost.addAll(g.hostBlocks());
        case StorageOp.Put p -> k.quarantinedSources.addAll(p.hostBlocks());
        default -> {}
      }
      if (k.r == 0) {
        quarantines++;
      }
      return;
    }
    if (k.r != 0) {
      return;
    }
    if (op instanceof StorageOp.Get g && !c.detached()) {
      for (KeyOutcome o : c.outcomes()) {
        if (o == KeyOutcome.OK) {
          restoredKeys++;
        }
      }
    }
    Long putEpoch = paceEpochOf.remove(c.operationId());
    if (op instanceof StorageOp.Put p && generation == k.stm.generation()) {
      int accepted = c.okCount();
      refusedBackups += p.keys().size() - accepted;
      if (putEpoch != null && putEpoch == paceEpoch) {
        paceKeys -= p.keys().size();
        if (accepted < p.keys().size()) {
          paceEpoch++; // a fresh refusal: the hold starts at the next tick
          paceKeys = 0;
          paceLevel++;
          paceHoldUntilNs = replica.held.tickNs() + backoffNs(paceLevel);
        } else {
          paceLevel = 0;
        }
      }
    }
  }

  /** Idle workers take queued work; each call completes after a latency drawn from the seed. */
  private void takeWork(Rank k) {
    for (StorageKind kind : StorageKind.values()) {
      int limit =
          switch (kind) {
            case QUERY -> executorConfig.queryWorkers();
            case GET -> executorConfig.getWorkers();
            case PUT -> executorConfig.putWorkers();
          };
      int running = 0;
      for (InFlight f : k.inFlight) {
        running += f.kind() == kind ? 1 : 0;
      }
      while (running < limit) {
        Runnable call = k.executor.takeWork(kind);
        if (call == null) {
          break;
        }
        long latency = (long) (50_000 + rnd.nextInt(3_000_000));
        if (clock - slowUntilNs < 0) {
          latency += (long) rnd.nextInt(800) * MS; // slow or stalled past the soft deadline
        }
        k.inFlight.add(new InFlight(call, clock + latency, kind));
        running++;
      }
    }
  }

  private void runDueCalls(Replica rep) {
    store.outage = clock - outageUntilNs < 0;
    store.refusePuts = refuseForever || clock - refuseUntilNs < 0;
    for (Rank k : rep.ranks) {
      List<InFlight> due = new ArrayList<>();
      for (InFlight f : k.inFlight) {
        if (f.dueNs() - clock <= 0) {
          due.add(f);
        }
      }
      due.sort((a, b) -> Long.compare(a.dueNs(), b.dueNs()));
      k.inFlight.removeAll(due);
      for (InFlight f : due) {
        f.call().run();
      }
      if (!due.isEmpty()) {
        takeWork(k);
      }
    }
    if (!(store.violations.isEmpty())) {
      throw fail(String.join("; ", store.violations));
    }
  }

  // ---------------------------------------------------------------- copies, forward, sampling

  /** The write-through of finished prefixes: Device pages copied to private Host blocks. */
  private List<int[]> writeThrough(Rank k) {
    List<int[]> pages = new ArrayList<>();
    for (CacheKey key : k.backups) {
      if (k.cache.host().contains(key)) {
        continue;
      }
      int b = k.cache.device().lookup(key);
      if (b == 0) {
        continue;
      }
      int[] needs = new int[numGroups];
      needs[key.groupId()] = 1;
      int[][] dst = k.cache.host().allocate(needs);
      if (dst == null) {
        break;
      }
      k.cache.device().ref(b);
      pages.add(new int[] {b, dst[key.groupId()][0], pageIndex(key)});
    }
    k.backups.clear();
    return pages;
  }

  private final List<CacheKey> pageKeys = new ArrayList<>();
  private final Map<CacheKey, Integer> pageIds = new HashMap<>();

  private int pageIndex(CacheKey key) {
    return pageIds.computeIfAbsent(
        key,
        x -> {
          pageKeys.add(x);
          return pageKeys.size() - 1;
        });
  }

  private void d2h(Replica rep, ExecutionPlan plan, List<List<int[]>> pages) {
    for (Rank k : rep.ranks) {
      for (ExecutionPlan.Demotion dm : plan.demotions()) {
        System.arraycopy(k.device, dm.deviceBlock() * BG, k.hostRows, dm.hostBlock() * BG, BG);
      }
      for (int[] p : pages.get(k.r)) {
        System.arraycopy(k.device, p[0] * BG, k.hostRows, p[1] * BG, BG);
      }
    }
  }

  /** Publishes the write-through's Host blocks; returns the keys newly published. */
  private List<CacheKey> publish(Rank k, List<int[]> pages) {
    List<CacheKey> published = new ArrayList<>();
    for (int[] p : pages) {
      CacheKey key = pageKeys.get(p[2]);
      k.cache.host().noteWrite(p[1]);
      if (k.cache.host().publish(key, p[1])) {
        published.add(key);
      }
      k.cache.host().unref(p[1]);
      k.cache.device().unref(p[0]);
    }
    if (!published.isEmpty()) {
      k.scheduler.onHostPublished(published);
    }
    return published;
  }

  private void forward(Replica rep, Rank k, ExecutionPlan plan) {
    for (ExecutionPlan.ForwardItem item : plan.forward()) {
      Req q = rep.active.get(item.requestId());
      if (!(q != null)) {
        throw fail("the plan forwards request " + item.requestId() + ", which is not running");
      }
      int[][] tables = k.scheduler.blockTables(q.id);
      for (int g = 0; g < numGroups; g++) {
        int[] table = tables[g];
        for (int p = item.startToken(); p < item.startToken() + item.numTokens(); p++) {
          long prev = p == 0 ? origin(k.r) : k.device[slot(table, p - 1, q, g)];
          k.device[slot(table, p, q, g)] = row(prev, q.tokens[p], k.r, g);
        }
      }
    }
  }

  private void sample(Replica rep, ExecutionPlan plan) {
    for (ExecutionPlan.ForwardItem item : plan.forward()) {
      Req q = rep.active.get(item.requestId());
      if (q == null || item.startToken() + item.numTokens() != q.known) {
        continue;
      }
      // attention reads every row of the full history and the window's rows of the last token
      int windowFrom = Math.max(0, q.known - window + 1);
      long h = 0;
      for (Rank k : rep.ranks) {
        int[][] tables = k.scheduler.blockTables(q.id);
        for (int g = 0; g < numGroups; g++) {
          for (int p = g == 0 ? 0 : windowFrom; p < q.known; p++) {
            h = mix(h, k.device[slot(tables[g], p, q, g)]);
          }
        }
      }
      int token = (int) Math.floorMod(h, (long) VOCAB);
      q.extendReference(q.known);
      long ref = 0;
      for (int r = 0; r < numRanks; r++) {
        for (int g = 0; g < numGroups; g++) {
          for (int p = g == 0 ? 0 : windowFrom; p < q.known; p++) {
            ref = mix(ref, q.ref[g][r][p]);
          }
        }
      }
      int expected = (int) Math.floorMod(ref, (long) VOCAB);
      if (!(token == expected)) {
        throw fail(
            "request "
                + q.id
                + " sampled "
                + token
                + " at position "
                + q.known
                + " where its recomputation samples "
                + expected
                + ": its KV is wrong");
      }
      q.tokens[q.known++] = token;
      q.generated++;
      tokensSampled++;
      if (q.generated == q.maxNew) {
        for (Rank k : rep.ranks) {
          k.scheduler.complete(q.id);
          // the write-through of the engine's HostPublication: every key of the longest full
          // boundary, and with a window the windows of each shorter boundary, longest first
          int longest = q.keys.numFullPages() * BG;
          Set<CacheKey> keys = new LinkedHashSet<>();
          if (longest > 0) {
            keys.addAll(k.cache.neededKeys(q.keys, longest));
            for (int b = longest - BG; window > 0 && b >= BG; b -= BG) {
              keys.addAll(k.cache.neededKeys(q.keys, b));
            }
          }
          k.backups.addAll(keys);
        }
        rep.active.remove(q.id);
        rep.housekeeping = true;
        end(q, "length");
      }
    }
  }

  /** Requests retracted after they generated tokens go back with those tokens as their prompt. */
  private void resumeRetracted(Replica rep) {
    for (Scheduler.RetractedBlocks rb : rep.leader().scheduler.retractedThisRound()) {
      Req q = rep.active.get(rb.requestId());
      if (q == null
          || q.generated == 0
          || !(rep.leader().scheduler.state(q.id) instanceof RequestState.Retracted)) {
        continue;
      }
      for (Rank k : rep.ranks) {
        k.scheduler.complete(q.id);
      }
      rep.active.remove(q.id);
      for (Rank k : rep.ranks) {
        submit(rep, k, q);
      }
    }
  }

  /** Where row {@code p} of a request's group lives in Device memory (its block must be held). */
  private int slot(int[] table, int p, Req q, int g) {
    int row = p / BG;
    if (row >= table.length || table[row] == 0) {
      throw fail(
          "request "
              + q.id
              + " reads token "
              + p
              + " of group "
              + g
              + ", whose block it does not hold");
    }
    return table[row] * BG + p % BG;
  }

  private static long origin(int rank) {
    return 0x6B76_0000_0000_0000L + rank;
  }

  /** The model's KV row of a token: a function of the token and of the row before it. */
  static long row(long previous, int token, int rank, int group) {
    return mix(mix(previous, token), rank + 1 + 1_000L * group);
  }

  private static long mix(long h, long v) {
    long z = h ^ (v + 0x9e37_79b9_7f4a_7c15L + (h << 6) + (h >>> 2));
    z = (z ^ (z >>> 30)) * 0xbf58_476d_1ce4_e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d0_49bb_1331_11ebL;
    return z ^ (z >>> 31);
  }

  // ---------------------------------------------------------------- invariants

  /** The reference rows of {@code key} on rank {@code r}, or null when no request named it. */
  private long[] expectedRows(CacheKey key, int r) {
    PageSource src = pageSources.get(key);
    if (src == null) {
      return null;
    }
    src.req().extendReference((src.page() + 1) * BG);
    long[] rows = src.req().ref[key.groupId()][r];
    return Arrays.copyOfRange(rows, src.page() * BG, (src.page() + 1) * BG);
  }

  private void checkPut(String storeKey, byte[] bytes) {
    CacheKey key = storeKeys.get(storeKey);
    int r =
        Integer.parseInt(
            storeKey.substring(
                storeKey.indexOf("/r") + 2, storeKey.indexOf('/', storeKey.indexOf("/r") + 1)));
    long[] expected = key == null ? null : expectedRows(key, r);
    if (expected == null) {
      store.violations.add("a PUT of " + storeKey + ", a key no request named");
      return;
    }
    long[] got = new long[BG];
    ByteBuffer.wrap(bytes).order(ByteOrder.nativeOrder()).asLongBuffer().get(got);
    if (!Arrays.equals(expected, got)) {
      store.violations.add("a PUT of " + storeKey + " carries bytes other than its reference");
    }
  }

  /**
   * A soft timeout ends a wait that lasted the soft deadline in agreed time: the wait started no
   * earlier than the clock of the round that submitted its request, and a timer set in a round
   * starts at the next tick, which is that round's clock. Each soft timeout of the round ends the
   * wait of a request that was waiting on L3 before it ({@code waiting}) and no longer is after it,
   * so at least as many of those were submitted the soft deadline or more before the tick.
   */
  private void checkSoftTimeouts(Replica rep, long before, long tickNs, List<Req> waiting) {
    long timedOut = rep.leader().stm.counters().softTimeouts - before;
    softTimeouts += timedOut;
    if (timedOut == 0) {
      return;
    }
    long soft = TimeUnit.MILLISECONDS.toNanos(storageConfig.softDeadlineMs());
    int ended = 0;
    int waited = 0;
    for (Req q : waiting) {
      if (!(rep.leader().scheduler.state(q.id) instanceof RequestState.Prefetching)) {
        ended++;
        if (tickNs - q.submittedNs >= soft) {
          waited++;
        }
      }
    }
    if (!(waited >= timedOut)) {
      throw fail(
          timedOut
              + " soft timeouts at tick "
              + tickNs / MS
              + " ms, but only "
              + waited
              + " of the "
              + ended
              + " requests whose L3 wait ended in the round had waited "
              + storageConfig.softDeadlineMs()
              + " ms");
    }
  }

  private void checkRound(Replica rep, ExecutionPlan plan) {
    for (Rank k : rep.ranks) {
      checkPublished(k, k.cache.device().pool().blockIdLimit(), Tier.DEVICE);
      checkPublished(k, k.cache.host().pool().blockIdLimit(), Tier.HOST);
      for (int b : k.quarantinedHost) {
        if (!(k.cache.host().pool().isAllocated(b))) {
          throw fail("quarantined Host block " + b + " was freed");
        }
        if (!(k.cache.host().keyOf(b) == null)) {
          throw fail("quarantined GET block " + b + " is published");
        }
      }
      for (int b : k.quarantinedSources) {
        if (!(k.cache.host().pool().isAllocated(b))) {
          throw fail("quarantined PUT source " + b + " was freed");
        }
      }
      if (rounds % 16 == 0 || rep.active.isEmpty()) {
        k.scheduler.checkInvariants();
        k.stm.checkInvariants();
        List<HeldBlock> holders = new ArrayList<>(k.scheduler.heldBlocks());
        holders.addAll(k.stm.heldHostBlocks());
        CacheInvariants.check(k.cache, holders);
      }
    }
    if (rep.active.isEmpty()
        && !storageBusy(rep)
        && rep.held != null
        && rep.held.completions().isEmpty()) {
      checkIdle(rep);
    }
  }

  private void checkPublished(Rank k, int limit, Tier tier) {
    var t = k.cache.tier(tier);
    long[] memory = tier == Tier.DEVICE ? k.device : k.hostRows;
    for (int b = 1; b < limit; b++) {
      CacheKey key = t.keyOf(b);
      if (key == null) {
        continue;
      }
      long[] expected = expectedRows(key, k.r);
      if (!(expected != null)) {
        throw fail(
            tier + " block " + b + " is published under " + key + ", which no request named");
      }
      for (int i = 0; i < BG; i++) {
        if (memory[b * BG + i] != expected[i]) {
          throw fail(
              "rank "
                  + k.r
                  + " publishes "
                  + tier
                  + " block "
                  + b
                  + " under "
                  + key
                  + " but row "
                  + i
                  + " differs from its reference");
        }
      }
    }
  }

  /** Idle: no request, no storage work: credits, leases and references at baseline. */
  private void checkIdle(Replica rep) {
    if (!rep.active.isEmpty() || storageBusy(rep)) {
      return;
    }
    for (Rank k : rep.ranks) {
      if (!(k.inFlight.isEmpty())) {
        throw fail("rank " + k.r + " is idle with store calls in flight");
      }
      if (!(k.stm.readyHolds() == 0)) {
        throw fail("rank " + k.r + " idle with Ready holds");
      }
      if (!(k.stm.hostCreditsInUse() == k.stm.quarantinedRefs())) {
        throw fail(
            "rank "
                + k.r
                + " idle with "
                + k.stm.hostCreditsInUse()
                + " Host credits in use ("
                + k.stm.quarantinedRefs()
                + " quarantined)");
      }
      if (!(k.cache.device().cachedCount() == k.cache.device().pool().heldBlocks())) {
        throw fail("rank " + k.r + " idle with Device blocks held by no request");
      }
    }
  }

  /** The figures of the run, one line. */
  String figures() {
    return String.format(
        "seed=%d ranks=%d rounds=%d idle=%d replicas=%d requests=%d (finished %d, cancelled %d,"
            + " failed %d) tokens=%d restored=%d softTimeouts=%d refused=%d quarantines=%d"
            + " updates=%d commands=%d storeRestarts=%d calls=%d",
        seed,
        numRanks,
        rounds,
        idleWaits,
        replicas,
        requestsEnded,
        requestsFinished,
        requestsCancelled,
        requestsFailed,
        tokensSampled,
        restoredKeys,
        softTimeouts,
        refusedBackups,
        quarantines,
        weightUpdates,
        commandsApplied,
        storeRestarts,
        store.calls);
  }

  static {
    // the Host memory is read through a native-order view of the long rows
    if (ValueLayout.JAVA_LONG.order() != ByteOrder.nativeOrder()) {
      throw new IllegalStateException("unexpected byte order");
    }
  }
}

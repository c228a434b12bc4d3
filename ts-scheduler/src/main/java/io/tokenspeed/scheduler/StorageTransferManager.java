package io.tokenspeed.scheduler;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.cache.TierCache;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The scheduler's owner of everything L3: operation ids, tickets, credits, leases, Ready holds,
 * quarantine, negative metadata, backup candidates, the pressure gate and soft deadlines.
 *
 * <h2>The ledger</h2>
 *
 * <pre>
 *   ticket (one per operation id, ids monotonic, never reused — not even across clears)
 *     QUERY   1 operation credit                          released when the agreed fact arrives
 *     GET     1 operation credit + 1 Host credit / dest   released at retirement, or kept as a
 *             (1 Host credit = 1 LCM parent)              Ready hold on the published blocks
 *     PUT     1 operation credit + 1 Host credit / source  released at retirement (backups: at most
 *                                                           half of each budget, rounded down)
 *     any     unretired on some owner -> QUARANTINED: never freed, published or repaired
 * </pre>
 *
 * <p>Every Host reference a ticket holds is a real reference in the Host tier of the {@link
 * CacheCoordinator}, and is charged one Host credit: one potentially pinned LCM parent, since a
 * single referenced child keeps its whole parent from the free list. Requests never hold Host
 * references: they hold a {@link StorageLease} on a ticket. Closing the lease detaches the request;
 * the ticket and its references live on until every owner reported retirement.
 *
 * <h2>Host credits and the retraction reserve</h2>
 *
 * <pre>
 *   Host tier (parents):  [ Host credits: what tickets may pin    | retraction reserve ]
 *   held Host blocks  <=  Host credits  <=  parents - reserve      (checked at construction)
 *   parents tickets pin  <=  held Host blocks                      (one parent per block at most)
 * </pre>
 *
 * <p>The charge is conservative: blocks packed into one parent are charged one parent each, which
 * can underuse packed Host capacity but cannot oversubscribe it. Because no credit reaches the
 * reserve, however many credits slow or hung operations hold, at least the reserve's parents stay
 * free of L3 references, and a retracted request's exact image finds room there instead of falling
 * back to recomputation ({@link StorageConfig#forHost}).
 *
 * <h2>What it must never do</h2>
 *
 * <ul>
 *   <li>publish anything from a detached, failed or unretired read;
 *   <li>allocate Host memory for a query (a query reserves nothing);
 *   <li>let backups take the credits reads need (backups are capped at half);
 *   <li>block: it is called on the event loop, owns no thread and takes no lock.
 * </ul>
 *
 * <h2>Generations</h2>
 *
 * <p>A full clear, namespace rotation or weight update ({@link #rejectAll}) starts a new
 * generation. Every ticket remembers the generation it was issued in, and nothing of an earlier one
 * reaches the current state: its facts never enter the negative metadata, its refused PUT rows are
 * never offered again, and the Host blocks its PUTs still hold (in flight or quarantined) are
 * unpublished at once ({@link TierCache#unpublish}):
 *
 * <pre>
 *   published, a PUT's source ──clear──▶ withdrawn: in no index (never matched, looked up or
 *                                          backed up), still allocated and referenced, read-only
 *       │ the PUT retires (its last reference)       │ quarantined: the reference never goes
 *       ▼                                            ▼
 *     freed                                          allocated until restart
 * </pre>
 *
 * <p>So the rule costs nothing on the read path: admission, preparation and backup dispatch look in
 * the index, and a withdrawn block is not there. The rest of a full clear (cached blocks, running
 * requests' rows, copies in flight) is {@link CacheCoordinator#clear}.
 *
 * <h2>Timers</h2>
 *
 * <p>Soft deadlines, Ready holds and backup holds are read against agreed ticks only, so every rank
 * ends the same waits in the same round. A timer starts at the first tick applied after the round
 * that set it, never at the tick that round ran under:
 *
 * <pre>
 *   clock     c0      c1 ........ idle gap ........ c2        c3
 *   round     r0      r1                            r2        r3
 *   tick      -       c0                            c1        c2     (the exchange: one round late)
 *                                                   query     deadline = c2 + soft
 * </pre>
 *
 * <p>The round that issues a query still carries the clock of the round before it — from before the
 * gap, after an idle period — and counting from it would end the wait at once. The next tick is
 * exactly the issuing round's clock. The same holds for a Ready hold (from the round that published
 * the read) and the backup hold after a refusal (from the round that learned the refusal).
 *
 * <h2>Backups</h2>
 *
 * <pre>
 *   offerBackup ──▶ candidates ──dispatch, as the pacer allows──▶ PUT ──accepted──▶ forgotten
 *                     ▲  (bounded, drop-oldest)                     │ retired refusal (no space,
 *                     │                                             │ an ACL, a cooldown)
 *                     └──── back at the tail, refusals + 1 ◀────────┘ (a probe's: + 0)
 *                                                 │ refusals = max attempts: dropped (refused)
 *   any refusal ──▶ BackupPacer: every backup held, then one probe of one page, then a ramp
 *   unretired ─▶ quarantine: candidates dropped (disabled), every later offer too
 * </pre>
 *
 * <p>The store, not the key, sets the pace ({@link BackupPacer}): after a refusal nothing is sent
 * for a backoff that doubles with each consecutive refusal (capped at {@code
 * max_backup_backoff_ms}), then one page; a store that keeps refusing sees one page per hold,
 * however many prompts publish pages meanwhile, and the bytes re-offered once it takes pages again
 * grow with what it takes. Refused keys wait among the candidates for that pace, so pages refused
 * during a cooldown are offered again once the store answers, as long as they are still on the Host
 * (dispatch skips evicted ones). A key counts only the refusals of PUTs that were not probes, so a
 * long outage does not use up its attempts; a key the store refuses while it takes others goes
 * after {@link StorageConfig#DEFAULT_MAX_BACKUP_ATTEMPTS}.
 *
 * <p>Candidates held back are no dispatchable work ({@link #queuedCandidates} is 0 while held): the
 * loop sleeps until {@link #nextBackupRetryNs}. They are pending work ({@link #deferredCandidates})
 * until the store is taken to refuse persistently; then they are {@link #heldCandidates}, which
 * nothing waits for. Pressure closure, frozen-round cleanup and clears drop the candidates. The
 * refusal count of a key lives only while the key is a candidate or in a PUT.
 *
 * <p>Deterministic: the same inputs produce the same operations, ids and wake-ups on every rank
 * (insertion-ordered maps, no clocks of its own, no hashing of identities).
 */
public final class StorageTransferManager {

  private enum Phase {
    INFLIGHT,
    /** A query whose facts arrived in a round without storage permission: GET waits for one. */
    PARKED,
    READY,
    QUARANTINED
  }

  private static final class Ticket {
    final long id;
    final StorageKind kind;
    final List<CacheKey> keys;
    final int[] hostBlocks; // GET destinations, PUT sources; 0 once released

    /**
     * A GET's early Device destinations (see {@link StorageConfig#earlyH2d}), 0 once released or
     * where none; null when the GET has none.
     */
    int[] deviceBlocks;

    /** The Device parents {@link #deviceBlocks} were charged as (released with them). */
    long earlyParents;

    final boolean backup;
    final long generation;

    /** A backup's write epoch at dispatch ({@link BackupPacer#epoch}). */
    long writeEpoch;

    /** A backup dispatched as the pacer's probe: its refusal is the store's, not its keys'. */
    boolean probe;

    Phase phase = Phase.INFLIGHT;
    StorageLease lease;
    long deadlineNs;
    long readyUntilNs;

    /**
     * The timer of the current phase (the soft deadline while waiting, the hold while Ready) starts
     * at the next tick: set by the round that issued the query or published the read.
     */
    boolean timerPending;

    PromptKeys prompt;
    int floor;
    int[] candidates;
    int boundary;

    /**
     * The agreed tick of the round that issued the restore's query (its GET keeps it). On a replica
     * of several ranks that tick is a round old, older after an idle gap: the time gone since
     * counts a little more than passed, so the restore is abandoned later rather than sooner.
     */
    long issuedNs;

    Set<CacheKey> exists;

    Ticket(
        long id,
        StorageKind kind,
        List<CacheKey> keys,
        int[] hostBlocks,
        boolean backup,
        long generation) {
      this.id = id;
      this.generation = generation;
      this.kind = kind;
      this.keys = keys;
      this.hostBlocks = hostBlocks;
      this.backup = backup;
    }

    int heldRefs() {
      int n = 0;
      for (int b : hostBlocks) {
        if (b != 0) {
          n++;
        }
      }
      return n;
    }

    int heldDeviceRefs() {
      int n = 0;
      if (deviceBlocks != null) {
        for (int b : deviceBlocks) {
          if (b != 0) {
            n++;
          }
        }
      }
      return n;
    }
  }

  /** The outcome of {@link #prepare}: a bypass, or a lease on the issued query. */
  public record Preparation(Bypass bypass, StorageLease lease) {
    public boolean waiting() {
      return lease != null;
    }
  }

  private final StorageConfig config;
  private final CacheCoordinator cache;
  private final TierCache host;
  private final Map<Long, Ticket> tickets = new LinkedHashMap<>();
  private final List<StorageOp> ops = new ArrayList<>();
  private final List<Wakeup> wakeups = new ArrayList<>();
  private final StorageCounters counters = new StorageCounters();

  private final ArrayDeque<CacheKey> negativeFifo = new ArrayDeque<>();
  private final Set<CacheKey> negative = new HashSet<>();
  private final ArrayDeque<CacheKey> candidates = new ArrayDeque<>();
  private final Set<CacheKey> candidateSet = new HashSet<>();
  private final Map<CacheKey, Integer> pendingPutKeys = new LinkedHashMap<>();

  /** Refusals so far (probes' not counted) of each key that is a candidate or in a PUT. */
  private final Map<CacheKey, Integer> refusals = new HashMap<>();

  /** The store-wide pace of backups. */
  private final BackupPacer pacer;

  /** Advanced by every full clear; tickets of an earlier generation touch nothing current. */
  private long generation;

  private long nextOperationId;
  private long nowNs;

  /**
   * Safety rules a test has switched off, to show that the loop's simulation detects their absence
   * (always empty outside those tests).
   */
  private final EnumSet<SafetyRule> disabledRules = EnumSet.noneOf(SafetyRule.class);

  /** Rules of this manager that a simulation's planted-bug test may switch off. */
  enum SafetyRule {
    /** After a refusal, backups are held back for the store's backoff and then probed. */
    BACKUP_BACKOFF,
    /** A GET publishes only the rows every owner read whole. */
    FAILED_ROWS_UNPUBLISHED,
    /** A GET's early Device destinations are published for exactly the rows it publishes. */
    EARLY_ROWS_MATCH_HOST
  }

  /** Switches {@code rule} off (planted-bug tests only). */
  void disableForTest(SafetyRule rule) {
    disabledRules.add(rule);
  }

  /** No deadline or Ready expiry falls before this tick: {@link #onTick} skips its scan. */
  private long nextTimerNs = Long.MAX_VALUE;

  /** Some ticket's timer starts at the next tick: {@link #onTick} starts it before anything. */
  private boolean timersToStart;

  private int opUsed;
  private int hostUsed;
  private int backupOpUsed;
  private int backupHostUsed;
  private boolean gateClosed;

  /** Whether this round may start new storage work (false in frozen and idle rounds). */
  private boolean permitted = true;

  /** Tickets INFLIGHT ({@link #inFlightOperations}), kept by transition and release. */
  private int inFlight;

  /** Parked queries: a permitted round's start scans the tickets only when there are some. */
  private int parked;

  private int ready;

  private boolean quarantined;

  /** Weighs restores against recomputation ({@link CostModel}); decides nothing while off. */
  private final CostModel costModel;

  /** GETs reserve early Device destinations ({@link #earlyH2d()}). */
  private final boolean earlyH2d;

  /** Device parents the early destinations of GETs in flight are charged as, together. */
  private long earlyParents;

  /** The most keys {@link #drainEarlyPublished} keeps between two calls (oldest dropped). */
  private static final int MAX_EARLY_PUBLISHED = 1 << 16;

  /** Keys early copies published on the Device since the last {@link #drainEarlyPublished}. */
  private final ArrayDeque<CacheKey> earlyPublished = new ArrayDeque<>();

  /** The agreed tick of the round that issued the latest query ({@link #exploreDue}). */
  private long lastQueryTickNs;

  private boolean queriedYet;

  /** A weight update's fence: no new storage work until it lifts (see {@link #fence}). */
  private boolean fenced;

  /** Hears every key a current-generation PUT stored (KV events); null for nobody. */
  private Consumer<CacheKey> storedListener;

  /**
   * Sets who hears the keys that backups stored: called on the loop thread, in the round that
   * applies the PUT's agreed completion, once per key the store accepted, for PUTs of the current
   * generation only (a clear or namespace rotation since the PUT was issued silences it). It must
   * be cheap and must not block. Null for nobody (the default).
   */
  public void storedListener(Consumer<CacheKey> listener) {
    this.storedListener = listener;
  }

  /**
   * The manager of {@code cache}'s L3 work under {@code config}, its Host credits fitted to the
   * Host tier ({@link StorageConfig#forHost}).
   *
   * @throws IllegalArgumentException when {@code max_host_blocks} exceeds the Host tier's parents
   *     less the retraction reserve
   */
  public StorageTransferManager(StorageConfig config, CacheCoordinator cache) {
    this.host = cache.host();
    this.config = config.forHost(host.pool().numParents());
    this.cache = cache;
    this.pacer = new BackupPacer(this.config.maxBackupBackoffMs(), this.config.backupHostCredits());
    this.costModel = new CostModel(this.config, cache.layout());
    boolean dealt = false;
    for (var g : cache.layout().groups()) {
      dealt |=
          g.sharding() instanceof io.tokenspeed.core.Sharding.PageCyclic pc && pc.shardCount() > 1;
    }
    this.earlyH2d = this.config.earlyH2d() && !dealt;
  }

  /**
   * Whether GETs reserve early Device destinations: {@link StorageConfig#earlyH2d}, except in a
   * layout that deals a group's pages over several owners (a Host row and its Device destination
   * could then live on different ranks; their loads stay at admission, where the engine moves pages
   * between owners).
   */
  public boolean earlyH2d() {
    return earlyH2d;
  }

  // ================================================================ read transaction

  /**
   * Considers L3 once for a request in Submitted: either a bypass (ordinary admission follows) or a
   * query is issued and the returned lease belongs to the request's Prefetching state.
   */
  public Preparation prepare(long requestId, PromptKeys prompt, boolean permitted) {
    if (!permitted && !quarantined && !fenced) {
      return new Preparation(Bypass.NOT_PERMITTED, null); // tried again: not counted
    }
    Preparation p = considerL3(requestId, prompt);
    if (!p.waiting()) {
      counters.bypass(p.bypass());
    }
    return p;
  }

  /**
   * The rules of {@link #prepare} in a permitted round (or under quarantine or a fence, which end
   * every preparation): the fixed rules, then the cost model on the candidates that remain.
   */
  private Preparation considerL3(long requestId, PromptKeys prompt) {
    if (quarantined) {
      return new Preparation(Bypass.QUARANTINED, null);
    }
    if (fenced) {
      return new Preparation(Bypass.FENCED, null);
    }
    if (gateClosed) {
      counters.pressureBypasses++;
      return new Preparation(Bypass.PRESSURE, null);
    }
    int bound = prompt.reusableBound();
    int local = cache.probe(prompt, bound).hostHit();
    if (local >= bound) {
      return new Preparation(Bypass.LOCAL_HIT, null);
    }
    int max = (int) Math.min(bound, (long) local + config.lookaheadTokens());
    int[] cands = cache.candidates(prompt, local, max);
    if (cands[cands.length - 1] - local < config.minExtensionTokens()) {
      return new Preparation(Bypass.SHORT_EXTENSION, null);
    }
    boolean partial = false;
    boolean explore = false;
    if (costModel.decides()) {
      int best = costModel.chooseBoundary(prompt.numTokens(), local, cands);
      if (best - local < config.minExtensionTokens()) {
        if (!exploreDue()) {
          return new Preparation(Bypass.SLOWER_THAN_COMPUTE, null);
        }
        explore = true; // measured again: the whole restore, as the fixed rules ask
      } else if (best < cands[cands.length - 1]) {
        cands = Arrays.copyOf(cands, Arrays.binarySearch(cands, best) + 1);
        partial = true;
      }
    }
    List<CacheKey> ask = planQueryKeys(prompt, cands);
    if (ask.isEmpty()) {
      return new Preparation(Bypass.NOTHING_TO_ASK, null);
    }
    if (opUsed >= config.maxOperations()) {
      return new Preparation(Bypass.NO_OPERATION_CREDITS, null);
    }
    if (hostUsed >= config.maxHostBlocks()) {
      return new Preparation(Bypass.NO_HOST_CREDITS, null);
    }
    Ticket t = newTicket(StorageKind.QUERY, ask, new int[0], false);
    t.prompt = prompt;
    t.floor = local;
    t.candidates = cands;
    t.issuedNs = nowNs;
    startTimerAtNextTick(t); // the soft deadline starts with the clock of this round
    t.lease = new StorageLease(this, requestId, t.id);
    ops.add(new StorageOp.Query(t.id, ask));
    counters.queriesIssued++;
    if (partial) {
      counters.partialRestores++;
    }
    if (explore) {
      counters.costExplorations++;
    }
    lastQueryTickNs = nowNs;
    queriedYet = true;
    return new Preparation(null, t.lease);
  }

  /**
   * Whether a restore the cost model would bypass is issued anyway, to measure the store again: no
   * query was issued for {@code async.cost_model_explore_ms} of agreed ticks (never when 0), or
   * since the model's first decision when none ever was (a prior decided before any restore).
   */
  private boolean exploreDue() {
    if (!queriedYet) {
      queriedYet = true; // a model that decides before any query counts from its first decision
      lastQueryTickNs = nowNs;
    }
    long every = costModel.exploreMs();
    return every > 0 && nowNs - lastQueryTickNs >= TimeUnit.MILLISECONDS.toNanos(every);
  }

  /** The keys a query asks for: see {@link QueryPlanner}. */
  private List<CacheKey> planQueryKeys(PromptKeys prompt, int[] cands) {
    TierCache device = cache.device();
    return QueryPlanner.plan(
        prompt,
        cands,
        k -> device.contains(k) || host.contains(k),
        negative,
        config.maxQueryKeys());
  }

  private void onQueryDone(Ticket t, AgreedCompletion f) {
    StorageLease lease = t.lease;
    if (lease == null || !lease.live() || f.detached() || gateClosed || quarantined) {
      releaseTicket(t);
      if (lease != null && lease.live()) {
        wake(lease, Wakeup.Reason.NOTHING_RESTORED);
      }
      return;
    }
    Set<CacheKey> exists = new HashSet<>();
    for (int i = 0; i < t.keys.size(); i++) {
      if (f.ok(i)) {
        exists.add(t.keys.get(i));
      }
    }
    if (!permitted) {
      transition(t, Phase.PARKED); // no new storage work this round: reserve when permitted
      t.exists = exists;
      return;
    }
    releaseTicket(t);
    reserveOrWake(t, lease, exists);
  }

  /** Runs the reservation of a finished query (now, or when a parked query may proceed). */
  private void reserveOrWake(Ticket t, StorageLease lease, Set<CacheKey> exists) {
    int[] cands = t.candidates;
    while (cands.length > 1) {
      int boundary = cache.matchAssuming(t.prompt, cands, exists::contains);
      if (boundary <= t.floor) {
        break;
      }
      if (costModel.decides()
          && loses(
              t.prompt,
              t.floor,
              boundary,
              t.issuedNs,
              1 + config.costModelMarginPercent() / 100.0)) {
        // figures agreed while the query ran say the store has slowed: no GET is issued
        counters.restoresAbandoned++;
        wake(lease, Wakeup.Reason.SLOWER_THAN_COMPUTE);
        return;
      }
      if (reserve(t, lease, boundary)) {
        return;
      }
      cands = below(cands, boundary); // shortage: try the next shorter boundary
    }
    wake(lease, Wakeup.Reason.NOTHING_RESTORED);
  }

  /**
   * Reserves Host destinations for the keys missing at {@code boundary} and issues the GET. Warm
   * dependencies (blocks of the boundary already on the Host) are pinned only while allocating, so
   * the allocation cannot evict them, and count against the credit check with the destinations.
   */
  private boolean reserve(Ticket query, StorageLease lease, int boundary) {
    List<CacheKey> dest = cache.missingKeys(query.prompt, boundary);
    if (dest.isEmpty()) {
      return false;
    }
    List<Integer> warm = present(host, query.prompt, boundary);
    if (opUsed + 1 > config.maxOperations()
        || (long) hostUsed + dest.size() + warm.size() > config.maxHostBlocks()) {
      return false;
    }
    int[] needs = new int[cache.layout().numGroups()];
    for (CacheKey k : dest) {
      needs[k.groupId()]++;
    }
    int[] blocks = allocateFor(host, dest, needs, warm);
    if (blocks == null) {
      return false;
    }
    Ticket get = newTicket(StorageKind.GET, dest, blocks, false);
    if (earlyH2d) {
      reserveDevice(get, query.prompt, boundary, needs);
    }
    get.prompt = query.prompt;
    get.floor = query.floor;
    get.issuedNs = query.issuedNs;
    get.boundary = boundary;
    get.deadlineNs = query.deadlineNs; // the soft deadline runs from query issue
    if (query.timerPending) {
      startTimerAtNextTick(get);
    }
    get.lease = lease;
    query.lease = null;
    lease.moveTo(get.id);
    ops.add(
        new StorageOp.Get(
            get.id,
            dest,
            Arrays.stream(blocks).boxed().toList(),
            get.deviceBlocks == null
                ? List.of()
                : Arrays.stream(get.deviceBlocks).boxed().toList()));
    counters.getsIssued++;
    return true;
  }

  /**
   * Gives {@code get} early Device destinations (see {@link StorageConfig#earlyH2d}), unless the
   * Device has no room for them: allocating them may evict cached Device blocks (as the admission
   * that would otherwise load the rows does), but never the Device's own blocks of the prefix below
   * them, and it leaves at most {@link StorageConfig#EARLY_H2D_MAX_REFERENCED_PERCENT} of the
   * Device's parents referenced, so running requests keep room to grow, and at most {@link
   * StorageConfig#EARLY_H2D_MAX_HELD_PERCENT} held by early destinations together (what a hung
   * store can take from the Device). Each block is private to the ticket until the GET's fact:
   * published on the Device with its Host entry, or freed.
   */
  private void reserveDevice(Ticket get, PromptKeys prompt, int boundary, int[] needs) {
    TierCache device = cache.device();
    io.tokenspeed.cache.BlockPool pool = device.pool();
    long parents = 0;
    for (int g = 0; g < needs.length; g++) {
      int per = pool.childrenPerParent(g);
      parents += (needs[g] + per - 1) / per;
    }
    long limit = (long) pool.numParents() * StorageConfig.EARLY_H2D_MAX_REFERENCED_PERCENT / 100;
    long held = (long) pool.numParents() * StorageConfig.EARLY_H2D_MAX_HELD_PERCENT / 100;
    if (pool.referencedParents() + parents > limit || earlyParents + parents > held) {
      counters.earlyH2dSkipped++;
      return;
    }
    int[] blocks = allocateFor(device, get.keys, needs, present(device, prompt, boundary));
    if (blocks == null) {
      counters.earlyH2dSkipped++;
      return;
    }
    for (int b : blocks) {
      device.noteWrite(b);
    }
    counters.earlyH2dGets++;
    earlyParents += parents;
    get.deviceBlocks = blocks;
    get.earlyParents = parents;
  }

  /** The blocks of {@code tier} that hold keys the prompt needs at {@code boundary}. */
  private List<Integer> present(TierCache tier, PromptKeys prompt, int boundary) {
    List<Integer> out = new ArrayList<>();
    for (CacheKey k : cache.neededKeys(prompt, boundary)) {
      int b = tier.lookup(k);
      if (b != 0) {
        out.add(b);
      }
    }
    return out;
  }

  /**
   * A fresh block of {@code tier} for each of {@code dest} (in its order; {@code needs} counts them
   * per group), allocated while {@code keep} is pinned so that the allocation cannot evict it;
   * null, allocating nothing, when the tier cannot hold them.
   */
  private static int[] allocateFor(
      TierCache tier, List<CacheKey> dest, int[] needs, List<Integer> keep) {
    for (int b : keep) {
      tier.ref(b);
    }
    int[][] fresh = tier.allocate(needs);
    for (int b : keep) {
      tier.unref(b);
    }
    if (fresh == null) {
      return null;
    }
    int[] used = new int[needs.length];
    int[] blocks = new int[dest.size()];
    for (int i = 0; i < dest.size(); i++) {
      int g = dest.get(i).groupId();
      blocks[i] = fresh[g][used[g]++];
    }
    return blocks;
  }

  /**
   * Row {@code i}'s early Device destination after the GET's fact: published under {@code key} when
   * {@code publish} (the row read in full on every owner of an attached GET, so the rank's copy of
   * it to the Device is done too: a rank reports a GET only after its early copies), freed
   * otherwise. Either way the ticket's reference goes: a published block is cached and evictable,
   * and admission matches it as any Device block.
   */
  private void settleDevice(Ticket t, int i, CacheKey key, boolean publish) {
    if (t.deviceBlocks == null || t.deviceBlocks[i] == 0) {
      return;
    }
    int d = t.deviceBlocks[i];
    t.deviceBlocks[i] = 0;
    if (t.heldDeviceRefs() == 0) {
      earlyParents -= t.earlyParents; // the GET's last early destination settles
      t.earlyParents = 0;
    }
    if (publish && cache.device().publish(key, d)) {
      counters.earlyH2dBlocks++;
      earlyPublished.add(key);
      if (earlyPublished.size() > MAX_EARLY_PUBLISHED) {
        earlyPublished.removeFirst();
      }
    }
    cache.device().unref(d);
  }

  private void onGetDone(Ticket t, AgreedCompletion f) {
    StorageLease lease = t.lease;
    boolean attached = lease != null && lease.live() && !f.detached();
    if (!f.retired()) {
      for (int i = 0; i < t.keys.size(); i++) {
        settleDevice(t, i, t.keys.get(i), false); // no store writes there: only the Host stays
      }
      quarantine(t);
      if (lease != null && lease.live()) {
        wake(lease, Wakeup.Reason.READ_FAILED);
      }
      return;
    }
    int published = 0;
    for (int i = 0; i < t.keys.size(); i++) {
      CacheKey k = t.keys.get(i);
      if (f.objectFailure(i) && t.generation == generation) {
        rememberNegative(k); // a fact from before a clear is about a namespace no longer asked
      }
      int b = t.hostBlocks[i];
      boolean ok = f.ok(i) || disabledRules.contains(SafetyRule.FAILED_ROWS_UNPUBLISHED);
      settleDevice(
          t, i, k, attached && (ok || disabledRules.contains(SafetyRule.EARLY_ROWS_MATCH_HOST)));
      if (attached && ok && host.publish(k, b)) {
        published++; // keep the reference: it becomes the Ready hold
      } else {
        releaseRef(t, i);
      }
    }
    counters.publishedBlocks += published;
    if (!attached) {
      releaseTicket(t);
      return;
    }
    boolean complete = published == t.keys.size();
    if (complete && !t.prompt.aligned(t.boundary)) {
      cache.recordTail(t.prompt, t.boundary);
    }
    if (published == 0) {
      releaseTicket(t);
      wake(lease, Wakeup.Reason.READ_FAILED);
      return;
    }
    transition(t, Phase.READY);
    startTimerAtNextTick(t); // the hold starts with the clock of this round
    wakeups.add(new Wakeup(lease.requestId(), Wakeup.Reason.READ_COMPLETE, lease));
  }

  // ================================================================ write transaction

  /**
   * Offers a newly published Host block for backup. Candidates are non-owning: the block may be
   * evicted while queued, in which case dispatch skips it. The offer is dropped and counted when
   * writes are disabled — no backup budget, or quarantine ({@code disabled}) — or the pressure gate
   * is closed ({@code pressure}). It coalesces, uncounted, with the same key already a candidate
   * (refused before, or not) or in a pending PUT.
   */
  public void offerBackup(CacheKey key) {
    if (config.backupOperationCredits() == 0 || config.backupHostCredits() == 0 || quarantined) {
      counters.drop(StorageCounters.DropReason.DISABLED, 1);
      return;
    }
    if (fenced) {
      counters.drop(StorageCounters.DropReason.CLEANUP, 1); // written under a namespace going away
      return;
    }
    if (gateClosed) {
      counters.drop(StorageCounters.DropReason.PRESSURE, 1);
      return;
    }
    if (candidateSet.contains(key) || pendingPutKeys.containsKey(key)) {
      return; // coalesced with a candidate or a pending PUT: not a loss
    }
    enqueue(key);
  }

  /** Appends a dispatchable candidate to the bounded queue, dropping the oldest on overflow. */
  private void enqueue(CacheKey key) {
    if (config.backupCandidateCapacity() == 0) {
      forget(key, StorageCounters.DropReason.OVERFLOW);
      return;
    }
    if (candidates.size() == config.backupCandidateCapacity()) {
      CacheKey oldest = candidates.pollFirst();
      candidateSet.remove(oldest);
      forget(oldest, StorageCounters.DropReason.OVERFLOW);
    }
    candidates.addLast(key);
    candidateSet.add(key);
  }

  /**
   * Turns candidates into create-only PUTs, oldest first, while backup credits last and the pacer's
   * window allows (nothing while it holds backups back; one key when it probes).
   */
  private void dispatchBackups() {
    int window = pacer.window();
    while (!candidates.isEmpty()
        && backupOpUsed < config.backupOperationCredits()
        && opUsed < config.maxOperations()
        && backupHostUsed < window) {
      List<CacheKey> keys = new ArrayList<>();
      List<Integer> blocks = new ArrayList<>();
      while (!candidates.isEmpty()
          && keys.size() < config.maxPutKeys()
          && backupHostUsed + keys.size() < config.backupHostCredits()
          && backupHostUsed + keys.size() < window
          && hostUsed + keys.size() < config.maxHostBlocks()) {
        CacheKey k = candidates.pollFirst();
        candidateSet.remove(k);
        int b = host.lookup(k);
        if (b == 0) {
          forget(k, StorageCounters.DropReason.UNAVAILABLE);
          continue;
        }
        host.ref(b);
        keys.add(k);
        blocks.add(b);
      }
      if (keys.isEmpty()) {
        return; // credits are short: candidates wait for them
      }
      Ticket t =
          newTicket(
              StorageKind.PUT, keys, blocks.stream().mapToInt(Integer::intValue).toArray(), true);
      t.writeEpoch = pacer.epoch();
      t.probe = pacer.probing();
      for (CacheKey k : keys) {
        pendingPutKeys.merge(k, 1, Integer::sum);
      }
      ops.add(new StorageOp.Put(t.id, keys, blocks));
      counters.putsIssued++;
    }
  }

  private void onPutDone(Ticket t, AgreedCompletion f) {
    boolean current = t.generation == generation;
    if (current) { // a clear forgot the earlier generation's pending keys and refusals
      for (CacheKey k : t.keys) {
        pendingPutKeys.merge(k, -1, (a, b) -> a + b == 0 ? null : a + b);
      }
    }
    if (!f.retired()) {
      if (current) {
        t.keys.forEach(refusals::remove); // never offered again: L3 work stops here
      }
      quarantine(t);
      return;
    }
    for (int i = 0; i < t.keys.size(); i++) {
      releaseRef(t, i);
    }
    releaseTicket(t); // an earlier generation's sources were withdrawn: freed by releaseRef
    if (!current) {
      return; // an old generation's refused rows are never offered again
    }
    int accepted = f.okCount();
    if (!disabledRules.contains(SafetyRule.BACKUP_BACKOFF)) {
      pacer.onPutAnswered(t.writeEpoch, accepted < t.keys.size(), accepted);
    }
    for (int i = 0; i < t.keys.size(); i++) {
      if (f.ok(i)) {
        refusals.remove(t.keys.get(i));
        if (storedListener != null) {
          storedListener.accept(t.keys.get(i));
        }
      } else {
        onRefused(t.keys.get(i), t.probe);
      }
    }
  }

  /**
   * A retired refusal of {@code key} (no space, an ACL, a cooldown rejection): the local Host entry
   * stays usable and the key goes back to the tail of the candidates, where the pacer's hold keeps
   * it until the store takes a probe. A refusal counts against the key unless its PUT was the probe
   * (the store refusing, not the key); the {@link StorageConfig#DEFAULT_MAX_BACKUP_ATTEMPTS}th
   * drops it ({@code refused}).
   */
  private void onRefused(CacheKey key, boolean probe) {
    int n = refusals.getOrDefault(key, 0) + (probe ? 0 : 1);
    if (quarantined) {
      forget(key, StorageCounters.DropReason.DISABLED);
    } else if (gateClosed) {
      forget(key, StorageCounters.DropReason.PRESSURE);
    } else if (n >= StorageConfig.DEFAULT_MAX_BACKUP_ATTEMPTS) {
      forget(key, StorageCounters.DropReason.REFUSED);
    } else if (candidateSet.contains(key)) {
      refusals.put(key, n); // offered again meanwhile: one candidate
    } else {
      if (n > 0) {
        refusals.put(key, n);
      } else {
        refusals.remove(key);
      }
      enqueue(key);
    }
  }

  /** Drops one candidate occurrence: counted by reason, its refusals forgotten. */
  private void forget(CacheKey key, StorageCounters.DropReason reason) {
    refusals.remove(key);
    counters.drop(reason, 1);
  }

  /**
   * Drops every candidate — pressure closure, frozen-round cleanup, a clear, quarantine — counted
   * as {@code reason}. Keys in pending PUTs keep their refusals until their facts arrive.
   */
  private void dropQueued(StorageCounters.DropReason reason) {
    counters.drop(reason, candidates.size());
    for (CacheKey k : candidates) {
      refusals.remove(k);
    }
    candidates.clear();
    candidateSet.clear();
  }

  /**
   * Counts backup keys the engine dropped before they became candidates — a write-through that
   * found the Host full counts {@code unavailable} — in the same counter as the manager's own
   * drops, so every dropped backup key is counted once, by reason.
   */
  public void onBackupsDropped(StorageCounters.DropReason reason, int keys) {
    if (reason == null) {
      throw new IllegalArgumentException("reason=null");
    }
    if (keys < 0) {
      throw new IllegalArgumentException("keys=" + keys + " must be >= 0");
    }
    counters.drop(reason, keys);
  }

  // ================================================================ the round

  /**
   * Whether this round may start new storage work; set at the loop head after the tick and the
   * cancellations and before completions, so a parked query of a request cancelled this round never
   * becomes a GET. Frozen and idle rounds still take completions, deadlines and cancellations, but
   * a finished query reserves nothing and issues no GET until a permitted round; their cleanup
   * discards backup candidates, held back or not (counted as {@code cleanup}), as pressure closure
   * does.
   */
  public void beginRound(boolean storagePermitted) {
    this.permitted = storagePermitted;
    if (!storagePermitted && !candidates.isEmpty()) {
      dropQueued(StorageCounters.DropReason.CLEANUP);
    }
    if (!storagePermitted || gateClosed || quarantined || fenced || parked == 0) {
      return;
    }
    for (Ticket t : new ArrayList<>(tickets.values())) {
      if (t.phase == Phase.PARKED) {
        StorageLease lease = t.lease;
        Set<CacheKey> exists = t.exists;
        releaseTicket(t);
        reserveOrWake(t, lease, exists);
      }
    }
  }

  /**
   * The agreed tick, applied first every round (before cancellations and completions): timers set
   * by the previous round start, soft deadlines end waits, Ready holds expire, a backup hold
   * learned last round starts and one that is over ends in a probe.
   */
  public void onTick(long tickNs) {
    this.nowNs = tickNs;
    if (timersToStart) {
      startTimers(tickNs);
    }
    pacer.onTick(tickNs);
    if (nextTimerNs == Long.MAX_VALUE || tickNs - nextTimerNs < 0) {
      return; // nothing is due: no scan
    }
    nextTimerNs = Long.MAX_VALUE;
    for (Ticket t : new ArrayList<>(tickets.values())) {
      if (t.phase == Phase.PARKED && tickNs - t.deadlineNs >= 0) {
        counters.softTimeouts++;
        StorageLease lease = t.lease;
        releaseParked(t);
        wake(lease, Wakeup.Reason.SOFT_TIMEOUT);
      } else if (t.phase == Phase.INFLIGHT
          && t.lease != null
          && t.lease.live()
          && tickNs - t.deadlineNs >= 0) {
        counters.softTimeouts++;
        StorageLease lease = t.lease;
        detach(t);
        wake(lease, Wakeup.Reason.SOFT_TIMEOUT);
      } else if (t.phase == Phase.READY && tickNs - t.readyUntilNs >= 0) {
        counters.readyExpired++;
        if (t.lease != null) {
          t.lease.endedByManager();
        }
        releaseReady(t);
      } else if ((t.phase == Phase.INFLIGHT && t.lease != null && t.lease.live())
          || t.phase == Phase.PARKED) {
        armTimer(t.deadlineNs);
      } else if (t.phase == Phase.READY) {
        armTimer(t.readyUntilNs);
      }
    }
  }

  /**
   * Marks {@code t}'s timer to start at the next tick. On a replica of several ranks the round that
   * sets a timer runs under the tick of the round before it (the exchange delivers the agreed clock
   * one round late), and after a gap (a rank that stalled the exchange) that tick is older still;
   * the next tick is the clock of the round that set it. A single rank's tick is its round's own
   * clock, and the timer starts one round later than it could.
   */
  private void startTimerAtNextTick(Ticket t) {
    t.timerPending = true;
    timersToStart = true;
  }

  /** Starts the timers set since the last tick: soft deadlines and Ready holds. */
  private void startTimers(long tickNs) {
    timersToStart = false;
    for (Ticket t : tickets.values()) {
      if (!t.timerPending) {
        continue;
      }
      t.timerPending = false;
      startTimer(t, tickNs);
    }
  }

  /** Starts {@code t}'s timer at {@code tickNs}: its Ready hold, or else its soft deadline. */
  private void startTimer(Ticket t, long tickNs) {
    if (t.phase == Phase.READY) {
      t.readyUntilNs = tickNs + TimeUnit.MILLISECONDS.toNanos(config.readyHoldMs());
      armTimer(t.readyUntilNs);
    } else {
      t.deadlineNs = tickNs + TimeUnit.MILLISECONDS.toNanos(config.softDeadlineMs());
      armTimer(t.deadlineNs);
    }
  }

  private void armTimer(long atNs) {
    if (nextTimerNs == Long.MAX_VALUE || atNs - nextTimerNs < 0) {
      nextTimerNs = atNs;
    }
  }

  /**
   * The MAX-reduced pressure of the round. The gate closes when any observation reaches its high
   * watermark and reopens only when all are at or below their low ones. Closing detaches requests
   * still waiting on a QUERY and drops queued backup candidates; submitted GETs and PUTs go on and
   * Ready results stay usable.
   */
  public void onPressure(PressureSnapshot p) {
    long ageMs = TimeUnit.NANOSECONDS.toMillis(p.oldestAgeNs());
    if (!gateClosed) {
      if (p.queuedJobs() >= config.highQueuedJobs()
          || p.queuedPayloadBytes() >= config.highQueuedBytes()
          || ageMs >= config.highOldestAgeMs()) {
        gateClosed = true;
        for (Ticket t : new ArrayList<>(tickets.values())) {
          if (t.phase == Phase.PARKED) {
            StorageLease lease = t.lease;
            releaseParked(t);
            wake(lease, Wakeup.Reason.PRESSURE);
          } else if (t.kind == StorageKind.QUERY && t.lease != null && t.lease.live()) {
            StorageLease lease = t.lease;
            detach(t);
            wake(lease, Wakeup.Reason.PRESSURE);
          }
        }
        dropQueued(StorageCounters.DropReason.PRESSURE);
      }
    } else if (p.queuedJobs() <= config.lowQueuedJobs()
        && p.queuedPayloadBytes() <= config.lowQueuedBytes()
        && ageMs <= config.lowOldestAgeMs()) {
      gateClosed = false;
    }
  }

  /**
   * One agreed completion fact. Unknown or finished operations, a kind that differs from the
   * ticket's and masks of the wrong length are protocol errors, raised before anything changes.
   * (Success together with an object failure on one key, or object failures on a QUERY or PUT,
   * cannot be represented by {@link AgreedCompletion}; the control plane rejects such reports.)
   */
  public void onCompletion(AgreedCompletion f) {
    Ticket t = tickets.get(f.operationId());
    if (t == null || t.phase != Phase.INFLIGHT) {
      throw new ProtocolError("completion for unknown or finished operation " + f.operationId());
    }
    if (f.kind() != t.kind) {
      throw new ProtocolError(
          "operation " + f.operationId() + " is a " + t.kind + " but the fact says " + f.kind());
    }
    if (f.numKeys() != t.keys.size()) {
      throw new ProtocolError(
          "operation "
              + f.operationId()
              + " has "
              + t.keys.size()
              + " keys but the fact carries a mask of "
              + f.numKeys());
    }
    switch (t.kind) {
      case QUERY -> onQueryDone(t, f);
      case GET -> onGetDone(t, f);
      case PUT -> onPutDone(t, f);
    }
  }

  /** Issues this round's backup PUTs (when permitted) and returns every storage op, in order. */
  public List<StorageOp> drainOps(boolean permitted) {
    if (permitted && !gateClosed && !quarantined && !fenced) {
      dispatchBackups();
    }
    List<StorageOp> out = List.copyOf(ops);
    ops.clear();
    return out;
  }

  /**
   * The keys GETs' early copies published on the Device since the last call (at most the newest
   * 65,536), for the figures of where a prefix came from; it feeds no decision.
   */
  public List<CacheKey> drainEarlyPublished() {
    List<CacheKey> out = List.copyOf(earlyPublished);
    earlyPublished.clear();
    return out;
  }

  /** Requests whose L3 wait ended since the last call, in the order it happened. */
  public List<Wakeup> drainWakeups() {
    List<Wakeup> out = List.copyOf(wakeups);
    wakeups.clear();
    return out;
  }

  // ================================================================ administration

  /**
   * A full cache clear, namespace rotation or weight update: rejects every outstanding storage
   * operation — waits end, Ready holds are released, queued candidates, pending PUT keys and
   * negative metadata are dropped — without waiting for any I/O, and starts a new generation.
   * In-flight tickets stay charged until their facts arrive; quarantined references stay until
   * restart. Host blocks that PUTs (in flight or quarantined) still hold are unpublished at once:
   * in no index any more (never matched or backed up again), still allocated for the native I/O,
   * freed when their PUT retires (never, when quarantined). Operation ids keep increasing.
   */
  public void rejectAll() {
    generation++;
    for (Ticket t : new ArrayList<>(tickets.values())) {
      switch (t.phase) {
        case INFLIGHT -> {
          if (t.lease != null && t.lease.live()) {
            StorageLease lease = t.lease;
            detach(t);
            wake(lease, Wakeup.Reason.CLEARED);
          }
        }
        case PARKED -> {
          StorageLease lease = t.lease;
          releaseParked(t);
          wake(lease, Wakeup.Reason.CLEARED);
        }
        case READY -> {
          if (t.lease != null) {
            t.lease.endedByManager();
          }
          releaseReady(t);
        }
        case QUARANTINED -> {}
      }
      if (t.kind == StorageKind.PUT) {
        for (int b : t.hostBlocks) {
          if (b != 0) {
            host.unpublish(b); // withdrawn: the native I/O may still read it
          }
        }
      }
    }
    dropQueued(StorageCounters.DropReason.CLEANUP);
    refusals.clear();
    pendingPutKeys.clear();
    negative.clear();
    negativeFifo.clear();
    pacer.reset(); // a new namespace: its writes start open
  }

  // ================================================================ leases

  /**
   * The boundary a waiting request hopes to restore: the longest candidate of its query, or the
   * boundary its GET reads. 0 when the lease is no longer waiting.
   */
  public int wantedBoundary(StorageLease lease) {
    Ticket t = tickets.get(lease.operationId());
    if (t == null || t.lease != lease || (t.phase != Phase.INFLIGHT && t.phase != Phase.PARKED)) {
      return 0;
    }
    return t.kind == StorageKind.QUERY ? t.candidates[t.candidates.length - 1] : t.boundary;
  }

  /**
   * Ends a wait because local data now covers what the request wanted (another request's
   * publication): the request detaches like a client detach, and the ticket lives on until its
   * facts arrive.
   */
  public void satisfiedLocally(StorageLease lease) {
    Ticket t = tickets.get(lease.operationId());
    if (t != null && t.lease == lease && t.phase == Phase.INFLIGHT) {
      counters.satisfiedLocally++;
      detach(t);
    } else if (t != null && t.lease == lease && t.phase == Phase.PARKED) {
      counters.satisfiedLocally++;
      releaseParked(t);
      lease.endedByManager();
    }
  }

  void onLeaseClosed(StorageLease lease) {
    Ticket t = tickets.get(lease.operationId());
    if (t == null || t.lease != lease) {
      return;
    }
    switch (t.phase) {
      case INFLIGHT -> {
        counters.clientDetaches++;
        detach(t);
      }
      case PARKED -> {
        counters.clientDetaches++;
        releaseParked(t);
      }
      case READY -> releaseReady(t);
      case QUARANTINED -> t.lease = null;
    }
  }

  /** Ends a parked query: its I/O is over, so the ticket goes at once. */
  private void releaseParked(Ticket t) {
    t.lease = null;
    t.exists = null;
    releaseTicket(t);
  }

  /** Detaches the request and asks the executor to drop the job if it is still queued. */
  private void detach(Ticket t) {
    StorageLease lease = t.lease;
    t.lease = null;
    if (lease != null) {
      lease.endedByManager();
    }
    ops.add(new StorageOp.Cancel(t.id));
  }

  /** Ends a wait that leaves nothing to hold (every reason but a completed read). */
  private void wake(StorageLease lease, Wakeup.Reason reason) {
    lease.endedByManager();
    wakeups.add(new Wakeup(lease.requestId(), reason, null));
  }

  // ================================================================ ledger

  private Ticket newTicket(StorageKind kind, List<CacheKey> keys, int[] blocks, boolean backup) {
    Ticket t = new Ticket(nextOperationId++, kind, List.copyOf(keys), blocks, backup, generation);
    tickets.put(t.id, t);
    inFlight++;
    opUsed++;
    hostUsed += blocks.length;
    if (backup) {
      backupOpUsed++;
      backupHostUsed += blocks.length;
    }
    return t;
  }

  private void releaseRef(Ticket t, int i) {
    int b = t.hostBlocks[i];
    if (b != 0) {
      host.unref(b);
      t.hostBlocks[i] = 0;
      hostUsed--;
      if (t.backup) {
        backupHostUsed--;
      }
    }
  }

  private void releaseReady(Ticket t) {
    for (int i = 0; i < t.hostBlocks.length; i++) {
      releaseRef(t, i);
    }
    t.lease = null;
    releaseTicket(t);
  }

  private void releaseTicket(Ticket t) {
    if (t.heldRefs() != 0 || t.heldDeviceRefs() != 0) {
      throw new IllegalStateException(
          "ticket " + t.id + " released with Host or Device references held");
    }
    if (tickets.remove(t.id) != null) {
      count(t.phase, -1);
      opUsed--;
      if (t.backup) {
        backupOpUsed--;
      }
    }
  }

  /**
   * The one transition of a ticket's phase: an INFLIGHT ticket becomes PARKED, READY or QUARANTINED
   * once its fact arrives; nothing else moves (a ticket leaves by {@link #releaseTicket}). Keeps
   * the phase gauges.
   */
  private void transition(Ticket t, Phase to) {
    if (t.phase != Phase.INFLIGHT || to == Phase.INFLIGHT) {
      throw new IllegalStateException(
          "ticket " + t.id + " (" + t.kind + ") cannot go from " + t.phase + " to " + to);
    }
    count(t.phase, -1);
    count(to, 1);
    t.phase = to;
  }

  private void count(Phase phase, int delta) {
    switch (phase) {
      case INFLIGHT -> inFlight += delta;
      case PARKED -> parked += delta;
      case READY -> ready += delta;
      case QUARANTINED -> {}
    }
  }

  /**
   * Quarantines an unretired ticket and, the first time, stops new L3 work for good: backup
   * candidates are dropped ({@code disabled}) and {@link #offerBackup} drops every later offer; no
   * query, GET or PUT is issued again.
   */
  private void quarantine(Ticket t) {
    transition(t, Phase.QUARANTINED);
    if (!quarantined) {
      quarantined = true;
      dropQueued(StorageCounters.DropReason.DISABLED);
    }
  }

  private void rememberNegative(CacheKey k) {
    counters.negativeFacts++;
    if (config.negativeMetadataCapacity() == 0 || !negative.add(k)) {
      return;
    }
    negativeFifo.addLast(k);
    if (negativeFifo.size() > config.negativeMetadataCapacity()) {
      negative.remove(negativeFifo.pollFirst());
    }
  }

  private static int[] below(int[] cands, int boundary) {
    int n = 0;
    while (n < cands.length && cands[n] < boundary) {
      n++;
    }
    return Arrays.copyOf(cands, n);
  }

  // ================================================================ observation

  public StorageCounters counters() {
    return counters;
  }

  /** The cost model (its figures, break-even and settings: observation and the engine's input). */
  public CostModel costModel() {
    return costModel;
  }

  /**
   * New agreed cost figures: applied at the round's head on every rank alike, so every scheduler of
   * a replica decides the same preparations with them.
   */
  public void onCostFigures(io.tokenspeed.core.storage.CostFigures figures) {
    costModel.onFigures(figures);
    abandonLosingRestores();
  }

  /**
   * Ends the wait of each request whose GET, under the figures just agreed, is expected to take
   * longer than the recomputation it saves (a store that reads slower than when the restore was
   * chosen): its request goes to ordinary admission, as at a soft timeout, and the GET runs on
   * detached. A GET is expected to take its restore time ({@link CostModel#restoreNs}) from the
   * round that issued its query; what is left of that, against {@code prefill(floor, n) -
   * prefill(boundary, n)}, raised by the margin, so that a restore the model chose only narrowly is
   * not abandoned by the noise of the next figures. Only when the model decides; every rank applies
   * the same figures in the same round, so every rank abandons alike.
   */
  private void abandonLosingRestores() {
    if (!costModel.decides() || inFlight == 0) {
      return;
    }
    double margin = 1 + config.costModelMarginPercent() / 100.0;
    for (Ticket t : new ArrayList<>(tickets.values())) {
      if (t.kind != StorageKind.GET
          || t.backup
          || t.phase != Phase.INFLIGHT
          || t.prompt == null
          || t.lease == null
          || !t.lease.live()) {
        continue;
      }
      if (loses(t.prompt, t.floor, t.boundary, t.issuedNs, margin)) {
        counters.restoresAbandoned++;
        StorageLease lease = t.lease;
        detach(t);
        wake(lease, Wakeup.Reason.SLOWER_THAN_COMPUTE);
      }
    }
  }

  /**
   * Whether a restore of {@code prompt} from {@code floor} to {@code boundary}, issued at {@code
   * issuedNs}, is now expected to need longer than the recomputation it saves, raised by {@code
   * margin} (see {@link #abandonLosingRestores}).
   */
  private boolean loses(PromptKeys prompt, int floor, int boundary, long issuedNs, double margin) {
    int n = prompt.numTokens();
    double saved = costModel.prefillNs(floor, n) - costModel.prefillNs(boundary, n);
    double left =
        costModel.restoreNs(costModel.ownerBytes(floor, boundary)) - Math.max(0, nowNs - issuedNs);
    return left > saved * margin;
  }

  /** The scheduler's token budget, the size of a prefill's chunks (the cost model's prefill). */
  void useTokenBudget(int tokens) {
    costModel.tokenBudget(tokens);
  }

  /**
   * The fence of a weight update or namespace deletion, set and lifted by the scheduler's owner.
   * Setting it rejects every outstanding storage operation ({@link #rejectAll}); while it stands, a
   * new request bypasses L3 ({@link Bypass#FENCED}: ordinary admission serves it), no GET or PUT is
   * issued and offered backups are dropped as {@code cleanup}. Operations already inside the store
   * go on until they retire ({@link #inFlightOperations}).
   */
  public void fence(boolean on) {
    if (on && !fenced) {
      fenced = true;
      rejectAll();
    } else if (!on) {
      fenced = false;
    }
  }

  /** True while the pressure gate is closed (a mirrored gauge). */
  public boolean gateClosed() {
    return gateClosed;
  }

  /** True once an unproven retirement stopped new L3 work until restart. */
  public boolean quarantined() {
    return quarantined;
  }

  /** Operation credits in use. */
  public int operationsInUse() {
    return opUsed;
  }

  /**
   * Host credits in use: Host block references tickets hold, each one potentially pinned parent.
   */
  public int hostCreditsInUse() {
    return hostUsed;
  }

  /** The contract it runs under, its Host credits fitted to the Host tier. */
  public StorageConfig config() {
    return config;
  }

  /** Host parents no credit reaches, kept for retraction images. */
  public int retractionReserveParents() {
    return config.retractionReserveParents(host.pool().numParents());
  }

  /** Ready holds alive (a gauge). */
  public int readyHolds() {
    return ready;
  }

  /** Host references held by quarantined tickets (a gauge). */
  public int quarantinedRefs() {
    int n = 0;
    for (Ticket t : tickets.values()) {
      if (t.phase == Phase.QUARANTINED) {
        n += t.heldRefs();
      }
    }
    return n;
  }

  /**
   * Backup candidates that a permitted round would dispatch now (credits and the pacer's window
   * allowing). While the store's refusal holds backups back they are not counted: they are no work
   * until {@link #nextBackupRetryNs}. 0 for good once quarantined.
   */
  public int queuedCandidates() {
    return pacer.held() ? 0 : candidates.size();
  }

  /**
   * Backup candidates held back after the store refused a PUT, waiting for the probe at {@link
   * #nextBackupRetryNs}, while a retry is expected to succeed: pending work (a gauge). Once the
   * store is taken to refuse persistently they are {@link #heldCandidates} instead.
   */
  public int deferredCandidates() {
    return pacer.held() && !pacer.persistent() ? candidates.size() : 0;
  }

  /**
   * Backup candidates held back while the store refuses persistently ({@link
   * StorageConfig#DEFAULT_MAX_BACKUP_ATTEMPTS} refusals in a row): no pending work, so an idle
   * engine stays idle and close() does not wait for them; probes go on at the capped backoff and a
   * probe the store takes sends them (a gauge).
   */
  public int heldCandidates() {
    return pacer.held() && pacer.persistent() ? candidates.size() : 0;
  }

  /**
   * The current backup hold's length, in nanoseconds: 0 while the store's latest answers were
   * successes, else the backoff after its consecutive refusals (a gauge).
   */
  public long backupBackoffNs() {
    return pacer.backoffNs();
  }

  /**
   * The agreed tick from which held-back backups are probed ({@link #onTick} at or after it ends
   * the hold), or {@link Long#MAX_VALUE} when no candidate is held back. A refusal learned in this
   * round starts its hold at the next tick; until that tick is applied this returns the current
   * tick: one more round is due. With a one-round-late exchange, the tick reaches this value one
   * round after the clock does.
   */
  public long nextBackupRetryNs() {
    return candidates.isEmpty() ? Long.MAX_VALUE : pacer.holdEndNs(nowNs);
  }

  /**
   * Storage operations whose I/O has not retired: queries, reads and backups submitted to the
   * executor whose agreed fact has not arrived, whether a request still waits on them or not — what
   * a weight update waits for after rejecting outstanding work. A parked query (its fact arrived;
   * its GET waits for a permitted round) and a Ready hold hold no executor work and are not
   * counted. Quarantined tickets are not counted either: their retirement is never proven, so
   * nothing may wait for it (see {@link #quarantined}). O(1).
   */
  public int inFlightOperations() {
    return inFlight;
  }

  /** Keys with refusals remembered: candidates or in a PUT after a refusal (tests). */
  int trackedRefusals() {
    return refusals.size();
  }

  /** Keys in pending PUTs of the current generation (tests). */
  int pendingPutKeys() {
    return pendingPutKeys.size();
  }

  /** The generation: how many full clears this manager has seen. */
  public long generation() {
    return generation;
  }

  /** True while {@code requestId} holds a live lease on any ticket (tests and observability). */
  boolean holdsLease(long requestId) {
    for (Ticket t : tickets.values()) {
      if (t.lease != null && t.lease.live() && t.lease.requestId() == requestId) {
        return true;
      }
    }
    return false;
  }

  /** True when {@code key} is in the negative metadata. */
  public boolean knownMissing(CacheKey key) {
    return negative.contains(key);
  }

  /** The next operation id that will be issued. */
  public long nextOperationId() {
    return nextOperationId;
  }

  /**
   * Every reference tickets hold, for the cache's invariant checker: Host destinations and sources,
   * and the early Device destinations of GETs in flight.
   */
  public List<HeldBlock> heldBlocks() {
    List<HeldBlock> out = new ArrayList<>();
    for (Ticket t : tickets.values()) {
      for (int b : t.hostBlocks) {
        if (b != 0) {
          out.add(new HeldBlock(Tier.HOST, b));
        }
      }
      if (t.deviceBlocks != null) {
        for (int b : t.deviceBlocks) {
          if (b != 0) {
            out.add(new HeldBlock(Tier.DEVICE, b));
          }
        }
      }
    }
    return out;
  }

  /** Checks the ledger: credits conserved, caps respected, leases consistent. */
  public void checkInvariants() {
    int ops = 0;
    int hostRefs = 0;
    int backupOps = 0;
    int backupRefs = 0;
    for (Ticket t : tickets.values()) {
      ops++;
      hostRefs += t.heldRefs();
      if (t.backup) {
        backupOps++;
        backupRefs += t.heldRefs();
      }
      if (t.lease != null && t.lease.operationId() != t.id) {
        throw new AssertionError("ticket " + t.id + " holds the lease of " + t.lease);
      }
      if (t.phase == Phase.READY && t.heldRefs() == 0) {
        throw new AssertionError("Ready ticket " + t.id + " holds nothing");
      }
      if (t.phase != Phase.INFLIGHT && t.heldDeviceRefs() != 0) {
        throw new AssertionError(
            "ticket " + t.id + " (" + t.phase + ") still holds early Device destinations");
      }
    }
    check(ops == opUsed, "operation credits " + opUsed + " but " + ops + " tickets");
    check(hostRefs == hostUsed, "Host credits " + hostUsed + " but " + hostRefs + " references");
    check(backupOps == backupOpUsed, "backup operations " + backupOpUsed + " vs " + backupOps);
    check(
        backupRefs == backupHostUsed,
        "backup Host credits " + backupHostUsed + " vs " + backupRefs);
    check(opUsed <= config.maxOperations(), "operation credits overdrawn: " + opUsed);
    long early = 0;
    for (Ticket t : tickets.values()) {
      early += t.earlyParents;
      check(
          (t.earlyParents == 0) == (t.heldDeviceRefs() == 0),
          "ticket " + t.id + " charged " + t.earlyParents + " early parents for its Device refs");
    }
    check(early == earlyParents, "early parents " + earlyParents + " but tickets hold " + early);
    check(
        earlyParents
            <= (long) cache.device().pool().numParents()
                * StorageConfig.EARLY_H2D_MAX_HELD_PERCENT
                / 100,
        "early destinations hold " + earlyParents + " Device parents: over the limit");
    check(hostUsed <= config.maxHostBlocks(), "Host credits overdrawn: " + hostUsed);
    int parents = host.pool().numParents();
    check(
        config.maxHostBlocks() <= parents - retractionReserveParents(),
        "Host credits " + config.maxHostBlocks() + " reach the retraction reserve of " + parents);
    check(
        pinnedParents() <= hostUsed,
        "tickets pin " + pinnedParents() + " Host parents on " + hostUsed + " credits");
    check(backupOpUsed <= config.backupOperationCredits(), "backups overdrew operations");
    check(backupHostUsed <= config.backupHostCredits(), "backups overdrew Host credits");
    check(candidates.size() == candidateSet.size(), "candidate index out of step");
    for (Phase phase : Phase.values()) {
      long n = tickets.values().stream().filter(t -> t.phase == phase).count();
      int gauge =
          switch (phase) {
            case INFLIGHT -> inFlight;
            case PARKED -> parked;
            case READY -> ready;
            case QUARANTINED -> (int) n;
          };
      check(n == gauge, phase + " gauge " + gauge + " but " + n + " tickets");
    }
    pacer.checkInvariants();
    for (CacheKey k : refusals.keySet()) {
      check(
          candidateSet.contains(k) || pendingPutKeys.containsKey(k),
          "refusals of " + k + " remembered but it is nowhere: a leak");
      check(
          refusals.get(k) < StorageConfig.DEFAULT_MAX_BACKUP_ATTEMPTS,
          "key " + k + " refused " + refusals.get(k) + " times and still kept");
    }
    if (quarantined || gateClosed) {
      check(candidates.isEmpty(), "candidates kept while writes are off");
    }
    check(candidates.size() <= config.backupCandidateCapacity(), "candidate queue overflowed");
    check(negative.size() <= config.negativeMetadataCapacity(), "negative metadata overflowed");
    for (Ticket t : tickets.values()) {
      if (t.generation != generation) {
        for (int b : t.hostBlocks) {
          check(
              b == 0 || host.keyOf(b) == null,
              "ticket "
                  + t.id
                  + " of generation "
                  + t.generation
                  + " holds Host block "
                  + b
                  + " published as "
                  + (b == 0 ? null : host.keyOf(b))
                  + " in generation "
                  + generation);
        }
      }
    }
  }

  /** Distinct Host parents that ticket references pin. */
  private int pinnedParents() {
    Set<Integer> parents = new HashSet<>();
    for (Ticket t : tickets.values()) {
      for (int b : t.hostBlocks) {
        if (b != 0) {
          parents.add(host.pool().parentOf(b));
        }
      }
    }
    return parents.size();
  }

  private static void check(boolean ok, String message) {
    if (!ok) {
      throw new AssertionError("storage ledger broken: " + message);
    }
  }
}

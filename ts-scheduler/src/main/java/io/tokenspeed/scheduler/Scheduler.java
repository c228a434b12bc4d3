package io.tokenspeed.scheduler;

import io.tokenspeed.cache.Admission;
import io.tokenspeed.cache.BlockCopy;
import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.RetractionImage;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The request scheduler: one instance per rank, single-threaded and deterministic — every rank fed
 * the same agreed {@link RoundInput}s produces the same {@link ExecutionPlan}s.
 *
 * <p>A round: apply the agreed tick, pressure and cancellations, then open the round's storage
 * permission (a parked query may become a GET only now, after the cancellations), then apply the
 * completion facts; resume requests whose L3 wait ended; let each new request consider L3 once
 * (bypass or Prefetching); admit waiting requests through the ordinary matcher; build the forward
 * batch within the token budget; emit the storage commands. A cancelled request starts no storage
 * work: a PD request cancelled while Bootstrapping never considers L3.
 *
 * <p>Admission allocates the whole prompt plus a headroom of decode tokens; prefill is chunked by
 * the per-round token budget; decoding grows the block table row by row. When the Device cannot
 * grow a running request, the most recently admitted other request is retracted: its blocks go
 * back, it waits again (without a fresh L3 preparation) and its headroom doubles, so it is less
 * likely to be retracted again. A request larger than the Device can ever hold is refused at
 * submission.
 *
 * <p>The plan is what the Device runs, so it never names a request that is not running at its end.
 * A retraction inside the batch can hit a request the batch already planned (the victim is the most
 * recently admitted, the batch walks arrival order): its forward item and its admission's pending
 * copies leave the plan with it, and its tokens go back to the budget. Without that, the block the
 * victim freed would be written by two requests of one plan.
 */
public final class Scheduler {

  /** Limits of the base scheduler. */
  public record Config(
      int tokenBudget, int maxRunning, int headroomTokens, int demoteBelowFreeParents) {
    /** Decode tokens allocated at admission before the first growth. */
    public static final int DEFAULT_HEADROOM_TOKENS = 16;

    /** Cached Device blocks move to the Host while fewer Device parents than this are free. */
    public static final int DEFAULT_DEMOTE_BELOW_FREE_PARENTS = 0;

    /** Most demotions planned in one round. */
    public static final int MAX_DEMOTIONS_PER_ROUND = 64;

    public Config {
      if (tokenBudget < 1) {
        throw new IllegalArgumentException("token_budget=" + tokenBudget + " must be >= 1");
      }
      if (maxRunning < 1) {
        throw new IllegalArgumentException("max_running=" + maxRunning + " must be >= 1");
      }
      if (headroomTokens < 1) {
        throw new IllegalArgumentException("headroom_tokens=" + headroomTokens + " must be >= 1");
      }
      if (demoteBelowFreeParents < 0) {
        throw new IllegalArgumentException(
            "demote_below_free_parents=" + demoteBelowFreeParents + " must be >= 0");
      }
    }

    public Config(int tokenBudget, int maxRunning, int headroomTokens) {
      this(tokenBudget, maxRunning, headroomTokens, DEFAULT_DEMOTE_BELOW_FREE_PARENTS);
    }

    public Config(int tokenBudget, int maxRunning) {
      this(tokenBudget, maxRunning, DEFAULT_HEADROOM_TOKENS);
    }
  }

  private static final class Request {
    final long id;
    final PromptKeys prompt;
    final int maxNewTokens;
    final boolean pd;
    final long arrival;

    /**
     * PD decode: its prompt's KV lands from a prefill engine (admitted into Landing); cleared once
     * it landed.
     */
    boolean landing;

    RequestState state;
    boolean cancelAfterBootstrap;
    boolean copiesPending;
    RequestBlocks blocks;
    long admittedSeq;
    int headroomTokens;

    /** The exact image a retracted request resumes from, or null (its Host references). */
    RetractionImage image;

    /** The image an admission is loading (its copies pending), kept if it is retracted again. */
    RetractionImage loading;

    Request(
        long id,
        PromptKeys prompt,
        int maxNewTokens,
        boolean pd,
        long arrival,
        RequestState state) {
      this.id = id;
      this.arrival = arrival;
      this.prompt = prompt;
      this.maxNewTokens = maxNewTokens;
      this.pd = pd;
      this.state = state;
    }
  }

  private final CacheCoordinator cache;
  private final StorageTransferManager storage; // null: storage disabled
  private final Config config;
  private final Map<Long, Request> requests = new LinkedHashMap<>();

  /** Requests that have not considered L3 yet, in arrival order (a round scans only these). */
  private final Map<Long, Request> unprepared = new LinkedHashMap<>();

  /** Requests waiting for admission (Submitted, Retracted), in arrival order. */
  private final java.util.TreeMap<Long, Request> waiting = new java.util.TreeMap<>();

  /** Admitted requests (Prefilling, PrefillDone, Decoding, Landing), in arrival order. */
  private final java.util.TreeMap<Long, Request> running = new java.util.TreeMap<>();

  private long arrivals;

  /** Demotions planned and not yet completed (their references are held here). */
  private final List<ExecutionPlan.Demotion> demoting = new ArrayList<>();

  private final int maxRequestTokens;
  private long round;
  private final Map<io.tokenspeed.core.CacheKey, List<Request>> sentinelIndex =
      new java.util.HashMap<>();
  private boolean sentinelsDirty = true;
  private long seenDevicePublications = -1;
  private long seenHostPublications = -1;
  private long admissions;
  private long retractions;
  private long redundantEvictions;
  private final List<RetractedBlocks> retractedThisRound = new ArrayList<>();

  /** The plan under construction (the batch step): a retraction withdraws its victim from it. */
  private List<ExecutionPlan.ForwardItem> planForward;

  private List<BlockCopy> planCopies;
  private int budgetLeft;
  private long retractionsInBatch;

  /** Demotions planned before the last full clear: their copies publish nothing. */
  private final java.util.Set<ExecutionPlan.Demotion> voidedDemotions = new java.util.HashSet<>();

  public Scheduler(CacheCoordinator cache, StorageTransferManager storage, Config config) {
    this.cache = cache;
    this.storage = storage;
    this.config = config;
    this.maxRequestTokens = singleRequestLimit(cache);
    if (storage != null) {
      storage.useTokenBudget(config.tokenBudget());
    }
  }

  /**
   * The most tokens one request can ever hold: every group's rows for them (each group packing its
   * own blocks into parents) plus the state slots must fit the Device's parents at once.
   */
  static int singleRequestLimit(CacheCoordinator cache) {
    var pool = cache.device().pool();
    int lo = 0;
    int hi = Integer.MAX_VALUE / 2;
    while (lo < hi) {
      int mid = lo + (hi - lo + 1) / 2;
      long parents = 0;
      for (var g : cache.layout().groups()) {
        int rows =
            g.kind() instanceof io.tokenspeed.core.GroupKind.StateCheckpoints ? 2 : g.rowsFor(mid);
        parents += Math.ceilDiv(rows, pool.childrenPerParent(g.groupId()));
      }
      if (parents <= pool.numParents()) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }

  /** The single-request limit in tokens (prompt plus generation). */
  public int maxRequestTokens() {
    return maxRequestTokens;
  }

  /** Retractions since start. */
  public long retractions() {
    return retractions;
  }

  /**
   * The Device blocks each request retracted in the last {@link #round} held, per group and row (0
   * for a hole), as they were before the retraction released them. The blocks may already belong to
   * another request of that round's plan, but nothing has written them yet: a caller that copies
   * them out before it runs the plan's Device copies and forward reads the retracted request's
   * bytes.
   */
  public List<RetractedBlocks> retractedThisRound() {
    return List.copyOf(retractedThisRound);
  }

  /** A retracted request's block table at the moment of its retraction. */
  public record RetractedBlocks(long requestId, int[][] rows) {}

  /**
   * Cached Device blocks freed since start, while the Device was short of free parents, because the
   * Host already held their keys (a demotion without a copy).
   */
  public long redundantEvictions() {
    return redundantEvictions;
  }

  /** Retractions of a request the same round's batch had already planned (tests, observability). */
  public long retractionsInBatch() {
    return retractionsInBatch;
  }

  // ---------------------------------------------------------------- frontend

  /** A new request; PD-prefill requests wait for their bootstrap acknowledgement. */
  public void submit(long id, PromptKeys prompt, int maxNewTokens, boolean pd) {
    Request r =
        newRequest(
            id,
            prompt,
            maxNewTokens,
            pd,
            pd
                ? new RequestState.Bootstrapping(AdmissionResources.FRESH)
                : new RequestState.Submitted(AdmissionResources.FRESH));
    if (storage != null) {
      unprepared.put(id, r);
    }
  }

  /**
   * A PD-decode request: its prompt's KV comes from a prefill engine, which also sampled its first
   * token. It never considers L3 (a remote landing keeps its Device-only contract) and reuses
   * nothing: admission reserves Device blocks for the whole prompt and its decode headroom and puts
   * it in {@link RequestState.Landing}, where it waits, never forwarded and never retracted, until
   * {@link #onLanded}. {@link #landingsAdmitted} names the admissions of the last round.
   */
  public void submitLanding(long id, PromptKeys prompt, int maxNewTokens) {
    Request r =
        newRequest(
            id,
            prompt,
            maxNewTokens,
            false,
            new RequestState.Submitted(new AdmissionResources(true, null)));
    r.landing = true;
  }

  /**
   * A landing request's KV is in its Device blocks (the engine's copies into {@link #blockTables}
   * completed): its prompt's pages are published and it continues as {@link
   * RequestState.PrefillDone}, its next forward step the first token's. False (nothing changes)
   * when the request is not in Landing.
   */
  public boolean onLanded(long id) {
    Request r = requests.get(id);
    if (r == null || !(r.state instanceof RequestState.Landing l)) {
      return false;
    }
    int n = r.prompt.numTokens();
    // the window's rows first: a landing writes only the rows the next token reads, so a window's
    // older rows were never written and must go before the written rows are published
    r.blocks.slideWindows(n);
    if (cache.isCurrent(l.admission())) { // admitted before a full clear: publishes nothing
      r.blocks.publishComputed(r.prompt, n);
    }
    r.landing = false; // landed: a retraction from here on recovers by the matcher, as any request
    transition(r, new RequestState.PrefillDone(l.admission()));
    return true;
  }

  /** The landing requests admitted in the last round, in admission order. */
  public List<Long> landingsAdmitted() {
    return List.copyOf(landingsAdmitted);
  }

  private final List<Long> landingsAdmitted = new ArrayList<>();

  /**
   * Takes back a request that was retracted after it generated tokens, with {@code prompt} its
   * prompt and the tokens it generated so far: it waits for admission in Retracted, resumes from
   * {@code image} when one is given (its Host references pass to the scheduler), and never starts a
   * fresh L3 preparation.
   */
  public void resubmitRetracted(
      long id, PromptKeys prompt, int maxNewTokens, RetractionImage image) {
    Request r =
        newRequest(
            id,
            prompt,
            maxNewTokens,
            false,
            new RequestState.Retracted(new AdmissionResources(true, null)));
    r.image = image;
  }

  /**
   * Attaches the exact image of a request retracted in the last round, its copies complete; its
   * Host references pass to the scheduler, which drops them when the request ends. False (nothing
   * taken) when the request is not waiting in Retracted without an image.
   */
  public boolean attachImage(long id, RetractionImage image) {
    Request r = requests.get(id);
    if (r == null || !(r.state instanceof RequestState.Retracted) || r.image != null) {
      return false;
    }
    r.image = image;
    return true;
  }

  private Request newRequest(
      long id, PromptKeys prompt, int maxNewTokens, boolean pd, RequestState s) {
    if (requests.containsKey(id)) {
      throw new IllegalArgumentException("request id=" + id + " is already known");
    }
    if (maxNewTokens < 1) {
      throw new IllegalArgumentException("max_new_tokens=" + maxNewTokens + " must be >= 1");
    }
    long total = (long) prompt.numTokens() + maxNewTokens;
    if (total > maxRequestTokens) {
      throw new IllegalArgumentException(
          "request id="
              + id
              + " needs "
              + total
              + " tokens (prompt "
              + prompt.numTokens()
              + " + max_new_tokens "
              + maxNewTokens
              + "); the Device holds at most "
              + maxRequestTokens
              + " tokens of one request in every cache group");
    }
    Request r = new Request(id, prompt, maxNewTokens, pd, arrivals++, s);
    r.headroomTokens = config.headroomTokens();
    requests.put(id, r);
    index(r);
    return r;
  }

  /** The PD peer acknowledged: the continuation moves on without ending an L3 wait. */
  public void onBootstrapAck(long id) {
    Request r = requests.get(id);
    if (r == null) {
      return;
    }
    switch (r.state) {
      case RequestState.Bootstrapping b -> {
        if (r.cancelAfterBootstrap) {
          finish(r, "cancelled");
        } else {
          transition(r, new RequestState.Submitted(b.resources()));
        }
      }
      case RequestState.Prefetching p ->
          transition(
              r,
              new RequestState.Prefetching(
                  RequestState.Continuation.SUBMITTED, p.lease(), p.resources()));
      default -> {}
    }
  }

  /** The decode headroom a request is admitted with next (doubles at every retraction). */
  public int headroomTokens(long id) {
    Request r = requests.get(id);
    return r == null ? 0 : r.headroomTokens;
  }

  /** The state of a request (tests and observability). */
  public RequestState state(long id) {
    Request r = requests.get(id);
    return r == null ? null : r.state;
  }

  // ---------------------------------------------------------------- the round

  /** Runs one round on agreed inputs and returns its plan. */
  public ExecutionPlan round(RoundInput in) {
    round++;
    retractedThisRound.clear();
    landingsAdmitted.clear();
    if (storage != null) {
      storage.onTick(in.tickNs());
      storage.onPressure(in.pressure());
    }
    for (long id : in.cancellations()) {
      cancel(id);
    }
    if (storage != null) {
      storage.beginRound(in.storagePermitted()); // after the cancellations: see the class essay
      if (!in.completions().isEmpty()) {
        sentinelsDirty = true; // a query may have become a GET for another boundary
      }
      List<io.tokenspeed.core.storage.AgreedCompletion> facts = new ArrayList<>(in.completions());
      facts.sort(
          Comparator.comparingLong(io.tokenspeed.core.storage.AgreedCompletion::operationId));
      for (io.tokenspeed.core.storage.AgreedCompletion f : facts) {
        storage.onCompletion(f);
      }
      for (Wakeup w : storage.drainWakeups()) {
        resume(w);
      }
      endWaitsCoveredLocally();
    }
    prepareNewRequests(in.storagePermitted());
    List<BlockCopy> copies = new ArrayList<>();
    List<ExecutionPlan.ForwardItem> forward = new ArrayList<>();
    List<ExecutionPlan.Demotion> demotions = new ArrayList<>();
    if (in.forwardPermitted()) {
      admit(copies);
      batch(forward, copies);
      demote(demotions);
    }
    List<StorageOp> ops = storage == null ? List.of() : storage.drainOps(in.storagePermitted());
    return new ExecutionPlan(round, forward, copies, demotions, ops);
  }

  private void prepareNewRequests(boolean permitted) {
    if (storage == null) {
      return;
    }
    for (Request r : new ArrayList<>(unprepared.values())) {
      AdmissionResources res;
      RequestState.Continuation cont;
      switch (r.state) {
        case RequestState.Submitted s -> {
          res = s.resources();
          cont = RequestState.Continuation.SUBMITTED;
        }
        case RequestState.Bootstrapping b -> {
          res = b.resources();
          cont = RequestState.Continuation.BOOTSTRAPPING;
        }
        default -> {
          unprepared.remove(r.id);
          continue;
        }
      }
      if (res.storagePrepared() || r.cancelAfterBootstrap) {
        unprepared.remove(r.id);
        continue;
      }
      StorageTransferManager.Preparation p = storage.prepare(r.id, r.prompt, permitted);
      if (p.bypass() != Bypass.NOT_PERMITTED) {
        unprepared.remove(r.id);
      }
      if (p.waiting()) {
        transition(r, new RequestState.Prefetching(cont, p.lease(), res.prepared()));
      } else if (p.bypass() != Bypass.NOT_PERMITTED) {
        transition(r, withResources(cont, res.prepared()));
      }
    }
  }

  /**
   * Another request's local publication may satisfy a wait before the remote operation completes.
   * Each waiting request is indexed by its sentinel — the last row the first group needs at the
   * boundary it wants — and only a request whose sentinel was just published gets a full probe. A
   * round without new publications costs nothing; one with them costs a lookup per new block. The
   * index is rebuilt only after rounds that changed who waits for what.
   */
  private void endWaitsCoveredLocally() {
    long device = cache.device().publications();
    long host = cache.host().publications();
    if (device == seenDevicePublications && host == seenHostPublications) {
      return;
    }
    List<io.tokenspeed.core.CacheKey> d = cache.device().publishedSince(seenDevicePublications);
    List<io.tokenspeed.core.CacheKey> h = cache.host().publishedSince(seenHostPublications);
    seenDevicePublications = device;
    seenHostPublications = host;
    if (sentinelsDirty) {
      sentinelIndex.clear();
      for (Request r : requests.values()) {
        if (r.state instanceof RequestState.Prefetching p) {
          int wanted = storage.wantedBoundary(p.lease());
          io.tokenspeed.core.CacheKey key = wanted > 0 ? sentinel(r.prompt, wanted) : null;
          if (key != null) {
            sentinelIndex.computeIfAbsent(key, k -> new ArrayList<>(1)).add(r);
          }
        }
      }
      sentinelsDirty = false;
    }
    java.util.Set<Request> candidates = new java.util.LinkedHashSet<>();
    if (d == null || h == null) {
      sentinelIndex.values().forEach(candidates::addAll); // more news than the rings hold
    } else {
      for (List<io.tokenspeed.core.CacheKey> keys : List.of(d, h)) {
        for (io.tokenspeed.core.CacheKey k : keys) {
          List<Request> waiting = sentinelIndex.get(k);
          if (waiting != null) {
            candidates.addAll(waiting);
          }
        }
      }
    }
    for (Request r : candidates) {
      if (r.state instanceof RequestState.Prefetching p) {
        int wanted = storage.wantedBoundary(p.lease());
        if (wanted > 0 && cache.probe(r.prompt, wanted).hostHit() >= wanted) {
          storage.satisfiedLocally(p.lease());
          transition(r, withResources(p.continuation(), p.resources()));
        }
      }
    }
  }

  /** The last row the first group with any needed row needs at {@code boundary}. */
  private io.tokenspeed.core.CacheKey sentinel(PromptKeys prompt, int boundary) {
    for (var g : cache.layout().groups()) {
      int end = g.rowsFor(boundary);
      if (g.firstNeededRow(boundary) < end) {
        return prompt.keyOf(g.groupId(), end - 1, boundary);
      }
    }
    return null;
  }

  private void resume(Wakeup w) {
    Request r = requests.get(w.requestId());
    if (r == null || !(r.state instanceof RequestState.Prefetching p)) {
      if (w.ready() != null) {
        w.ready().close(); // nobody waits for it any more
      }
      return;
    }
    AdmissionResources res = w.ready() != null ? p.resources().withReady(w.ready()) : p.resources();
    transition(r, withResources(p.continuation(), res));
  }

  private static RequestState withResources(
      RequestState.Continuation cont, AdmissionResources res) {
    return cont == RequestState.Continuation.SUBMITTED
        ? new RequestState.Submitted(res)
        : new RequestState.Bootstrapping(res);
  }

  private void admit(List<BlockCopy> copies) {
    for (Request r : new ArrayList<>(waiting.values())) {
      if (running.size() >= config.maxRunning()) {
        return;
      }
      AdmissionResources resources;
      switch (r.state) {
        case RequestState.Submitted s -> resources = s.resources();
        case RequestState.Retracted rt -> resources = rt.resources();
        default -> {
          continue;
        }
      }
      if (storage != null && !resources.storagePrepared()) {
        continue; // considers L3 first (next round when storage is not permitted now)
      }
      int end = r.prompt.numTokens() + Math.min(r.headroomTokens, r.maxNewTokens);
      if (r.landing) {
        Admission a = cache.admitUpTo(r.prompt, 0, end); // every row lands: nothing reused
        if (a == null) {
          return; // the Device is full: first come, first served
        }
        r.blocks = new RequestBlocks(cache.layout(), cache.device(), a);
        r.admittedSeq = ++admissions;
        landingsAdmitted.add(r.id);
        transition(r, new RequestState.Landing(a));
        continue;
      }
      Admission a =
          r.image != null
              ? cache.admitImage(r.image, end) // exact: its bytes, byte for byte
              : cache.admitUpTo(r.prompt, r.prompt.reusableBound(), end);
      if (a == null && r.image == null && running.isEmpty()) {
        a = admitReusingLess(r, end);
      }
      if (a == null) {
        return; // the Device is full: first come, first served
      }
      r.loading = r.image; // its references are the loads' sources now
      r.image = null;
      if (resources.readyHold() != null) {
        resources.readyHold().close(); // admission acquired the Host sources
      }
      copies.addAll(a.copies());
      r.copiesPending = true;
      r.blocks = new RequestBlocks(cache.layout(), cache.device(), a);
      r.admittedSeq = ++admissions;
      transition(r, new RequestState.Prefilling(a, a.hit()));
    }
  }

  /**
   * Admits {@code r} with a shorter reuse than its longest match, down to none, when even that
   * cannot fit with nothing running (nothing will free the Device for it): the reuse itself can be
   * what does not fit. A partial last row is copied into a fresh block while its Device source
   * stays pinned, so a match that ends inside a row needs a block more than recomputing the row:
   * with a Device of the single-request limit the request would wait for ever. Each try drops the
   * match to the page boundary below it; without reuse a request needs only its own rows, which fit
   * once no request runs and the cached blocks are evicted. Null when no shorter reuse fits either
   * (early destinations of GETs in flight hold the room: their retirement frees it).
   */
  private Admission admitReusingLess(Request r, int end) {
    int page = cache.layout().prefixGranularity();
    int cap = cache.probe(r.prompt, r.prompt.reusableBound()).hostHit();
    while (cap > 0) {
      cap = (cap - 1) / page * page;
      Admission a = cache.admitUpTo(r.prompt, cap, end);
      if (a != null) {
        reusedLess++;
        return a;
      }
    }
    return null;
  }

  /**
   * Admissions that reused less than the longest match because it could not fit ({@link
   * #admitReusingLess}).
   */
  private long reusedLess;

  /**
   * Admissions so far that took a shorter reuse than their longest match so as to fit the Device.
   */
  public long admissionsReusingLess() {
    return reusedLess;
  }

  /**
   * Builds the forward batch in arrival order within the token budget. A growth may retract a
   * request planned earlier in this walk; {@link #retract} then withdraws it from the plan (see the
   * class essay), so every item left names a request that is running when the plan is returned.
   */
  private void batch(List<ExecutionPlan.ForwardItem> forward, List<BlockCopy> copies) {
    planForward = forward;
    planCopies = copies;
    budgetLeft = config.tokenBudget();
    try {
      for (Request r : new ArrayList<>(running.values())) {
        if (budgetLeft == 0) {
          return;
        }
        switch (r.state) {
          case RequestState.Decoding d -> {
            if (!grow(r, r.prompt.numTokens() + d.generated() + 1)) {
              continue; // retracted itself: waits again
            }
            forward.add(
                new ExecutionPlan.ForwardItem(r.id, r.prompt.numTokens() + d.generated(), 1, true));
            budgetLeft--;
          }
          case RequestState.PrefillDone pd -> {
            if (!grow(r, r.prompt.numTokens() + 1)) {
              continue;
            }
            forward.add(new ExecutionPlan.ForwardItem(r.id, r.prompt.numTokens(), 1, true));
            budgetLeft--;
          }
          case RequestState.Prefilling p -> {
            int n = Math.min(budgetLeft, r.prompt.numTokens() - p.computed());
            forward.add(new ExecutionPlan.ForwardItem(r.id, p.computed(), n, false));
            budgetLeft -= n;
          }
          default -> {} // retracted earlier in this walk
        }
      }
    } finally {
      planForward = null;
      planCopies = null;
    }
  }

  /**
   * Takes a request about to be retracted out of the plan being built: its forward item (its tokens
   * go back to the budget) and the pending copies of an admission made this round.
   */
  private void withdrawFromPlan(Request r) {
    if (planForward == null) {
      return;
    }
    for (int i = 0; i < planForward.size(); i++) {
      ExecutionPlan.ForwardItem item = planForward.get(i);
      if (item.requestId() == r.id) {
        planForward.remove(i);
        budgetLeft += item.numTokens();
        retractionsInBatch++;
        break;
      }
    }
    if (r.copiesPending) {
      planCopies.removeAll(r.blocks.admission.copies());
    }
  }

  /**
   * While the Device is short of free parents, copies its oldest cached blocks to the Host. The
   * Device source is pinned until the copy completes and freed then. A block whose key the Host
   * already holds needs no copy: it is freed at once, until the Device has its free parents again
   * (left cached, it would stay at the head of the eviction order and keep every younger block from
   * being demoted).
   */
  private void demote(List<ExecutionPlan.Demotion> out) {
    var device = cache.device();
    var host = cache.host();
    if (device.pool().freeParents() >= config.demoteBelowFreeParents()) {
      return;
    }
    for (int b : device.evictionCandidates(Config.MAX_DEMOTIONS_PER_ROUND)) {
      io.tokenspeed.core.CacheKey key = device.keyOf(b);
      if (host.contains(key)) {
        if (device.pool().freeParents() < config.demoteBelowFreeParents()) {
          device.evict(b);
          redundantEvictions++;
        }
        continue;
      }
      int[] needs = new int[cache.layout().numGroups()];
      needs[key.groupId()] = 1;
      int[][] dst = host.allocate(needs);
      if (dst == null) {
        return; // the Host is full of referenced blocks: try again next round
      }
      device.ref(b);
      ExecutionPlan.Demotion d = new ExecutionPlan.Demotion(key, b, dst[key.groupId()][0]);
      demoting.add(d);
      out.add(d);
    }
  }

  /**
   * A demotion's D2H copy completed (on every owner): the Host entry is published, the Device
   * source is freed at once, and the key becomes a backup candidate. Nothing waits for L3.
   */
  private void onDemoted(ExecutionPlan.Demotion d) {
    var device = cache.device();
    var host = cache.host();
    boolean voided = voidedDemotions.remove(d); // planned before a full clear: publishes nothing
    if (!voided) {
      host.noteWrite(d.hostBlock());
    }
    boolean published = !voided && host.publish(d.key(), d.hostBlock());
    host.unref(d.hostBlock()); // cached if published, freed if another copy won
    device.unref(d.deviceBlock());
    if (device.keyOf(d.deviceBlock()) != null && device.pool().refCount(d.deviceBlock()) == 0) {
      device.evict(d.deviceBlock());
    }
    if (published && storage != null) {
      storage.offerBackup(d.key());
    }
  }

  /**
   * Grows {@code r}'s table to {@code numTokens}, retracting the most recently admitted other
   * running requests while the Device is short. Returns false when {@code r} itself had to go.
   */
  private boolean grow(Request r, int numTokens) {
    while (!r.blocks.ensureCapacity(numTokens)) {
      Request victim = null;
      for (Request o : running.values()) {
        if (o != r
            && o.blocks != null
            && admitted(o.state)
            && (victim == null || o.admittedSeq > victim.admittedSeq)) {
          victim = o;
        }
      }
      retract(victim != null ? victim : r);
      if (victim == null) {
        return false;
      }
    }
    return true;
  }

  /**
   * Gives a running request's blocks back and puts it in the waiting queue again. It never starts a
   * fresh L3 preparation (its storage_prepared bit stays set); its headroom doubles.
   */
  private void retract(Request r) {
    withdrawFromPlan(r);
    if (r.copiesPending && r.loading != null) {
      for (int b : r.loading.blocks()) {
        cache.host().ref(b); // retracted before its loads ran: it keeps its image
      }
      r.image = r.loading;
    }
    int[][] rows = r.blocks.rows();
    int[][] held = new int[rows.length][];
    for (int g = 0; g < rows.length; g++) {
      held[g] = rows[g].clone();
    }
    retractedThisRound.add(new RetractedBlocks(r.id, held));
    release(r);
    retractions++;
    r.headroomTokens = (int) Math.min((long) r.headroomTokens * 2, r.maxNewTokens);
    transition(r, new RequestState.Retracted(new AdmissionResources(true, null)));
  }

  /**
   * The tail of the round: the plan's copies and forward ran. Prefill progresses, decode steps
   * count, finished requests release their blocks.
   */
  public void onForwardDone(ExecutionPlan plan) {
    for (ExecutionPlan.Demotion d : plan.demotions()) {
      if (demoting.remove(d)) {
        onDemoted(d);
      }
    }
    for (Request r : running.values()) {
      if (r.copiesPending && (r.state instanceof RequestState.Prefilling p)) {
        cache.finishCopies(p.admission(), true);
        r.copiesPending = false;
        r.loading = null;
      }
    }
    for (ExecutionPlan.ForwardItem item : plan.forward()) {
      Request r = requests.get(item.requestId());
      if (r == null) {
        continue;
      }
      switch (r.state) {
        case RequestState.Prefilling p -> {
          int computed = p.computed() + item.numTokens();
          if (cache.isCurrent(p.admission())) { // admitted before a full clear: publishes nothing
            r.blocks.publishComputed(r.prompt, computed);
          }
          r.blocks.slideWindows(computed);
          transition(
              r,
              computed == r.prompt.numTokens()
                  ? new RequestState.PrefillDone(p.admission())
                  : new RequestState.Prefilling(p.admission(), computed));
        }
        case RequestState.PrefillDone pd -> step(r, pd.admission(), 1);
        case RequestState.Decoding d -> step(r, d.admission(), d.generated() + 1);
        default -> {}
      }
    }
  }

  private void step(Request r, Admission a, int generated) {
    if (generated >= r.maxNewTokens) {
      finish(r, "length");
    } else {
      transition(r, new RequestState.Decoding(a, generated));
    }
  }

  private static boolean admitted(RequestState s) {
    return s instanceof RequestState.Prefilling
        || s instanceof RequestState.PrefillDone
        || s instanceof RequestState.Decoding;
  }

  // ---------------------------------------------------------------- cancellation

  /**
   * Client cancellation at the loop head. A fused request in Submitted or Prefetching aborts at
   * once (it owns no forward resources). A PD request detaches L3 but keeps its transport fence: it
   * ends when its bootstrap completes.
   */
  private void cancel(long id) {
    Request r = requests.get(id);
    if (r == null) {
      return;
    }
    switch (r.state) {
      case RequestState.Prefetching p -> {
        p.lease().close();
        if (r.pd) {
          r.cancelAfterBootstrap = true;
          transition(r, withResources(p.continuation(), p.resources()));
          if (r.state instanceof RequestState.Submitted) {
            finish(r, "cancelled");
          }
        } else {
          finish(r, "cancelled");
        }
      }
      case RequestState.Bootstrapping b -> {
        r.cancelAfterBootstrap = true; // no L3 preparation any more: see prepareNewRequests
        unprepared.remove(r.id);
        if (b.resources().readyHold() != null) {
          b.resources().readyHold().close();
        }
      }
      default -> finish(r, "cancelled");
    }
  }

  private void finish(Request r, String reason) {
    switch (r.state) {
      case RequestState.Submitted s -> closeHold(s.resources());
      case RequestState.Bootstrapping b -> closeHold(b.resources());
      case RequestState.Prefetching p -> {
        p.lease().close();
        closeHold(p.resources());
      }
      case RequestState.Retracted rt -> {
        closeHold(rt.resources());
        dropImage(r);
      }
      case RequestState.Prefilling p -> release(r);
      case RequestState.PrefillDone pd -> release(r);
      case RequestState.Landing l -> release(r);
      case RequestState.Decoding d -> release(r);
      case RequestState.Finished f -> {}
    }
    transition(r, new RequestState.Finished(reason));
    requests.remove(r.id); // finished requests are forgotten at once
    unprepared.remove(r.id);
  }

  /** Drops the Host references of a request's retraction image, if it holds one. */
  private void dropImage(Request r) {
    if (r.image != null) {
      for (int b : r.image.blocks()) {
        cache.host().unref(b);
      }
      r.image = null;
    }
  }

  /** Gives back every block an admitted request holds (abandoning copies still pending). */
  private void release(Request r) {
    if (r.copiesPending) {
      cache.finishCopies(r.blocks.admission, false);
      r.copiesPending = false;
    }
    r.loading = null;
    r.blocks.release();
    r.blocks = null;
  }

  private static void closeHold(AdmissionResources res) {
    if (res.readyHold() != null) {
      res.readyHold().close();
    }
  }

  /** The one transition method: every state change goes through here. */
  private void transition(Request r, RequestState next) {
    if (r.state instanceof RequestState.Finished) {
      throw new IllegalStateException("request " + r.id + " is finished; cannot become " + next);
    }
    if (r.state instanceof RequestState.Prefetching || next instanceof RequestState.Prefetching) {
      sentinelsDirty = true;
    }
    r.state = next;
    index(r);
  }

  /** Keeps the waiting and running indexes in step with the request's state. */
  private void index(Request r) {
    boolean isWaiting =
        r.state instanceof RequestState.Submitted || r.state instanceof RequestState.Retracted;
    if (isWaiting) {
      waiting.put(r.arrival, r);
    } else {
      waiting.remove(r.arrival);
    }
    if (ownsBlocks(r.state)) {
      running.put(r.arrival, r);
    } else {
      running.remove(r.arrival);
    }
  }

  /**
   * The states that own Device blocks: the admitted ones, and Landing (which counts against
   * max_running but is neither forwarded nor a retraction victim).
   */
  private static boolean ownsBlocks(RequestState s) {
    return admitted(s) || s instanceof RequestState.Landing;
  }

  /** Every cache reference admitted requests hold (their block tables and pending copy sources). */
  public List<io.tokenspeed.cache.HeldBlock> heldBlocks() {
    List<io.tokenspeed.cache.HeldBlock> out = new ArrayList<>();
    for (ExecutionPlan.Demotion d : demoting) {
      out.add(new io.tokenspeed.cache.HeldBlock(io.tokenspeed.cache.Tier.DEVICE, d.deviceBlock()));
      out.add(new io.tokenspeed.cache.HeldBlock(io.tokenspeed.cache.Tier.HOST, d.hostBlock()));
    }
    for (Request r : requests.values()) {
      if (r.image != null) {
        for (int b : r.image.blocks()) {
          out.add(new io.tokenspeed.cache.HeldBlock(io.tokenspeed.cache.Tier.HOST, b));
        }
      }
      if (r.blocks == null) {
        continue;
      }
      Admission a = r.blocks.admission;
      for (int[] table : r.blocks.rows()) {
        for (int b : table) {
          if (b != 0) {
            out.add(new io.tokenspeed.cache.HeldBlock(io.tokenspeed.cache.Tier.DEVICE, b));
          }
        }
      }
      if (r.copiesPending) {
        for (BlockCopy c : a.copies()) {
          out.add(new io.tokenspeed.cache.HeldBlock(c.srcTier(), c.srcBlock()));
        }
      }
    }
    return out;
  }

  /**
   * A copy of an admitted request's Device block tables (per group, the block of each row; 0 for a
   * hole), or null when the request is not admitted. The engine hands them to the forward pass.
   */
  public int[][] blockTables(long id) {
    Request r = requests.get(id);
    if (r == null || r.blocks == null) {
      return null;
    }
    int[][] rows = r.blocks.rows();
    int[][] out = new int[rows.length][];
    for (int g = 0; g < rows.length; g++) {
      out[g] = rows[g].clone();
    }
    return out;
  }

  /**
   * How many times an admitted request's Device block tables changed since its admission (rows
   * added as it grows, window rows released); -1 when it is not admitted. For one {@link
   * #admission}, an unchanged count means that {@link #blockTables} would return equal tables: a
   * caller that translates them every round may keep its translation instead.
   */
  public int blockTablesChanges(long id) {
    Request r = requests.get(id);
    return r == null || r.blocks == null ? -1 : r.blocks.changes();
  }

  /**
   * The admission a running request was admitted with (its reused boundary and the Device part of
   * it), or null when it is not admitted.
   */
  public Admission admission(long id) {
    Request r = requests.get(id);
    return r == null || r.blocks == null ? null : r.blocks.admission;
  }

  /**
   * Ends a request whose generation the engine finished (a stop token, its token limit): between
   * rounds, after {@link #onForwardDone}; its blocks go back at once. Unknown ids are ignored.
   */
  public void complete(long id) {
    Request r = requests.get(id);
    if (r != null) {
      finish(r, "stop");
    }
  }

  /** Each admitted request's Device block table, by request id (the invariant checkers). */
  Map<Long, int[][]> deviceTables() {
    Map<Long, int[][]> out = new LinkedHashMap<>();
    for (Request r : running.values()) {
      out.put(r.id, r.blocks.rows());
    }
    return out;
  }

  /**
   * Checks the scheduler's own invariants: exactly the admitted states (Prefilling, PrefillDone,
   * Decoding) and Landing own Device blocks — never a request in Prefetching, Submitted or
   * Bootstrapping — only waiting states own leases, and a landing request never prefills.
   */
  public void checkInvariants() {
    int waitingStates = 0;
    int runningStates = 0;
    for (Request r : requests.values()) {
      boolean isWaiting =
          r.state instanceof RequestState.Submitted || r.state instanceof RequestState.Retracted;
      waitingStates += isWaiting ? 1 : 0;
      runningStates += ownsBlocks(r.state) ? 1 : 0;
      if ((waiting.get(r.arrival) == r) != isWaiting
          || (running.get(r.arrival) == r) != ownsBlocks(r.state)) {
        throw new AssertionError("request " + r.id + " is misfiled for " + r.state);
      }
    }
    if (waiting.size() != waitingStates || running.size() != runningStates) {
      throw new AssertionError(
          "indexes hold " + waiting.size() + " waiting and " + running.size() + " running");
    }
    for (Request r : requests.values()) {
      if (ownsBlocks(r.state) != (r.blocks != null)) {
        throw new AssertionError(
            "request "
                + r.id
                + " in "
                + r.state.getClass().getSimpleName()
                + " owns blocks="
                + (r.blocks != null));
      }
      if (r.landing
          && !(r.state instanceof RequestState.Submitted
              || r.state instanceof RequestState.Landing)) {
        throw new AssertionError("landing request " + r.id + " in " + r.state);
      }
      if (r.state instanceof RequestState.Prefetching p && !p.lease().live()) {
        throw new AssertionError("request " + r.id + " waits on a dead lease " + p.lease());
      }
    }
  }

  /**
   * Newly published Host blocks (a D2H completion agreed by every owner): each becomes a backup
   * candidate. The Host entry never waits for L3.
   */
  public void onHostPublished(List<io.tokenspeed.core.CacheKey> keys) {
    if (storage != null) {
      for (io.tokenspeed.core.CacheKey k : keys) {
        storage.offerBackup(k);
      }
    }
  }

  /**
   * A full cache clear, namespace rotation or weight update: rejects every outstanding storage
   * operation (waits end, Ready holds go, Host blocks still pinned by PUTs leave the index and are
   * freed when they retire) without draining any I/O, voids demotions in flight (their copies
   * publish nothing and offer no backup), then clears the cache ({@link CacheCoordinator#clear}):
   * cached Device and Host blocks are dropped, and every block still held — by a running request, a
   * copy in flight or a storage ticket — is unpublished, so no request admitted from now on can
   * match anything from before. Running requests keep their blocks and go on; what they compute
   * from now on is not published (their admission predates the clear).
   */
  public void clearAll() {
    voidedDemotions.addAll(demoting);
    if (storage != null) {
      storage.rejectAll();
      for (Wakeup w : storage.drainWakeups()) {
        resume(w);
      }
    }
    cache.clear();
  }

  /**
   * Sets or lifts the fence of a weight update or namespace deletion (see {@link
   * StorageTransferManager#fence}): setting it rejects every outstanding storage operation as
   * {@link #clearAll} does (waits end, Ready holds go, queued candidates are dropped) without
   * clearing the local tiers, and new requests bypass L3 until it lifts; the I/O already started
   * stays charged until it retires.
   */
  public void fenceStorage(boolean on) {
    if (storage != null) {
      storage.fence(on);
      for (Wakeup w : storage.drainWakeups()) {
        resume(w);
      }
    }
  }

  /** An L1-only clear: cached Device blocks go; Host-only storage I/O is left alone. */
  public void clearDevice() {
    for (int b : cache.device().evictionCandidates(Integer.MAX_VALUE)) {
      cache.device().evict(b);
    }
  }

  /** Requests known (not finished). */
  public int size() {
    return requests.size();
  }

  /**
   * Admitted requests (Prefilling, PrefillDone, Decoding): those that hold Device blocks. The rest
   * of {@link #size} waits: for admission, for L3 or for a bootstrap. A gauge; O(1).
   */
  public int runningCount() {
    return running.size();
  }
}

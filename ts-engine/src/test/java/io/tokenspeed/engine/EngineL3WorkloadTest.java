package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.CacheInvariants;
import io.tokenspeed.engine.EngineL3Test.SharedStore;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.Scheduler;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A seeded random workload with L3 (issue 21, acceptance): bursts of short requests whose prompts
 * share prefixes of random lengths, on a Device that only just admits a burst (several retractions
 * per round) over a Host of 5 % of it, with L3 over the memory or the file store, a store that
 * refuses PUT and GET rows at random (retired refusals), idle gaps of 0–400 ms between bursts and
 * full clears (always before the last burst, so that its prefixes come back from L3). Every output
 * — token ids and logits, bit for bit — equals the request's alone run with storage off, on the
 * untied model of {@link ContextModels}; invariants hold after every round; after each burst the
 * engine drains its L3 work and is idle within one tick, with no credit, lease, Ready hold, queued
 * candidate or Host reference left (the baseline of a fresh engine); the last burst asks L3 again,
 * and over the seeds some prefix is restored from L3 (one seed alone may restore nothing: a Host of
 * 5 % drops most write-through keys, and refusals can leave no complete boundary).
 *
 * <p>On 66f0a4f seed 1 gives an output that differs from its alone run (several retractions in one
 * round over a full Host), and the other seeds usually restore nothing: the idle gap before the
 * last burst outlasts the 200 ms soft deadline, counted from the last round before the gap.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineL3WorkloadTest {
  private static final int P = 4;
  private static final int BLOCK = 2;
  private static final int BURSTS = 3;

  /** Prompts whose reusable extension is shorter than this do not consult L3. */
  private static final int MIN_EXTENSION = 3 * P;

  /** The loop's tick while L3 work is pending, and the slack a busy 2-core machine needs. */
  private static final long TICK_MS = 5;

  private static final long SLACK_MS = 20;

  private CausalLm model;
  private final Map<String, Run> aloneRuns = new ConcurrentHashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) {
    model = ContextModels.llama(dir);
  }

  private final java.util.concurrent.atomic.LongAdder restoredOverSeeds =
      new java.util.concurrent.atomic.LongAdder();
  private final java.util.concurrent.atomic.LongAdder seedsRun =
      new java.util.concurrent.atomic.LongAdder();

  @AfterAll
  void close() {
    model.close();
    if (seedsRun.sum() >= 4) {
      assertTrue(
          restoredOverSeeds.sum() > 0,
          "no seed of " + seedsRun.sum() + " restored anything from L3 after its full clear");
    }
  }

  static Stream<Arguments> cases() {
    int n = Integer.getInteger("tokenspeed.workloadSeeds", 4);
    return java.util.stream.LongStream.rangeClosed(1, n)
        .mapToObj(seed -> Arguments.of(seed, seed % 2 == 1 ? "memory" : "file"));
  }

  /** Long enough that no wait of this test ends on the clock of a loaded machine. */
  private static final int SOFT_DEADLINE_MS = 30_000;

  private record Job(int[] prompt, int maxTokens) {
    String id() {
      return Arrays.toString(prompt) + "/" + maxTokens;
    }
  }

  /**
   * Refuses each PUT and GET row with probability {@code rate}, as a retired per-row refusal
   * (nothing transferred). The decision is a hash of the seed, the key and how often the key was
   * asked before, so it does not depend on the workers' interleaving.
   */
  static final class RandomRefusals extends ForwardingStore {
    private final long seed;
    private final double rate;
    private final Map<String, AtomicInteger> attempts = new ConcurrentHashMap<>();
    final AtomicLong refusedRows = new AtomicLong();

    RandomRefusals(Store inner, long seed, double rate) {
      super(inner);
      this.seed = seed;
      this.rate = rate;
    }

    private boolean refuse(String kind, String key) {
      int n = attempts.computeIfAbsent(kind + key, k -> new AtomicInteger()).getAndIncrement();
      long h =
          new SplittableRandom(seed ^ (kind + key).hashCode() * 0x9E3779B97F4A7C15L).nextLong();
      return new SplittableRandom(h + n).nextDouble() < rate;
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      return filtered("get", keys, destinations, true);
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      return filtered("put", keys, sources, false);
    }

    private StoreResult filtered(
        String kind, List<String> keys, List<MemorySegment> segments, boolean get)
        throws Exception {
      RowResult[] rows = new RowResult[keys.size()];
      List<String> passKeys = new ArrayList<>();
      List<MemorySegment> passSegments = new ArrayList<>();
      List<Integer> at = new ArrayList<>();
      for (int i = 0; i < keys.size(); i++) {
        if (refuse(kind, keys.get(i))) {
          rows[i] = new RowResult.Rejected(RowResult.Rejected.NO_SPACE);
          refusedRows.incrementAndGet();
        } else {
          passKeys.add(keys.get(i));
          passSegments.add(segments.get(i));
          at.add(i);
        }
      }
      if (!passKeys.isEmpty()) {
        StoreResult inner =
            get ? super.get(passKeys, passSegments) : super.put(passKeys, passSegments);
        if (!inner.retired()) {
          return inner; // not this wrapper's concern
        }
        for (int j = 0; j < at.size(); j++) {
          rows[at.get(j)] = inner.rows().get(j);
        }
      }
      return StoreResult.of(Arrays.asList(rows));
    }
  }

  /**
   * {@link Checked}, plus the most retractions of one round and, on request, a check (on the loop
   * thread) that everything the storage transfer manager and the scheduler hold is back to a fresh
   * engine's baseline.
   */
  static final class Observer extends Checked {
    final AtomicInteger mostRetractionsInOneRound = new AtomicInteger();
    final AtomicInteger roundsWithSeveralRetractions = new AtomicInteger();
    volatile CompletableFuture<List<String>> baseline;

    @Override
    public void afterRound(EngineView e) {
      super.afterRound(e);
      int n = e.scheduler().retractedThisRound().size();
      mostRetractionsInOneRound.accumulateAndGet(n, Math::max);
      if (n > 1) {
        roundsWithSeveralRetractions.incrementAndGet();
      }
      CompletableFuture<List<String>> b = baseline;
      if (b != null && e.activeCount() == 0) {
        baseline = null;
        b.complete(offBaseline(e));
      }
    }

    private static List<String> offBaseline(EngineView e) {
      List<String> off = new ArrayList<>();
      StorageTransferManager stm = e.storageTransferManager();
      Scheduler s = e.scheduler();
      if (!s.heldBlocks().isEmpty()) {
        off.add("scheduler holds " + s.heldBlocks().size() + " blocks");
      }
      if (stm.operationsInUse() != 0) {
        off.add("operation credits in use: " + stm.operationsInUse());
      }
      if (stm.hostCreditsInUse() != 0) {
        off.add("Host credits in use: " + stm.hostCreditsInUse());
      }
      if (stm.readyHolds() != 0) {
        off.add("Ready holds: " + stm.readyHolds());
      }
      if (stm.queuedCandidates() != 0) {
        off.add("queued backup candidates: " + stm.queuedCandidates());
      }
      if (!stm.heldBlocks().isEmpty()) {
        off.add("Host references held by tickets: " + stm.heldBlocks().size());
      }
      if (stm.quarantined()) {
        off.add("quarantined (every refusal was retired)");
      }
      try {
        CacheInvariants.check(e.cache(), List.of()); // no reference left on either tier
      } catch (AssertionError a) {
        off.add("a reference is left: " + a.getMessage());
      }
      return off;
    }
  }

  /** The fewest Device parents that hold every job's prompt plus its admission headroom at once. */
  private int parentsAdmittingAll(List<Job> jobs) {
    var layout = model.cacheLayout(P, BLOCK);
    var pool = new CacheCoordinator(layout, 2, 1, 16).device().pool();
    int parents = 0;
    for (var g : layout.groups()) {
      long rows = 0;
      for (Job j : jobs) {
        int headroom = Math.min(Scheduler.Config.DEFAULT_HEADROOM_TOKENS, j.maxTokens());
        rows += g.rowsFor(j.prompt().length + headroom);
      }
      parents += (int) Math.ceilDiv(rows, pool.childrenPerParent(g.groupId()));
    }
    return Math.max(2, parents);
  }

  private Run aloneRun(Job j) throws Exception {
    Run cached = aloneRuns.get(j.id());
    if (cached != null) {
      return cached;
    }
    Checked rec = new Checked();
    Run r;
    try (Engine e =
        Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(rec).conclude())) {
      r = rec.await(e.submit(j.prompt(), SamplingParams.greedy(j.maxTokens())));
    }
    aloneRuns.put(j.id(), r);
    return r;
  }

  @ParameterizedTest(name = "seed={0} {1} store")
  @MethodSource("cases")
  void shouldGiveAloneOutputsAndReturnToBaselineUnderARandomL3Workload(
      long seed, String storeKind, @TempDir Path dir) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    int vocab = model.vocabSize();
    List<int[]> roots = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      roots.add(rnd.ints(12 + rnd.nextInt(9), 0, vocab).toArray());
    }
    List<List<Job>> bursts = new ArrayList<>();
    for (int b = 0; b < BURSTS; b++) {
      List<Job> burst = new ArrayList<>();
      int n = b == 0 ? 28 + rnd.nextInt(5) : 12 + rnd.nextInt(13);
      for (int i = 0; i < n; i++) {
        int[] root = rnd.nextInt(4) == 0 ? new int[0] : roots.get(rnd.nextInt(roots.size()));
        // the first burst's prompts are shorter than the L3 minimum extension: the first round
        // admits them all together, so they outgrow the Device together (several retractions in
        // one round); later prompts extend the roots far enough to consult L3
        int keep =
            root.length == 0 ? 0 : rnd.nextInt((b == 0 ? MIN_EXTENSION - P : root.length) + 1);
        int[] tail = rnd.ints(1 + rnd.nextInt(b == 0 ? P - 1 : 6), 0, vocab).toArray();
        int[] prompt = Arrays.copyOf(root, keep + tail.length);
        System.arraycopy(tail, 0, prompt, keep, tail.length);
        burst.add(new Job(prompt, 24 + rnd.nextInt(17))); // past the 16-token headroom
      }
      bursts.add(burst);
    }
    int parents = parentsAdmittingAll(bursts.get(0));
    int[] budgets = {256, 4096};
    int maxRunning = bursts.stream().mapToInt(List::size).max().orElseThrow();
    EngineConfig config =
        new EngineConfig(
            P, BLOCK, parents, 0.05, budgets[rnd.nextInt(budgets.length)], maxRunning, 0, 2, 256);
    Store base =
        storeKind.equals("memory")
            ? new SharedStore()
            : new FileStore(FileStoreSettings.of(dir).withFsync(false));
    RandomRefusals store = new RandomRefusals(base, seed, 0.2);
    L3Settings l3 =
        EngineL3Test.l3(
            store,
            StorageConfig.defaults()
                .withMinExtensionTokens(MIN_EXTENSION)
                // waits end on their facts, not on a loaded machine's clock: the deadline after an
                // idle gap has its own test (EngineL3IdleTest)
                .withSoftDeadlineMs(SOFT_DEADLINE_MS)
                // the fixed rules under test: a tiny model computes a short prefix faster than
                // the executor answers, and the cost model would rightly skip L3
                .withCostModel(false));

    Observer obs = new Observer();
    List<String> problems = new ArrayList<>();
    long restoredTokens = 0;
    long retractions;
    String counters;
    long queriesBefore = 0;
    long queriesAfterClear;
    try (Engine e =
        Engine.start(EngineSettings.of(model, config).observer(obs).l3(l3).paused().conclude())) {
      for (int b = 0; b < BURSTS; b++) {
        List<Job> burst = bursts.get(b);
        List<RequestHandle> handles = new ArrayList<>();
        for (Job j : burst) {
          handles.add(e.submit(j.prompt(), SamplingParams.greedy(j.maxTokens())));
        }
        if (b == 0) {
          e.resume(); // the first round takes the whole first burst
        }
        for (int i = 0; i < burst.size(); i++) {
          Run got = obs.await(handles.get(i));
          restoredTokens += got.result().metrics().reusedStorageTokens();
          try {
            EngineTest.assertSame(aloneRun(burst.get(i)), got, "burst " + b + " request " + i);
          } catch (AssertionError a) {
            problems.add(a.getMessage());
          }
        }
        problems.addAll(settle(e, obs, "burst " + b));
        long gapMs = rnd.nextInt(401);
        boolean clear = b == BURSTS - 2 || rnd.nextInt(3) == 0; // the last burst reads L3
        if (clear) {
          e.clearCache().get(10, TimeUnit.SECONDS);
        }
        if (b == BURSTS - 2) {
          queriesBefore = e.storageTransferManager().counters().queriesIssued(); // after the clear
        }
        Thread.sleep(gapMs);
      }
      retractions = e.scheduler().retractions();
      counters = e.storageTransferManager().counters().toString();
      queriesAfterClear = e.storageTransferManager().counters().queriesIssued() - queriesBefore;
    }
    assertTrue(obs.broken.isEmpty(), () -> "seed=" + seed + " " + obs.broken);
    long restored = restoredTokens;
    assertTrue(
        problems.isEmpty(),
        () ->
            "seed="
                + seed
                + " "
                + storeKind
                + " (Device "
                + parents
                + " parents, "
                + retractions
                + " retractions, at most "
                + obs.mostRetractionsInOneRound.get()
                + " in one round, "
                + store.refusedRows.get()
                + " rows refused, "
                + restored
                + " tokens restored from L3): "
                + problems);
    assertTrue(
        obs.roundsWithSeveralRetractions.get() > 0,
        "seed=" + seed + ": no round retracted several requests (" + retractions + " in all)");
    assertTrue(
        queriesAfterClear > 0,
        "seed=" + seed + ": the last burst, after a full clear, never asked L3 (" + counters + ")");
    restoredOverSeeds.add(restored);
    seedsRun.increment();
  }

  /**
   * After a burst: the engine drains its L3 work (within 5 s), is then idle within one tick (no
   * round in the next tick plus slack), and is back at the baseline. Returns what is not.
   */
  private static List<String> settle(Engine e, Observer obs, String when) throws Exception {
    List<String> out = new ArrayList<>();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
    boolean busy;
    while ((busy = e.storageBusyNow()) && System.nanoTime() < deadline) {
      Thread.sleep(2);
    }
    if (busy) {
      out.add(when + ": L3 work still pending 5 s after the burst");
      return out;
    }
    long before = obs.rounds.get();
    Thread.sleep(TICK_MS + SLACK_MS);
    long rounds = obs.rounds.get() - before;
    if (rounds > 1) {
      out.add(
          when + ": " + rounds + " rounds in the " + (TICK_MS + SLACK_MS) + " ms after it drained");
    }
    CompletableFuture<List<String>> b = new CompletableFuture<>();
    obs.baseline = b;
    e.cancel(Long.MAX_VALUE); // no such request: the idle loop runs one round, which checks
    for (String s : b.get(10, TimeUnit.SECONDS)) {
      out.add(when + ": " + s);
    }
    return out;
  }
}

package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.TierCache;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.ObjectKey;
import io.tokenspeed.core.PrefixHasher;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.kvevents.KvEvent;
import io.tokenspeed.engine.kvevents.KvMedium;
import io.tokenspeed.engine.kvevents.KvPage;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The engine's KV block events (docs/kv-events.md) against its tiers, under seeded workloads:
 * bursts of requests sharing prefixes on a Device small enough to evict and demote, a Host small
 * enough to evict, L3 over an in-memory store, Device-only clears and full clears between bursts.
 *
 * <p>After every round (on the loop thread, right after the round's batch went to the sink) the
 * events so far, replayed, name only pages each tier holds; whenever the engine is idle they name
 * exactly the pages each tier holds (a page: a full page of a prompt or of a prompt and its output,
 * held when its sentinel row is published), and, for L3, exactly the pages whose sentinel object a
 * PUT stored since the last full clear. Every {@code BlockStored} is a chain whose first parent was
 * stored before, whose hashes are the first 8 bytes of the SHA-256 page hashes its tokens and
 * parents give; every {@code BlockRemoved} removes a page its tier held.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineKvEventsTest {
  private static final int P = 4;
  private static final int BG = 2;

  private final Map<String, CausalLm> models = new ConcurrentHashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) throws Exception {
    models.put("llama", ContextModels.llama(dir));
    models.put("gemma3", ContextModels.gemma3(dir));
    models.put("jamba", CausalLm.load(io.tokenspeed.model.Fixtures.extract("jamba", dir)));
  }

  @AfterAll
  void close() {
    models.values().forEach(CausalLm::close);
  }

  static Stream<Arguments> cases() {
    return Stream.of(
        Arguments.of(1L, "llama"),
        Arguments.of(2L, "llama"),
        Arguments.of(3L, "gemma3"),
        Arguments.of(4L, "llama"),
        Arguments.of(5L, "jamba"));
  }

  /** The sink: every batch, in order, as the loop handed it over (loop thread). */
  static final class Collected {
    final List<List<KvEvent>> batches = new CopyOnWriteArrayList<>();
  }

  /** A store that remembers the keys it accepted, since the test's last full clear. */
  static final class RecordingStore extends ForwardingStore {
    final Set<String> accepted = ConcurrentHashMap.newKeySet();

    RecordingStore() {
      super(new MemoryStore());
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      StoreResult r = super.put(keys, sources);
      if (r.retired()) {
        for (int i = 0; i < keys.size(); i++) {
          if (r.rows().get(i) instanceof RowResult.Ok) {
            accepted.add(keys.get(i));
          }
        }
      }
      return r;
    }
  }

  /**
   * Replays the batches on the loop thread and checks them against the tiers: after every round,
   * that each medium's replayed pages are held; on request, that they are exactly the pages held.
   */
  static final class Replayer extends Checked {
    final Collected sink;
    final int sentinelGroup;
    final int sentinelOffset;
    final PrefixHasher hasher = new PrefixHasher(P, List.of());
    final Map<KvMedium, Set<Long>> replayed = new EnumMap<>(KvMedium.class);

    /** Full hashes of every page ever stored (for the parents). */
    final Map<Long, ContentHash> everStored = new ConcurrentHashMap<>();

    final List<String> problems = new CopyOnWriteArrayList<>();
    int seen;
    long stores;
    long removals;
    long clears;

    /** L3 pages announced, summed over the checks (some must be). */
    long replayedStorageEver;

    /** The full pages of the workload so far (event hash), filled by the test thread. */
    final Set<Long> fullPages = ConcurrentHashMap.newKeySet();

    volatile CompletableFuture<List<String>> exact;

    Replayer(Collected sink, CacheLayout layout) {
      this.sink = sink;
      int g0 = 0;
      for (CacheGroupSpec g : layout.groups()) {
        if (g.kind() instanceof GroupKind.FullHistory) {
          g0 = g.groupId();
          break;
        }
      }
      this.sentinelGroup = g0;
      this.sentinelOffset = P / layout.group(g0).blockGranularity() - 1;
      for (KvMedium m : KvMedium.values()) {
        replayed.put(m, new HashSet<>());
      }
    }

    @Override
    public void afterRound(EngineView e) {
      super.afterRound(e);
      while (seen < sink.batches.size()) {
        List<KvEvent> batch = sink.batches.get(seen++);
        if (batch.isEmpty()) {
          problems.add("an empty batch");
        }
        for (KvEvent ev : batch) {
          apply(ev);
        }
      }
      for (KvMedium m : List.of(KvMedium.DEVICE, KvMedium.HOST)) {
        Set<Long> held = held(m == KvMedium.DEVICE ? e.cache().device() : e.cache().host());
        Set<Long> extra = new TreeSet<>(replayed.get(m));
        extra.removeAll(held);
        if (!extra.isEmpty()) {
          problems.add("round " + rounds.get() + ": " + m + " announced but not held: " + extra);
        }
      }
      CompletableFuture<List<String>> x = exact;
      if (x != null && e.activeCount() == 0) {
        exact = null;
        List<String> off = new ArrayList<>();
        for (KvMedium m : List.of(KvMedium.DEVICE, KvMedium.HOST)) {
          Set<Long> held = held(m == KvMedium.DEVICE ? e.cache().device() : e.cache().host());
          held.retainAll(fullPages);
          if (!held.equals(replayed.get(m))) {
            Set<Long> missing = new TreeSet<>(held);
            missing.removeAll(replayed.get(m));
            Set<Long> extra = new TreeSet<>(replayed.get(m));
            extra.removeAll(held);
            off.add(m + ": held and not announced " + missing + ", announced not held " + extra);
          }
        }
        x.complete(off);
      }
    }

    /** The event hashes of the pages whose sentinel row {@code tier} publishes. */
    Set<Long> held(TierCache tier) {
      Set<Long> out = new HashSet<>();
      for (int b = 1; b < tier.pool().blockIdLimit(); b++) {
        CacheKey k = tier.keyOf(b);
        if (k != null && k.groupId() == sentinelGroup && k.pageOffset() == sentinelOffset) {
          out.add(k.pageHash().w0());
        }
      }
      return out;
    }

    private void apply(KvEvent ev) {
      switch (ev) {
        case KvEvent.BlockStored s -> {
          stores++;
          ContentHash parent = s.pages().getFirst().parentPageHash();
          if (parent != null && !everStored.containsKey(parent.w0())) {
            problems.add("stored " + s.pages().getFirst() + " before its parent");
          }
          for (KvPage page : s.pages()) {
            if (page.parentPageHash() == null
                ? parent != null
                : !page.parentPageHash().equals(parent)) {
              problems.add("the pages of one BlockStored do not chain: " + s.pages());
            }
            int[] tokens = new int[P];
            for (int i = 0; i < P; i++) {
              tokens[i] = page.token(i);
            }
            ContentHash h = hasher.hashPage(parent, tokens, 0, P);
            if (!h.equals(page.pageHash()) || page.hash() != h.w0()) {
              problems.add("page " + page + ": its tokens and parent hash to " + h.toHex());
            }
            everStored.put(page.hash(), page.pageHash());
            replayed.get(s.medium()).add(page.hash());
            parent = page.pageHash();
          }
        }
        case KvEvent.BlockRemoved r -> {
          removals++;
          if (r.medium() == KvMedium.STORAGE) {
            problems.add("L3 never removes: " + r);
          }
          for (int i = 0; i < r.size(); i++) {
            if (!replayed.get(r.medium()).remove(r.hash(i))) {
              problems.add(r.medium() + " removed " + r.hash(i) + ", which it did not hold");
            }
          }
        }
        case KvEvent.AllBlocksCleared c -> {
          clears++;
          replayed.values().forEach(Set::clear);
        }
      }
    }
  }

  private record Job(int[] prompt, int maxTokens) {}

  @ParameterizedTest(name = "seed={0} {1}")
  @MethodSource("cases")
  void shouldAnnounceExactlyWhatEachTierHoldsUnderASeededWorkload(long seed, String modelName)
      throws Exception {
    CausalLm model = models.get(modelName);
    SplittableRandom rnd = new SplittableRandom(seed);
    int vocab = model.vocabSize();
    List<int[]> roots = new ArrayList<>();
    for (int i = 0; i < 4; i++) {
      roots.add(rnd.ints(16 + rnd.nextInt(17), 0, vocab).toArray());
    }
    EngineConfig config = new EngineConfig(P, BG, 40, 1.0, 64, 6, 6, 2, 256);
    Collected sink = new Collected();
    RecordingStore store = new RecordingStore();
    var l3 =
        EngineL3Test.l3(
            store,
            StorageConfig.defaults()
                .withMinExtensionTokens(2 * P)
                .withSoftDeadlineMs(30_000)
                .withCostModel(false));
    CacheLayout layout = model.cacheLayout(P, BG);
    Replayer obs = new Replayer(sink, layout);
    long clearsAsked = 0;
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, config)
                .observer(obs)
                .l3(l3)
                .kvEvents(batch -> sink.batches.add(batch))
                .conclude())) {
      for (int burst = 0; burst < 5; burst++) {
        List<Job> jobs = new ArrayList<>();
        int n = 4 + rnd.nextInt(6);
        for (int i = 0; i < n; i++) {
          int[] root = roots.get(rnd.nextInt(roots.size()));
          int keep = rnd.nextInt(root.length + 1);
          int[] tail = rnd.ints(1 + rnd.nextInt(2 * P), 0, vocab).toArray();
          int[] prompt = Arrays.copyOf(root, keep + tail.length);
          System.arraycopy(tail, 0, prompt, keep, tail.length);
          jobs.add(new Job(prompt, 2 + rnd.nextInt(12)));
        }
        List<RequestHandle> handles = new ArrayList<>();
        for (Job j : jobs) {
          handles.add(e.submit(j.prompt(), SamplingParams.greedy(j.maxTokens())));
        }
        for (int i = 0; i < jobs.size(); i++) {
          Run run = obs.await(handles.get(i));
          int[] all =
              Arrays.copyOf(
                  jobs.get(i).prompt(), jobs.get(i).prompt().length + run.tokens().length);
          System.arraycopy(run.tokens(), 0, all, jobs.get(i).prompt().length, run.tokens().length);
          PromptKeys keys = PromptKeys.of(layout, all, List.of());
          for (int p = 0; p < keys.numFullPages(); p++) {
            obs.fullPages.add(keys.pageHash(p).w0());
          }
        }
        settle(e);
        assertExact(e, obs, "seed " + seed + " after burst " + burst);
        assertStorage(obs, store, "seed " + seed + " after burst " + burst);
        int action = rnd.nextInt(3);
        if (action == 1 || burst == 2) {
          e.clearDeviceCache().get(10, TimeUnit.SECONDS);
        } else if (action == 2 || burst == 1) {
          e.clearCache().get(10, TimeUnit.SECONDS);
          store.accepted.clear(); // what a PUT stores from now on is announced again
          clearsAsked++;
        }
        assertExact(e, obs, "seed " + seed + " after the clear following burst " + burst);
      }
      assertTrue(obs.broken.isEmpty(), () -> obs.broken.toString());
      assertEquals(List.of(), obs.problems, "seed " + seed);
      assertEquals(clearsAsked, obs.clears, "one AllBlocksCleared per full clear");
      assertTrue(
          obs.stores > 0 && obs.removals > 0, "stores " + obs.stores + " removals " + obs.removals);
      assertTrue(obs.replayedStorageEver > 0, "seed " + seed + ": no page was ever stored in L3");
    }
  }

  /** Waits until the engine's L3 work is done. */
  private static void settle(Engine e) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (e.storageBusyNow() && System.nanoTime() < deadline) {
      Thread.sleep(2);
    }
  }

  /** Asks the idle loop for the exact comparison (one round, which checks). */
  private static void assertExact(Engine e, Replayer obs, String when) throws Exception {
    CompletableFuture<List<String>> f = new CompletableFuture<>();
    obs.exact = f;
    e.cancel(Long.MAX_VALUE); // no such request: the idle loop runs one round
    assertEquals(List.of(), f.get(10, TimeUnit.SECONDS), when);
  }

  /** The pages announced in L3 since the last full clear are those whose sentinel a PUT stored. */
  private static void assertStorage(Replayer obs, RecordingStore store, String when) {
    Set<Long> stored = new TreeSet<>();
    for (String k : store.accepted) {
      CacheKey key = ObjectKey.parse(k).cacheKey();
      if (key.groupId() == obs.sentinelGroup
          && key.pageOffset() == obs.sentinelOffset
          && obs.fullPages.contains(key.pageHash().w0())) {
        stored.add(key.pageHash().w0());
      }
    }
    Set<Long> announced = new TreeSet<>(obs.replayed.get(KvMedium.STORAGE));
    obs.replayedStorageEver += announced.size();
    assertEquals(stored, announced, when + ": L3");
  }

  @Test
  void shouldPublishFromRankZeroAloneOnATensorParallelReplica(@TempDir Path dir) throws Exception {
    Path folder = io.tokenspeed.model.Fixtures.extract("llama", dir);
    List<List<List<KvEvent>>> sinks =
        List.of(new CopyOnWriteArrayList<>(), new CopyOnWriteArrayList<>());
    SplittableRandom rnd = new SplittableRandom(9);
    int[] root = rnd.ints(3 * P, 0, 64).toArray();
    Set<Long> pages = new HashSet<>();
    try (TpReplica replica =
        TpReplica.start(
            folder,
            2,
            r -> EngineTest.small(256),
            null,
            r -> EngineObserver.NONE,
            io.tokenspeed.model.parallel.Shard.KvSplit.HEADS,
            r -> PdOptions.FUSED,
            r -> batch -> sinks.get(r).add(batch))) {
      Engine leader = replica.leader();
      for (int i = 0; i < 3; i++) {
        int[] prompt = Arrays.copyOf(root, root.length + 1 + i);
        prompt[prompt.length - 1] = 60 + i;
        leader.submit(prompt, SamplingParams.greedy(2)).result().get(60, TimeUnit.SECONDS);
        PromptKeys keys = PromptKeys.of(leader.layout(), prompt, List.of());
        for (int p = 0; p < keys.numFullPages(); p++) {
          pages.add(keys.pageHash(p).w0());
        }
      }
      leader.clearCache().get(10, TimeUnit.SECONDS);
      leader.submit(root, SamplingParams.greedy(1)).result().get(60, TimeUnit.SECONDS);
    }
    assertEquals(List.of(), sinks.get(1), "a follower publishes nothing");
    Set<Long> stored = new HashSet<>();
    List<KvEvent> all = new ArrayList<>();
    sinks.get(0).forEach(all::addAll);
    for (KvEvent e : all) {
      if (e instanceof KvEvent.BlockStored s && s.medium() == KvMedium.DEVICE) {
        s.pages().forEach(page -> stored.add(page.hash()));
      }
    }
    assertEquals(pages, stored, "the leader stored every page of the prompts on the Device");
    assertEquals(1, all.stream().filter(e -> e instanceof KvEvent.AllBlocksCleared).count());
    assertTrue(
        all.getLast() instanceof KvEvent.BlockStored,
        "the prefix stored again after the clear: " + all);
  }

  @Test
  void shouldMergeChainsAndSayAllBlocksClearedOnceForAFullClear() {
    // unit-level: the recorder alone over a layout of one full-history group
    CacheLayout layout = models.get("llama").cacheLayout(P, BG);
    List<List<KvEvent>> out = new ArrayList<>();
    KvEventRecorder r = new KvEventRecorder(layout, out::add);
    int g = KvEventRecorder.sentinelGroup(layout);
    int[] tokens = new SplittableRandom(5).ints(3 * P + 1, 0, 50).toArray();
    PromptKeys keys = PromptKeys.of(layout, tokens, List.of());
    r.noteKeys(keys);
    for (int p = 0; p < 3; p++) {
      r.published(
          io.tokenspeed.cache.Tier.DEVICE, new CacheKey(g, keys.pageHash(p), 0)); // no sentinel
      r.published(io.tokenspeed.cache.Tier.DEVICE, new CacheKey(g, keys.pageHash(p), P / BG - 1));
    }
    r.published(io.tokenspeed.cache.Tier.HOST, new CacheKey(g, keys.pageHash(1), P / BG - 1));
    r.removed(io.tokenspeed.cache.Tier.DEVICE, new CacheKey(g, keys.pageHash(0), P / BG - 1));
    r.removed(io.tokenspeed.cache.Tier.DEVICE, new CacheKey(g, keys.pageHash(2), P / BG - 1));
    r.flush();
    r.flush(); // nothing new: no batch
    assertEquals(1, out.size());
    List<KvEvent> batch = out.getFirst();
    assertEquals(3, batch.size(), batch::toString);
    KvEvent.BlockStored device = (KvEvent.BlockStored) batch.get(0);
    assertEquals(KvMedium.DEVICE, device.medium());
    assertEquals(3, device.pages().size(), "one chain of three pages");
    assertEquals(KvMedium.HOST, ((KvEvent.BlockStored) batch.get(1)).medium());
    KvEvent.BlockRemoved removed = (KvEvent.BlockRemoved) batch.get(2);
    assertEquals(2, removed.size());
    assertEquals(keys.pageHash(0).w0(), removed.hash(0));
    r.beginClear();
    r.removed(io.tokenspeed.cache.Tier.DEVICE, new CacheKey(g, keys.pageHash(1), P / BG - 1));
    r.removed(io.tokenspeed.cache.Tier.HOST, new CacheKey(g, keys.pageHash(1), P / BG - 1));
    r.endClear();
    r.flush();
    assertEquals(List.of(KvEvent.AllBlocksCleared.INSTANCE), out.get(1));
    // a page stored again after the clear is announced again, from the remembered tokens
    r.published(io.tokenspeed.cache.Tier.HOST, new CacheKey(g, keys.pageHash(0), P / BG - 1));
    // a tail (the partial page at an exact boundary) is no page
    r.published(
        io.tokenspeed.cache.Tier.HOST, new CacheKey(g, keys.tailHash(3 * P + 1), P / BG - 1));
    r.flush();
    assertEquals(1, out.get(2).size());
    assertEquals(1, r.unresolved());
  }
}

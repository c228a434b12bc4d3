package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.CacheInvariants;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The engine against the Hugging Face fixtures and against itself, bit for bit: the greedy ids
 * transformers produced; then the same prompt cold, on a full Device hit, on a Host hit after its
 * blocks were demoted and loaded back into other Device blocks, batched with other requests, and
 * after retraction — the token ids and the logits every token was drawn from must be identical; the
 * same for a synthetic Jamba-style hybrid with seeded weights and prompts. The cache's and
 * scheduler's invariants are checked after every round.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineTest {
  private static final String[] FIXTURES = {"llama", "qwen2", "gemma3", "mamba", "jamba"};

  /** The synthetic Jamba-style hybrid (seeded weights; prompts are seeded random ids). */
  private static final String SYNTHETIC_HYBRID = "synthetic:jamba-tiny";

  private final Map<String, CausalLm> models = new ConcurrentHashMap<>();
  private final Map<String, Path> folders = new ConcurrentHashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) {
    for (String f : FIXTURES) {
      Path folder = Fixtures.extract(f, dir);
      folders.put(f, folder);
      models.put(f, CausalLm.load(folder));
    }
    Path hybrid =
        SyntheticCheckpoints.materialize(
            SYNTHETIC_HYBRID,
            SyntheticCheckpoints.DEFAULT_SEED,
            DType.F32,
            dir.resolve("synthetic"));
    models.put(SYNTHETIC_HYBRID, CausalLm.load(hybrid));
  }

  @AfterAll
  void close() {
    models.values().forEach(CausalLm::close);
  }

  /** Records every logits row and checks the invariants after every round. */
  static final class Recorder implements EngineObserver {
    final Map<Long, List<float[]>> logits = new ConcurrentHashMap<>();
    final List<Throwable> broken = new CopyOnWriteArrayList<>();
    final Map<Long, int[][]> tables = new ConcurrentHashMap<>(); // each request's last tables
    volatile int deviceCached = -1;
    volatile int hostCached = -1;

    /**
     * Device blocks per group to take and hold once the engine is idle with nothing cached on the
     * Device (so that later admissions must use other slots); {@link #releaseSquat} gives them
     * back. Done on the loop thread, between rounds.
     */
    volatile int[][] squatOn;

    final List<Integer> squatted = new CopyOnWriteArrayList<>();
    volatile boolean squatDone;
    volatile boolean releaseSquat;

    @Override
    public void afterRound(EngineView e) {
      deviceCached = e.cache().device().cachedCount();
      hostCached = e.cache().host().cachedCount();
      if (squatOn != null && !squatDone && deviceCached == 0 && e.activeCount() == 0) {
        squat(e);
      }
      if (releaseSquat && !squatted.isEmpty()) {
        squatted.forEach(b -> e.cache().device().unref(b));
        squatted.clear();
      }
      for (long id : e.activeIds()) {
        int[][] t = e.scheduler().blockTables(id);
        if (t != null) {
          tables.put(id, t);
        }
      }
      try {
        if (e.copyBacklog() != 0) {
          throw new AssertionError("a round ended with " + e.copyBacklog() + " copy batches due");
        }
        e.scheduler().checkInvariants();
        List<io.tokenspeed.cache.HeldBlock> held = new ArrayList<>(e.heldBlocks());
        for (int b : squatted) {
          held.add(new io.tokenspeed.cache.HeldBlock(io.tokenspeed.cache.Tier.DEVICE, b));
        }
        CacheInvariants.check(e.cache(), held);
      } catch (Throwable t) {
        broken.add(t);
      }
    }

    private void squat(EngineView e) {
      var device = e.cache().device();
      int groups = squatOn.length;
      for (int g = 0; g < groups; g++) {
        java.util.Set<Integer> want = new java.util.HashSet<>();
        for (int b : squatOn[g]) {
          if (b != 0) {
            want.add(b);
          }
        }
        List<Integer> others = new ArrayList<>();
        while (!want.isEmpty()) {
          int[] needs = new int[groups];
          needs[g] = 1;
          int[][] got = device.allocate(needs);
          if (got == null) {
            break;
          }
          (want.remove(got[g][0]) ? squatted : others).add(got[g][0]);
        }
        others.forEach(device::unref);
      }
      squatDone = true;
    }

    @Override
    public boolean wantsLogits() {
      return true;
    }

    @Override
    public void onLogits(long requestId, int step, float[] row) {
      logits.computeIfAbsent(requestId, k -> new CopyOnWriteArrayList<>()).add(row.clone());
    }
  }

  /** One finished request: its ids, logits rows and figures. */
  record Run(int[] tokens, List<float[]> logits, GenerationResult result) {}

  static EngineConfig small(int deviceParents) {
    return new EngineConfig(4, 2, deviceParents, 4.0, 64, 8, 2, 2, 64);
  }

  /** Demotes every cached Device block to the Host as soon as it is cached. */
  static EngineConfig alwaysDemote(int deviceParents) {
    return new EngineConfig(4, 2, deviceParents, 4.0, 64, 8, deviceParents, 2, 64);
  }

  /** The fewest Device parents whose single-request limit reaches {@code tokens}. */
  static int parentsFor(CausalLm model, EngineConfig base, int tokens) {
    var layout = model.cacheLayout(base.prefixGranularity(), base.blockGranularity());
    for (int parents = 2; ; parents++) {
      var cache = new io.tokenspeed.cache.CacheCoordinator(layout, parents, 1, 16);
      var s =
          new io.tokenspeed.scheduler.Scheduler(
              cache, null, new io.tokenspeed.scheduler.Scheduler.Config(64, 8));
      if (s.maxRequestTokens() >= tokens) {
        return parents;
      }
    }
  }

  static Run await(RequestHandle h, Recorder rec) throws Exception {
    GenerationResult r = h.result().get(60, TimeUnit.SECONDS);
    assertNull(r.error(), () -> "request " + h.id() + " failed: " + r.error());
    return new Run(r.tokens(), rec.logits.getOrDefault(h.id(), List.of()), r);
  }

  static void assertSame(Run want, Run got, String what) {
    assertArrayEquals(want.tokens(), got.tokens(), what + ": token ids");
    assertEquals(want.logits().size(), got.logits().size(), what + ": logits rows");
    for (int i = 0; i < want.logits().size(); i++) {
      float[] a = want.logits().get(i);
      float[] b = got.logits().get(i);
      for (int v = 0; v < a.length; v++) {
        assertEquals(
            Float.floatToRawIntBits(a[v]),
            Float.floatToRawIntBits(b[v]),
            what + ": step " + i + " logit " + v);
      }
    }
  }

  static Stream<Arguments> fixturePrompts() {
    List<Arguments> out = new ArrayList<>();
    for (String f : FIXTURES) {
      for (int p = 0; p < Fixtures.PROMPTS; p++) {
        out.add(Arguments.of(f, p));
      }
    }
    return out.stream();
  }

  /** The fixtures' prompts and as many of the synthetic hybrid's. */
  static Stream<Arguments> allPrompts() {
    List<Arguments> out = new ArrayList<>(fixturePrompts().toList());
    for (int p = 0; p < Fixtures.PROMPTS; p++) {
      out.add(Arguments.of(SYNTHETIC_HYBRID, p));
    }
    return out.stream();
  }

  /** A fixture's reference prompt; for the synthetic hybrid, seeded ids of 23, 64 or 133 tokens. */
  private int[] prompt(String model, int p) {
    if (model.equals(SYNTHETIC_HYBRID)) {
      int[] lengths = {23, 64, 133};
      return new SplittableRandom(p)
          .ints(lengths[p % lengths.length], 0, models.get(model).vocabSize())
          .toArray();
    }
    return Fixtures.referenceInts(folders.get(model), "ids_" + p);
  }

  @ParameterizedTest(name = "{0} prompt {1}")
  @MethodSource("fixturePrompts")
  void shouldReproduceTransformersGreedyIdsThroughTheEngine(String fixture, int p)
      throws Exception {
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(EngineSettings.of(models.get(fixture), small(256)).observer(rec).conclude())) {
      Run r = await(e.submit(prompt(fixture, p), SamplingParams.greedy(16)), rec);
      assertArrayEquals(
          Fixtures.referenceInts(folders.get(fixture), "greedy_" + p), r.tokens(), "greedy ids");
      assertEquals("length", r.result().finishReason());
      assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    }
  }

  @ParameterizedTest(name = "{0} prompt {1}")
  @MethodSource("allPrompts")
  void shouldGiveIdenticalOutputOnAFullDeviceHit(String fixture, int p) throws Exception {
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(EngineSettings.of(models.get(fixture), small(256)).observer(rec).conclude())) {
      int[] prompt = prompt(fixture, p);
      Run cold = await(e.submit(prompt, SamplingParams.greedy(8)), rec);
      Run hit = await(e.submit(prompt, SamplingParams.greedy(8)), rec);
      assertSame(cold, hit, fixture + " device hit");
      int reusable = (prompt.length - 1) / 4 * 4;
      assertEquals(0, cold.result().metrics().reusedDeviceTokens());
      assertEquals(reusable, hit.result().metrics().reusedDeviceTokens(), "device-reused tokens");
      assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama", "qwen2", "gemma3", "mamba", "jamba", SYNTHETIC_HYBRID})
  void shouldGiveIdenticalOutputOnAHostHitAfterDeviceEviction(String fixture) throws Exception {
    Recorder rec = new Recorder();
    int[] prompt = prompt(fixture, 2); // 133 tokens
    Run cold;
    try (Engine e =
        Engine.start(EngineSettings.of(models.get(fixture), small(256)).observer(rec).conclude())) {
      cold = await(e.submit(prompt, SamplingParams.greedy(8)), rec);
    }
    // every cached Device block is demoted to the Host at once: the second run loads them back
    Recorder rec2 = new Recorder(); // request ids start again in a new engine
    try (SteppedEngine e =
        new SteppedEngine(
            EngineSettings.of(models.get(fixture), alwaysDemote(256)).observer(rec2))) {
      Run first = await(e.serve(prompt, SamplingParams.greedy(8)), rec2);
      int[][] before = rec2.tables.get(first.result().requestId());
      // once every cached Device block is demoted, the first run's Device blocks are taken and
      // held: the Host hit must load into other slots
      rec2.squatOn = before;
      e.runRoundsUntil(() -> rec2.squatDone, "rounds demote every cached Device block, then squat");
      assertTrue(rec2.hostCached > 0, "demoted to the Host");
      java.util.Set<Integer> taken = new java.util.HashSet<>(rec2.squatted);
      for (int[] row : before) {
        for (int b : row) {
          assertTrue(b == 0 || taken.contains(b), "block " + b + " of the first run is held");
        }
      }
      Run again = await(e.serve(prompt, SamplingParams.greedy(8)), rec2);
      assertSame(cold, first, fixture + " demoting engine, cold");
      assertSame(cold, again, fixture + " host hit");
      for (int[] row : rec2.tables.get(again.result().requestId())) {
        for (int b : row) {
          assertTrue(!taken.contains(b), "the Host hit went into an old slot: " + b);
        }
      }
      rec2.releaseSquat = true;
      e.runRoundsUntil(rec2.squatted::isEmpty, "the held blocks go back");
      assertTrue(rec2.squatted.isEmpty(), "the held blocks went back");
      assertEquals(0, again.result().metrics().reusedDeviceTokens(), "nothing left on Device");
      assertEquals(
          (prompt.length - 1) / 4 * 4,
          again.result().metrics().reusedHostTokens(),
          "reused from Host: " + again.result().metrics());
      assertTrue(rec.broken.isEmpty() && rec2.broken.isEmpty(), () -> rec + " " + rec2);
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama", "qwen2", "gemma3", "mamba", "jamba", SYNTHETIC_HYBRID})
  void shouldGiveEachRequestItsAloneOutputWhenBatchedOrRetracted(String fixture) throws Exception {
    CausalLm model = models.get(fixture);
    SplittableRandom rnd = new SplittableRandom(fixture.hashCode());
    List<int[]> prompts = new ArrayList<>();
    for (int i = 0; i < 6; i++) {
      prompts.add(rnd.ints(20 + rnd.nextInt(60), 0, model.vocabSize()).toArray());
    }
    List<Run> alone = new ArrayList<>();
    for (int[] p : prompts) {
      Recorder rec = new Recorder();
      try (Engine e = Engine.start(EngineSettings.of(model, small(256)).observer(rec).conclude())) {
        alone.add(await(e.submit(p, SamplingParams.greedy(40)), rec));
      }
    }
    int single = parentsFor(model, small(2), 130); // every request fits alone
    long retracted = 0;
    // two requests at a time, each growing as it decodes: models with attention layers retract
    // here (a Mamba request never grows: its State group keeps two slots)
    List<io.tokenspeed.core.GroupKind> kinds =
        model.cacheLayout(4, 2).groups().stream()
            .map(io.tokenspeed.core.CacheGroupSpec::kind)
            .toList();
    boolean hasAttention =
        kinds.stream().anyMatch(k -> !(k instanceof io.tokenspeed.core.GroupKind.StateCheckpoints));
    for (int deviceParents : new int[] {512, 2 * single, single}) {
      Recorder r2 = new Recorder();
      try (Engine e =
          Engine.start(
              EngineSettings.of(model, small(deviceParents)).observer(r2).paused().conclude())) {
        List<RequestHandle> hs = new ArrayList<>();
        for (int[] p : prompts) {
          hs.add(e.submit(p, SamplingParams.greedy(40)));
        }
        e.resume(); // the first round sees every request
        long computed = 0;
        long needed = 0;
        for (int i = 0; i < hs.size(); i++) {
          Run got = await(hs.get(i), r2);
          assertSame(
              alone.get(i), got, fixture + " batched, device=" + deviceParents + " request " + i);
          computed += got.result().metrics().computedTokens();
          needed += prompts.get(i).length + got.tokens().length - 1;
        }
        long retractions = e.scheduler().retractions();
        retracted += retractions;
        if (retractions > 0) {
          assertTrue(e.stats().imageBlocks() > 0, "retracted requests saved their images");
        }
        // every retracted request resumed from its exact image (the Host holds four Devices):
        // nothing was computed twice, whatever the model's groups (State included)
        assertEquals(
            needed,
            computed,
            fixture
                + " computed "
                + computed
                + " for "
                + needed
                + " with "
                + retractions
                + " retractions");
        assertTrue(r2.broken.isEmpty(), () -> r2.broken.toString());
      }
    }
    if (hasAttention) {
      assertTrue(retracted > 0, "the small Devices retracted nothing");
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama"})
  void shouldRejectBadInputAndKeepServingTheOthers(String fixture) throws Exception {
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(EngineSettings.of(models.get(fixture), small(64)).observer(rec).conclude())) {
      RequestHandle good = e.submit(prompt(fixture, 1), SamplingParams.greedy(8));
      GenerationResult empty =
          e.submit(new int[0], SamplingParams.greedy(4)).result().get(10, TimeUnit.SECONDS);
      GenerationResult tooLong =
          e.submit(new int[e.maxRequestTokens()], SamplingParams.greedy(4))
              .result()
              .get(10, TimeUnit.SECONDS);
      GenerationResult badToken =
          e.submit(new int[] {1, 2, 1 << 20}, SamplingParams.greedy(4))
              .result()
              .get(10, TimeUnit.SECONDS);
      assertEquals("error", empty.finishReason());
      assertTrue(empty.error().contains("empty"), empty.error());
      assertTrue(
          tooLong.error().contains("single-request limit of " + e.maxRequestTokens()),
          tooLong.error());
      assertTrue(badToken.error().contains("outside the vocabulary"), badToken.error());
      GenerationResult ok = good.result().get(60, TimeUnit.SECONDS);
      assertNull(ok.error());
      assertEquals(8, ok.tokens().length);
      assertNotNull(ok.metrics());
    }
  }
}

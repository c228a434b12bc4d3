package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.CacheInvariants;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
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
 * after retraction — the token ids and the logits every token was drawn from must be identical. The
 * cache's and scheduler's invariants are checked after every round.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineTest {
  private static final String[] FIXTURES = {"llama", "qwen2", "gemma3", "mamba", "jamba"};

  private final Map<String, CausalLm> models = new ConcurrentHashMap<>();
  private final Map<String, Path> folders = new ConcurrentHashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) {
    for (String f : FIXTURES) {
      Path folder = Fixtures.extract(f, dir);
      folders.put(f, folder);
      models.put(f, CausalLm.load(folder));
    }
  }

  @AfterAll
  void close() {
    models.values().forEach(CausalLm::close);
  }

  /** Records every logits row and checks the invariants after every round. */
  static final class Recorder implements EngineObserver {
    final Map<Long, List<float[]>> logits = new ConcurrentHashMap<>();
    final List<Throwable> broken = new CopyOnWriteArrayList<>();
    volatile int deviceCached = -1;
    volatile int hostCached = -1;

    @Override
    public void afterRound(Engine e) {
      deviceCached = e.cache().device().cachedCount();
      hostCached = e.cache().host().cachedCount();
      try {
        e.scheduler().checkInvariants();
        CacheInvariants.check(e.cache(), e.scheduler().heldBlocks());
      } catch (Throwable t) {
        broken.add(t);
      }
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

  private int[] prompt(String fixture, int p) {
    return Fixtures.referenceInts(folders.get(fixture), "ids_" + p);
  }

  @ParameterizedTest(name = "{0} prompt {1}")
  @MethodSource("fixturePrompts")
  void shouldReproduceTransformersGreedyIdsThroughTheEngine(String fixture, int p)
      throws Exception {
    Recorder rec = new Recorder();
    try (Engine e = Engine.start(models.get(fixture), small(256), OptionalInt.empty(), rec)) {
      Run r = await(e.submit(prompt(fixture, p), SamplingParams.greedy(16)), rec);
      assertArrayEquals(
          Fixtures.referenceInts(folders.get(fixture), "greedy_" + p), r.tokens(), "greedy ids");
      assertEquals("length", r.result().finishReason());
      assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    }
  }

  @ParameterizedTest(name = "{0} prompt {1}")
  @MethodSource("fixturePrompts")
  void shouldGiveIdenticalOutputOnAFullDeviceHit(String fixture, int p) throws Exception {
    Recorder rec = new Recorder();
    try (Engine e = Engine.start(models.get(fixture), small(256), OptionalInt.empty(), rec)) {
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
  @ValueSource(strings = {"llama", "qwen2", "gemma3", "mamba", "jamba"})
  void shouldGiveIdenticalOutputOnAHostHitAfterDeviceEviction(String fixture) throws Exception {
    Recorder rec = new Recorder();
    int[] prompt = prompt(fixture, 2); // 133 tokens
    Run cold;
    try (Engine e = Engine.start(models.get(fixture), small(256), OptionalInt.empty(), rec)) {
      cold = await(e.submit(prompt, SamplingParams.greedy(8)), rec);
    }
    // every cached Device block is demoted to the Host at once: the second run loads them back
    Recorder rec2 = new Recorder(); // request ids start again in a new engine
    try (Engine e =
        Engine.start(models.get(fixture), alwaysDemote(256), OptionalInt.empty(), rec2)) {
      Run first = await(e.submit(prompt, SamplingParams.greedy(8)), rec2);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while ((rec2.deviceCached != 0 || rec2.hostCached <= 0) && System.nanoTime() < deadline) {
        Thread.sleep(2); // idle rounds demote every cached Device block
      }
      Run again = await(e.submit(prompt, SamplingParams.greedy(8)), rec2);
      assertSame(cold, first, fixture + " demoting engine, cold");
      assertSame(cold, again, fixture + " host hit");
      assertEquals(0, again.result().metrics().reusedDeviceTokens(), "nothing left on Device");
      assertEquals(
          (prompt.length - 1) / 4 * 4,
          again.result().metrics().reusedHostTokens(),
          "reused from Host: " + again.result().metrics());
      assertTrue(rec.broken.isEmpty() && rec2.broken.isEmpty(), () -> rec + " " + rec2);
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama", "qwen2", "gemma3", "mamba", "jamba"})
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
      try (Engine e = Engine.start(model, small(256), OptionalInt.empty(), rec)) {
        alone.add(await(e.submit(p, SamplingParams.greedy(40)), rec));
      }
    }
    int tight = 2 * parentsFor(model, small(2), 130);
    // two requests at a time, each growing as it decodes: the attention models retract here (a
    // Mamba request never grows: its State group keeps two slots)
    boolean attentionOnly =
        model.cacheLayout(4, 2).groups().stream()
            .noneMatch(g -> g.kind() instanceof io.tokenspeed.core.GroupKind.StateCheckpoints);
    for (int deviceParents : new int[] {512, tight}) {
      Recorder r2 = new Recorder();
      try (Engine e = Engine.paused(model, small(deviceParents), OptionalInt.empty(), r2)) {
        List<RequestHandle> hs = new ArrayList<>();
        for (int[] p : prompts) {
          hs.add(e.submit(p, SamplingParams.greedy(40)));
        }
        e.resume(); // the first round sees every request
        for (int i = 0; i < hs.size(); i++) {
          assertSame(
              alone.get(i),
              await(hs.get(i), r2),
              fixture + " batched, device=" + deviceParents + " request " + i);
        }
        if (deviceParents == tight && attentionOnly) {
          assertTrue(e.scheduler().retractions() > 0, "the small Device retracted nothing");
        }
        assertTrue(r2.broken.isEmpty(), () -> r2.broken.toString());
      }
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama"})
  void shouldRejectBadInputAndKeepServingTheOthers(String fixture) throws Exception {
    Recorder rec = new Recorder();
    try (Engine e = Engine.start(models.get(fixture), small(64), OptionalInt.empty(), rec)) {
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

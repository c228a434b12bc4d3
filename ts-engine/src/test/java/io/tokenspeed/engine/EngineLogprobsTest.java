package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineTest.Recorder;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.TokenLogprobs;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
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
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Log probabilities through the engine: the log-softmax of the very logits row each token was
 * sampled from (recorded by the observer), the greedy token first, the raw distribution whatever
 * the sampling settings, readable as soon as each token is streamed and after a cancellation, bit
 * for bit the same alone, batched, chunked differently, after retraction and on a Host hit; and
 * refused out of range. The models are the untied ones of {@link ContextModels} (whose logits
 * depend on the KV they read) and the synthetic Jamba-style hybrid (State groups).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineLogprobsTest {
  private static final String LLAMA = "untied-llama";
  private static final String GEMMA3 = "untied-gemma3";
  private static final String HYBRID = "synthetic:jamba-tiny";

  private final Map<String, CausalLm> models = new HashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) {
    models.put(LLAMA, ContextModels.llama(dir));
    models.put(GEMMA3, ContextModels.gemma3(dir));
    models.put(
        HYBRID,
        CausalLm.load(
            SyntheticCheckpoints.materialize(
                HYBRID, SyntheticCheckpoints.DEFAULT_SEED, DType.F32, dir.resolve("hybrid"))));
  }

  @AfterAll
  void close() {
    models.values().forEach(CausalLm::close);
  }

  /** A request's streamed tokens, the logprobs read as each came, its result and logits rows. */
  record Streamed(
      int[] tokens, List<TokenLogprobs> logprobs, GenerationResult result, List<float[]> logits) {}

  /**
   * Reads {@code h}'s tokens as they come and each step's logprobs right after its token (they must
   * already be there), then its result; the handle's list must hold the same steps.
   */
  static Streamed stream(RequestHandle h, Recorder rec) throws Exception {
    List<Integer> tokens = new ArrayList<>();
    List<TokenLogprobs> read = new ArrayList<>();
    while (true) {
      OptionalInt t = h.nextToken(60, TimeUnit.SECONDS);
      assertNotNull(t, "no token within 60 s");
      if (t.isEmpty()) {
        break;
      }
      if (h.topLogprobs() != TokenLogprobs.NO_LOGPROBS) {
        TokenLogprobs lp = h.logprobs(tokens.size());
        assertEquals(t.getAsInt(), lp.token(), "step " + tokens.size() + ": its token's logprobs");
        read.add(lp);
      }
      tokens.add(t.getAsInt());
    }
    GenerationResult r = h.result().get(60, TimeUnit.SECONDS);
    int[] ids = tokens.stream().mapToInt(Integer::intValue).toArray();
    assertArrayEquals(r.tokens(), ids, "streamed tokens");
    assertEquals(read, h.logprobs(), "the handle's list after the end");
    return new Streamed(ids, read, r, rec.logits.getOrDefault(h.id(), List.of()));
  }

  /** {@link #streamOk(RequestHandle, Recorder)} of a request {@code e}'s turns serve. */
  static Streamed streamOk(RequestHandle h, SteppedEngine e, Recorder rec) throws Exception {
    e.finish(h);
    return streamOk(h, rec);
  }

  static Streamed streamOk(RequestHandle h, Recorder rec) throws Exception {
    Streamed s = stream(h, rec);
    assertNull(s.result().error(), () -> "request " + h.id() + " failed: " + s.result().error());
    return s;
  }

  /** The log-softmax of a row in double, the textbook way; its probabilities sum to 1. */
  static double[] logSoftmax(float[] row) {
    double max = Double.NEGATIVE_INFINITY;
    for (float x : row) {
      max = Math.max(max, x);
    }
    double sum = 0;
    for (float x : row) {
      sum += Math.exp(x - max);
    }
    double[] out = new double[row.length];
    double mass = 0;
    for (int i = 0; i < row.length; i++) {
      out[i] = row[i] - max - Math.log(sum);
      mass += Math.exp(out[i]);
    }
    assertEquals(1.0, mass, 1e-9, "the reference distribution sums to 1");
    return out;
  }

  /**
   * Checks one step against the row its token was drawn from: every reported value is that row's
   * log-softmax, the top list holds the N most likely ids, most likely first.
   */
  static void assertLogSoftmaxOf(float[] row, TokenLogprobs lp, int numTop, String what) {
    double[] ref = logSoftmax(row);
    assertEquals(ref[lp.token()], lp.logprob(), 1e-5, what + ": the sampled token's");
    int[] ids = lp.topTokens();
    float[] values = lp.topLogprobs();
    assertEquals(Math.min(numTop, row.length), ids.length, what + ": top length");
    for (int j = 0; j < ids.length; j++) {
      assertEquals(ref[ids[j]], values[j], 1e-5, what + ": top " + j);
      if (j > 0) {
        assertTrue(
            row[ids[j]] < row[ids[j - 1]]
                || (row[ids[j]] == row[ids[j - 1]] && ids[j] > ids[j - 1]),
            what + ": top " + j + " follows top " + (j - 1));
      }
      if (ids[j] == lp.token()) {
        assertEquals(values[j], lp.logprob(), what + ": the token's value in the list");
      }
    }
    if (ids.length > 0) {
      java.util.Set<Integer> top = new java.util.HashSet<>();
      for (int id : ids) {
        top.add(id);
      }
      float last = row[ids[ids.length - 1]];
      for (int v = 0; v < row.length; v++) {
        assertTrue(top.contains(v) || row[v] <= last, what + ": id " + v + " left out of the top");
      }
    }
  }

  static Stream<Arguments> seededRequests() {
    List<Arguments> out = new ArrayList<>();
    for (String m : List.of(LLAMA, GEMMA3, HYBRID)) {
      for (long seed = 1; seed <= 3; seed++) {
        out.add(Arguments.of(m, seed));
      }
    }
    return out.stream();
  }

  @ParameterizedTest(name = "{0} seed={1}")
  @MethodSource("seededRequests")
  void shouldReportTheLogSoftmaxOfEachRowWithTheGreedyTokenOnTop(String name, long seed)
      throws Exception {
    CausalLm model = models.get(name);
    SplittableRandom rnd = new SplittableRandom(seed);
    int[] prompt = rnd.ints(5 + rnd.nextInt(60), 0, model.vocabSize()).toArray();
    int numTop = 1 + rnd.nextInt(TokenLogprobs.MAX_TOP_LOGPROBS);
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(rec).conclude())) {
      RequestHandle h = e.submit(prompt, SamplingParams.greedy(12), numTop);
      assertEquals(numTop, h.topLogprobs());
      Streamed s = streamOk(h, rec);
      assertEquals(12, s.tokens().length);
      assertEquals(12, s.logits().size());
      for (int i = 0; i < s.tokens().length; i++) {
        TokenLogprobs lp = s.logprobs().get(i);
        String what = name + " numTop=" + numTop + " step " + i;
        assertLogSoftmaxOf(s.logits().get(i), lp, numTop, what);
        assertEquals(s.tokens()[i], lp.topTokens()[0], what + ": the greedy token is the argmax");
      }
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2})
  void shouldReportTheModelsDistributionWhateverTheSamplingSettings(long seed) throws Exception {
    CausalLm model = models.get(LLAMA);
    int[] prompt = new SplittableRandom(seed).ints(30, 0, model.vocabSize()).toArray();
    SamplingParams hot =
        SamplingParams.defaults().withTemperature(8).withSeed(seed).withMaxTokens(40);
    SamplingParams filtered =
        SamplingParams.defaults()
            .withTemperature(0.5)
            .withTopK(3)
            .withTopP(0.8)
            .withMinP(0.05)
            .withSeed(seed)
            .withMaxTokens(40);
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(rec).conclude())) {
      Streamed greedy = streamOk(e.submit(prompt, SamplingParams.greedy(40), 5), rec);
      Streamed hotRun = streamOk(e.submit(prompt, hot, 1), rec);
      Streamed filteredRun = streamOk(e.submit(prompt, filtered, 5), rec);
      // the first step's row is the prompt's: one distribution whatever the settings
      assertArrayEquals(
          greedy.logprobs().get(0).topTokens(), filteredRun.logprobs().get(0).topTokens());
      assertArrayEquals(
          greedy.logprobs().get(0).topLogprobs(), filteredRun.logprobs().get(0).topLogprobs());
      assertEquals(
          greedy.logprobs().get(0).topTokens()[0], hotRun.logprobs().get(0).topTokens()[0]);
      int outsideTop = 0;
      for (Streamed s : List.of(hotRun, filteredRun)) {
        for (int i = 0; i < s.tokens().length; i++) {
          TokenLogprobs lp = s.logprobs().get(i);
          int numTop = s == hotRun ? 1 : 5;
          assertLogSoftmaxOf(s.logits().get(i), lp, numTop, "seed=" + seed + " step " + i);
          if (lp.token() != lp.topTokens()[0]) {
            outsideTop++;
            assertTrue(lp.logprob() <= lp.topLogprobs()[0], "below the most likely one");
          }
        }
      }
      assertTrue(outsideTop > 0, "no sampled token was outside the top 1");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  /** A request of the exactness comparison: its prompt, settings and how many alternatives. */
  record Ask(int[] prompt, SamplingParams params, int numTop) {}

  static EngineConfig withBudget(int deviceParents, int tokenBudget) {
    return new EngineConfig(4, 2, deviceParents, 4.0, tokenBudget, 8, 2, 2, 64);
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {LLAMA, GEMMA3, HYBRID})
  void shouldGiveIdenticalLogprobsAloneBatchedChunkedRetractedAndFromTheHost(String name)
      throws Exception {
    CausalLm model = models.get(name);
    SplittableRandom rnd = new SplittableRandom(name.hashCode());
    List<Ask> asks = new ArrayList<>();
    for (int i = 0; i < 6; i++) {
      int[] prompt = rnd.ints(20 + rnd.nextInt(60), 0, model.vocabSize()).toArray();
      SamplingParams params =
          i % 2 == 0
              ? SamplingParams.greedy(30)
              : SamplingParams.defaults().withTemperature(0.9).withSeed(i).withMaxTokens(30);
      asks.add(
          new Ask(prompt, params, i == 0 ? 0 : rnd.nextInt(TokenLogprobs.MAX_TOP_LOGPROBS + 1)));
    }
    List<Streamed> alone = new ArrayList<>();
    for (Ask a : asks) {
      Recorder rec = new Recorder();
      try (Engine e =
          Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(rec).conclude())) {
        Streamed s = streamOk(e.submit(a.prompt(), a.params(), a.numTop()), rec);
        assertEquals(s.tokens().length, s.logprobs().size());
        alone.add(s);
      }
    }
    int single = EngineTest.parentsFor(model, EngineTest.small(2), 130);
    long retractions = 0;
    // batched in one round with a roomy Device, then chunked by an odd budget, then on a Device
    // that holds about one request at a time (attention models retract there)
    for (EngineConfig config :
        List.of(withBudget(512, 64), withBudget(512, 7), withBudget(single, 64))) {
      Recorder rec = new Recorder();
      try (Engine e =
          Engine.start(EngineSettings.of(model, config).observer(rec).paused().conclude())) {
        List<RequestHandle> hs = new ArrayList<>();
        for (Ask a : asks) {
          hs.add(e.submit(a.prompt(), a.params(), a.numTop()));
        }
        e.resume();
        for (int i = 0; i < hs.size(); i++) {
          Streamed got = streamOk(hs.get(i), rec);
          String what = name + " " + config + " request " + i;
          assertArrayEquals(alone.get(i).tokens(), got.tokens(), what + ": tokens");
          assertEquals(alone.get(i).logprobs(), got.logprobs(), what + ": logprobs");
        }
        retractions += e.scheduler().retractions();
      }
      assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    }
    if (!name.equals(HYBRID)) {
      assertTrue(retractions > 0, name + ": the small Device retracted nothing");
    }
    // a Host hit: every cached Device block is demoted at once, the prompt loaded back
    Recorder rec = new Recorder();
    try (SteppedEngine e =
        new SteppedEngine(EngineSettings.of(model, EngineTest.alwaysDemote(256)).observer(rec))) {
      for (int i = 0; i < 2; i++) {
        Ask a = asks.get(i);
        streamOk(e.engine.submit(a.prompt(), a.params(), a.numTop()), e, rec);
        e.runRoundsUntil(
            () -> rec.deviceCached == 0 && rec.hostCached > 0,
            "every cached Device block is demoted to the Host");
        Streamed again = streamOk(e.engine.submit(a.prompt(), a.params(), a.numTop()), e, rec);
        assertTrue(
            again.result().metrics().reusedHostTokens() > 0,
            () -> "reused from the Host: " + again.result().metrics());
        assertArrayEquals(alone.get(i).tokens(), again.tokens(), name + " host hit: tokens");
        assertEquals(alone.get(i).logprobs(), again.logprobs(), name + " host hit: logprobs");
      }
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  @Test
  void shouldGiveOnlyTheSampledTokensOwnWithZeroAndNothingByDefault() throws Exception {
    CausalLm model = models.get(GEMMA3);
    int[] prompt = new SplittableRandom(7).ints(25, 0, model.vocabSize()).toArray();
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(rec).conclude())) {
      Streamed zero = streamOk(e.submit(prompt, SamplingParams.greedy(10), 0), rec);
      Streamed twenty = streamOk(e.submit(prompt, SamplingParams.greedy(10), 20), rec);
      RequestHandle plain = e.submit(prompt, SamplingParams.greedy(10));
      GenerationResult r = plain.result().get(60, TimeUnit.SECONDS);
      assertArrayEquals(twenty.tokens(), r.tokens(), "asking for logprobs changes no token");
      assertArrayEquals(twenty.tokens(), zero.tokens());
      for (int i = 0; i < zero.tokens().length; i++) {
        TokenLogprobs lp = zero.logprobs().get(i);
        assertEquals(0, lp.topTokens().length);
        assertEquals(0, lp.topLogprobs().length);
        assertEquals(twenty.logprobs().get(i).logprob(), lp.logprob(), "step " + i);
        assertEquals(20, twenty.logprobs().get(i).topTokens().length);
      }
      assertEquals(TokenLogprobs.NO_LOGPROBS, plain.topLogprobs());
      assertEquals(List.of(), plain.logprobs());
      var none = assertThrows(IllegalStateException.class, () -> plain.logprobs(0));
      assertTrue(none.getMessage().contains("did not ask for logprobs"), none.getMessage());
    }
  }

  @Test
  void shouldKeepTheEmittedStepsReadableAfterACancellation() throws Exception {
    CausalLm model = models.get(LLAMA);
    int[] prompt = new SplittableRandom(3).ints(12, 0, model.vocabSize()).toArray();
    CountDownLatch atStep3 = new CountDownLatch(1);
    CountDownLatch goOn = new CountDownLatch(1);
    Recorder rec = new Recorder();
    EngineObserver observer =
        new EngineObserver() {
          @Override
          public void afterRound(EngineView e) {
            rec.afterRound(e);
          }

          @Override
          public boolean wantsLogits() {
            return true;
          }

          @Override
          public void onLogits(long requestId, int step, float[] logits) {
            rec.onLogits(requestId, step, logits);
            if (step == 3) {
              atStep3.countDown();
              try {
                goOn.await(30, TimeUnit.SECONDS); // the test cancels meanwhile
              } catch (InterruptedException ex) {
                Thread.currentThread().interrupt();
              }
            }
          }
        };
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256)).observer(observer).conclude())) {
      RequestHandle h = e.submit(prompt, SamplingParams.greedy(200), 5);
      for (int i = 0; i < 3; i++) {
        int token = h.nextToken(60, TimeUnit.SECONDS).getAsInt();
        assertEquals(token, h.logprobs(i).token(), "step " + i + " readable once streamed");
      }
      assertTrue(atStep3.await(60, TimeUnit.SECONDS), "the loop reached step 3");
      h.cancel(); // taken at the next round's start, before any later step
      goOn.countDown();
      GenerationResult r = h.result().get(60, TimeUnit.SECONDS);
      assertEquals("cancelled", r.finishReason());
      assertEquals(4, r.tokens().length, "steps 0 to 3");
      List<TokenLogprobs> all = h.logprobs();
      assertEquals(4, all.size());
      for (int i = 0; i < 4; i++) {
        assertEquals(r.tokens()[i], all.get(i).token());
        assertEquals(all.get(i), h.logprobs(i));
        assertLogSoftmaxOf(rec.logits.get(h.id()).get(i), all.get(i), 5, "step " + i);
      }
      var past = assertThrows(IndexOutOfBoundsException.class, () -> h.logprobs(4));
      assertTrue(past.getMessage().contains("step=4"), past.getMessage());
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  @ParameterizedTest(name = "topLogprobs={0}")
  @ValueSource(ints = {-2, 21, Integer.MIN_VALUE, Integer.MAX_VALUE})
  void shouldRejectTopLogprobsOutOfRangeAndKeepServing(int topLogprobs) throws Exception {
    CausalLm model = models.get(LLAMA);
    int[] prompt = new SplittableRandom(5).ints(9, 0, model.vocabSize()).toArray();
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(EngineSettings.of(model, EngineTest.small(64)).observer(rec).conclude())) {
      RequestHandle bad = e.submit(prompt, SamplingParams.greedy(4), topLogprobs);
      GenerationResult r = bad.result().get(10, TimeUnit.SECONDS);
      assertEquals("error", r.finishReason());
      assertTrue(r.error().contains("top_logprobs=" + topLogprobs), r.error());
      assertTrue(r.error().contains("[-1, 20]"), r.error());
      assertEquals(0, r.tokens().length);
      assertEquals(List.of(), bad.logprobs());
      for (int edge : new int[] {-1, 0, 20}) {
        Streamed ok = streamOk(e.submit(prompt, SamplingParams.greedy(4), edge), rec);
        assertEquals(edge < 0 ? 0 : 4, ok.logprobs().size(), "topLogprobs=" + edge);
      }
    }
  }
}

package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.TokenLogprobs;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.OptionalLong;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * In deterministic mode a request's output does not depend on what shares the GPU: served alone,
 * and again among 63 other requests of other lengths admitted with it (prefill chunks and decode
 * rows of others in its batches, the batch's size changing every round), it gives the same tokens
 * and the same log probabilities, bit for bit — greedy, and sampled with a seed on the device. The
 * llama fixture's embeddings are untied, so its outputs depend on the context it attends over.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineUnderLoadGpuTest {
  private static final int TOP = 5;
  private static final int OTHERS = 63;

  private CudaDevice device;
  private CudaDeviceModel fixedOrder;

  @BeforeAll
  void load(@TempDir Path dir) {
    device = CudaDevice.open(0);
    Path folder = Fixtures.extract("llama", dir);
    fixedOrder = new CudaDeviceModel(CudaCausalLm.load(device, folder, "llama", "test", true));
  }

  @AfterAll
  void close() {
    if (fixedOrder != null) {
      fixedOrder.close();
      fixedOrder.model().close();
    }
    if (device != null) {
      device.close();
    }
  }

  private static EngineConfig config() {
    return new EngineConfig(4, 2, 4096, 2.0, 512, OTHERS + 1, 2, 1, 256);
  }

  private record Out(int[] tokens, List<TokenLogprobs> logprobs) {}

  private Out await(RequestHandle h) throws Exception {
    GenerationResult r = h.result().get(300, TimeUnit.SECONDS);
    assertNull(r.error(), "the request failed: " + r.error());
    return new Out(r.tokens(), h.logprobs());
  }

  @ParameterizedTest(name = "temperature={0}")
  @ValueSource(doubles = {0, 0.8})
  void shouldGiveTheSameOutputAloneAndUnderSixtyFourWayLoad(double temperature) throws Exception {
    SplittableRandom rnd = new SplittableRandom(4_064);
    int vocab = fixedOrder.vocabSize();
    int[] prompt = rnd.ints(57, 0, vocab).toArray();
    SamplingParams params =
        new SamplingParams(temperature, 0, 0.95, 0, OptionalLong.of(2026), 24, Set.of(), true);
    Out alone;
    try (Engine e = Engine.start(EngineSettings.of(fixedOrder, config()).conclude())) {
      alone = await(e.submit(prompt, params, TOP));
    }
    Out loaded;
    long generated = 0;
    long rounds;
    try (Engine e = Engine.start(EngineSettings.of(fixedOrder, config()).conclude())) {
      List<RequestHandle> others = new ArrayList<>();
      int half = OTHERS / 2;
      for (int i = 0; i < half; i++) {
        others.add(e.submit(rnd.ints(5 + rnd.nextInt(300), 0, vocab).toArray(), other(rnd), -1));
      }
      RequestHandle mine = e.submit(prompt, params, TOP);
      for (int i = half; i < OTHERS; i++) {
        others.add(e.submit(rnd.ints(5 + rnd.nextInt(300), 0, vocab).toArray(), other(rnd), -1));
      }
      loaded = await(mine);
      generated += loaded.tokens().length;
      for (RequestHandle h : others) {
        generated += await(h).tokens().length;
      }
      rounds = e.stats().rounds();
    }
    assertArrayEquals(alone.tokens(), loaded.tokens(), "tokens alone and under load");
    assertEquals(alone.logprobs().size(), loaded.logprobs().size());
    for (int i = 0; i < alone.logprobs().size(); i++) {
      TokenLogprobs a = alone.logprobs().get(i);
      TokenLogprobs b = loaded.logprobs().get(i);
      assertEquals(
          Float.floatToRawIntBits(a.logprob()), Float.floatToRawIntBits(b.logprob()), "step " + i);
      assertArrayEquals(a.topTokens(), b.topTokens(), "step " + i);
      assertArrayEquals(a.topLogprobs(), b.topLogprobs(), "step " + i);
    }
    // the requests shared their rounds: served one after another they would take a round a token
    assertTrue(rounds * 4 < generated, rounds + " rounds for " + generated + " tokens");
    System.out.printf(
        Locale.ROOT,
        "deterministic, temperature %.1f: %d tokens alone = among %d others (%d tokens in %d"
            + " rounds), logprobs bit for bit%n",
        temperature,
        alone.tokens().length,
        OTHERS,
        generated,
        rounds);
  }

  /** Another request's settings: greedy or sampled, 8 to 40 tokens. */
  private static SamplingParams other(SplittableRandom rnd) {
    int tokens = 8 + rnd.nextInt(33);
    return rnd.nextBoolean()
        ? SamplingParams.greedy(tokens)
        : new SamplingParams(
            0.5 + rnd.nextDouble(),
            rnd.nextInt(50),
            1,
            0,
            OptionalLong.of(rnd.nextLong()),
            tokens,
            Set.of(),
            true);
  }
}

package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.sampling.SamplingParams;
import java.util.Arrays;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Penalties through the CPU engine: a penalized request is deterministic (the same tokens twice,
 * greedy and seeded), it repeats itself less than the same request without penalties on prompts
 * whose greedy output repeats, and neutral penalties are no penalties.
 */
class EnginePenaltiesTest extends WithContextLlama {
  private static final int MAX_TOKENS = 24;

  private static int[] run(Engine e, int[] prompt, SamplingParams params) {
    GenerationResult r = e.submit(prompt, params).result().join();
    assertNull(r.error(), () -> "request failed: " + r.error());
    return r.tokens();
  }

  /** Tokens that repeat an earlier token of the same output. */
  private static int repeats(int[] tokens) {
    return tokens.length - (int) Arrays.stream(tokens).distinct().count();
  }

  @Test
  void shouldRepeatLessWithPenaltiesAndGiveTheSameTokensTwice() {
    SamplingParams plain = SamplingParams.greedy(MAX_TOKENS).withIgnoreEos(true);
    SamplingParams penalized = plain.withPenalties(1.5, 1.0, 1.2);
    SplittableRandom rnd = new SplittableRandom(11);
    int repeatingPrompts = 0;
    int plainRepeats = 0;
    int penalizedRepeats = 0;
    try (Engine e = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      for (int i = 0; i < 8; i++) {
        int[] prompt = rnd.ints(16, 0, model.vocabSize()).toArray();
        int[] a = run(e, prompt, plain);
        int[] b = run(e, prompt, penalized);
        assertArrayEquals(b, run(e, prompt, penalized), "prompt " + i + ": penalized, twice");
        assertEquals(MAX_TOKENS, b.length);
        if (repeats(a) > 0) {
          repeatingPrompts++;
          plainRepeats += repeats(a);
          penalizedRepeats += repeats(b);
          assertTrue(!Arrays.equals(a, b), "prompt " + i + ": the penalties changed nothing");
        }
      }
    }
    assertTrue(repeatingPrompts > 0, "no prompt's greedy output repeats: the test shows nothing");
    assertTrue(
        penalizedRepeats < plainRepeats,
        "repeats with penalties=" + penalizedRepeats + " without=" + plainRepeats);
  }

  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {1, 2, 3})
  void shouldSampleSeededPenalizedRequestsDeterministically(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int[] prompt = rnd.ints(20, 0, model.vocabSize()).toArray();
    SamplingParams params =
        SamplingParams.defaults()
            .withMaxTokens(MAX_TOKENS)
            .withIgnoreEos(true)
            .withSeed(seed)
            .withTopK(20)
            .withPenalties(-0.5, 2.0, 1.5);
    try (Engine e = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      assertArrayEquals(run(e, prompt, params), run(e, prompt, params));
    }
  }

  @Test
  void shouldGiveTheSameTokensWithNeutralPenalties() {
    int[] prompt = new SplittableRandom(4).ints(16, 0, model.vocabSize()).toArray();
    SamplingParams plain = SamplingParams.greedy(MAX_TOKENS).withIgnoreEos(true);
    try (Engine e = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      assertArrayEquals(run(e, prompt, plain), run(e, prompt, plain.withPenalties(0, 0, 1)));
    }
  }
}

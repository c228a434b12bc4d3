package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.HashSet;
import java.util.OptionalInt;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The sampler with penalties: the token is the one the sampler gives without penalties from a row
 * the penalties were applied to beforehand, the caller's row is never written, neutral penalties
 * change nothing, and a strong presence penalty keeps greedy decoding from repeating itself.
 */
class SamplerPenaltiesTest {

  static LongStream seeds() {
    return LongStream.range(0, 60);
  }

  static SamplingParams randomParams(SplittableRandom rnd) {
    SamplingParams p = SamplingParams.defaults();
    switch (rnd.nextInt(4)) {
      case 0 -> p = p.withTemperature(0);
      case 1 -> p = p.withTemperature(0.3 + rnd.nextDouble(2)).withTopK(1 + rnd.nextInt(20));
      case 2 -> p = p.withTemperature(0.3 + rnd.nextDouble(2)).withTopP(rnd.nextDouble(0.1, 1));
      default -> p = p.withTemperature(0.3 + rnd.nextDouble(2)).withMinP(rnd.nextDouble(0.2));
    }
    return p.withPenalties(rnd.nextDouble(-2, 2), rnd.nextDouble(-2, 2), rnd.nextDouble(0.05, 10));
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldSampleTheRowThePenaltiesWereAppliedTo(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int vocab = 2 + rnd.nextInt(200);
    float[] raw = PenaltiesTest.randomRow(rnd, vocab);
    raw[rnd.nextInt(vocab)] = 1; // at least one finite logit
    SamplingParams params = randomParams(rnd);
    Penalties p =
        PenaltiesTest.penaltiesOf(
            (float) params.presencePenalty(),
            (float) params.frequencyPenalty(),
            (float) params.repetitionPenalty(),
            PenaltiesTest.randomTokens(rnd, rnd.nextInt(40), vocab),
            PenaltiesTest.randomTokens(rnd, rnd.nextInt(40), vocab));
    int offset = rnd.nextInt(3) * vocab;
    float[] batch = new float[3 * vocab];
    System.arraycopy(raw, 0, batch, offset, vocab);
    float[] before = batch.clone();
    Sampler sampler = new Sampler(vocab);
    long drawSeed = rnd.nextLong();
    for (int step = 0; step < 5; step++) {
      float[] penalized = raw.clone();
      p.apply(penalized, 0);
      int want = new Sampler(vocab).sample(penalized, params, drawSeed, step);
      assertEquals(want, sampler.sample(batch, offset, params, drawSeed, step, p), "step " + step);
      assertArrayEquals(before, batch, "the caller's row is not written");
    }
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldGiveTodaysTokensWithNeutralPenalties(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int vocab = 2 + rnd.nextInt(200);
    float[] row = PenaltiesTest.randomRow(rnd, vocab);
    row[rnd.nextInt(vocab)] = 1;
    SamplingParams params = randomParams(rnd).withPenalties(0, 0, 1);
    SamplingState state =
        new SamplingState(params.withSeed(seed), OptionalInt.empty(), new int[] {0, 1});
    Sampler sampler = new Sampler(vocab);
    for (int step = 0; step < 4; step++) {
      RowSampling rs = state.rowSampling(TokenLogprobs.NO_LOGPROBS);
      assertNull(rs.penalties());
      assertNull(state.penalties());
      int want = sampler.sample(row, 0, params, seed, step);
      assertEquals(want, sampler.sample(row, 0, params, seed, step, null));
      assertEquals(want, state.sample(sampler, row, 0));
      state.onToken(want);
    }
  }

  @Test
  void shouldNotRepeatAGreedyTokenUnderAStrongPresencePenalty() {
    int vocab = 64;
    float[] row = new float[vocab];
    Arrays.fill(row, -5);
    for (int i = 0; i < 10; i++) {
      row[10 + i] = 1.0f - 0.05f * i; // ten close leaders, token 10 the argmax
    }
    SamplingParams plain = SamplingParams.greedy(10).withIgnoreEos(true).withSeed(1);
    SamplingParams penalized = plain.withPenalties(2, 0, 1);
    Sampler sampler = new Sampler(vocab);
    int[] prompt = {3, 4};
    SamplingState a = new SamplingState(plain, OptionalInt.empty(), prompt);
    SamplingState b = new SamplingState(penalized, OptionalInt.empty(), prompt);
    Set<Integer> seen = new HashSet<>();
    for (int step = 0; step < 10; step++) {
      int t = a.sample(sampler, row, 0);
      assertEquals(10, t, "without penalties greedy repeats the argmax");
      a.onToken(t);
      int u = b.sample(sampler, row, 0);
      assertEquals(10 + step, u, "each token loses 2 once generated: the next leader wins");
      assertTrue(seen.add(u));
      b.onToken(u);
    }
  }

  @Test
  void shouldCheckThePenalizedRow() {
    Sampler sampler = new Sampler(4);
    float[] row = {1, Float.NEGATIVE_INFINITY, Float.NEGATIVE_INFINITY, Float.NEGATIVE_INFINITY};
    SamplingParams params = SamplingParams.greedy(1).withPenalties(0, 0, 2);
    Penalties p = new Penalties(0, 0, 2, new int[] {0, 5}, new int[] {0, 0});
    assertThrows(IllegalArgumentException.class, () -> sampler.sample(row, 0, params, 1, 0, p));
    Penalties ok = new Penalties(0, 0, 2, new int[] {0}, new int[] {1});
    assertEquals(0, sampler.sample(row, 0, params, 1, 0, ok));
    assertThrows(IllegalArgumentException.class, () -> sampler.sample(row, 1, params, 1, 0, ok));
  }
}

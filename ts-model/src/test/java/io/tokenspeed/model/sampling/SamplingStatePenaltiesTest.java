package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.Arrays;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The penalties a {@link SamplingState} builds for each step: the distinct ids of the prompt and
 * the generated tokens with the generated counts, against counts taken from the raw token lists.
 */
class SamplingStatePenaltiesTest {

  static LongStream seeds() {
    return LongStream.range(0, 30);
  }

  @Test
  void shouldCountTheGeneratedTokensAndGivePromptOnlyIdsZero() {
    SamplingParams params = SamplingParams.greedy(10).withSeed(4).withPenalties(0.5, 0.25, 1.5);
    SamplingState s = new SamplingState(params, OptionalInt.empty(), new int[] {5, 3, 5, 9});
    Penalties first = s.rowSampling(2).penalties();
    assertArrayEquals(new int[] {3, 5, 9}, first.ids());
    assertArrayEquals(new int[] {0, 0, 0}, first.outputCounts());
    assertEquals(0.5f, first.presence());
    assertEquals(0.25f, first.frequency());
    assertEquals(1.5f, first.repetition());
    s.onToken(3);
    s.onToken(7);
    s.onToken(3);
    s.onToken(1);
    Penalties later = s.rowSampling(TokenLogprobs.NO_LOGPROBS).penalties();
    assertArrayEquals(new int[] {1, 3, 5, 7, 9}, later.ids());
    assertArrayEquals(new int[] {1, 2, 0, 1, 0}, later.outputCounts());
    assertEquals(later, s.penalties());
    assertArrayEquals(new int[] {3, 5, 9}, first.ids(), "an earlier step's penalties stay");
  }

  @Test
  void shouldKeepNoPenaltiesWithoutThemOrWithTheTwoArgumentConstructor() {
    SamplingState plain =
        new SamplingState(SamplingParams.greedy(4).withSeed(1), OptionalInt.empty(), new int[] {1});
    plain.onToken(2);
    assertNull(plain.penalties());
    assertNull(plain.rowSampling(0).penalties());
    SamplingState noPrompt =
        new SamplingState(
            SamplingParams.greedy(4).withSeed(1).withPenalties(0, 0, 2), OptionalInt.empty());
    assertArrayEquals(new int[0], noPrompt.penalties().ids());
    noPrompt.onToken(6);
    assertArrayEquals(new int[] {6}, noPrompt.penalties().ids());
    assertArrayEquals(new int[] {1}, noPrompt.penalties().outputCounts());
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldMatchCountsTakenFromTheTokenLists(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int vocab = 1 + rnd.nextInt(2000);
    int[] prompt = PenaltiesTest.randomTokens(rnd, 1 + rnd.nextInt(100), vocab);
    int maxTokens = 1 + rnd.nextInt(300);
    SamplingParams params =
        SamplingParams.greedy(maxTokens)
            .withIgnoreEos(true)
            .withSeed(seed)
            .withPenalties(rnd.nextDouble(-2, 2), rnd.nextDouble(-2, 2), 1);
    SamplingState s = new SamplingState(params, OptionalInt.empty(), prompt);
    int[] output = PenaltiesTest.randomTokens(rnd, maxTokens, vocab);
    for (int step = 0; step < maxTokens; step++) {
      Penalties want =
          PenaltiesTest.penaltiesOf(
              (float) params.presencePenalty(),
              (float) params.frequencyPenalty(),
              1,
              prompt,
              Arrays.copyOf(output, step));
      assertEquals(want, s.rowSampling(TokenLogprobs.NO_LOGPROBS).penalties(), "step " + step);
      s.onToken(output[step]);
    }
    assertEquals(true, s.isFinished());
  }
}

package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;
import java.util.Random;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class SamplingStateTest {

  private static final int VOCAB = 50;
  private static final OptionalInt EOS = OptionalInt.of(0);

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 8);
  }

  /** A request without a seed, replayed with the seed the engine reported, gives the same ids. */
  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldReproduceFromReportedSeedWhenEngineAssignedIt(long seed) {
    SplittableRandom engineSeeds = new SplittableRandom(seed);
    SamplingParams request = SamplingParams.defaults().withMaxTokens(40).withTopP(0.9);
    SamplingState first = new SamplingState(request.withSeedIfAbsent(engineSeeds::nextLong), EOS);
    List<Integer> ids = run(first, seed, 0, List.of());

    SamplingState replay = new SamplingState(request.withSeed(first.seed()), EOS);
    assertEquals(ids, run(replay, seed, 0, List.of()));
    assertEquals(first.finishReason(), replay.finishReason());
  }

  /** A retracted sequence recomputes its ids so far and resumes with the same next draws. */
  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldDrawSameTokensWhenResumedAfterRetraction(long seed) {
    SamplingParams params = SamplingParams.defaults().withMaxTokens(30).withSeed(seed);
    List<Integer> uninterrupted = run(new SamplingState(params, EOS), seed, 0, List.of());
    int cut = Math.min(uninterrupted.size() - 1, 1 + (int) (seed % 10));
    SamplingState resumed = new SamplingState(params, EOS);
    List<Integer> prefix = uninterrupted.subList(0, cut);
    assertEquals(uninterrupted, run(resumed, seed, cut, prefix));
  }

  /** A token sampled elsewhere from the state's row sampling is the one the state samples. */
  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldDescribeTheSameDrawWhenSampledElsewhere(long seed) {
    SamplingParams params = SamplingParams.defaults().withMaxTokens(20).withTopK(8).withSeed(seed);
    SamplingState state = new SamplingState(params, OptionalInt.empty());
    Sampler sampler = new Sampler(VOCAB);
    Random random = new Random(seed);
    while (!state.isFinished()) {
      float[] row = new float[VOCAB];
      for (int i = 0; i < VOCAB; i++) {
        row[i] = (float) random.nextGaussian();
      }
      RowSampling r = state.rowSampling(TokenLogprobs.NO_LOGPROBS);
      assertEquals(new RowSampling(params, seed, state.numGeneratedTokens(), -1), r);
      int elsewhere = sampler.sample(row, r.params(), r.seed(), r.step());
      assertEquals(state.sample(sampler, row, 0), elsewhere);
      state.onToken(elsewhere);
    }
    assertThrows(IllegalStateException.class, () -> state.rowSampling(0));
  }

  /**
   * Runs a sequence to its end on rows that depend only on (seed, step); replays a prefix first.
   */
  private static List<Integer> run(
      SamplingState state, long rowSeed, int numReplayed, List<Integer> replayed) {
    Sampler sampler = new Sampler(VOCAB);
    List<Integer> ids = new ArrayList<>(replayed);
    for (int id : replayed) {
      state.onToken(id);
    }
    while (!state.isFinished()) {
      Random random = new Random(rowSeed * 7919 + state.numGeneratedTokens());
      float[] row = new float[VOCAB];
      for (int i = 0; i < VOCAB; i++) {
        row[i] = (float) random.nextGaussian();
      }
      row[0] -= 3; // eos is unlikely but possible
      int id = state.sample(sampler, row, 0);
      ids.add(id);
      state.onToken(id);
    }
    assertEquals(numReplayed, replayed.size());
    return ids;
  }
}

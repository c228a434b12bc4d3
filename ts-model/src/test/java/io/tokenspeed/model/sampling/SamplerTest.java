package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class SamplerTest {

  private static final SamplingParams SAMPLE = SamplingParams.defaults();

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 16);
  }

  // ---- greedy ---------------------------------------------------------------------------------

  @Test
  void shouldPickArgmaxWhenGreedy() {
    Sampler s = new Sampler(5);
    SamplingParams greedy = SamplingParams.greedy(1);
    assertEquals(3, s.sample(new float[] {0.1f, -2f, 0.5f, 4f, 3.9f}, greedy, 1, 0));
    assertEquals(0, s.sample(new float[] {-1f, -2f, -3f, -4f, -5f}, greedy, 1, 0));
  }

  @Test
  void shouldPickLowestIdWhenGreedyTies() {
    Sampler s = new Sampler(6);
    SamplingParams greedy = SamplingParams.greedy(1);
    assertEquals(1, s.sample(new float[] {1f, 7f, 2f, 7f, 7f, 0f}, greedy, 1, 0));
    assertEquals(1, s.sample(new float[] {-1f, -0f, 0f, -5f, 0f, -0f}, greedy, 1, 0));
    // Top-k = 1 breaks the same ties the same way, -0.0 included.
    assertEquals(1, s.sample(new float[] {-1f, -0f, 0f, -5f, 0f, -0f}, SAMPLE.withTopK(1), 1, 0));
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldEqualGreedyWhenTemperatureNearZero(long seed) {
    Random random = new Random(seed);
    Sampler s = new Sampler(300);
    for (int step = 0; step < 20; step++) {
      float[] row = distinctLogits(random, 300);
      int greedy = s.sample(row, SamplingParams.greedy(1), seed, step);
      assertEquals(greedy, s.sample(row, SAMPLE.withTemperature(1e-4), seed, step));
    }
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldEqualGreedyWhenTopKIsOneOrTopPTiny(long seed) {
    Random random = new Random(seed);
    Sampler s = new Sampler(200);
    for (int step = 0; step < 20; step++) {
      float[] row = tiedLogits(random, 200);
      int greedy = s.sample(row, SamplingParams.greedy(1), seed, step);
      assertEquals(greedy, s.sample(row, SAMPLE.withTemperature(2).withTopK(1), seed, step));
      assertEquals(greedy, s.sample(row, SAMPLE.withTemperature(2).withTopP(1e-9), seed, step));
      // min_p = 1 keeps every token tied with the max, so it is greedy only without ties.
      float[] distinct = distinctLogits(random, 200);
      assertEquals(
          s.sample(distinct, SamplingParams.greedy(1), seed, step),
          s.sample(distinct, SAMPLE.withTemperature(2).withMinP(1), seed, step));
    }
  }

  // ---- distribution ---------------------------------------------------------------------------

  static Stream<Arguments> distributions() {
    return Stream.of(
        Arguments.of(1, SAMPLE),
        Arguments.of(2, SAMPLE.withTemperature(0.7)),
        Arguments.of(3, SAMPLE.withTemperature(1.8)),
        Arguments.of(4, SAMPLE.withTopK(4)),
        Arguments.of(5, SAMPLE.withTopP(0.8)),
        Arguments.of(6, SAMPLE.withMinP(0.2)),
        Arguments.of(7, SAMPLE.withTemperature(1.3).withTopK(6).withTopP(0.9).withMinP(0.05)));
  }

  private static final float[] DISTRIBUTION_LOGITS = {
    1.2f, 2.0f, Float.NEGATIVE_INFINITY, 0.3f, 1.9f, -0.4f, 0.9f, 2.0f, -1.1f, 0.0f
  };

  /**
   * Empirical frequencies over N = 20,000 draws of one sequence (steps 0..N-1) match the expected
   * renormalized softmax per bin. The band is Bernstein's inequality at δ = 1e-7 per bin, {@code
   * P(|X - Np| >= t) <= 2 exp(-t² / (2 Np(1-p) + 2t/3))}, which holds for every p (no normal
   * approximation, so thin bins are covered too). For a correct sampler and a random seed the 7
   * cases × 10 bins here fail by chance with probability below 7e-6. Bins that the filters remove
   * must have a count of exactly zero.
   */
  @ParameterizedTest(name = "seed {0}: {1}")
  @MethodSource("distributions")
  void shouldMatchSoftmaxFrequenciesWhenSeeded(long seed, SamplingParams params) {
    int n = 20_000;
    double logTwoOverDelta = Math.log(2 / 1e-7);
    double[] expected = referenceProbabilities(DISTRIBUTION_LOGITS, params);
    Sampler s = new Sampler(DISTRIBUTION_LOGITS.length);
    int[] counts = new int[DISTRIBUTION_LOGITS.length];
    for (int step = 0; step < n; step++) {
      counts[s.sample(DISTRIBUTION_LOGITS, params, seed, step)]++;
    }
    for (int i = 0; i < counts.length; i++) {
      double p = expected[i];
      if (p == 0) {
        assertEquals(0, counts[i], "token " + i + " is filtered out but was sampled");
        continue;
      }
      double variance = n * p * (1 - p);
      double band =
          logTwoOverDelta / 3
              + Math.sqrt(Math.pow(logTwoOverDelta / 3, 2) + 2 * variance * logTwoOverDelta);
      double deviation = Math.abs(counts[i] - n * p);
      assertTrue(
          deviation < band,
          "token " + i + ": count=" + counts[i] + " expected=" + n * p + " band=" + band);
    }
  }

  /** The band above is tight enough to notice a wrong temperature. */
  @Test
  void shouldFailFrequencyBandWhenTemperatureIsWrong() {
    int n = 20_000;
    double[] expected = referenceProbabilities(DISTRIBUTION_LOGITS, SAMPLE);
    Sampler s = new Sampler(DISTRIBUTION_LOGITS.length);
    int[] counts = new int[DISTRIBUTION_LOGITS.length];
    for (int step = 0; step < n; step++) {
      counts[s.sample(DISTRIBUTION_LOGITS, SAMPLE.withTemperature(1.3), 1, step)]++;
    }
    double logTwoOverDelta = Math.log(2 / 1e-7);
    boolean anyOutside = false;
    for (int i = 0; i < counts.length; i++) {
      double variance = n * expected[i] * (1 - expected[i]);
      double band =
          logTwoOverDelta / 3
              + Math.sqrt(Math.pow(logTwoOverDelta / 3, 2) + 2 * variance * logTwoOverDelta);
      anyOutside |= Math.abs(counts[i] - n * expected[i]) >= band;
    }
    assertTrue(anyOutside);
  }

  @Test
  void shouldKeepExactlyTopKTokensWhenTopKOn() {
    float[] row = {0f, 3f, 1f, 2.5f, -1f, 2.9f, 0.5f};
    Set<Integer> seen = drawSet(row, SAMPLE.withTemperature(5).withTopK(3), 3_000);
    assertEquals(Set.of(1, 3, 5), seen);
  }

  @Test
  void shouldKeepSmallestNucleusWhenTopPOn() {
    // Softmax at T = 1 of ln(p): probabilities 0.5, 0.3, 0.15, 0.05 (ids 2, 0, 3, 1).
    float[] row = {
      (float) Math.log(0.3), (float) Math.log(0.05), (float) Math.log(0.5), (float) Math.log(0.15)
    };
    assertEquals(Set.of(2), drawSet(row, SAMPLE.withTopP(0.45), 2_000));
    assertEquals(Set.of(0, 2), drawSet(row, SAMPLE.withTopP(0.75), 2_000));
    assertEquals(Set.of(0, 2, 3), drawSet(row, SAMPLE.withTopP(0.9), 2_000));
    assertEquals(Set.of(0, 1, 2, 3), drawSet(row, SAMPLE.withTopP(0.999), 4_000));
  }

  @Test
  void shouldKeepTokensAboveMinPWhenMinPOn() {
    float[] row = {
      (float) Math.log(0.3), (float) Math.log(0.05), (float) Math.log(0.5), (float) Math.log(0.15)
    };
    // min_p = 0.25: keep p >= 0.125, i.e. ids 0, 2, 3.
    assertEquals(Set.of(0, 2, 3), drawSet(row, SAMPLE.withMinP(0.25), 2_000));
  }

  // ---- integer weights -----------------------------------------------------------------------

  @Test
  void shouldScaleWeightsSoThatARowSumsToAtMostTwoToThe53() {
    assertEquals(0x1p52, Sampler.weightScale(1));
    assertEquals(0x1p52, Sampler.weightScale(2));
    assertEquals(0x1p51, Sampler.weightScale(3));
    assertEquals(0x1p51, Sampler.weightScale(4));
    assertEquals(0x1p50, Sampler.weightScale(5));
    assertEquals(0x1p43, Sampler.weightScale(1024));
    assertEquals(0x1p42, Sampler.weightScale(1025));
    assertEquals(0x1p35, Sampler.weightScale(151_936)); // Qwen's padded vocabulary
    assertEquals(0x1p22, Sampler.weightScale(Integer.MAX_VALUE));
    for (int v = 1; v < 5_000; v++) {
      double scale = Sampler.weightScale(v);
      assertTrue(v * scale <= 0x1p53, "vocabSize=" + v + ": a row's total fits");
      if (v > 1) {
        assertTrue(2 * v * scale > 0x1p53, "vocabSize=" + v + ": the largest such power of two");
      }
    }
    assertThrows(IllegalArgumentException.class, () -> Sampler.weightScale(0));
  }

  @Test
  void shouldDrawWithTheStepRandomUniform() {
    for (int step = 0; step < 100; step++) {
      assertEquals(StepRandom.uniform(-7, step), Sampler.uniform(-7, step));
    }
  }

  /**
   * Over a uniform row of {@code V = 2^b} tokens every weight is {@code SCALE} and the total is
   * exactly {@code 2^53}, the largest a row can sum to: the walk then returns {@code floor(u × V)},
   * which {@code u × V} (a power-of-two multiple, so exact) gives directly.
   */
  @Test
  void shouldDrawFloorOfUTimesVocabWhenRowIsUniform() {
    for (int b = 0; b <= 20; b++) {
      int vocab = 1 << b;
      Sampler s = new Sampler(vocab);
      float[] row = new float[vocab];
      for (int step = 0; step < 40; step++) {
        int expected = (int) Math.floor(Sampler.uniform(b, step) * vocab);
        assertEquals(expected, s.sample(row, SAMPLE, b, step), "vocab=" + vocab + " step=" + step);
      }
    }
  }

  /**
   * A candidate whose weight quantizes to 0 still counts for top-k. Row {@code [-0.1, 0, -1000]} at
   * temperature 1: id 2's weight is 0, yet three candidates exceed {@code k = 2}, so the two kept
   * are walked most likely first, [1, 0], with weights {@code SCALE} and {@code ≈ 0.905 SCALE}:
   * {@code u < 0.5} gives 1, {@code u > 0.55} gives 0. (Counted out, k would not cut and the walk
   * would run in id order, [0, 1], giving 0 for small u.)
   */
  @Test
  void shouldCountZeroWeightCandidatesWhenTopKCuts() {
    float[] row = {-0.1f, 0f, -1000f};
    Sampler s = new Sampler(row.length);
    int numChecked = 0;
    for (int step = 0; step < 200; step++) {
      double u = Sampler.uniform(3, step);
      int token = s.sample(row, SAMPLE.withTopK(2), 3, step);
      if (u < 0.5) {
        assertEquals(1, token, "u=" + u);
        numChecked++;
      } else if (u > 0.55) {
        assertEquals(0, token, "u=" + u);
        numChecked++;
      }
    }
    assertTrue(numChecked > 150);
  }

  /**
   * A token whose weight is positive in double, and passes min-p, but is below one unit of SCALE is
   * a candidate that is never drawn.
   */
  @Test
  void shouldNeverDrawWeightsBelowOneUnitWhenQuantized() {
    // V = 2: SCALE = 2^52; exp(-40) ≈ 4.2e-18 < 2^-52 ≈ 2.2e-16, so id 0's weight is 0.
    float[] row = {-40f, 0f};
    assertEquals(Set.of(1), drawSet(row, SAMPLE.withMinP(1e-18), 2_000));
  }

  // ---- determinism ----------------------------------------------------------------------------

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldReproduceWhenSameSeedAndStep(long seed) {
    Random random = new Random(seed);
    float[] row = distinctLogits(random, 500);
    SamplingParams p = SAMPLE.withTopP(0.95);
    Sampler first = new Sampler(500);
    Sampler second = new Sampler(500);
    int[] forward = new int[50];
    for (int step = 0; step < 50; step++) {
      forward[step] = first.sample(row, p, seed, step);
    }
    for (int step = 49; step >= 0; step--) {
      assertEquals(forward[step], second.sample(row, p, seed, step), "step " + step);
    }
  }

  @Test
  void shouldDifferWhenSeedsDiffer() {
    float[] row = new float[1000]; // uniform over 1000 tokens
    Sampler s = new Sampler(row.length);
    Set<List<Integer>> sequences = new HashSet<>();
    for (long seed = 0; seed < 20; seed++) {
      List<Integer> ids = new ArrayList<>();
      for (int step = 0; step < 16; step++) {
        ids.add(s.sample(row, SAMPLE, seed, step));
      }
      sequences.add(ids);
    }
    assertEquals(20, sequences.size());
  }

  /** A sequence's tokens are the same alone and in batches of any size, order and company. */
  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldNotDependOnBatchWhenSampledTogether(long seed) {
    int vocab = 64;
    int numSequences = 5;
    int numSteps = 12;
    SamplingParams[] params = {
      SAMPLE,
      SAMPLE.withTopK(5),
      SAMPLE.withTopP(0.7),
      SamplingParams.greedy(1),
      SAMPLE.withMinP(0.3)
    };
    int[][] alone = new int[numSequences][numSteps];
    for (int q = 0; q < numSequences; q++) {
      Sampler solo = new Sampler(vocab);
      for (int t = 0; t < numSteps; t++) {
        alone[q][t] = solo.sample(rowOf(seed, q, t, vocab), params[q], seed * 31 + q, t);
      }
    }
    Random random = new Random(seed);
    Sampler shared = new Sampler(vocab);
    for (int t = 0; t < numSteps; t++) {
      List<Integer> batch = new ArrayList<>();
      for (int q = 0; q < numSequences; q++) {
        batch.add(q);
      }
      int numStrangers = random.nextInt(4);
      for (int x = 0; x < numStrangers; x++) {
        batch.add(-1 - x);
      }
      Collections.shuffle(batch, random);
      float[] matrix = new float[batch.size() * vocab];
      for (int r = 0; r < batch.size(); r++) {
        int q = batch.get(r);
        float[] row = q >= 0 ? rowOf(seed, q, t, vocab) : distinctLogits(random, vocab);
        System.arraycopy(row, 0, matrix, r * vocab, vocab);
      }
      for (int r = 0; r < batch.size(); r++) {
        int q = batch.get(r);
        if (q < 0) {
          shared.sample(matrix, r * vocab, SAMPLE, random.nextLong(), random.nextInt(100));
        } else {
          assertEquals(
              alone[q][t],
              shared.sample(matrix, r * vocab, params[q], seed * 31 + q, t),
              "sequence " + q + " step " + t);
        }
      }
    }
  }

  // ---- bad logits -----------------------------------------------------------------------------

  @Test
  void shouldNameThePositionWhenLogitIsNaNOrPositiveInfinity() {
    Sampler s = new Sampler(4);
    for (SamplingParams p : new SamplingParams[] {SAMPLE, SamplingParams.greedy(1)}) {
      IllegalArgumentException nan =
          assertThrows(
              IllegalArgumentException.class,
              () -> s.sample(new float[] {0f, 1f, Float.NaN, 2f}, p, 1, 0));
      assertTrue(nan.getMessage().contains("token id 2 is NaN"), nan.getMessage());
      IllegalArgumentException inf =
          assertThrows(
              IllegalArgumentException.class,
              () -> s.sample(new float[] {0f, Float.POSITIVE_INFINITY, 1f, 2f}, p, 1, 0));
      assertTrue(inf.getMessage().contains("token id 1 is Infinity"), inf.getMessage());
    }
  }

  @Test
  void shouldNeverSampleNegativeInfinityWhenOthersFinite() {
    float ninf = Float.NEGATIVE_INFINITY;
    float[] row = {ninf, 0f, ninf, 0.5f, ninf, -0.3f, ninf};
    assertEquals(Set.of(1, 3, 5), drawSet(row, SAMPLE.withTemperature(50), 2_000));
    assertEquals(Set.of(1, 3, 5), drawSet(row, SAMPLE.withTemperature(50).withTopP(0.99), 2_000));
    float[] one = {ninf, ninf, -100f, ninf};
    assertEquals(Set.of(2), drawSet(one, SAMPLE, 100));
    assertEquals(2, new Sampler(4).sample(one, SamplingParams.greedy(1), 0, 0));
  }

  @Test
  void shouldFailWhenAllLogitsAreNegativeInfinity() {
    float[] row = new float[8];
    Arrays.fill(row, Float.NEGATIVE_INFINITY);
    for (SamplingParams p : new SamplingParams[] {SAMPLE, SamplingParams.greedy(1)}) {
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> new Sampler(8).sample(row, p, 1, 0));
      assertTrue(e.getMessage().contains("every logit is -Infinity"), e.getMessage());
    }
  }

  @Test
  void shouldRejectRowsThatDoNotFit() {
    Sampler s = new Sampler(4);
    assertThrows(IllegalArgumentException.class, () -> s.sample(new float[5], SAMPLE, 1, 0));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> s.sample(new float[8], 5, SAMPLE, 1, 0));
    assertTrue(e.getMessage().contains("offset=5"), e.getMessage());
    assertThrows(IllegalArgumentException.class, () -> s.sample(new float[4], SAMPLE, 1, -1));
    assertThrows(IllegalArgumentException.class, () -> new Sampler(0));
  }

  @Test
  void shouldOrderKeysByLogitDescendingThenIdAscending() {
    float[] logits = {3f, -0f, 0f, Float.MIN_VALUE, -Float.MAX_VALUE, 3f, -2.5f, Float.MAX_VALUE};
    Integer[] byKey = new Integer[logits.length];
    Integer[] byComparator = new Integer[logits.length];
    for (int i = 0; i < logits.length; i++) {
      byKey[i] = i;
      byComparator[i] = i;
    }
    Arrays.sort(byKey, Comparator.comparingLong(i -> Sampler.orderKey(logits[i], i)));
    Arrays.sort(byComparator, referenceOrder(logits));
    assertEquals(Arrays.asList(byComparator), Arrays.asList(byKey));
  }

  // ---- helpers and the reference model ----------------------------------------------------------

  private static Set<Integer> drawSet(float[] row, SamplingParams p, int numDraws) {
    Sampler s = new Sampler(row.length);
    Set<Integer> seen = new HashSet<>();
    for (int step = 0; step < numDraws; step++) {
      seen.add(s.sample(row, p, 12345, step));
    }
    return seen;
  }

  private static float[] rowOf(long seed, int sequence, int step, int vocab) {
    return distinctLogits(new Random(seed * 1_000_003L + sequence * 1009L + step), vocab);
  }

  private static float[] distinctLogits(Random random, int vocab) {
    float[] row = new float[vocab];
    for (int i = 0; i < vocab; i++) {
      row[i] = (float) (random.nextGaussian() * 3);
    }
    return row;
  }

  /** Logits on a coarse grid, so that ties are common. */
  private static float[] tiedLogits(Random random, int vocab) {
    float[] row = new float[vocab];
    for (int i = 0; i < vocab; i++) {
      row[i] = (random.nextInt(9) - 4) * 0.5f;
    }
    return row;
  }

  private static Comparator<Integer> referenceOrder(float[] logits) {
    return (a, b) -> {
      int byLogit = Float.compare(logits[b] + 0f, logits[a] + 0f);
      return byLogit != 0 ? byLogit : Integer.compare(a, b);
    };
  }

  /** The kept tokens in walk order, with their unnormalized weights in {@code weights}. */
  private static List<Integer> referenceKept(float[] logits, SamplingParams p, double[] weights) {
    float max = Float.NEGATIVE_INFINITY;
    for (float x : logits) {
      max = Math.max(max, x);
    }
    List<Integer> kept = new ArrayList<>();
    for (int i = 0; i < logits.length; i++) {
      if (logits[i] == Float.NEGATIVE_INFINITY) {
        continue;
      }
      weights[i] = Math.exp(((double) logits[i] - max) / p.temperature());
      if (weights[i] >= p.minP()) {
        kept.add(i);
      }
    }
    boolean topKCuts = p.topK() > 0 && p.topK() < kept.size();
    if (topKCuts || p.topP() < 1) {
      kept.sort(referenceOrder(logits));
    }
    if (topKCuts) {
      kept = new ArrayList<>(kept.subList(0, p.topK()));
    }
    if (p.topP() < 1) {
      double total = 0;
      for (int id : kept) {
        total += weights[id];
      }
      double cumulative = 0;
      for (int j = 0; j < kept.size(); j++) {
        cumulative += weights[kept.get(j)];
        if (cumulative >= p.topP() * total) {
          kept = new ArrayList<>(kept.subList(0, j + 1));
          break;
        }
      }
    }
    return kept;
  }

  private static double[] referenceProbabilities(float[] logits, SamplingParams p) {
    double[] weights = new double[logits.length];
    List<Integer> kept = referenceKept(logits, p, weights);
    double total = 0;
    for (int id : kept) {
      total += weights[id];
    }
    double[] probabilities = new double[logits.length];
    for (int id : kept) {
      probabilities[id] = weights[id] / total;
    }
    return probabilities;
  }

  @Test
  void shouldAgreeWithClosedFormSoftmaxWhenNoFilter() {
    float[] row = {0f, (float) Math.log(3)};
    double[] p = referenceProbabilities(row, SAMPLE);
    assertEquals(0.25, p[0], 1e-7);
    assertEquals(0.75, p[1], 1e-7);
    assertNotEquals(0, p[0]);
  }
}

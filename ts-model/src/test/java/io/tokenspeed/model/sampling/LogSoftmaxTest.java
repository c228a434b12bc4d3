package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The log-softmax and top-N selection against a brute-force reference: every id's log probability
 * (asked one id at a time) over seeded random rows, with masks, ties and offsets large enough to
 * overflow a naive exp, and the top N against a sort of the whole row.
 */
class LogSoftmaxTest {

  /** Seeds × row lengths (1, a few, a small vocabulary, one past 1000). */
  static Stream<Arguments> rows() {
    List<Arguments> out = new ArrayList<>();
    for (long seed = 1; seed <= 12; seed++) {
      for (int length : new int[] {1, 7, 256, 1001}) {
        out.add(Arguments.of(seed, length));
      }
    }
    return out.stream();
  }

  /**
   * A seeded row: logits spread by a random scale around a random offset (up to ±1e4, where exp(x)
   * overflows), about 5 % masked with -Infinity (never all), and a few exact ties.
   */
  static float[] row(long seed, int length) {
    SplittableRandom rnd = new SplittableRandom(seed * 1_000_003L + length);
    double scale = new double[] {0.01, 1, 8, 50}[rnd.nextInt(4)];
    double offset = new double[] {0, -300, 1e4, -1e4}[rnd.nextInt(4)];
    float[] row = new float[length];
    for (int i = 0; i < length; i++) {
      row[i] = (float) (offset + scale * rnd.nextGaussian());
    }
    for (int i = 0; i < length / 10; i++) {
      row[rnd.nextInt(length)] = row[rnd.nextInt(length)]; // a tie
    }
    for (int i = 0; i < length; i++) {
      if (rnd.nextInt(20) == 0) {
        row[i] = Float.NEGATIVE_INFINITY;
      }
    }
    row[rnd.nextInt(length)] = (float) offset; // at least one finite
    return row;
  }

  /** Each id's log-softmax in double, by the textbook formula. */
  static double[] reference(float[] row) {
    double max = Double.NEGATIVE_INFINITY;
    for (float x : row) {
      max = Math.max(max, x);
    }
    double sum = 0;
    for (float x : row) {
      sum += Math.exp(x - max);
    }
    double logZ = max + Math.log(sum);
    double[] out = new double[row.length];
    for (int i = 0; i < row.length; i++) {
      out[i] = row[i] - logZ;
    }
    return out;
  }

  @ParameterizedTest(name = "seed={0} length={1}")
  @MethodSource("rows")
  void shouldGiveANormalizedDistributionWhoseTopIsTheBruteForceOrder(long seed, int length) {
    float[] row = row(seed, length);
    float[] copy = row.clone();
    LogSoftmax ls = new LogSoftmax();
    double[] ref = reference(row);
    float[] each = new float[length];
    double mass = 0;
    for (int v = 0; v < length; v++) {
      TokenLogprobs lp = ls.of(row, v, 0);
      assertEquals(v, lp.token());
      assertEquals(0, lp.topTokens().length);
      each[v] = lp.logprob();
      mass += Math.exp(each[v]);
      if (row[v] == Float.NEGATIVE_INFINITY) {
        assertEquals(Float.NEGATIVE_INFINITY, each[v], "a masked id has no mass");
      } else {
        assertEquals(ref[v], each[v], 1e-6 + 1e-6 * Math.abs(ref[v]), "id " + v);
      }
    }
    assertEquals(1.0, mass, 1e-5, "the probabilities of every id sum to 1");
    assertArrayEquals(copy, row, "the row is never written");

    // the top N: by logit descending (-0.0 equal to 0.0), the lower id first on ties
    List<Integer> order = new ArrayList<>();
    for (int v = 0; v < length; v++) {
      order.add(v);
    }
    order.sort(
        Comparator.<Integer>comparingDouble(v -> -(row[v] + 0.0f))
            .thenComparing(Comparator.naturalOrder()));
    int greedy = new Sampler(length).sample(row, SamplingParams.greedy(1), seed, 0);
    for (int numTop : new int[] {1, 5, 20}) {
      int token = new SplittableRandom(seed + numTop).nextInt(length);
      TokenLogprobs lp = ls.of(row, token, numTop);
      int n = Math.min(numTop, length);
      int[] wantIds = new int[n];
      float[] wantValues = new float[n];
      for (int j = 0; j < n; j++) {
        wantIds[j] = order.get(j);
        wantValues[j] = each[order.get(j)];
      }
      assertArrayEquals(wantIds, lp.topTokens(), "top " + numTop + " ids");
      assertArrayEquals(wantValues, lp.topLogprobs(), "top " + numTop + " values");
      for (int j = 1; j < n; j++) {
        assertTrue(wantValues[j] <= wantValues[j - 1], "the values never increase");
      }
      assertEquals(each[token], lp.logprob(), "the token's own, in or out of the top");
      assertEquals(greedy, lp.topTokens()[0], "the argmax (lowest id on ties) comes first");
    }
  }

  @Test
  void shouldStayFiniteAndExactWhereANaiveExpOverflows() {
    // exp(88.8f) overflows a float; exp(710) a double
    float[] row = {1000f, 999f, 998f, Float.NEGATIVE_INFINITY, 1000f};
    TokenLogprobs lp = new LogSoftmax().of(row, 2, 20);
    double logZ = 1000 + Math.log(2 + Math.exp(-1) + Math.exp(-2));
    assertArrayEquals(new int[] {0, 4, 1, 2, 3}, lp.topTokens());
    float[] want = {
      (float) (1000 - logZ),
      (float) (1000 - logZ),
      (float) (999 - logZ),
      (float) (998 - logZ),
      Float.NEGATIVE_INFINITY
    };
    assertArrayEquals(want, lp.topLogprobs());
    assertEquals(want[3], lp.logprob());
  }

  @Test
  void shouldGiveZeroToTheOnlyFiniteLogit() {
    float[] row = {Float.NEGATIVE_INFINITY, -3e5f, Float.NEGATIVE_INFINITY};
    TokenLogprobs lp = new LogSoftmax().of(row, 1, 2);
    assertEquals(0f, lp.logprob());
    assertArrayEquals(new int[] {1, 0}, lp.topTokens());
    assertArrayEquals(new float[] {0f, Float.NEGATIVE_INFINITY}, lp.topLogprobs());
  }

  @Test
  void shouldRefuseRowsWithoutADistributionAndBadArguments() {
    LogSoftmax ls = new LogSoftmax();
    var nan =
        assertThrows(IllegalArgumentException.class, () -> ls.of(new float[] {0, Float.NaN}, 0, 1));
    assertTrue(nan.getMessage().contains("token id 1 is NaN"), nan.getMessage());
    var inf =
        assertThrows(
            IllegalArgumentException.class,
            () -> ls.of(new float[] {Float.POSITIVE_INFINITY}, 0, 1));
    assertTrue(inf.getMessage().contains("Infinity"), inf.getMessage());
    var masked =
        assertThrows(
            IllegalArgumentException.class,
            () -> ls.of(new float[] {Float.NEGATIVE_INFINITY, Float.NEGATIVE_INFINITY}, 0, 1));
    assertTrue(masked.getMessage().contains("every logit is -Infinity"), masked.getMessage());
    var top = assertThrows(IllegalArgumentException.class, () -> ls.of(new float[] {0}, 0, 21));
    assertTrue(top.getMessage().contains("numTop=21"), top.getMessage());
    var token = assertThrows(IllegalArgumentException.class, () -> ls.of(new float[] {0}, 1, 0));
    assertTrue(token.getMessage().contains("token=1"), token.getMessage());
  }
}

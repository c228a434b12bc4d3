package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.OptionalLong;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@link Penalties#apply} against a reference that walks the whole vocabulary with the raw prompt
 * and output token lists and computes each operation in double, rounding to float after each: for a
 * multiply, add, subtract or divide of two floats that is the correctly rounded float result, so
 * the two must agree bit for bit while sharing no code. Also the validation of the penalties and of
 * the params' ranges.
 */
class PenaltiesTest {

  static LongStream seeds() {
    return LongStream.range(0, 40);
  }

  /** A random row with some -Infinity, zeros, negative and positive logits. */
  static float[] randomRow(SplittableRandom rnd, int vocab) {
    float[] row = new float[vocab];
    for (int i = 0; i < vocab; i++) {
      int kind = rnd.nextInt(10);
      row[i] =
          switch (kind) {
            case 0 -> Float.NEGATIVE_INFINITY;
            case 1 -> rnd.nextBoolean() ? 0.0f : -0.0f;
            default -> (float) (rnd.nextGaussian() * 8);
          };
    }
    return row;
  }

  static int[] randomTokens(SplittableRandom rnd, int n, int vocab) {
    int hot = 1 + rnd.nextInt(vocab); // a narrow range makes repeats
    return rnd.ints(n, 0, hot).toArray();
  }

  /** The penalties as {@link SamplingState} would build them, from the raw token lists. */
  static Penalties penaltiesOf(
      float presence, float frequency, float repetition, int[] prompt, int[] output) {
    java.util.TreeMap<Integer, Integer> counts = new java.util.TreeMap<>();
    for (int t : prompt) {
      counts.putIfAbsent(t, 0);
    }
    for (int t : output) {
      counts.merge(t, 1, Integer::sum);
    }
    int[] ids = counts.keySet().stream().mapToInt(Integer::intValue).toArray();
    int[] c = counts.values().stream().mapToInt(Integer::intValue).toArray();
    return new Penalties(presence, frequency, repetition, ids, c);
  }

  /** The stated semantics, token by token over the vocabulary, each operation in double. */
  static float[] reference(
      float[] raw, float presence, float frequency, float repetition, int[] prompt, int[] output) {
    float[] out = raw.clone();
    for (int t = 0; t < raw.length; t++) {
      boolean inPrompt = false;
      for (int p : prompt) {
        inPrompt |= p == t;
      }
      int count = 0;
      for (int o : output) {
        count += o == t ? 1 : 0;
      }
      if (!inPrompt && count == 0) {
        continue;
      }
      float x = raw[t];
      if (repetition != 1) {
        x = x > 0 ? (float) ((double) x / repetition) : (float) ((double) x * repetition);
      }
      if (count > 0 && (presence != 0 || frequency != 0)) {
        float m = (float) ((double) frequency * count);
        float s = (float) ((double) m + presence);
        x = (float) ((double) x - s);
      }
      out[t] = x;
    }
    return out;
  }

  static float randomPenalty(SplittableRandom rnd, float neutral, float lo, float hi) {
    return rnd.nextInt(4) == 0 ? neutral : lo + (hi - lo) * rnd.nextFloat();
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldApplyExactlyTheStatedFloatOperations(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int vocab = 1 + rnd.nextInt(300);
    float[] raw = randomRow(rnd, vocab);
    int[] prompt = randomTokens(rnd, rnd.nextInt(50), vocab);
    int[] output = randomTokens(rnd, rnd.nextInt(80), vocab);
    float presence = randomPenalty(rnd, 0, -2, 2);
    float frequency = randomPenalty(rnd, 0, -2, 2);
    float repetition = randomPenalty(rnd, 1, 0.01f, 10);
    Penalties p = penaltiesOf(presence, frequency, repetition, prompt, output);
    int offset = rnd.nextInt(5);
    float[] padded = new float[offset + vocab + 3];
    System.arraycopy(raw, 0, padded, offset, vocab);
    p.apply(padded, offset);
    float[] want = reference(raw, presence, frequency, repetition, prompt, output);
    for (int t = 0; t < vocab; t++) {
      assertEquals(
          Float.floatToRawIntBits(want[t]),
          Float.floatToRawIntBits(padded[offset + t]),
          "token " + t + ": raw=" + raw[t] + " want=" + want[t] + " got=" + padded[offset + t]);
      if (raw[t] == Float.NEGATIVE_INFINITY) {
        assertEquals(Float.NEGATIVE_INFINITY, padded[offset + t], "a mask stays a mask");
      }
    }
    for (int i = 0; i < offset; i++) {
      assertEquals(0f, padded[i], "before the row");
    }
  }

  @Test
  void shouldRoundTheFrequencyTermBeforeAddingThePresence() {
    // 0.1f * 3 rounds up; a fused multiply-add would not round it before adding the presence.
    float ff = 0.1f;
    float pf = 1e-8f;
    Penalties p = new Penalties(pf, ff, 1, new int[] {0}, new int[] {3});
    float[] row = {1.0f};
    p.apply(row, 0);
    float m = ff * 3f;
    float s = m + pf;
    assertEquals(1.0f - s, row[0]);
  }

  @Test
  void shouldTouchOnlyTheListedIdsAndLeavePromptOnlyIdsToTheRepetitionPenalty() {
    Penalties p = new Penalties(2, 0.5f, 2, new int[] {1, 3}, new int[] {0, 2});
    float[] row = {4, 4, -4, 4, -4};
    p.apply(row, 0);
    assertArrayEquals(new float[] {4, 2, -4, 2 - (0.5f * 2 + 2), -4}, row);
  }

  @Test
  void shouldRefuseBadPenalties() {
    int[] one = {1};
    assertThrows(IllegalArgumentException.class, () -> new Penalties(0, 0, 1, one, new int[0]));
    assertThrows(
        IllegalArgumentException.class,
        () -> new Penalties(0, 0, 1, new int[] {2, 2}, new int[] {0, 0}));
    assertThrows(
        IllegalArgumentException.class,
        () -> new Penalties(0, 0, 1, new int[] {3, 2}, new int[] {0, 0}));
    assertThrows(IllegalArgumentException.class, () -> new Penalties(0, 0, 1, new int[] {-1}, one));
    assertThrows(IllegalArgumentException.class, () -> new Penalties(0, 0, 1, one, new int[] {-1}));
    assertThrows(IllegalArgumentException.class, () -> new Penalties(2.5f, 0, 1, one, one));
    assertThrows(IllegalArgumentException.class, () -> new Penalties(0, Float.NaN, 1, one, one));
    assertThrows(IllegalArgumentException.class, () -> new Penalties(0, 0, 0, one, one));
    assertThrows(IllegalArgumentException.class, () -> new Penalties(0, 0, 11, one, one));
    IllegalArgumentException past =
        assertThrows(
            IllegalArgumentException.class,
            () -> new Penalties(0, 0, 2, new int[] {4}, one).apply(new float[4], 0));
    assertTrue(past.getMessage().contains("token id 4"), past.getMessage());
  }

  @Test
  void shouldCopyTheArraysInAndOut() {
    int[] ids = {1, 2};
    int[] counts = {0, 1};
    Penalties p = new Penalties(1, 1, 1, ids, counts);
    ids[0] = 9;
    counts[0] = 9;
    p.ids()[1] = 9;
    assertArrayEquals(new int[] {1, 2}, p.ids());
    assertArrayEquals(new int[] {0, 1}, p.outputCounts());
    assertEquals(new Penalties(1, 1, 1, new int[] {1, 2}, new int[] {0, 1}), p);
  }

  @Test
  void shouldValidateThePenaltiesOfTheParamsNamingTheFieldAndRange() {
    SamplingParams d = SamplingParams.defaults();
    assertEquals(false, d.hasPenalties());
    assertEquals(0.0, d.presencePenalty());
    assertEquals(0.0, d.frequencyPenalty());
    assertEquals(1.0, d.repetitionPenalty());
    assertTrue(d.withPenalties(0, 0, 1.5).hasPenalties());
    assertTrue(d.withPenalties(0, -0.1, 1).hasPenalties());
    assertTrue(d.withPenalties(2, 0, 1).hasPenalties());
    assertEquals(d, d.withPenalties(0, 0, 1));
    SamplingParams both = d.withPenalties(-2, 2, 10).withTemperature(0.5).withSeed(3);
    assertEquals(-2, both.presencePenalty());
    assertEquals(2, both.frequencyPenalty());
    assertEquals(10, both.repetitionPenalty());
    String[][] bad = {
      {"2.01", "0", "1", "presencePenalty=2.01 must be in [-2, 2]"},
      {"0", "-3", "1", "frequencyPenalty=-3.0 must be in [-2, 2]"},
      {"0", "NaN", "1", "frequencyPenalty=NaN must be in [-2, 2]"},
      {"0", "0", "0", "repetitionPenalty=0.0 must be in (0, 10]"},
      {"0", "0", "10.5", "repetitionPenalty=10.5 must be in (0, 10]"},
    };
    for (String[] b : bad) {
      IllegalArgumentException e =
          assertThrows(
              IllegalArgumentException.class,
              () ->
                  new SamplingParams(
                      1,
                      0,
                      1,
                      0,
                      OptionalLong.empty(),
                      4,
                      Set.of(),
                      false,
                      Double.parseDouble(b[0]),
                      Double.parseDouble(b[1]),
                      Double.parseDouble(b[2])));
      assertTrue(e.getMessage().startsWith(b[3]), e.getMessage());
    }
  }

  @Test
  void shouldGiveRowSamplingPenaltiesExactlyWhenTheParamsHaveThem() {
    SamplingParams plain = SamplingParams.greedy(4).withSeed(1);
    SamplingParams penalized = plain.withPenalties(0.5, 0, 1);
    Penalties p = new Penalties(0.5f, 0, 1, new int[] {1}, new int[] {1});
    assertEquals(null, new RowSampling(plain, 1, 0, -1).penalties());
    assertEquals(p, new RowSampling(penalized, 1, 0, -1, p).penalties());
    assertThrows(IllegalArgumentException.class, () -> new RowSampling(penalized, 1, 0, -1));
    assertThrows(IllegalArgumentException.class, () -> new RowSampling(plain, 1, 0, -1, p));
    Penalties other = new Penalties(0.25f, 0, 1, new int[] {1}, new int[] {1});
    assertThrows(IllegalArgumentException.class, () -> new RowSampling(penalized, 1, 0, -1, other));
  }
}

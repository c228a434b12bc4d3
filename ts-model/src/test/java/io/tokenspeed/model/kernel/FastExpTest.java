package io.tokenspeed.model.kernel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.SplittableRandom;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link FastExp} against {@link StrictMath#exp} rounded to float (at most 1 ulp apart over a dense
 * sweep of the floats in {@code [-104, 88.7]}), its special values, and its array form against its
 * scalar form bit for bit, tails and out-of-range lanes included.
 */
class FastExpTest {

  /** Every 127th float from 0 to {@code end} (the end included), negative or positive. */
  @ParameterizedTest(name = "[0, {0}]")
  @ValueSource(floats = {-104f, 88.7f})
  void shouldStayWithinOneUlpOfStrictMathWhenSweptDensely(float end) {
    int sign = Float.floatToRawIntBits(end) & 0x8000_0000;
    int last = Float.floatToRawIntBits(Math.abs(end));
    long worst = 0;
    float worstAt = 0f;
    for (int m = 0; m <= last; m = m < last ? Math.min(last, m + 127) : last + 1) {
      float x = Float.intBitsToFloat(sign | m);
      long ulps = ulps(FastExp.exp(x), (float) StrictMath.exp(x));
      if (ulps > worst) {
        worst = ulps;
        worstAt = x;
      }
    }
    assertTrue(worst <= 1, "max ulp error " + worst + " at x=" + worstAt);
  }

  @Test
  void shouldGiveExactZeroOneAndInfinityAtTheEnds() {
    float[] zero = {Float.NEGATIVE_INFINITY, -Float.MAX_VALUE, -1e30f, -1000f, -110f, -105f, -104f};
    for (float x : zero) {
      assertEquals(0, Float.floatToRawIntBits(FastExp.exp(x)), "exp(" + x + ") must be +0");
    }
    for (float x : new float[] {0f, -0f, Float.MIN_VALUE, -Float.MIN_VALUE}) {
      assertEquals(1f, FastExp.exp(x), "exp(" + x + ")");
    }
    for (float x : new float[] {Float.POSITIVE_INFINITY, Float.MAX_VALUE, 100f, 89f, 88.73f}) {
      assertEquals(Float.POSITIVE_INFINITY, FastExp.exp(x), "exp(" + x + ")");
    }
    assertTrue(Float.isNaN(FastExp.exp(Float.NaN)));
    // Subnormal results and the last normal ones, where the two-step scaling matters.
    for (float x : new float[] {-103.9f, -103f, -100f, -95.5f, -90f, -87.4f, -87.33f, -86f}) {
      assertTrue(ulps(FastExp.exp(x), (float) StrictMath.exp(x)) <= 1, "exp(" + x + ")");
    }
  }

  static Stream<Arguments> seeds() {
    return LongStream.range(1, 21).mapToObj(Arguments::of);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldMatchTheScalarFormBitForBitInTheArrayForm(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    for (int round = 0; round < 200; round++) {
      int n = 1 + rnd.nextInt(300);
      float[] x = new float[n];
      for (int i = 0; i < n; i++) {
        x[i] = input(rnd);
      }
      float shift = rnd.nextInt(4) == 0 ? 0f : input(rnd);
      int from = rnd.nextInt(n);
      int to = from + rnd.nextInt(n - from + 1);
      float[] actual = x.clone();
      FastExp.expShifted(actual, from, to, shift);
      for (int i = 0; i < n; i++) {
        float expected = i >= from && i < to ? FastExp.exp(x[i] - shift) : x[i];
        if (Float.isNaN(expected)) {
          assertTrue(Float.isNaN(actual[i]), "seed=" + seed + " x=" + x[i] + " shift=" + shift);
        } else {
          assertEquals(
              Float.floatToRawIntBits(expected),
              Float.floatToRawIntBits(actual[i]),
              "seed=" + seed + " x=" + x[i] + " shift=" + shift + " i=" + i);
        }
      }
    }
  }

  /** Softmax-like arguments, the underflow and overflow edges, and special values. */
  private static float input(SplittableRandom rnd) {
    return switch (rnd.nextInt(12)) {
      case 0 -> (float) rnd.nextDouble(-110, -80);
      case 1 -> (float) rnd.nextDouble(80, 95);
      case 2 -> (float) rnd.nextDouble(-1e4, 1e4);
      case 3 ->
          new float[] {
                0f,
                -0f,
                Float.NEGATIVE_INFINITY,
                Float.POSITIVE_INFINITY,
                Float.NaN,
                Float.MIN_VALUE,
                -Float.MAX_VALUE
              }
              [rnd.nextInt(7)];
      default -> (float) rnd.nextDouble(-30, 5);
    };
  }

  private static long ulps(float a, float b) {
    return Math.abs((long) Float.floatToRawIntBits(a) - Float.floatToRawIntBits(b));
  }
}

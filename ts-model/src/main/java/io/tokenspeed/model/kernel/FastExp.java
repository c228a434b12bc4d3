package io.tokenspeed.model.kernel;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

/**
 * {@code exp(x)} in float from a fixed sequence of float operations, one scalar form and one form
 * over an array that performs the same operations lane by lane, so both give the same bits on every
 * path (interpreted, C1, C2) and every vector width.
 *
 * <pre>
 *   c  = min(max(x, -110), 89)                        NaN stays NaN
 *   t  = fma(c, log2(e), 1.5·2²³)                      t's low bits hold n = round(c·log2(e))
 *   n  = t − 1.5·2²³                                   exact
 *   r  = fma(n, −ln2_hi, c);  r = fma(n, −ln2_lo, r)    |r| ≲ ln2/2
 *   p  = P5;  p = fma(p, r, Pi)   for i = 4, 3, 2, 1, 0
 *   y  = fma(p, r·r, r) + 1                             e^r
 *   k  = bits(t) − bits(1.5·2²³) = n,  k1 = k >> 1,  k2 = k − k1
 *   exp(x) = (y · 2^k1) · 2^k2                          2^k1, 2^k2 stay normal floats
 * </pre>
 *
 * <p>The first product is exact (y is near 1 and 2^k1 ≥ 2⁻⁸⁰), so a subnormal result is rounded
 * once. Within 1 ulp of {@link StrictMath#exp} rounded to float for every float in {@code [-104,
 * 88.7]}; {@code exp(-∞)} and every {@code x ≤ -104} give exactly {@code +0}, {@code exp(+∞)} and
 * every {@code x ≥ 88.73} give {@code +∞}. The array form uses no {@code VectorOperators.EXP},
 * whose results depend on where the code runs.
 */
public final class FastExp {
  private static final float LOW = -110f;
  private static final float HIGH = 89f;
  private static final float LOG2E = 1.44269504f;
  private static final float SHIFT = 12582912f;
  private static final int SHIFT_BITS = Float.floatToRawIntBits(SHIFT);
  private static final float LN2_HI = 0.693147182f;
  private static final float LN2_LO = -1.90465421e-9f;
  private static final float P5 = 1.9875691500e-4f;
  private static final float P4 = 1.3981999507e-3f;
  private static final float P3 = 8.3334519073e-3f;
  private static final float P2 = 4.1665795894e-2f;
  private static final float P1 = 1.6666665459e-1f;
  private static final float P0 = 5.0000001201e-1f;

  private FastExp() {}

  /** {@code exp(x)}, the scalar form. */
  public static float exp(float x) {
    float c = Math.min(Math.max(x, LOW), HIGH);
    float t = Math.fma(c, LOG2E, SHIFT);
    float n = t - SHIFT;
    float r = Math.fma(n, -LN2_HI, c);
    r = Math.fma(n, -LN2_LO, r);
    float p = Math.fma(P5, r, P4);
    p = Math.fma(p, r, P3);
    p = Math.fma(p, r, P2);
    p = Math.fma(p, r, P1);
    p = Math.fma(p, r, P0);
    float y = Math.fma(p, r * r, r) + 1f;
    int k = Float.floatToRawIntBits(t) - SHIFT_BITS;
    int k1 = k >> 1;
    int k2 = k - k1;
    return y * Float.intBitsToFloat((k1 + 127) << 23) * Float.intBitsToFloat((k2 + 127) << 23);
  }

  /**
   * {@code x[i] = exp(x[i] − shift)} for {@code i} in {@code [from, to)}: whole vectors of {@link
   * VectorMath#SPECIES} with the operations of {@link #exp(float)} lane by lane, the rest with
   * {@link #exp(float)} itself. The loop holds the vector form so that it compiles with a constant
   * species whether or not the caller inlines it.
   */
  public static void expShifted(float[] x, int from, int to, float shift) {
    VectorSpecies<Float> species = VectorMath.SPECIES;
    int i = from;
    for (; i + species.length() <= to; i += species.length()) {
      FloatVector v = FloatVector.fromArray(species, x, i).sub(shift);
      FloatVector c = v.max(LOW).min(HIGH);
      FloatVector t = c.fma(LOG2E, SHIFT);
      FloatVector n = t.sub(SHIFT);
      FloatVector r = n.fma(v.broadcast(-LN2_HI), c);
      r = n.fma(v.broadcast(-LN2_LO), r);
      FloatVector p = r.fma(P5, P4);
      p = p.fma(r, v.broadcast(P3));
      p = p.fma(r, v.broadcast(P2));
      p = p.fma(r, v.broadcast(P1));
      p = p.fma(r, v.broadcast(P0));
      FloatVector y = p.fma(r.mul(r), r).add(1f);
      IntVector k = ((IntVector) t.viewAsIntegralLanes()).sub(SHIFT_BITS);
      IntVector k1 = k.lanewise(VectorOperators.ASHR, 1);
      IntVector k2 = k.sub(k1);
      FloatVector s1 =
          (FloatVector) k1.add(127).lanewise(VectorOperators.LSHL, 23).viewAsFloatingLanes();
      FloatVector s2 =
          (FloatVector) k2.add(127).lanewise(VectorOperators.LSHL, 23).viewAsFloatingLanes();
      y.mul(s1).mul(s2).intoArray(x, i);
    }
    for (; i < to; i++) {
      x[i] = exp(x[i] - shift);
    }
  }
}

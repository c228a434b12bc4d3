package io.tokenspeed.model.kernel;

import io.tokenspeed.model.checkpoint.Tensor;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;

/**
 * The one dot product every kernel uses, and its fixed reduction order.
 *
 * <pre>
 *   n elements, L = lanes of the preferred species
 *   acc[l] = fma(a[i], b[i], acc[l])  for i = l, l+L, l+2L, ... below loopBound(n)   (lane-wise)
 *   s = ((acc[0] + acc[1]) + acc[2]) + ... + acc[L-1]                               (sequential)
 *   s = fma(a[i], b[i], s)            for the tail i = loopBound(n) .. n-1            (sequential)
 * </pre>
 *
 * <p>The lanes are summed one by one rather than with {@code reduceLanes}, whose order the Vector
 * API leaves unspecified (and which may differ between interpreted and compiled code). The result
 * therefore depends only on the two operand vectors and the species, never on who calls or when.
 * Operands come from heap arrays or from little-endian memory segments (mapped F32 weights, the
 * paged KV pool); both paths perform the same operations, so a BF16 row widened into an array and
 * the same values stored as F32 give bit-identical dots.
 */
public final class VectorMath {
  /** The species all kernels use. */
  public static final VectorSpecies<Float> SPECIES = FloatVector.SPECIES_PREFERRED;

  private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;

  private VectorMath() {}

  /** Dot of {@code a[aOff..aOff+n)} and {@code b[bOff..bOff+n)}. */
  public static float dot(float[] a, int aOff, float[] b, int bOff, int n) {
    FloatVector acc = FloatVector.zero(SPECIES);
    int bound = SPECIES.loopBound(n);
    int i = 0;
    for (; i < bound; i += SPECIES.length()) {
      FloatVector va = FloatVector.fromArray(SPECIES, a, aOff + i);
      FloatVector vb = FloatVector.fromArray(SPECIES, b, bOff + i);
      acc = va.fma(vb, acc);
    }
    float s = sumLanes(acc);
    for (; i < n; i++) {
      s = Math.fma(a[aOff + i], b[bOff + i], s);
    }
    return s;
  }

  /**
   * Dot of {@code a[aOff..aOff+n)} and {@code n} little-endian floats at byte {@code bOffBytes}.
   */
  public static float dot(float[] a, int aOff, MemorySegment b, long bOffBytes, int n) {
    FloatVector acc = FloatVector.zero(SPECIES);
    int bound = SPECIES.loopBound(n);
    int i = 0;
    for (; i < bound; i += SPECIES.length()) {
      FloatVector va = FloatVector.fromArray(SPECIES, a, aOff + i);
      FloatVector vb = FloatVector.fromMemorySegment(SPECIES, b, bOffBytes + 4L * i, LE);
      acc = va.fma(vb, acc);
    }
    float s = sumLanes(acc);
    for (; i < n; i++) {
      s = Math.fma(a[aOff + i], b.get(Tensor.F32_LE, bOffBytes + 4L * i), s);
    }
    return s;
  }

  /** Sum of squares of {@code a[off..off+n)}, in the same order as {@link #dot}. */
  public static float sumOfSquares(float[] a, int off, int n) {
    return dot(a, off, a, off, n);
  }

  /**
   * {@code acc[accOff+d] = fma(p, v[d], acc[accOff+d])} for {@code d < n}, with {@code v} read
   * little-endian from {@code seg} at byte {@code vOffBytes}. Lane-wise: each element sees one
   * fused multiply-add, so the order across calls is the caller's.
   */
  public static void axpy(
      float p, MemorySegment seg, long vOffBytes, float[] acc, int accOff, int n) {
    int bound = SPECIES.loopBound(n);
    int i = 0;
    FloatVector vp = FloatVector.broadcast(SPECIES, p);
    for (; i < bound; i += SPECIES.length()) {
      FloatVector v = FloatVector.fromMemorySegment(SPECIES, seg, vOffBytes + 4L * i, LE);
      FloatVector a = FloatVector.fromArray(SPECIES, acc, accOff + i);
      vp.fma(v, a).intoArray(acc, accOff + i);
    }
    for (; i < n; i++) {
      acc[accOff + i] = Math.fma(p, seg.get(Tensor.F32_LE, vOffBytes + 4L * i), acc[accOff + i]);
    }
  }

  static float sumLanes(FloatVector v) {
    float s = 0f;
    for (int l = 0; l < SPECIES.length(); l++) {
      s += v.lane(l);
    }
    return s;
  }
}

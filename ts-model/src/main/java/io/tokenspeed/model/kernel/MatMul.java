package io.tokenspeed.model.kernel;

import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.Tensor;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;

/**
 * {@code y = x · Wᵀ (+ b)}: {@code x} is {@code [rows][in]} on the heap, {@code W} a mapped weight
 * {@code [out][in]} (F32, BF16 or F16), {@code y} is {@code [rows][out]}.
 *
 * <p>Exactness: {@code y[t][o]} is bit-identical to {@link VectorMath#dot}{@code (x[t], W[o])}
 * (then {@code + b[o]}). It does not depend on the other rows of {@code x} (other requests, other
 * tokens of the chunk), on the thread count, or on whether the weight was widened from BF16/F16 or
 * read as F32.
 *
 * <p>Why it is still fast: a single dot is one FMA dependency chain, so it runs at the FMA latency,
 * not its throughput, and reloads its weight vector for every token. This kernel computes a tile of
 * up to 4 tokens × 4 weight rows at once. Each of the 16 outputs keeps its own vector accumulator
 * and sees exactly the dot's operations in the dot's order:
 *
 * <pre>
 *   for i = 0, L, 2L, ... below loopBound(in):           (L = lanes of VectorMath.SPECIES)
 *     w0..w3 = W[o..o+3][i..i+L)                         loaded once, used by 4 tokens
 *     u      = x[t+j][i..i+L)                            loaded once, used by 4 weight rows
 *     acc[j][r] = fma(u, w_r, acc[j][r])                 16 independent chains
 *   y[t+j][o+r] = tail(sumLanes(acc[j][r]))              the dot's lane sum and scalar tail
 * </pre>
 *
 * Interleaving independent accumulators changes only which instruction issues when, never an
 * operand of any output's own sequence, so the values are those of the one-chain dot ({@code
 * MatMulExactnessTest} compares them bit for bit with a copy of the one-dot kernel).
 *
 * <p>Threading: the weight rows are split into contiguous ranges of whole 4-row blocks, one range
 * per thread. A thread widens (or copies, for F32) each 4-row block once into a scratch array and
 * runs it against every token, so each weight byte is read from memory once per call. A step of
 * fewer than 4 tokens with F32 weights (decode) runs the one-chain dot straight on the mapped rows:
 * measured, four interleaved mapped streams were slower there than one.
 */
public final class MatMul {
  /** Weight rows per tile (and per unit of the thread split). */
  static final int ROW_BLOCK = 4;

  /** Tokens per tile. */
  static final int TOKEN_BLOCK = 4;

  private static final VectorSpecies<Float> SPECIES = VectorMath.SPECIES;
  private static final int L = SPECIES.length();

  private MatMul() {}

  /** Computes {@code y[t*out + o]} for {@code t < rows}, {@code o < out}. */
  public static void apply(
      ComputePool pool, float[] x, int rows, Tensor w, float[] bias, float[] y) {
    if (w.rank() != 2) {
      throw new IllegalArgumentException("weight " + w.name() + " rank=" + w.rank() + " must be 2");
    }
    int out = w.dim(0);
    int in = w.dim(1);
    if (x.length < (long) rows * in || y.length < (long) rows * out) {
      throw new IllegalArgumentException(
          "matmul "
              + w.name()
              + " rows="
              + rows
              + " x.length="
              + x.length
              + " y.length="
              + y.length);
    }
    if (bias != null && bias.length != out) {
      throw new IllegalArgumentException(
          "matmul " + w.name() + " bias.length=" + bias.length + " out=" + out);
    }
    if (rows <= 0) {
      return;
    }
    int blocks = (out + ROW_BLOCK - 1) / ROW_BLOCK;
    boolean mapped = w.dtype() == DType.F32 && rows < TOKEN_BLOCK;
    pool.parallelFor(
        blocks,
        (from, to) -> {
          float[] wBlock = mapped ? null : new float[ROW_BLOCK * in];
          for (int blk = from; blk < to; blk++) {
            int o = blk * ROW_BLOCK;
            int n = Math.min(ROW_BLOCK, out - o);
            if (mapped) {
              for (int r = 0; r < n; r++) {
                for (int t = 0; t < rows; t++) {
                  float d = VectorMath.dot(x, t * in, w.data(), (long) (o + r) * in * 4, in);
                  y[t * out + o + r] = bias == null ? d : d + bias[o + r];
                }
              }
              continue;
            }
            w.readFloats((long) o * in, wBlock, 0, n * in);
            if (n == ROW_BLOCK) {
              int t = 0;
              for (; t + TOKEN_BLOCK <= rows; t += TOKEN_BLOCK) {
                tile4x4(x, t, in, wBlock, o, out, bias, y);
              }
              for (; t < rows; t++) {
                tile1x4(x, t, in, wBlock, o, out, bias, y);
              }
            } else {
              for (int r = 0; r < n; r++) {
                float b = bias == null ? 0f : bias[o + r];
                for (int t = 0; t < rows; t++) {
                  float d = VectorMath.dot(x, t * in, wBlock, r * in, in);
                  y[t * out + o + r] = bias == null ? d : d + b;
                }
              }
            }
          }
        });
  }

  /** Tokens {@code t..t+3} against the 4 rows in {@code wb}, written to columns {@code o..o+3}. */
  private static void tile4x4(
      float[] x, int t, int in, float[] wb, int o, int out, float[] bias, float[] y) {
    int x0 = t * in;
    int x1 = x0 + in;
    int x2 = x1 + in;
    int x3 = x2 + in;
    int w1 = in;
    int w2 = 2 * in;
    int w3 = 3 * in;
    FloatVector a00 = FloatVector.zero(SPECIES);
    FloatVector a01 = a00;
    FloatVector a02 = a00;
    FloatVector a03 = a00;
    FloatVector a10 = a00;
    FloatVector a11 = a00;
    FloatVector a12 = a00;
    FloatVector a13 = a00;
    FloatVector a20 = a00;
    FloatVector a21 = a00;
    FloatVector a22 = a00;
    FloatVector a23 = a00;
    FloatVector a30 = a00;
    FloatVector a31 = a00;
    FloatVector a32 = a00;
    FloatVector a33 = a00;
    int bound = SPECIES.loopBound(in);
    for (int i = 0; i < bound; i += L) {
      FloatVector v0 = FloatVector.fromArray(SPECIES, wb, i);
      FloatVector v1 = FloatVector.fromArray(SPECIES, wb, w1 + i);
      FloatVector v2 = FloatVector.fromArray(SPECIES, wb, w2 + i);
      FloatVector v3 = FloatVector.fromArray(SPECIES, wb, w3 + i);
      FloatVector u = FloatVector.fromArray(SPECIES, x, x0 + i);
      a00 = u.fma(v0, a00);
      a01 = u.fma(v1, a01);
      a02 = u.fma(v2, a02);
      a03 = u.fma(v3, a03);
      u = FloatVector.fromArray(SPECIES, x, x1 + i);
      a10 = u.fma(v0, a10);
      a11 = u.fma(v1, a11);
      a12 = u.fma(v2, a12);
      a13 = u.fma(v3, a13);
      u = FloatVector.fromArray(SPECIES, x, x2 + i);
      a20 = u.fma(v0, a20);
      a21 = u.fma(v1, a21);
      a22 = u.fma(v2, a22);
      a23 = u.fma(v3, a23);
      u = FloatVector.fromArray(SPECIES, x, x3 + i);
      a30 = u.fma(v0, a30);
      a31 = u.fma(v1, a31);
      a32 = u.fma(v2, a32);
      a33 = u.fma(v3, a33);
    }
    int y0 = t * out + o;
    int y1 = y0 + out;
    int y2 = y1 + out;
    int y3 = y2 + out;
    y[y0] = finish(a00, x, x0, wb, 0, bound, in, bias, o);
    y[y0 + 1] = finish(a01, x, x0, wb, w1, bound, in, bias, o + 1);
    y[y0 + 2] = finish(a02, x, x0, wb, w2, bound, in, bias, o + 2);
    y[y0 + 3] = finish(a03, x, x0, wb, w3, bound, in, bias, o + 3);
    y[y1] = finish(a10, x, x1, wb, 0, bound, in, bias, o);
    y[y1 + 1] = finish(a11, x, x1, wb, w1, bound, in, bias, o + 1);
    y[y1 + 2] = finish(a12, x, x1, wb, w2, bound, in, bias, o + 2);
    y[y1 + 3] = finish(a13, x, x1, wb, w3, bound, in, bias, o + 3);
    y[y2] = finish(a20, x, x2, wb, 0, bound, in, bias, o);
    y[y2 + 1] = finish(a21, x, x2, wb, w1, bound, in, bias, o + 1);
    y[y2 + 2] = finish(a22, x, x2, wb, w2, bound, in, bias, o + 2);
    y[y2 + 3] = finish(a23, x, x2, wb, w3, bound, in, bias, o + 3);
    y[y3] = finish(a30, x, x3, wb, 0, bound, in, bias, o);
    y[y3 + 1] = finish(a31, x, x3, wb, w1, bound, in, bias, o + 1);
    y[y3 + 2] = finish(a32, x, x3, wb, w2, bound, in, bias, o + 2);
    y[y3 + 3] = finish(a33, x, x3, wb, w3, bound, in, bias, o + 3);
  }

  /** Token {@code t} against the 4 rows in {@code wb}: four independent chains. */
  private static void tile1x4(
      float[] x, int t, int in, float[] wb, int o, int out, float[] bias, float[] y) {
    int x0 = t * in;
    int w1 = in;
    int w2 = 2 * in;
    int w3 = 3 * in;
    FloatVector a0 = FloatVector.zero(SPECIES);
    FloatVector a1 = a0;
    FloatVector a2 = a0;
    FloatVector a3 = a0;
    int bound = SPECIES.loopBound(in);
    for (int i = 0; i < bound; i += L) {
      FloatVector u = FloatVector.fromArray(SPECIES, x, x0 + i);
      a0 = u.fma(FloatVector.fromArray(SPECIES, wb, i), a0);
      a1 = u.fma(FloatVector.fromArray(SPECIES, wb, w1 + i), a1);
      a2 = u.fma(FloatVector.fromArray(SPECIES, wb, w2 + i), a2);
      a3 = u.fma(FloatVector.fromArray(SPECIES, wb, w3 + i), a3);
    }
    int y0 = t * out + o;
    y[y0] = finish(a0, x, x0, wb, 0, bound, in, bias, o);
    y[y0 + 1] = finish(a1, x, x0, wb, w1, bound, in, bias, o + 1);
    y[y0 + 2] = finish(a2, x, x0, wb, w2, bound, in, bias, o + 2);
    y[y0 + 3] = finish(a3, x, x0, wb, w3, bound, in, bias, o + 3);
  }

  /** The rest of {@link VectorMath#dot} after its vector loop: lane sum, scalar tail, bias. */
  private static float finish(
      FloatVector acc,
      float[] x,
      int xOff,
      float[] wb,
      int wOff,
      int bound,
      int in,
      float[] bias,
      int o) {
    float s = VectorMath.sumLanes(acc);
    for (int i = bound; i < in; i++) {
      s = Math.fma(x[xOff + i], wb[wOff + i], s);
    }
    return bias == null ? s : s + bias[o];
  }
}

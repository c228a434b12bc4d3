package io.tokenspeed.model.kernel;

import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;

/**
 * {@code y = x · Wᵀ (+ b)}: {@code x} is {@code [rows][in]} on the heap, {@code W} a {@link
 * PackedMatrix} {@code [out][in]}, {@code y} is {@code [rows][out]}.
 *
 * <p>Exactness: every output is one sequential chain of fused multiply-adds over the inputs, in
 * input order, then the bias:
 *
 * <pre>
 *   s = +0.0
 *   s = fma(x[t][k], W[o][k], s)     for k = 0, 1, ..., in-1
 *   y[t][o] = s (+ b[o])
 * </pre>
 *
 * That is exactly {@code Math.fma} in a scalar loop. It depends on nothing but row {@code t} of
 * {@code x} and row {@code o} of {@code W}: not on the other rows of {@code x} (other requests,
 * other tokens of the chunk, how a prompt was chunked), the thread count, the vector width of the
 * machine, or whether the weight was stored as BF16, F16 or F32 ({@code MatMulExactnessTest}
 * compares with that scalar loop bit for bit).
 *
 * <p>Why it is fast: the vector lanes run over outputs, not over inputs. A tile of 6 tokens × 1
 * panel ({@link PackedMatrix#PANEL} outputs, four vectors) keeps 24 vector accumulators in
 * registers; each input step loads four weight vectors once for the six tokens and broadcasts one
 * input of each token once for the four vectors:
 *
 * <pre>
 *   for k in 0 .. in-1:
 *     w0..w3 = panel[k][0 .. 4L)                      (L = lanes; one contiguous 4L-float row)
 *     for j in 0..5:  a = broadcast(x[t+j][k])
 *                     acc[j][v] = fma(a, w_v, acc[j][v])     v = 0..3: 24 independent chains
 *   y[t+j][o+vL .. o+vL+L) = acc[j][v]
 * </pre>
 *
 * Lane {@code l} of {@code acc[j][v]} is the chain of output {@code o+vL+l} for token {@code t+j},
 * and a lane-wise fused multiply-add is the scalar one, so the vector code computes exactly the
 * scalar chains above. Rows left over after the 6-token tiles run one at a time (decode steps of
 * one token take that path); the padded columns of the last panel go to a scratch tile and are
 * dropped.
 *
 * <p>Threading: the work is panels (× token slices when there are fewer panels than threads), split
 * into contiguous ranges, so a thread streams its own panels and every weight byte is read from
 * memory about once per call.
 */
public final class MatMul {
  /** Tokens per tile. */
  static final int TOKEN_TILE = 6;

  private static final VectorSpecies<Float> SPECIES = VectorMath.SPECIES;
  private static final int L = SPECIES.length();
  private static final ByteOrder NATIVE = ByteOrder.nativeOrder();
  private static final long VECTOR_BYTES = (long) L * Float.BYTES;
  private static final long STEP_BYTES = (long) PackedMatrix.PANEL * Float.BYTES;

  private MatMul() {}

  /** Computes {@code y[t*out + o]} for {@code t < rows}, {@code o < out}. */
  public static void apply(
      ComputePool pool, float[] x, int rows, PackedMatrix w, float[] bias, float[] y) {
    int out = w.dim(0);
    int in = w.dim(1);
    if (rows < 0 || x.length < (long) rows * in || y.length < (long) rows * out) {
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
    if (rows == 0) {
      return;
    }
    MemorySegment[] b = w.panelsOn(pool);
    int panels = w.panels();
    int slices = tokenSlices(pool.threads(), panels, rows);
    pool.parallelFor(
        panels * slices,
        (from, to) -> {
          float[] scratch = new float[TOKEN_TILE * PackedMatrix.PANEL];
          for (int item = from; item < to; item++) {
            int p = item / slices;
            int s = item % slices;
            int t0 = (int) ((long) rows * s / slices);
            int t1 = (int) ((long) rows * (s + 1) / slices);
            panel(x, t0, t1, in, b[p], p * PackedMatrix.PANEL, out, bias, y, scratch);
          }
        });
  }

  /** Token slices per panel: enough work items for every thread, tiles of whole 6-token runs. */
  private static int tokenSlices(int threads, int panels, int rows) {
    if (panels >= threads) {
      return 1;
    }
    int wanted = (threads + panels - 1) / panels;
    return Math.max(1, Math.min(wanted, rows / TOKEN_TILE));
  }

  /** Tokens {@code t0..t1-1} against the panel {@code b} of outputs {@code o0..}. */
  private static void panel(
      float[] x,
      int t0,
      int t1,
      int in,
      MemorySegment b,
      int o0,
      int out,
      float[] bias,
      float[] y,
      float[] scratch) {
    int n = Math.min(PackedMatrix.PANEL, out - o0);
    boolean whole = n == PackedMatrix.PANEL;
    int t = t0;
    while (t < t1) {
      int tile = t1 - t >= TOKEN_TILE ? TOKEN_TILE : 1;
      if (whole) {
        if (tile == TOKEN_TILE) {
          tile6(x, t * in, in, b, y, t * out + o0, out);
        } else {
          tile1(x, t * in, in, b, y, t * out + o0, out);
        }
      } else {
        if (tile == TOKEN_TILE) {
          tile6(x, t * in, in, b, scratch, 0, PackedMatrix.PANEL);
        } else {
          tile1(x, t * in, in, b, scratch, 0, PackedMatrix.PANEL);
        }
        for (int j = 0; j < tile; j++) {
          System.arraycopy(scratch, j * PackedMatrix.PANEL, y, (t + j) * out + o0, n);
        }
      }
      if (bias != null) {
        for (int j = 0; j < tile; j++) {
          int row = (t + j) * out;
          for (int c = o0; c < o0 + n; c++) {
            y[row + c] = y[row + c] + bias[c];
          }
        }
      }
      t += tile;
    }
  }

  /**
   * Rows {@code x[xOff..]} (stride {@code in}) ×6 against one panel, into {@code y[yOff..]} (stride
   * {@code yStride}).
   */
  private static void tile6(
      float[] x, int xOff, int in, MemorySegment b, float[] y, int yOff, int yStride) {
    FloatVector zero = FloatVector.zero(SPECIES);
    FloatVector c00 = zero;
    FloatVector c01 = zero;
    FloatVector c02 = zero;
    FloatVector c03 = zero;
    FloatVector c10 = zero;
    FloatVector c11 = zero;
    FloatVector c12 = zero;
    FloatVector c13 = zero;
    FloatVector c20 = zero;
    FloatVector c21 = zero;
    FloatVector c22 = zero;
    FloatVector c23 = zero;
    FloatVector c30 = zero;
    FloatVector c31 = zero;
    FloatVector c32 = zero;
    FloatVector c33 = zero;
    FloatVector c40 = zero;
    FloatVector c41 = zero;
    FloatVector c42 = zero;
    FloatVector c43 = zero;
    FloatVector c50 = zero;
    FloatVector c51 = zero;
    FloatVector c52 = zero;
    FloatVector c53 = zero;
    int x0 = xOff;
    int x1 = xOff + 1 * in;
    int x2 = xOff + 2 * in;
    int x3 = xOff + 3 * in;
    int x4 = xOff + 4 * in;
    int x5 = xOff + 5 * in;
    long at = 0;
    for (int k = 0; k < in; k++, at += STEP_BYTES) {
      FloatVector b0 = FloatVector.fromMemorySegment(SPECIES, b, at, NATIVE);
      FloatVector b1 = FloatVector.fromMemorySegment(SPECIES, b, at + VECTOR_BYTES, NATIVE);
      FloatVector b2 = FloatVector.fromMemorySegment(SPECIES, b, at + 2 * VECTOR_BYTES, NATIVE);
      FloatVector b3 = FloatVector.fromMemorySegment(SPECIES, b, at + 3 * VECTOR_BYTES, NATIVE);
      FloatVector a0 = FloatVector.broadcast(SPECIES, x[x0 + k]);
      c00 = a0.fma(b0, c00);
      c01 = a0.fma(b1, c01);
      c02 = a0.fma(b2, c02);
      c03 = a0.fma(b3, c03);
      FloatVector a1 = FloatVector.broadcast(SPECIES, x[x1 + k]);
      c10 = a1.fma(b0, c10);
      c11 = a1.fma(b1, c11);
      c12 = a1.fma(b2, c12);
      c13 = a1.fma(b3, c13);
      FloatVector a2 = FloatVector.broadcast(SPECIES, x[x2 + k]);
      c20 = a2.fma(b0, c20);
      c21 = a2.fma(b1, c21);
      c22 = a2.fma(b2, c22);
      c23 = a2.fma(b3, c23);
      FloatVector a3 = FloatVector.broadcast(SPECIES, x[x3 + k]);
      c30 = a3.fma(b0, c30);
      c31 = a3.fma(b1, c31);
      c32 = a3.fma(b2, c32);
      c33 = a3.fma(b3, c33);
      FloatVector a4 = FloatVector.broadcast(SPECIES, x[x4 + k]);
      c40 = a4.fma(b0, c40);
      c41 = a4.fma(b1, c41);
      c42 = a4.fma(b2, c42);
      c43 = a4.fma(b3, c43);
      FloatVector a5 = FloatVector.broadcast(SPECIES, x[x5 + k]);
      c50 = a5.fma(b0, c50);
      c51 = a5.fma(b1, c51);
      c52 = a5.fma(b2, c52);
      c53 = a5.fma(b3, c53);
    }
    int y0 = yOff;
    c00.intoArray(y, y0);
    c01.intoArray(y, y0 + 1 * L);
    c02.intoArray(y, y0 + 2 * L);
    c03.intoArray(y, y0 + 3 * L);
    int y1 = yOff + 1 * yStride;
    c10.intoArray(y, y1);
    c11.intoArray(y, y1 + 1 * L);
    c12.intoArray(y, y1 + 2 * L);
    c13.intoArray(y, y1 + 3 * L);
    int y2 = yOff + 2 * yStride;
    c20.intoArray(y, y2);
    c21.intoArray(y, y2 + 1 * L);
    c22.intoArray(y, y2 + 2 * L);
    c23.intoArray(y, y2 + 3 * L);
    int y3 = yOff + 3 * yStride;
    c30.intoArray(y, y3);
    c31.intoArray(y, y3 + 1 * L);
    c32.intoArray(y, y3 + 2 * L);
    c33.intoArray(y, y3 + 3 * L);
    int y4 = yOff + 4 * yStride;
    c40.intoArray(y, y4);
    c41.intoArray(y, y4 + 1 * L);
    c42.intoArray(y, y4 + 2 * L);
    c43.intoArray(y, y4 + 3 * L);
    int y5 = yOff + 5 * yStride;
    c50.intoArray(y, y5);
    c51.intoArray(y, y5 + 1 * L);
    c52.intoArray(y, y5 + 2 * L);
    c53.intoArray(y, y5 + 3 * L);
  }

  /**
   * Rows {@code x[xOff..]} (stride {@code in}) ×1 against one panel, into {@code y[yOff..]} (stride
   * {@code yStride}).
   */
  private static void tile1(
      float[] x, int xOff, int in, MemorySegment b, float[] y, int yOff, int yStride) {
    FloatVector zero = FloatVector.zero(SPECIES);
    FloatVector c00 = zero;
    FloatVector c01 = zero;
    FloatVector c02 = zero;
    FloatVector c03 = zero;
    int x0 = xOff;
    long at = 0;
    for (int k = 0; k < in; k++, at += STEP_BYTES) {
      FloatVector b0 = FloatVector.fromMemorySegment(SPECIES, b, at, NATIVE);
      FloatVector b1 = FloatVector.fromMemorySegment(SPECIES, b, at + VECTOR_BYTES, NATIVE);
      FloatVector b2 = FloatVector.fromMemorySegment(SPECIES, b, at + 2 * VECTOR_BYTES, NATIVE);
      FloatVector b3 = FloatVector.fromMemorySegment(SPECIES, b, at + 3 * VECTOR_BYTES, NATIVE);
      FloatVector a0 = FloatVector.broadcast(SPECIES, x[x0 + k]);
      c00 = a0.fma(b0, c00);
      c01 = a0.fma(b1, c01);
      c02 = a0.fma(b2, c02);
      c03 = a0.fma(b3, c03);
    }
    int y0 = yOff;
    c00.intoArray(y, y0);
    c01.intoArray(y, y0 + 1 * L);
    c02.intoArray(y, y0 + 2 * L);
    c03.intoArray(y, y0 + 3 * L);
  }
}

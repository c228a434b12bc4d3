package io.tokenspeed.model.kernel;

import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.Tensor;

/**
 * {@code y = x · Wᵀ (+ b)}: {@code x} is {@code [rows][in]} on the heap, {@code W} a mapped weight
 * {@code [out][in]} (F32, BF16 or F16), {@code y} is {@code [rows][out]}.
 *
 * <p>Threading: the {@code out} weight rows are split into contiguous ranges, one per thread; a
 * thread reads each of its weight rows once (widening BF16/F16 into a per-thread scratch row) and
 * computes that output column for every input row.
 *
 * <p>Exactness: {@code y[t][o]} is one {@link VectorMath#dot} of {@code x[t]} and {@code W[o]}
 * (then {@code + b[o]}), computed by one thread in the dot's fixed order. It does not depend on the
 * other rows of {@code x} (other requests, other tokens of the chunk), on the thread count, or on
 * whether the weight was widened from BF16/F16 or read as F32.
 */
public final class MatMul {
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
    boolean direct = w.dtype() == DType.F32;
    pool.parallelFor(
        out,
        (from, to) -> {
          float[] row = direct ? null : new float[in];
          for (int o = from; o < to; o++) {
            long rowBytes = (long) o * in * 4;
            if (!direct) {
              w.readFloats((long) o * in, row, 0, in);
            }
            float b = bias == null ? 0f : bias[o];
            for (int t = 0; t < rows; t++) {
              float d =
                  direct
                      ? VectorMath.dot(x, t * in, w.data(), rowBytes, in)
                      : VectorMath.dot(x, t * in, row, 0, in);
              y[t * out + o] = bias == null ? d : d + b;
            }
          }
        });
  }
}

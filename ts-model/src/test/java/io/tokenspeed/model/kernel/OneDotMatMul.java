package io.tokenspeed.model.kernel;

import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.Tensor;

/**
 * The matmul as it was before register tiling, kept as the reference {@link MatMul} must match bit
 * for bit: {@code y[t][o]} is one {@link VectorMath#dot} of {@code x[t]} and {@code W[o]} (then
 * {@code + b[o]}), a single FMA chain, F32 weights read straight from the mapping.
 */
final class OneDotMatMul {
  private OneDotMatMul() {}

  static void apply(ComputePool pool, float[] x, int rows, Tensor w, float[] bias, float[] y) {
    int out = w.dim(0);
    int in = w.dim(1);
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

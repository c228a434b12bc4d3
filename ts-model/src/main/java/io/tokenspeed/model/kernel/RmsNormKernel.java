package io.tokenspeed.model.kernel;

/**
 * RMSNorm over rows: {@code out[r][i] = w[i] * (x[r][i] * (1 / sqrt(mean(x[r]²) + eps)))}, or with
 * {@code (1 + w[i])} when {@code offsetOne} (Gemma's convention). Used for the residual stream and,
 * with rows of {@code head_dim}, for per-head QK-norm.
 *
 * <p>Exactness: a row is normalized by one thread; its sum of squares is {@link
 * VectorMath#sumOfSquares} in the dot's fixed order, the scale uses the correctly rounded {@code
 * Math.sqrt}, and each element is two float multiplies. A row's result depends on nothing but the
 * row.
 */
public final class RmsNormKernel {
  private RmsNormKernel() {}

  /** Normalizes {@code rows} rows of width {@code n}; {@code out} may be {@code x}. */
  public static void apply(
      ComputePool pool,
      float[] x,
      int rows,
      int n,
      float[] w,
      float eps,
      boolean offsetOne,
      float[] out) {
    if (w.length != n) {
      throw new IllegalArgumentException("rmsnorm weight length=" + w.length + " n=" + n);
    }
    pool.parallelFor(
        rows,
        (from, to) -> {
          for (int r = from; r < to; r++) {
            row(x, r * n, n, w, eps, offsetOne, out);
          }
        });
  }

  /** One row, on the calling thread. */
  public static void row(
      float[] x, int off, int n, float[] w, float eps, boolean offsetOne, float[] out) {
    float mean = VectorMath.sumOfSquares(x, off, n) / n;
    float inv = (float) (1.0 / Math.sqrt(mean + eps));
    for (int i = 0; i < n; i++) {
      float scale = offsetOne ? 1f + w[i] : w[i];
      out[off + i] = scale * (x[off + i] * inv);
    }
  }
}

package io.tokenspeed.model.kernel;

/**
 * Softmax of one row in place: {@code m = max}, {@code e_i = exp(x_i − m)} ({@link
 * StrictMath#exp}), {@code s = Σ e_i} summed left to right, {@code x_i = e_i / s}. Exactness: one
 * thread, a fixed left-to-right order, no vector reductions, so a row's result depends only on its
 * values.
 */
public final class Softmax {
  private Softmax() {}

  /** Normalizes {@code x[off..off+n)} in place. */
  public static void inPlace(float[] x, int off, int n) {
    float max = Float.NEGATIVE_INFINITY;
    for (int i = 0; i < n; i++) {
      max = Math.max(max, x[off + i]);
    }
    float sum = 0f;
    for (int i = 0; i < n; i++) {
      float e = (float) StrictMath.exp(x[off + i] - max);
      x[off + i] = e;
      sum += e;
    }
    for (int i = 0; i < n; i++) {
      x[off + i] = x[off + i] / sum;
    }
  }
}

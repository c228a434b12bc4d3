package io.tokenspeed.model.layer;

import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.RmsNormKernel;

/**
 * RMSNorm with a learned scale of width {@code n}. The weight is a 1-D tensor widened once at load
 * (O(hidden) floats: small vectors live on the heap, matrices stay mapped).
 *
 * @param weight the scale, length n
 * @param eps added to the mean square
 * @param offsetOne scale by {@code 1 + w} instead of {@code w} (Gemma)
 */
public record RmsNorm(float[] weight, float eps, boolean offsetOne) implements Layer {

  public RmsNorm {
    if (weight == null || weight.length == 0) {
      throw new IllegalArgumentException("rmsnorm weight is missing");
    }
    if (!(eps > 0)) {
      throw new IllegalArgumentException("eps=" + eps + " must be positive");
    }
  }

  public int width() {
    return weight.length;
  }

  /** Normalizes {@code rows} rows of {@code x} into {@code out} (which may be {@code x}). */
  public void apply(ComputePool pool, float[] x, int rows, float[] out) {
    RmsNormKernel.apply(pool, x, rows, weight.length, weight, eps, offsetOne, out);
  }
}

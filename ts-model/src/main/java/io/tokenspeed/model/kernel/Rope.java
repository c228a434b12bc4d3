package io.tokenspeed.model.kernel;

/**
 * Rotary position embedding in the "rotate half" layout: for a head of width {@code d} and {@code i
 * < d/2}, the pair {@code (x[i], x[i + d/2])} is rotated by the angle {@code pos · θ^(-2i/d)}.
 *
 * <pre>
 *   x[i]       ←  x[i]·cos − x[i+d/2]·sin
 *   x[i+d/2]   ←  x[i+d/2]·cos + x[i]·sin
 * </pre>
 *
 * <p>Frequencies follow the float32 arithmetic of the reference ({@code inverse frequency} and
 * {@code pos · invFreq} in float); cos/sin are {@link StrictMath} values rounded to float, so a
 * table depends only on (θ, d, pos). Exactness: every element is computed from its own token's
 * table row by one thread, elementwise.
 */
public final class Rope {
  private final int headDim;
  private final float[] invFreq;

  /** RoPE for heads of width {@code headDim} with base {@code theta}. */
  public Rope(double theta, int headDim) {
    if (headDim < 2 || headDim % 2 != 0) {
      throw new IllegalArgumentException("head_dim=" + headDim + " must be even and positive");
    }
    this.headDim = headDim;
    int half = headDim / 2;
    invFreq = new float[half];
    for (int i = 0; i < half; i++) {
      float exponent = (float) (2 * i) / (float) headDim;
      float p = (float) StrictMath.pow(theta, exponent);
      invFreq[i] = 1.0f / p;
    }
  }

  public int headDim() {
    return headDim;
  }

  /**
   * Fills {@code cos} and {@code sin} ({@code [positions.length][headDim/2]}) for the given token
   * positions.
   */
  public void table(int[] positions, float[] cos, float[] sin) {
    int half = headDim / 2;
    for (int t = 0; t < positions.length; t++) {
      float pos = positions[t];
      for (int i = 0; i < half; i++) {
        float angle = pos * invFreq[i];
        cos[t * half + i] = (float) StrictMath.cos(angle);
        sin[t * half + i] = (float) StrictMath.sin(angle);
      }
    }
  }

  /**
   * Rotates {@code heads} heads of every token row of {@code x} ({@code [tokens][heads*headDim]})
   * in place, token {@code t} by table row {@code t}.
   */
  public void apply(ComputePool pool, float[] x, int tokens, int heads, float[] cos, float[] sin) {
    int half = headDim / 2;
    int width = heads * headDim;
    pool.parallelFor(
        tokens,
        (from, to) -> {
          for (int t = from; t < to; t++) {
            for (int h = 0; h < heads; h++) {
              int base = t * width + h * headDim;
              for (int i = 0; i < half; i++) {
                float c = cos[t * half + i];
                float s = sin[t * half + i];
                float x1 = x[base + i];
                float x2 = x[base + half + i];
                x[base + i] = x1 * c - x2 * s;
                x[base + half + i] = x2 * c + x1 * s;
              }
            }
          }
        });
  }
}

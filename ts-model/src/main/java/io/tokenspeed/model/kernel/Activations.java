package io.tokenspeed.model.kernel;

/**
 * Elementwise activations. {@code silu(x) = x / (1 + e^{-x})} with {@link StrictMath#exp}, so the
 * value depends only on {@code x} (never on JIT state); SwiGLU multiplies it by the up projection.
 * Exactness: elementwise, each element by one thread.
 */
public final class Activations {
  private Activations() {}

  /** {@code silu(x)}. */
  public static float silu(float x) {
    return x / (1.0f + (float) StrictMath.exp(-x));
  }

  /**
   * {@code out[i] = silu(gate[i]) * up[i]} for {@code i < n}; {@code out} may alias either input.
   */
  public static void swiGlu(ComputePool pool, float[] gate, float[] up, float[] out, int n) {
    pool.parallelFor(
        n,
        (from, to) -> {
          for (int i = from; i < to; i++) {
            out[i] = silu(gate[i]) * up[i];
          }
        });
  }
}

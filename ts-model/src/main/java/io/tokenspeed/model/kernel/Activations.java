package io.tokenspeed.model.kernel;

/**
 * Elementwise activations. {@code silu(x) = x / (1 + e^{-x})} with {@link FastExp}, whose array
 * form gives the scalar form's bits, so the value depends only on {@code x} (never on JIT state or
 * on which path computed it); SwiGLU multiplies it by the up projection. GeGLU does the same with
 * the tanh approximation of GELU, {@code 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))}, evaluated in
 * float with {@link StrictMath#tanh}. Exactness: elementwise, each element by one thread.
 */
public final class Activations {
  private Activations() {}

  /** {@code silu(x)}. */
  public static float silu(float x) {
    return x / (1.0f + FastExp.exp(-x));
  }

  /**
   * {@code out[i] = silu(gate[i]) * up[i]} for {@code i < n}; {@code out} may alias either input.
   */
  public static void swiGlu(ComputePool pool, float[] gate, float[] up, float[] out, int n) {
    pool.parallelFor(
        n,
        (from, to) -> {
          float[] e = new float[Math.min(to - from, SCRATCH)];
          for (int s = from; s < to; s += e.length) {
            int m = Math.min(e.length, to - s);
            for (int i = 0; i < m; i++) {
              e[i] = -gate[s + i];
            }
            FastExp.expShifted(e, 0, m, 0f);
            for (int i = 0; i < m; i++) {
              out[s + i] = gate[s + i] / (1.0f + e[i]) * up[s + i];
            }
          }
        });
  }

  /** Elements per pass of the vector exp in {@link #swiGlu}. */
  private static final int SCRATCH = 4096;

  private static final float GELU_BETA = (float) Math.sqrt(2.0 / Math.PI);
  private static final float GELU_KAPPA = 0.044715f;

  /** GELU, tanh approximation. */
  public static float geluTanh(float x) {
    float inner = GELU_BETA * (x + GELU_KAPPA * (x * x * x));
    return 0.5f * x * (1.0f + (float) StrictMath.tanh(inner));
  }

  /**
   * {@code out[i] = geluTanh(gate[i]) * up[i]} for {@code i < n}; {@code out} may alias either
   * input.
   */
  public static void geGlu(ComputePool pool, float[] gate, float[] up, float[] out, int n) {
    pool.parallelFor(
        n,
        (from, to) -> {
          for (int i = from; i < to; i++) {
            out[i] = geluTanh(gate[i]) * up[i];
          }
        });
  }
}

package io.tokenspeed.model.layer;

import io.tokenspeed.model.kernel.Activations;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.MatMul;
import io.tokenspeed.model.kernel.PackedMatrix;

/**
 * The gated MLP {@code down(gelu_tanh(gate(x)) ⊙ up(x))} (Gemma), weights packed: gate and up are
 * {@code [intermediate][hidden]}, down is {@code [hidden][intermediate]}.
 */
public record GeGluMlp(PackedMatrix gate, PackedMatrix up, PackedMatrix down) implements Layer {

  public GeGluMlp {
    if (gate.dim(0) != up.dim(0)
        || gate.dim(1) != up.dim(1)
        || down.dim(0) != gate.dim(1)
        || down.dim(1) != gate.dim(0)) {
      throw new IllegalArgumentException(
          "mlp shapes disagree: gate=" + gate + " up=" + up + " down=" + down);
    }
  }

  /** {@code out[rows][hidden]} for input {@code h[rows][hidden]}. */
  public void forward(ComputePool pool, float[] h, int rows, float[] out) {
    int inter = gate.dim(0);
    float[] g = new float[rows * inter];
    float[] u = new float[rows * inter];
    MatMul.apply(pool, h, rows, gate, null, g);
    MatMul.apply(pool, h, rows, up, null, u);
    Activations.geGlu(pool, g, u, g, rows * inter);
    MatMul.apply(pool, g, rows, down, null, out);
  }
}

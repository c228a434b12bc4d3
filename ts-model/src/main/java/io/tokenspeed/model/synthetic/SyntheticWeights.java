package io.tokenspeed.model.synthetic;

import io.tokenspeed.model.checkpoint.TensorShape;
import io.tokenspeed.model.synthetic.SafetensorsWriter.ElementSource;
import java.nio.charset.StandardCharsets;
import java.util.SplittableRandom;

/**
 * Seeded random values for every tensor of a synthetic checkpoint, at the scales Hugging Face
 * initializes them, so activations stay in range at any depth and logits are finite and spread:
 *
 * <pre>
 *   matrices, embeddings, biases       normal(0, 0.02)
 *   RMSNorm weights                    1 + normal(0, 0.02)   (Gemma 3, which scales by 1 + w: normal(0, 0.02))
 *   Mamba conv1d.weight [d, 1, k]      uniform(±1/√k)        (PyTorch's Conv1d default)
 *   Mamba dt_proj.weight [d, r]        uniform(±1/√r)
 *   Mamba dt_proj.bias                 softplus⁻¹(dt), dt = exp(uniform(ln 0.001, ln 0.1)) ≥ 1e-4
 *   Mamba A_log [d, n]                 ln(j + 1) in column j   (A = -1, -2, ..., -n)
 *   Mamba D                            1
 * </pre>
 *
 * <p>Each tensor draws from its own generator, seeded by the checkpoint seed and the tensor's name,
 * so a tensor's values do not depend on which other tensors the file holds or in which order they
 * are written.
 */
final class SyntheticWeights {

  static final double STD = 0.02;
  static final double DT_MIN = 0.001;
  static final double DT_MAX = 0.1;
  static final double DT_FLOOR = 1e-4;

  private final long seed;
  private final boolean zeroCenteredNorms;

  /**
   * @param zeroCenteredNorms norms scale by {@code 1 + w} (Gemma 3)
   */
  SyntheticWeights(long seed, boolean zeroCenteredNorms) {
    this.seed = seed;
    this.zeroCenteredNorms = zeroCenteredNorms;
  }

  /** The element source of {@code t}, fresh (it starts at element 0). */
  ElementSource of(TensorShape t) {
    SplittableRandom rnd = new SplittableRandom(mix(seed, t.name()));
    String name = t.name();
    int[] shape = t.shape();
    if (name.endsWith("A_log")) {
      int cols = shape[shape.length - 1];
      long[] at = {0};
      return (dst, count) -> {
        for (int i = 0; i < count; i++) {
          dst[i] = (float) Math.log((at[0]++ % cols) + 1);
        }
      };
    }
    if (name.endsWith(".D") || name.equals("D")) {
      return (dst, count) -> java.util.Arrays.fill(dst, 0, count, 1f);
    }
    if (name.endsWith("conv1d.weight")) {
      return uniform(rnd, 1.0 / Math.sqrt(shape[shape.length - 1]));
    }
    if (name.endsWith("dt_proj.weight")) {
      return uniform(rnd, 1.0 / Math.sqrt(shape[1]));
    }
    if (name.endsWith("dt_proj.bias")) {
      return (dst, count) -> {
        for (int i = 0; i < count; i++) {
          double u = rnd.nextDouble();
          double dt = Math.exp(u * (Math.log(DT_MAX) - Math.log(DT_MIN)) + Math.log(DT_MIN));
          dt = Math.max(dt, DT_FLOOR);
          dst[i] = (float) (dt + Math.log(-Math.expm1(-dt))); // softplus⁻¹
        }
      };
    }
    if (shape.length == 1 && name.contains("norm")) {
      double center = zeroCenteredNorms ? 0 : 1;
      return (dst, count) -> {
        for (int i = 0; i < count; i++) {
          dst[i] = (float) (center + STD * rnd.nextGaussian());
        }
      };
    }
    return (dst, count) -> {
      for (int i = 0; i < count; i++) {
        dst[i] = (float) (STD * rnd.nextGaussian());
      }
    };
  }

  private static ElementSource uniform(SplittableRandom rnd, double bound) {
    return (dst, count) -> {
      for (int i = 0; i < count; i++) {
        dst[i] = (float) ((rnd.nextDouble() * 2 - 1) * bound);
      }
    };
  }

  /** A 64-bit seed from the checkpoint seed and the tensor name (FNV-1a, then a finalizer). */
  static long mix(long seed, String name) {
    long h = 0xcbf29ce484222325L;
    for (byte b : name.getBytes(StandardCharsets.UTF_8)) {
      h = (h ^ (b & 0xff)) * 0x100000001b3L;
    }
    long z = h ^ (seed * 0x9E3779B97F4A7C15L);
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    return z ^ (z >>> 31);
  }
}

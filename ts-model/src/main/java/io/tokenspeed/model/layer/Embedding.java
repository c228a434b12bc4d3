package io.tokenspeed.model.layer;

import io.tokenspeed.model.checkpoint.Tensor;

/**
 * Token embedding: row {@code id} of the mapped {@code [vocab][hidden]} matrix, widened to float,
 * times {@code scale} (1 except for models that scale embeddings, such as Gemma).
 *
 * @param weight {@code [vocab][hidden]}
 * @param scale multiplier applied to every element (1 leaves rows untouched)
 */
public record Embedding(Tensor weight, float scale) implements Layer {

  public Embedding {
    if (weight == null || weight.rank() != 2) {
      throw new IllegalArgumentException("embedding weight=" + weight + " must be a matrix");
    }
  }

  public int vocabSize() {
    return weight.dim(0);
  }

  public int hiddenSize() {
    return weight.dim(1);
  }

  /** Writes the rows of {@code tokens} into {@code x} ({@code [tokens][hidden]}). */
  public void lookup(int[] tokens, float[] x) {
    int h = hiddenSize();
    for (int t = 0; t < tokens.length; t++) {
      weight.readFloats((long) tokens[t] * h, x, t * h, h);
      if (scale != 1f) {
        for (int i = 0; i < h; i++) {
          x[t * h + i] *= scale;
        }
      }
    }
  }
}

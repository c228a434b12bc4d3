package io.tokenspeed.model.layer;

import io.tokenspeed.model.checkpoint.Tensor;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.MatMul;

/**
 * Logits {@code h · Wᵀ} over the vocabulary. {@code tied} says the matrix is the embedding's
 * ({@code tie_word_embeddings}); the bytes are the same mapped tensor either way.
 *
 * @param weight {@code [vocab][hidden]}
 * @param tied whether {@code weight} is the embedding matrix
 */
public record LmHead(Tensor weight, boolean tied) implements Layer {

  public LmHead {
    if (weight == null || weight.rank() != 2) {
      throw new IllegalArgumentException("lm head weight=" + weight + " must be a matrix");
    }
  }

  public int vocabSize() {
    return weight.dim(0);
  }

  /** {@code logits[rows][vocab]} for {@code h[rows][hidden]}. */
  public void apply(ComputePool pool, float[] h, int rows, float[] logits) {
    MatMul.apply(pool, h, rows, weight, null, logits);
  }
}

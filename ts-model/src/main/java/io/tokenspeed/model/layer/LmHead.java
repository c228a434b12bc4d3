package io.tokenspeed.model.layer;

import io.tokenspeed.model.checkpoint.Tensor;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.MatMul;
import io.tokenspeed.model.kernel.PagedAttention;

/**
 * Logits {@code h · Wᵀ} over the vocabulary. {@code tied} says the matrix is the embedding's
 * ({@code tie_word_embeddings}); the bytes are the same mapped tensor either way.
 *
 * @param weight {@code [vocab][hidden]}
 * @param tied whether {@code weight} is the embedding matrix
 * @param softcap 0, or the cap {@code c} of logits soft-capped to {@code c·tanh(l/c)} (elementwise)
 */
public record LmHead(Tensor weight, boolean tied, float softcap) implements Layer {

  public LmHead {
    if (weight == null || weight.rank() != 2) {
      throw new IllegalArgumentException("lm head weight=" + weight + " must be a matrix");
    }
    if (!(softcap >= 0f) || Float.isInfinite(softcap)) {
      throw new IllegalArgumentException(
          "final logit softcap=" + softcap + " must be 0 or positive");
    }
  }

  public int vocabSize() {
    return weight.dim(0);
  }

  /** {@code logits[rows][vocab]} for {@code h[rows][hidden]}. */
  public void apply(ComputePool pool, float[] h, int rows, float[] logits) {
    MatMul.apply(pool, h, rows, weight, null, logits);
    if (softcap > 0f) {
      int n = rows * vocabSize();
      for (int i = 0; i < n; i++) {
        logits[i] = PagedAttention.softcap(logits[i], softcap);
      }
    }
  }
}

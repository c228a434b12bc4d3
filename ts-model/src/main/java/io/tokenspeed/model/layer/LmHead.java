package io.tokenspeed.model.layer;

import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.MatMul;
import io.tokenspeed.model.kernel.PackedMatrix;
import io.tokenspeed.model.kernel.PagedAttention;

/**
 * Logits {@code h · Wᵀ} over the vocabulary. {@code tied} says the matrix is the embedding's
 * ({@code tie_word_embeddings}); either way it is multiplied in its packed form ({@link
 * PackedMatrix}).
 *
 * @param weight {@code [vocab][hidden]}
 * @param tied whether {@code weight} is the embedding matrix
 * @param softcap 0, or the cap {@code c} of logits soft-capped to {@code c·tanh(l/c)} (elementwise)
 */
public record LmHead(PackedMatrix weight, boolean tied, float softcap) implements Layer {

  public LmHead {
    if (weight == null) {
      throw new IllegalArgumentException("lm head weight is missing");
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

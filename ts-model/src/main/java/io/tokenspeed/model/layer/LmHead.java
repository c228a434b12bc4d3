package io.tokenspeed.model.layer;

import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.MatMul;
import io.tokenspeed.model.kernel.PackedMatrix;
import io.tokenspeed.model.kernel.PagedAttention;
import io.tokenspeed.model.parallel.Collective;

/**
 * Logits {@code h · Wᵀ} over the vocabulary. {@code tied} says the matrix is the embedding's
 * ({@code tie_word_embeddings}); either way it is multiplied in its packed form ({@link
 * PackedMatrix}).
 *
 * <p>Under tensor parallelism each rank holds a row block of the matrix, its share of the
 * vocabulary ({@code vocabCounts[rank]} ids, the ranks' shares in id order); every rank computes
 * its logits and the ranks gather them, so every rank ends with every logit, bit for bit the same.
 *
 * @param weight {@code [vocab][hidden]}, or this rank's rows of it
 * @param tied whether {@code weight} is the embedding matrix
 * @param softcap 0, or the cap {@code c} of logits soft-capped to {@code c·tanh(l/c)} (elementwise)
 * @param vocabCounts every rank's share of the vocabulary, in rank order ({@code {vocab}} without
 *     TP)
 */
public record LmHead(PackedMatrix weight, boolean tied, float softcap, int[] vocabCounts)
    implements Layer {

  public LmHead {
    if (weight == null) {
      throw new IllegalArgumentException("lm head weight is missing");
    }
    if (!(softcap >= 0f) || Float.isInfinite(softcap)) {
      throw new IllegalArgumentException(
          "final logit softcap=" + softcap + " must be 0 or positive");
    }
    vocabCounts = vocabCounts.clone();
  }

  /** The head of a single rank: the whole matrix. */
  public LmHead(PackedMatrix weight, boolean tied, float softcap) {
    this(weight, tied, softcap, new int[] {weight.dim(0)});
  }

  /** The whole vocabulary's size. */
  public int vocabSize() {
    int v = 0;
    for (int c : vocabCounts) {
      v += c;
    }
    return v;
  }

  /** {@code logits[rows][vocab]} for {@code h[rows][hidden]}. */
  public void apply(ComputePool pool, Collective collective, float[] h, int rows, float[] logits) {
    if (collective.size() == 1) {
      MatMul.apply(pool, h, rows, weight, null, logits);
      softcap(logits, rows * weight.dim(0));
      return;
    }
    int local = weight.dim(0);
    float[] mine = new float[rows * local];
    MatMul.apply(pool, h, rows, weight, null, mine);
    softcap(mine, mine.length);
    int[] counts = new int[vocabCounts.length];
    for (int r = 0; r < counts.length; r++) {
      counts[r] = rows * vocabCounts[r];
    }
    float[] byRank = new float[logits.length];
    collective.allGather(mine, counts, byRank);
    // [rank][row][its ids] → [row][every id]
    int vocab = vocabSize();
    int at = 0;
    int firstId = 0;
    for (int count : vocabCounts) {
      for (int row = 0; row < rows; row++) {
        System.arraycopy(byRank, at + row * count, logits, row * vocab + firstId, count);
      }
      at += rows * count;
      firstId += count;
    }
  }

  private void softcap(float[] logits, int n) {
    if (softcap > 0f) {
      for (int i = 0; i < n; i++) {
        logits[i] = PagedAttention.softcap(logits[i], softcap);
      }
    }
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof LmHead h
        && weight == h.weight
        && tied == h.tied
        && Float.compare(softcap, h.softcap) == 0
        && java.util.Arrays.equals(vocabCounts, h.vocabCounts);
  }

  @Override
  public int hashCode() {
    return java.util.Objects.hash(weight, tied, softcap, java.util.Arrays.hashCode(vocabCounts));
  }

  @Override
  public String toString() {
    return "LmHead[" + weight + ", tied=" + tied + ", softcap=" + softcap + "]";
  }
}

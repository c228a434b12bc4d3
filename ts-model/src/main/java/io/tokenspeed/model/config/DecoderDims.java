package io.tokenspeed.model.config;

/**
 * The dimensions every decoder-only transformer here shares, validated.
 *
 * @param vocabSize rows of the embedding and of the LM head
 * @param hiddenSize width of the residual stream
 * @param intermediateSize width of the MLP
 * @param numLayers decoder blocks
 * @param numHeads query heads
 * @param numKvHeads key/value heads (GQA: divides {@code numHeads})
 * @param headDim width of one head (even, for RoPE)
 * @param rmsNormEps epsilon added to the mean square in RMSNorm
 * @param ropeTheta RoPE base θ
 * @param maxPositionEmbeddings longest sequence accepted
 * @param tieWordEmbeddings whether the LM head reuses the embedding matrix
 */
public record DecoderDims(
    int vocabSize,
    int hiddenSize,
    int intermediateSize,
    int numLayers,
    int numHeads,
    int numKvHeads,
    int headDim,
    double rmsNormEps,
    double ropeTheta,
    int maxPositionEmbeddings,
    boolean tieWordEmbeddings) {

  public DecoderDims {
    positive("vocab_size", vocabSize);
    positive("hidden_size", hiddenSize);
    positive("intermediate_size", intermediateSize);
    positive("num_hidden_layers", numLayers);
    positive("num_attention_heads", numHeads);
    positive("num_key_value_heads", numKvHeads);
    positive("head_dim", headDim);
    positive("max_position_embeddings", maxPositionEmbeddings);
    if (numHeads % numKvHeads != 0) {
      throw new IllegalArgumentException(
          "num_attention_heads="
              + numHeads
              + " must be a multiple of num_key_value_heads="
              + numKvHeads);
    }
    if (headDim % 2 != 0) {
      throw new IllegalArgumentException("head_dim=" + headDim + " must be even for RoPE");
    }
    if (!(rmsNormEps > 0) || Double.isInfinite(rmsNormEps)) {
      throw new IllegalArgumentException("rms_norm_eps=" + rmsNormEps + " must be positive");
    }
    if (!(ropeTheta > 1) || Double.isInfinite(ropeTheta)) {
      throw new IllegalArgumentException("rope_theta=" + ropeTheta + " must be greater than 1");
    }
  }

  /** Query heads that share one key/value head. */
  public int groupSize() {
    return numHeads / numKvHeads;
  }

  private static void positive(String field, int value) {
    if (value < 1) {
      throw new IllegalArgumentException(field + "=" + value + " must be at least 1");
    }
  }
}

package io.tokenspeed.model.config;

/**
 * Mamba-1 ({@code MambaForCausalLM}, {@code model_type=mamba}): a stack of pre-norm residual blocks
 * {@code x += mixer(RMSNorm(x))}, each mixer a selective state-space layer, then a final RMSNorm
 * and the LM head (tied to the embedding unless {@code tie_word_embeddings=false}). There is no
 * attention and no position limit: the recurrent state carries the whole prefix.
 *
 * <p>This family has no attention dimensions, so {@link #dims()} is not available; the builder and
 * the forward pass read {@link #hiddenSize()}, {@link #vocabSize()} and {@link #mixer()} instead.
 *
 * @param vocabSize rows of the embedding and the LM head
 * @param hiddenSize width of the residual stream
 * @param numLayers Mamba blocks
 * @param mixer the shape of every block's mixer
 * @param normEps {@code layer_norm_epsilon} of the RMSNorms
 * @param tieWordEmbeddings whether the LM head reuses the embedding matrix
 */
public record MambaConfig(
    int vocabSize,
    int hiddenSize,
    int numLayers,
    MixerDims mixer,
    double normEps,
    boolean tieWordEmbeddings)
    implements ModelConfig {

  public MambaConfig {
    if (vocabSize < 1 || hiddenSize < 1 || numLayers < 1) {
      throw new IllegalArgumentException(
          "vocab_size="
              + vocabSize
              + " hidden_size="
              + hiddenSize
              + " num_hidden_layers="
              + numLayers
              + " must all be at least 1");
    }
    if (mixer == null) {
      throw new IllegalArgumentException("mixer dims are missing");
    }
    if (!(normEps > 0) || Double.isInfinite(normEps)) {
      throw new IllegalArgumentException("layer_norm_epsilon=" + normEps + " must be positive");
    }
  }

  /** Reads the Mamba fields of {@code config.json}. */
  static MambaConfig from(ConfigFields f) {
    String act = f.optString("hidden_act", "silu");
    if (!act.equals("silu")) {
      throw new IllegalArgumentException("hidden_act=" + act + " is not supported; allowed: silu");
    }
    if (f.optBool("use_bias", false)) {
      throw new IllegalArgumentException("use_bias=true is not supported; allowed: false");
    }
    int hidden = f.requireInt("hidden_size");
    int inner =
        f.has("intermediate_size")
            ? f.requireInt("intermediate_size")
            : Math.multiplyExact(f.optInt("expand", 2), hidden);
    MixerDims mixer =
        new MixerDims(
            inner,
            f.requireInt("state_size"),
            f.optInt("conv_kernel", 4),
            MixerDims.timeStepRank(f, "time_step_rank", hidden),
            f.optBool("use_conv_bias", true),
            false);
    return new MambaConfig(
        f.requireInt("vocab_size"),
        hidden,
        f.requireInt("num_hidden_layers"),
        mixer,
        f.optDouble("layer_norm_epsilon", 1e-5),
        f.optBool("tie_word_embeddings", true));
  }

  @Override
  public String architecture() {
    return "MambaForCausalLM";
  }

  @Override
  public String modelType() {
    return "mamba";
  }

  /**
   * Not available: Mamba has no attention heads.
   *
   * @throws UnsupportedOperationException always
   */
  @Override
  public DecoderDims dims() {
    throw new UnsupportedOperationException("mamba has no attention dims; read mixer()");
  }

  @Override
  public int maxPositionEmbeddings() {
    return Integer.MAX_VALUE;
  }

  @Override
  public boolean qkvBias() {
    return false;
  }

  @Override
  public boolean outputBias() {
    return false;
  }

  @Override
  public boolean qkNorm() {
    return false;
  }
}

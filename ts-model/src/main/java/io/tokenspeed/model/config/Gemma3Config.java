package io.tokenspeed.model.config;

import java.util.List;

/**
 * Gemma 3 text ({@code Gemma3ForCausalLM}, {@code model_type=gemma3_text}).
 *
 * <p>Layers alternate between sliding-window attention (a window of {@code slidingWindow} tokens,
 * the current one included, RoPE base {@code ropeLocalTheta}) and global full-history attention
 * (RoPE base {@code dims.ropeTheta}), as {@code layerTypes} says. Every attention has per-head
 * QK-norm; every RMSNorm scales by {@code 1 + w}; each block is a "sandwich" (norms before and
 * after both attention and the MLP); embeddings are multiplied by {@code sqrt(hidden)}; the MLP is
 * GELU(tanh)-gated; scores are scaled by {@code queryPreAttnScalar^-1/2}.
 *
 * <pre>
 *   layer_types = [sliding, sliding, sliding, sliding, sliding, full, sliding, ...]
 *                  └──────────── SWA group (window W) ─────────┘ └ Full ┘
 * </pre>
 *
 * @param dims shared dimensions; {@code ropeTheta} is the global layers' base
 * @param ropeLocalTheta RoPE base of the sliding-window layers ({@code rope_local_base_freq})
 * @param slidingWindow {@code sliding_window}: tokens a sliding layer sees, its own included
 * @param slidingLayers per layer, whether it is a sliding-window layer ({@code layer_types})
 * @param queryPreAttnScalar {@code query_pre_attn_scalar}: scores are scaled by its {@code -1/2}
 *     power
 * @param attnLogitSoftcap {@code attn_logit_softcapping}: scores become {@code c·tanh(s/c)}; 0 when
 *     the config leaves it null
 * @param finalLogitSoftcap {@code final_logit_softcapping}, likewise for the logits; 0 when null
 */
public record Gemma3Config(
    DecoderDims dims,
    double ropeLocalTheta,
    int slidingWindow,
    List<Boolean> slidingLayers,
    double queryPreAttnScalar,
    double attnLogitSoftcap,
    double finalLogitSoftcap)
    implements ModelConfig {

  public Gemma3Config {
    if (dims == null) {
      throw new IllegalArgumentException("dims is missing");
    }
    if (!(ropeLocalTheta > 1) || Double.isInfinite(ropeLocalTheta)) {
      throw new IllegalArgumentException(
          "rope_local_base_freq=" + ropeLocalTheta + " must be greater than 1");
    }
    if (slidingWindow < 1) {
      throw new IllegalArgumentException("sliding_window=" + slidingWindow + " must be at least 1");
    }
    if (slidingLayers == null || slidingLayers.size() != dims.numLayers()) {
      throw new IllegalArgumentException(
          "layer_types="
              + slidingLayers
              + " must give one entry per layer, num_hidden_layers="
              + dims.numLayers());
    }
    slidingLayers = List.copyOf(slidingLayers);
    if (!(queryPreAttnScalar > 0) || Double.isInfinite(queryPreAttnScalar)) {
      throw new IllegalArgumentException(
          "query_pre_attn_scalar=" + queryPreAttnScalar + " must be positive");
    }
    if (!(attnLogitSoftcap >= 0) || Double.isInfinite(attnLogitSoftcap)) {
      throw new IllegalArgumentException(
          "attn_logit_softcapping=" + attnLogitSoftcap + " must be positive or null");
    }
    if (!(finalLogitSoftcap >= 0) || Double.isInfinite(finalLogitSoftcap)) {
      throw new IllegalArgumentException(
          "final_logit_softcapping=" + finalLogitSoftcap + " must be positive or null");
    }
  }

  @Override
  public String architecture() {
    return "Gemma3ForCausalLM";
  }

  @Override
  public String modelType() {
    return "gemma3_text";
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
    return true;
  }

  /** Whether layer {@code layer} attends within the sliding window (else to the full history). */
  public boolean isSliding(int layer) {
    return slidingLayers.get(layer);
  }
}

package io.tokenspeed.model.config;

import java.util.ArrayList;
import java.util.List;

/**
 * Jamba ({@code JambaForCausalLM}, {@code model_type=jamba}) with one expert: pre-norm blocks whose
 * mixer is either full attention (GQA, no RoPE) or a Mamba-1 mixer with RMSNorms on dt, B and C,
 * each followed by a dense SwiGLU MLP. Layer {@code i} is attention when {@code i mod
 * attn_layer_period == attn_layer_offset} (or as {@code layers_block_type} lists). Mixture of
 * experts ({@code num_experts > 1}) is rejected by name.
 *
 * @param dims shared decoder dimensions (RoPE θ unused: Jamba's attention has no positions)
 * @param mixer the shape of the Mamba mixers
 * @param attentionLayers per layer, true for attention and false for Mamba
 */
public record JambaConfig(DecoderDims dims, MixerDims mixer, List<Boolean> attentionLayers)
    implements ModelConfig {

  public JambaConfig {
    if (dims == null || mixer == null || attentionLayers == null) {
      throw new IllegalArgumentException("dims, mixer and attention layers are required");
    }
    attentionLayers = List.copyOf(attentionLayers);
    if (attentionLayers.size() != dims.numLayers()) {
      throw new IllegalArgumentException(
          "layers_block_type has "
              + attentionLayers.size()
              + " entries but num_hidden_layers="
              + dims.numLayers());
    }
  }

  /** Reads the Jamba fields of {@code config.json}; {@code dims} are the shared ones. */
  static JambaConfig from(ConfigFields f, DecoderDims dims) {
    int experts = f.optInt("num_experts", 1);
    if (experts != 1) {
      throw new IllegalArgumentException(
          "num_experts=" + experts + " is not supported; allowed: 1 (dense MLP)");
    }
    if (f.optBool("mamba_proj_bias", false)) {
      throw new IllegalArgumentException("mamba_proj_bias=true is not supported; allowed: false");
    }
    if (f.has("sliding_window")) {
      throw new IllegalArgumentException(
          "sliding_window=" + f.raw("sliding_window") + " is not supported for jamba yet");
    }
    int hidden = dims.hiddenSize();
    MixerDims mixer =
        new MixerDims(
            Math.multiplyExact(f.optInt("mamba_expand", 2), hidden),
            f.optInt("mamba_d_state", 16),
            f.optInt("mamba_d_conv", 4),
            MixerDims.timeStepRank(f, "mamba_dt_rank", hidden),
            f.optBool("mamba_conv_bias", true),
            true);
    int n = dims.numLayers();
    List<Boolean> attention = new ArrayList<>(n);
    List<?> types = f.optList("layers_block_type");
    if (types != null) {
      if (types.size() != n) {
        throw new IllegalArgumentException(
            "layers_block_type has " + types.size() + " entries but num_hidden_layers=" + n);
      }
      for (int i = 0; i < n; i++) {
        Object t = types.get(i);
        if (!"attention".equals(t) && !"mamba".equals(t)) {
          throw new IllegalArgumentException(
              "layers_block_type[" + i + "]=" + t + " is not supported; allowed: attention, mamba");
        }
        attention.add("attention".equals(t));
      }
    } else {
      int period = f.optInt("attn_layer_period", 8);
      int offset = f.optInt("attn_layer_offset", 4);
      if (period < 1 || offset < 0 || offset >= period) {
        throw new IllegalArgumentException(
            "attn_layer_offset="
                + offset
                + " attn_layer_period="
                + period
                + ": need 0 <= offset < period");
      }
      for (int i = 0; i < n; i++) {
        attention.add(i % period == offset);
      }
    }
    return new JambaConfig(dims, mixer, attention);
  }

  @Override
  public String architecture() {
    return "JambaForCausalLM";
  }

  @Override
  public String modelType() {
    return "jamba";
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

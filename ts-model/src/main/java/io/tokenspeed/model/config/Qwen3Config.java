package io.tokenspeed.model.config;

/**
 * Qwen3 ({@code Qwen3ForCausalLM}, {@code model_type=qwen3}): Llama's structure with per-head
 * RMSNorm of queries and keys (weights of size {@code head_dim}) before RoPE, an explicit {@code
 * head_dim}, and optional biases on the q, k, v and o projections ({@code attention_bias}).
 *
 * @param dims shared dimensions
 * @param attentionBias {@code attention_bias}
 */
public record Qwen3Config(DecoderDims dims, boolean attentionBias) implements ModelConfig {

  public Qwen3Config {
    if (dims == null) {
      throw new IllegalArgumentException("dims is missing");
    }
  }

  @Override
  public String architecture() {
    return "Qwen3ForCausalLM";
  }

  @Override
  public String modelType() {
    return "qwen3";
  }

  @Override
  public boolean qkvBias() {
    return attentionBias;
  }

  @Override
  public boolean outputBias() {
    return attentionBias;
  }

  @Override
  public boolean qkNorm() {
    return true;
  }
}

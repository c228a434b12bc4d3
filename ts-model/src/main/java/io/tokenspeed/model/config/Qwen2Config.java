package io.tokenspeed.model.config;

/**
 * Qwen2 ({@code Qwen2ForCausalLM}, {@code model_type=qwen2}): Llama's structure with biases on the
 * q, k and v projections. Sliding-window layers ({@code use_sliding_window=true}) are rejected by
 * the parser until the sliding-window group exists.
 *
 * @param dims shared dimensions
 */
public record Qwen2Config(DecoderDims dims) implements ModelConfig {

  public Qwen2Config {
    if (dims == null) {
      throw new IllegalArgumentException("dims is missing");
    }
  }

  @Override
  public String architecture() {
    return "Qwen2ForCausalLM";
  }

  @Override
  public String modelType() {
    return "qwen2";
  }

  @Override
  public boolean qkvBias() {
    return true;
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

package io.tokenspeed.model.config;

/**
 * Llama ({@code LlamaForCausalLM}, {@code model_type=llama}) and Mistral without a sliding window
 * ({@code MistralForCausalLM}, {@code model_type=mistral}), which share the layer structure.
 *
 * @param architecture {@code LlamaForCausalLM} or {@code MistralForCausalLM}
 * @param modelType {@code llama} or {@code mistral}
 * @param dims shared dimensions
 * @param attentionBias {@code attention_bias}: biases on the q, k, v and o projections
 */
public record LlamaConfig(
    String architecture, String modelType, DecoderDims dims, boolean attentionBias)
    implements ModelConfig {

  public LlamaConfig {
    if (!(architecture.equals("LlamaForCausalLM") && modelType.equals("llama"))
        && !(architecture.equals("MistralForCausalLM") && modelType.equals("mistral"))) {
      throw new IllegalArgumentException(
          "architecture=" + architecture + " model_type=" + modelType + " is not a Llama variant");
    }
    if (dims == null) {
      throw new IllegalArgumentException("dims is missing");
    }
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
    return false;
  }
}

package io.tokenspeed.model.config;

/**
 * A validated {@code config.json}, one record per architecture. The switch over this family in the
 * model builder has no default: a new architecture breaks the build until it is wired.
 */
public sealed interface ModelConfig
    permits LlamaConfig, Qwen2Config, Qwen3Config, Gemma3Config, MambaConfig, JambaConfig {

  /** The {@code architectures[0]} entry, e.g. {@code LlamaForCausalLM}. */
  String architecture();

  /** The {@code model_type}, e.g. {@code llama}. */
  String modelType();

  /** Shared decoder dimensions. */
  DecoderDims dims();

  /** Whether q/k/v projections carry biases. */
  boolean qkvBias();

  /** Whether the o (output) projection carries a bias. */
  boolean outputBias();

  /** Whether queries and keys are RMS-normalized per head before RoPE. */
  boolean qkNorm();

  /** Rows of the embedding and of the LM head. */
  default int vocabSize() {
    return dims().vocabSize();
  }

  /** Width of the residual stream. */
  default int hiddenSize() {
    return dims().hiddenSize();
  }

  /** Longest sequence accepted ({@link Integer#MAX_VALUE}: no limit, as for recurrent models). */
  default int maxPositionEmbeddings() {
    return dims().maxPositionEmbeddings();
  }
}

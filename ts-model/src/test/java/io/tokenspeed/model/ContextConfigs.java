package io.tokenspeed.model;

/**
 * The configs of tiny synthetic models whose next token depends on the context, for tests that
 * compare outputs (the engine's, the GPU backend's).
 *
 * <p>With tied embeddings a tiny model with Hugging Face's initializer scales mostly repeats its
 * last token whatever the KV before it: the logit of token t is its embedding's dot product with
 * the last hidden state, which the last token's own embedding dominates. A restore that loaded
 * wrong KV would then give the same output as one that loaded the right KV, and a comparison with
 * recomputation would prove nothing. These models untie the output projection, so the attention
 * over the context (or the recurrent state) moves the argmax.
 */
public final class ContextConfigs {
  private ContextConfigs() {}

  /** A 2-layer Llama, 64 wide, vocabulary 256, untied output projection. */
  public static final String LLAMA =
      """
      {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": false,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 64,
        "intermediate_size": 128,
        "max_position_embeddings": 1024,
        "mlp_bias": false,
        "model_type": "llama",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": false,
        "vocab_size": 256
      }
      """;

  /**
   * A 3-layer Gemma 3 (two sliding-window layers of 16 tokens, one global), 64 wide, vocabulary
   * 256, untied output projection.
   */
  public static final String GEMMA3 =
      """
      {
        "architectures": ["Gemma3ForCausalLM"],
        "attention_bias": false,
        "head_dim": 16,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 64,
        "intermediate_size": 128,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        "max_position_embeddings": 1024,
        "model_type": "gemma3_text",
        "num_attention_heads": 4,
        "num_hidden_layers": 3,
        "num_key_value_heads": 1,
        "query_pre_attn_scalar": 16,
        "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0,
        "rope_theta": 1000000.0,
        "sliding_window": 16,
        "tie_word_embeddings": false,
        "vocab_size": 256
      }
      """;

  /**
   * Four Mamba layers, 256 wide, a state of 16, vocabulary 256, untied. Narrower Mambas of the
   * synthetic weights (64 wide, two layers) answer every context with the same token: their mixers'
   * outputs are small beside the last token's path.
   */
  public static final String MAMBA =
      """
      {
        "architectures": ["MambaForCausalLM"],
        "model_type": "mamba",
        "conv_kernel": 4,
        "hidden_size": 256,
        "intermediate_size": 512,
        "layer_norm_epsilon": 1e-05,
        "num_hidden_layers": 4,
        "state_size": 16,
        "tie_word_embeddings": false,
        "time_step_rank": 16,
        "vocab_size": 256
      }
      """;
}

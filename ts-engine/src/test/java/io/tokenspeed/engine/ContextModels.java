package io.tokenspeed.engine;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Tiny synthetic models whose next token depends on the context, for tests that compare outputs.
 *
 * <p>With tied embeddings a tiny model with Hugging Face's initializer scales mostly repeats its
 * last token whatever the KV before it: the logit of token t is its embedding's dot product with
 * the last hidden state, which the last token's own embedding dominates. A restore that loaded
 * wrong KV would then give the same output as one that loaded the right KV, and a comparison with
 * recomputation would prove nothing. These models untie the output projection, so the attention
 * over the context moves the argmax; {@code ContextModelsTest} checks that it does.
 */
final class ContextModels {
  private ContextModels() {}

  /** A 2-layer Llama, 64 wide, vocabulary 256, untied output projection. */
  static final String LLAMA =
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
  static final String GEMMA3 =
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

  /** The untied Gemma 3 of {@link #GEMMA3}, materialized under {@code dir} with seed 13. */
  static CausalLm gemma3(Path dir) {
    return load(dir, "untied-gemma3", GEMMA3, 13);
  }

  /** The untied Llama of {@link #LLAMA}, materialized under {@code dir} with seed 11. */
  static CausalLm llama(Path dir) {
    return load(dir, "untied-llama", LLAMA, 11);
  }

  static CausalLm load(Path dir, String label, String config, long seed) {
    return CausalLm.load(folder(dir, label, config, seed));
  }

  /**
   * The checkpoint folder of {@code config} with seeded weights, materialized under {@code dir}.
   */
  static Path folder(Path dir, String label, String config, long seed) {
    try {
      Path file = Files.createDirectories(dir).resolve(label + ".json");
      Files.writeString(file, config);
      return SyntheticCheckpoints.materialize(
          SyntheticCheckpoints.PREFIX + file, seed, DType.F32, dir.resolve("synthetic"));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}

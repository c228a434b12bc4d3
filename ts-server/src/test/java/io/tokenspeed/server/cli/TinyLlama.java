package io.tokenspeed.server.cli;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * A synthetic Llama small enough to generate in milliseconds, whose 256-id vocabulary is exactly
 * the byte tokenizer's: every generated id prints as text.
 */
final class TinyLlama {

  static final String CONFIG =
      """
      {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": false,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 64,
        "intermediate_size": 128,
        "max_position_embeddings": 4096,
        "mlp_bias": false,
        "model_type": "llama",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": true,
        "vocab_size": 256
      }
      """;

  private TinyLlama() {}

  /** Writes the config as {@code dir/tiny-llama.json} and returns its {@code --model} value. */
  static String model(Path dir) {
    try {
      Path file = Files.createDirectories(dir).resolve("tiny-llama.json");
      Files.writeString(file, CONFIG);
      return "synthetic:" + file;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}

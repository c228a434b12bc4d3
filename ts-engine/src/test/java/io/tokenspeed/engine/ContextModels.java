package io.tokenspeed.engine;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ContextConfigs;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The tiny synthetic models of {@link ContextConfigs}, whose next token depends on the context,
 * materialized for the engine's tests; {@code ContextModelsTest} checks that it does.
 */
final class ContextModels {
  private ContextModels() {}

  /** {@link ContextConfigs#LLAMA}. */
  static final String LLAMA = ContextConfigs.LLAMA;

  /** {@link ContextConfigs#GEMMA3}. */
  static final String GEMMA3 = ContextConfigs.GEMMA3;

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

package io.tokenspeed.server.cli;

import io.tokenspeed.model.checkpoint.SafetensorsFile;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * ts-model's Hugging Face fixtures (its test-jar's {@code fixtures/hf/NAME/}), copied out of the
 * jar into a folder the loader can map, and their reference outputs.
 */
final class ModelFixtures {

  /** The fixture checkpoints, one per architecture family. */
  static final String[] NAMES = {"llama", "qwen2", "gemma3", "mamba", "jamba"};

  /** Prompts per fixture in reference.safetensors. */
  static final int PROMPTS = 3;

  private ModelFixtures() {}

  /** Copies fixture {@code name} (config, weights, reference) into {@code dir/name}. */
  static Path extract(String name, Path dir) {
    try {
      Path dst = Files.createDirectories(dir.resolve(name));
      for (String f : new String[] {"config.json", "model.safetensors", "reference.safetensors"}) {
        String resource = "/fixtures/hf/" + name + "/" + f;
        try (InputStream in = ModelFixtures.class.getResourceAsStream(resource)) {
          if (in == null) {
            throw new IllegalStateException(resource + " is missing from ts-model's test-jar");
          }
          Files.copy(in, dst.resolve(f));
        }
      }
      return dst;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** {@code ids_<prompt>} of an extracted fixture. */
  static int[] ids(Path fixture, int prompt) {
    try (Arena arena = Arena.ofConfined()) {
      return SafetensorsFile.open(fixture.resolve("reference.safetensors"), arena)
          .tensor("ids_" + prompt)
          .toIntArray();
    }
  }

  /** {@code greedy_<prompt>} of an extracted fixture: the ids transformers generated greedily. */
  static int[] greedy(Path fixture, int prompt) {
    try (Arena arena = Arena.ofConfined()) {
      return SafetensorsFile.open(fixture.resolve("reference.safetensors"), arena)
          .tensor("greedy_" + prompt)
          .toIntArray();
    }
  }

  /** {@code logits_<prompt>} of an extracted fixture, flattened [positions][vocab]. */
  static float[] logits(Path fixture, int prompt) {
    return floats(fixture, "logits_" + prompt);
  }

  /**
   * {@code steps_<prompt>} of an extracted fixture, flattened [step][vocab]: the logits from which
   * transformers chose each greedy id (step 0's are the prompt's last position's).
   */
  static float[] steps(Path fixture, int prompt) {
    return floats(fixture, "steps_" + prompt);
  }

  private static float[] floats(Path fixture, String tensor) {
    try (Arena arena = Arena.ofConfined()) {
      return SafetensorsFile.open(fixture.resolve("reference.safetensors"), arena)
          .tensor(tensor)
          .toFloatArray();
    }
  }

  /** The {@code logits} tensor a {@code --logits-out} file holds, and its shape. */
  record Logits(int[] shape, float[] values) {}

  static Logits readLogits(Path file) {
    try (Arena arena = Arena.ofConfined()) {
      var t = SafetensorsFile.open(file, arena).tensor("logits");
      return new Logits(t.shape(), t.toFloatArray());
    }
  }

  /** The ids as a {@code --tokens} value. */
  static String tokenList(int[] ids) {
    StringBuilder b = new StringBuilder();
    for (int id : ids) {
      b.append(b.isEmpty() ? "" : ",").append(id);
    }
    return b.toString();
  }
}

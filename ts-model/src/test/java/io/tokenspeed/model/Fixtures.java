package io.tokenspeed.model;

import io.tokenspeed.model.checkpoint.SafetensorsFile;
import io.tokenspeed.model.checkpoint.Tensor;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.net.URISyntaxException;
import java.net.URL;
import java.nio.file.Files;
import java.nio.file.Path;

/** The Hugging Face fixtures under {@code src/test/resources/fixtures/hf}. */
public final class Fixtures {
  /** Prompts per fixture. */
  public static final int PROMPTS = 3;

  private Fixtures() {}

  /** The fixture folder {@code name} (config.json, model.safetensors, reference.safetensors). */
  public static Path folder(String name) {
    URL url = Fixtures.class.getResource("/fixtures/hf/" + name + "/config.json");
    if (url == null) {
      throw new IllegalStateException("fixture " + name + " is missing from the test resources");
    }
    try {
      return Path.of(url.toURI()).getParent();
    } catch (URISyntaxException e) {
      throw new IllegalStateException(e);
    }
  }

  /** Copies the fixture's config.json and model.safetensors into {@code dir/name}. */
  public static Path copyCheckpoint(String name, Path dir) {
    try {
      Path dst = Files.createDirectories(dir.resolve(name));
      for (String f : new String[] {"config.json", "model.safetensors"}) {
        Files.copy(folder(name).resolve(f), dst.resolve(f));
      }
      return dst;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /**
   * Copies fixture {@code name} (config, weights, reference) out of the test resources into {@code
   * dir/name}: what other modules use, where the resources are inside this module's test-jar.
   */
  public static Path extract(String name, Path dir) {
    try {
      Path dst = Files.createDirectories(dir.resolve(name));
      for (String f : new String[] {"config.json", "model.safetensors", "reference.safetensors"}) {
        String resource = "/fixtures/hf/" + name + "/" + f;
        try (java.io.InputStream in = Fixtures.class.getResourceAsStream(resource)) {
          if (in == null) {
            throw new IllegalStateException(resource + " is missing from the test resources");
          }
          Files.copy(in, dst.resolve(f));
        }
      }
      return dst;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** {@code greedy_<prompt>} and {@code ids_<prompt>} of an extracted fixture folder. */
  public static int[] referenceInts(Path extracted, String tensor) {
    try (Arena arena = Arena.ofConfined()) {
      return SafetensorsFile.open(extracted.resolve("reference.safetensors"), arena)
          .tensor(tensor)
          .toIntArray();
    }
  }

  /** The reference outputs of a fixture, read with the engine's own safetensors reader. */
  public static final class Reference implements AutoCloseable {
    private final Arena arena = Arena.ofShared();
    private final SafetensorsFile file;

    public Reference(String name) {
      file = SafetensorsFile.open(folder(name).resolve("reference.safetensors"), arena);
    }

    public int[] ids(int prompt) {
      return file.tensor("ids_" + prompt).toIntArray();
    }

    public float[] logits(int prompt) {
      return file.tensor("logits_" + prompt).toFloatArray();
    }

    public int[] greedy(int prompt) {
      return file.tensor("greedy_" + prompt).toIntArray();
    }

    public float[] steps(int prompt) {
      return file.tensor("steps_" + prompt).toFloatArray();
    }

    public Tensor tensor(String name) {
      return file.tensor(name);
    }

    @Override
    public void close() {
      arena.close();
    }
  }
}

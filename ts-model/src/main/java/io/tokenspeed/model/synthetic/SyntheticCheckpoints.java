package io.tokenspeed.model.synthetic;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.checkpoint.Checkpoint;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.Json;
import io.tokenspeed.model.checkpoint.TensorShape;
import io.tokenspeed.model.config.Gemma3Config;
import io.tokenspeed.model.config.ModelConfig;
import io.tokenspeed.model.config.ModelConfigs;
import io.tokenspeed.model.tokenizer.Tokenizer;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.stream.Stream;

/**
 * Synthetic checkpoints: any supported architecture at any size, with seeded random weights,
 * written as a real Hugging Face folder and loaded through the normal {@link CausalLm#load}.
 * Benchmarks at realistic sizes then need no download, and every byte is reproducible from (config,
 * seed, dtype).
 *
 * <p>What it guarantees:
 *
 * <ul>
 *   <li>The tensor set is the loader's own: names and shapes come from {@link
 *       CausalLm#expectedTensors}, which runs the architecture's builder against a planning source,
 *       so every architecture the loader supports is covered and the two cannot drift apart.
 *   <li>The same (config text, seed, dtype) gives byte-identical files; values follow {@link
 *       SyntheticWeights} (Hugging Face's initializer scales).
 *   <li>Text is visible: a model of more than 256 ids gets the {@code tokenizer.json} of {@link
 *       SyntheticTokenizer}, which encodes as the byte tokenizer does and decodes every id past the
 *       bytes to a word, so the ids seeded random weights sample print as words.
 *   <li>A folder is generated once and reused: the cache key is the SHA-256 of the config text, the
 *       seed, the dtype and {@link #FORMAT_VERSION}. It is written into a temporary directory next
 *       to its final place and renamed, so a reader never sees a half-written folder; when two
 *       processes race, one rename wins and the other's copy is discarded.
 * </ul>
 *
 * <pre>
 *   ${tokenspeed.synthetic.dir | $TOKENSPEED_SYNTHETIC_DIR | ${java.io.tmpdir}/tokenspeed-synthetic}/
 *     qwen2-0.5b-3f9a1c0e5b7d-seed0-f32/
 *       config.json          the preset's text, as is
 *       model.safetensors    every tensor the loader expects, in the order it asks for them
 *       tokenizer.json       bytes, then words up to vocab_size (only when vocab_size > 256)
 *     .tmp-...               a folder being written (removed or renamed when done)
 * </pre>
 *
 * <p>Models are named {@code synthetic:NAME} for a preset of {@link #PRESETS} or {@code
 * synthetic:PATH} for a {@code config.json} of one's own.
 */
public final class SyntheticCheckpoints {

  /** Prefix of a synthetic model name. */
  public static final String PREFIX = "synthetic:";

  /** System property naming the cache directory. */
  public static final String DIR_PROPERTY = "tokenspeed.synthetic.dir";

  /** Environment variable naming the cache directory (the property wins). */
  public static final String DIR_ENV = "TOKENSPEED_SYNTHETIC_DIR";

  /**
   * Bumped whenever the files generated for a given key change, so that a folder an older version
   * wrote is not reused. 2: the {@code tokenizer.json} of {@link SyntheticTokenizer}.
   */
  public static final int FORMAT_VERSION = 2;

  /**
   * The named presets: real configs (Qwen2-0.5B, Gemma 3 270M, Mamba 130M), small benchmark models,
   * and the shapes of Llama 3.2 1B and Llama 3 8B (default RoPE, 128k positions) for the GPU
   * benchmarks.
   */
  public static final List<String> PRESETS =
      List.of(
          "qwen2-0.5b",
          "gemma3-270m",
          "jamba-tiny",
          "mamba-130m",
          "llama-100m",
          "llama-1b",
          "llama-8b");

  /** Seed used when none is given. */
  public static final long DEFAULT_SEED = 0;

  private SyntheticCheckpoints() {}

  /** True when {@code model} names a synthetic checkpoint. */
  public static boolean isSynthetic(String model) {
    return model.startsWith(PREFIX);
  }

  /** The cache directory: the system property, else the environment variable, else the default. */
  public static Path defaultRoot() {
    String dir = System.getProperty(DIR_PROPERTY);
    if (dir == null || dir.isBlank()) {
      dir = System.getenv(DIR_ENV);
    }
    if (dir == null || dir.isBlank()) {
      return Path.of(System.getProperty("java.io.tmpdir"), "tokenspeed-synthetic");
    }
    return Path.of(dir);
  }

  /**
   * The config text of preset {@code name}.
   *
   * @throws IllegalArgumentException naming the preset and the known ones
   */
  public static String presetConfig(String name) {
    if (!PRESETS.contains(name)) {
      throw new IllegalArgumentException(
          "synthetic preset=" + name + " is unknown; known: " + String.join(", ", PRESETS));
    }
    try (InputStream in = SyntheticCheckpoints.class.getResourceAsStream(name + ".json")) {
      if (in == null) {
        throw new IllegalStateException("preset " + name + " is missing from the resources");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /**
   * The folder of {@code synthetic:NAME} (a preset) or {@code synthetic:PATH} (a config.json file),
   * generated into {@link #defaultRoot()} on first use.
   */
  public static Path materialize(String model, long seed, DType dtype) {
    return materialize(model, seed, dtype, defaultRoot());
  }

  /** As {@link #materialize(String, long, DType)}, caching under {@code root}. */
  public static Path materialize(String model, long seed, DType dtype, Path root) {
    if (!isSynthetic(model)) {
      throw new IllegalArgumentException(
          "model=" + model + " is not synthetic: it must start with " + PREFIX);
    }
    String spec = model.substring(PREFIX.length());
    if (PRESETS.contains(spec)) {
      return materialize(spec, presetConfig(spec), seed, dtype, root);
    }
    Path file = Path.of(spec);
    if (!spec.endsWith(".json") && !Files.isRegularFile(file)) {
      throw new IllegalArgumentException(
          "model="
              + model
              + " names neither a preset ("
              + String.join(", ", PRESETS)
              + ") nor a config.json file");
    }
    String text;
    try {
      text = Files.readString(file, StandardCharsets.UTF_8);
    } catch (NoSuchFileException e) {
      throw new IllegalArgumentException("model=" + model + ": file " + file + " is missing", e);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read " + file + ": " + e.getMessage(), e);
    }
    String label = file.getFileName().toString().replaceFirst("\\.json$", "");
    return materialize(label, text, seed, dtype, root);
  }

  /**
   * The folder for {@code configJson} with weights drawn from {@code seed}, stored as {@code dtype}
   * (F32 or BF16) under {@code root}; generated unless already there.
   *
   * @param label a readable prefix of the folder name
   * @throws IllegalArgumentException when the config is not a supported, valid model config
   */
  public static Path materialize(
      String label, String configJson, long seed, DType dtype, Path root) {
    if (dtype != DType.F32 && dtype != DType.BF16) {
      throw new IllegalArgumentException(
          "dtype=" + dtype + " is not supported for synthetic weights; allowed: F32, BF16");
    }
    ModelConfig config;
    try {
      config = ModelConfigs.parse(Json.parseObject(configJson));
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("synthetic config " + label + ": " + e.getMessage(), e);
    }
    String name =
        safe(label)
            + "-"
            + key(configJson, seed, dtype).substring(0, 12)
            + "-seed"
            + seed
            + "-"
            + dtype.name().toLowerCase(Locale.ROOT);
    Path folder = root.resolve(name);
    if (isComplete(folder, config)) {
      return folder;
    }
    try {
      Files.createDirectories(root);
      Path tmp = Files.createTempDirectory(root, ".tmp-" + name + "-");
      try {
        write(tmp, configJson, config, seed, dtype);
        try {
          Files.move(tmp, folder, StandardCopyOption.ATOMIC_MOVE);
        } catch (FileSystemException e) {
          if (!isComplete(folder, config)) {
            throw e;
          }
          // another process finished first: its folder holds the same bytes
        }
      } finally {
        deleteTree(tmp);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(
          "cannot write synthetic checkpoint " + folder + ": " + e.getMessage(), e);
    }
    return folder;
  }

  /**
   * Writes {@code config.json}, {@code model.safetensors} and, when the vocabulary goes past the
   * bytes, {@code tokenizer.json} into {@code dir}.
   */
  static void write(Path dir, String configJson, ModelConfig config, long seed, DType dtype)
      throws IOException {
    Files.writeString(dir.resolve(Checkpoint.CONFIG_FILE), configJson, StandardCharsets.UTF_8);
    List<TensorShape> tensors = CausalLm.expectedTensors(config);
    SyntheticWeights weights = new SyntheticWeights(seed, config instanceof Gemma3Config);
    SafetensorsWriter.write(dir.resolve(Checkpoint.SINGLE_FILE), dtype, tensors, weights::of);
    if (SyntheticTokenizer.isWritten(config.vocabSize())) {
      try (Writer out =
          Files.newBufferedWriter(
              dir.resolve(Tokenizer.TOKENIZER_JSON), StandardCharsets.US_ASCII)) {
        SyntheticTokenizer.write(config.vocabSize(), out);
      }
    }
  }

  /** Parameters of the model {@code configJson} describes (every tensor the loader expects). */
  public static long numParameters(String configJson) {
    long n = 0;
    for (TensorShape t :
        CausalLm.expectedTensors(ModelConfigs.parse(Json.parseObject(configJson)))) {
      n += t.numElements();
    }
    return n;
  }

  private static boolean isComplete(Path folder, ModelConfig config) {
    return Files.isRegularFile(folder.resolve(Checkpoint.CONFIG_FILE))
        && Files.isRegularFile(folder.resolve(Checkpoint.SINGLE_FILE))
        && (!SyntheticTokenizer.isWritten(config.vocabSize())
            || Files.isRegularFile(folder.resolve(Tokenizer.TOKENIZER_JSON)));
  }

  static String key(String configJson, long seed, DType dtype) {
    try {
      MessageDigest md = MessageDigest.getInstance("SHA-256");
      md.update(
          ("tokenspeed-synthetic v" + FORMAT_VERSION + "\nseed=" + seed + "\ndtype=" + dtype + "\n")
              .getBytes(StandardCharsets.UTF_8));
      md.update(configJson.getBytes(StandardCharsets.UTF_8));
      return HexFormat.of().formatHex(md.digest());
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  private static String safe(String label) {
    String s = label.toLowerCase(Locale.ROOT).replaceAll("[^a-z0-9._-]+", "-");
    return s.isEmpty() ? "config" : s;
  }

  private static void deleteTree(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    try (Stream<Path> walk = Files.walk(dir)) {
      for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) {
        Files.deleteIfExists(p);
      }
    }
  }
}

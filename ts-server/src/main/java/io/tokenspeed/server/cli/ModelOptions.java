package io.tokenspeed.server.cli;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.checkpoint.CheckpointException;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.Json;
import io.tokenspeed.model.config.ModelConfigs;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.model.tokenizer.BpeTokenizer;
import io.tokenspeed.model.tokenizer.ByteTokenizer;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.config.FileNames;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.Locale;
import java.util.OptionalInt;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * What the commands that run a model share: the options naming the model ({@code --model}, {@code
 * --seed}, {@code --dtype}) and its compute ({@code --threads}), and the steps from them to a
 * loaded model and a prompt's ids, each failing with an error that names the flag and the value.
 */
final class ModelOptions {

  @Spec(Spec.Target.MIXEE)
  private CommandSpec spec;

  @Option(
      names = "--model",
      paramLabel = "DIR|synthetic:NAME",
      required = true,
      description = "Model folder, or synthetic:NAME / synthetic:CONFIG.json.")
  private String model;

  @Option(
      names = "--seed",
      paramLabel = "N",
      description = "Weight seed of a synthetic model (default: 0).")
  private long seed = SyntheticCheckpoints.DEFAULT_SEED;

  @Option(
      names = "--dtype",
      paramLabel = "f32|bf16",
      description = "Weight type of a synthetic model (default: f32).")
  private String dtype = "f32";

  @Option(
      names = "--threads",
      paramLabel = "N",
      description = "Compute threads (default: one per core).")
  private Integer threads;

  /** The {@code --model} value as given. */
  String model() {
    return model;
  }

  /** Checks {@code --threads}; a usage error names the flag. */
  void checkThreads() {
    if (threads != null && threads < 1) {
      throw usage("--threads=" + threads + " must be at least 1");
    }
  }

  /** The {@code --dtype} value; a usage error lists the allowed ones. */
  DType weightType() {
    try {
      return weightType(dtype);
    } catch (IllegalArgumentException e) {
      throw usage(e.getMessage());
    }
  }

  /**
   * A synthetic model's weight type from a {@code --dtype} value ({@code f32} or {@code bf16}, any
   * case), for every command that takes the flag.
   *
   * @throws IllegalArgumentException naming the value and the allowed ones
   */
  static DType weightType(String dtype) {
    return switch (dtype.toLowerCase(Locale.ROOT)) {
      case "f32" -> DType.F32;
      case "bf16" -> DType.BF16;
      default ->
          throw new IllegalArgumentException(
              "--dtype=" + dtype + " is not supported; allowed: f32, bf16");
    };
  }

  /**
   * The {@code max_position_embeddings} of {@code model}'s config (a synthetic preset, a synthetic
   * config file, or a folder's config.json), read without loading weights; empty when the config
   * cannot be read or parsed here, where loading the model reports it.
   */
  static OptionalInt maxPositions(String model) {
    try {
      String text;
      if (SyntheticCheckpoints.isSynthetic(model)) {
        String name = model.substring(SyntheticCheckpoints.PREFIX.length());
        text =
            SyntheticCheckpoints.PRESETS.contains(name)
                ? SyntheticCheckpoints.presetConfig(name)
                : Files.readString(Path.of(name), StandardCharsets.UTF_8);
      } else {
        text = Files.readString(Path.of(model).resolve("config.json"), StandardCharsets.UTF_8);
      }
      return OptionalInt.of(ModelConfigs.parse(Json.parseObject(text)).maxPositionEmbeddings());
    } catch (IOException | RuntimeException e) {
      return OptionalInt.empty();
    }
  }

  /** The compute threads: {@code --threads}, or one per core. */
  int computeThreads() {
    return threads == null ? Runtime.getRuntime().availableProcessors() : threads;
  }

  /** A compute pool of {@link #computeThreads()}. */
  ComputePool computePool() {
    return threads == null ? ComputePool.ofCores() : ComputePool.ofThreads(threads);
  }

  /** The ids of a {@code --tokens} list; a malformed list is a usage error. */
  int[] parseTokens(String tokens) {
    try {
      return PromptTokens.fromList(tokens, null);
    } catch (IllegalArgumentException e) {
      throw usage(e.getMessage());
    }
  }

  /** Fails unless the JVM has the Vector API, which the model's kernels need. */
  void requireVectorModule() {
    if (ModuleLayer.boot().findModule("jdk.incubator.vector").isEmpty()) {
      throw new IllegalArgumentException(
          spec.name()
              + " needs the JVM option --add-modules jdk.incubator.vector (bin/tokenspeed adds"
              + " it)");
    }
  }

  /** The model's folder: the one given, or a synthetic model generated on first use. */
  Path folder(DType weightType) {
    if (SyntheticCheckpoints.isSynthetic(model)) {
      try {
        return SyntheticCheckpoints.materialize(model, seed, weightType);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("--model=" + model + ": " + e.getMessage(), e);
      }
    }
    Path dir;
    try {
      dir = Path.of(model);
    } catch (InvalidPathException e) {
      throw new IllegalArgumentException(
          "--model=" + FileNames.quote(model) + " " + FileNames.whyInvalid(model, e), e);
    }
    if (!Files.isDirectory(dir)) {
      throw new IllegalArgumentException(
          "--model=" + model + " is not a directory (nor synthetic:NAME)");
    }
    return dir;
  }

  /** Loads the checkpoint of {@code folder}; a bad checkpoint is invalid input. */
  CausalLm load(Path folder) {
    try {
      return CausalLm.load(folder);
    } catch (CheckpointException e) {
      throw new IllegalArgumentException("--model=" + model + ": " + e.getMessage(), e);
    }
  }

  /**
   * The tokenizer of {@code folder}: its tokenizer.json, or else the byte tokenizer (one token per
   * UTF-8 byte).
   */
  Tokenizer tokenizer(Path folder) {
    return tokenizerOf(folder);
  }

  /** {@link #tokenizer(Path)} for commands without this mixin. */
  static Tokenizer tokenizerOf(Path folder) {
    Path tokenizerJson = folder.resolve(Tokenizer.TOKENIZER_JSON);
    if (!Files.isRegularFile(tokenizerJson)) {
      return ByteTokenizer.plain();
    }
    Path configJson = folder.resolve(Tokenizer.TOKENIZER_CONFIG_JSON);
    try {
      String cfg =
          Files.isRegularFile(configJson)
              ? Files.readString(configJson, StandardCharsets.UTF_8)
              : null;
      return BpeTokenizer.fromJson(Files.readString(tokenizerJson, StandardCharsets.UTF_8), cfg);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read " + tokenizerJson + ": " + e.getMessage(), e);
    }
  }

  /**
   * Tokenizes the prompt text given as {@code option} with {@code tokenizer} (of {@code folder}),
   * saying on stderr which tokenizer it used; text that gives no tokens is invalid input.
   */
  int[] tokenize(Path folder, Tokenizer tokenizer, String option, String text) {
    int[] ids = tokenizer.encode(text);
    PrintWriter err = spec.commandLine().getErr();
    Path tokenizerJson = folder.resolve(Tokenizer.TOKENIZER_JSON);
    if (tokenizer instanceof BpeTokenizer) {
      err.println("note: " + option + " tokenized with " + tokenizerJson);
    } else {
      err.println(
          "note: "
              + option
              + ": "
              + folder
              + " has no tokenizer.json; using the byte tokenizer (one token per UTF-8 byte)");
    }
    err.flush();
    if (ids.length == 0) {
      throw new IllegalArgumentException(
          option + "=\"" + text + "\" gives no tokens: a prompt needs at least one");
    }
    return ids;
  }

  /** Fails when an id of the prompt given as {@code option} is outside the model's vocabulary. */
  void checkVocab(int[] ids, int vocab, String option) {
    for (int i = 0; i < ids.length; i++) {
      if (ids[i] >= vocab) {
        throw new IllegalArgumentException(
            option
                + ": token id="
                + ids[i]
                + " at position "
                + i
                + " is out of range [0, "
                + vocab
                + ") for --model="
                + model
                + " (vocab_size="
                + vocab
                + ")");
      }
    }
  }

  /** A usage error of the command this mixin belongs to. */
  ParameterException usage(String message) {
    return new ParameterException(spec.commandLine(), message);
  }
}

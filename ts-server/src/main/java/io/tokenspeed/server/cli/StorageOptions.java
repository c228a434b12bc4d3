package io.tokenspeed.server.cli;

import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.PdOptions;
import io.tokenspeed.engine.kvevents.KvEventSink;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.server.config.FileNames;
import io.tokenspeed.server.config.StorageExtraConfig;
import java.io.IOException;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Optional;
import java.util.OptionalInt;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * The L3 flags of the commands that run an engine: {@code --kvstore-storage-backend} selects the
 * store (none by default: L3 is off) and {@code --kvstore-storage-backend-extra-config} tunes it
 * with one JSON object, given inline or as {@code @FILE} (docs/l3-configuration.md). {@link
 * #resolve()} turns them into settings; every bad value is a usage error (exit 2) naming the flag
 * and the field.
 *
 * <p>picocli expands a separate argument {@code @FILE} as an argument file before any option sees
 * it, so the file form is written {@code --kvstore-storage-backend-extra-config=@FILE} (or {@code
 * --kvstore-storage-backend-extra-config @@FILE}, picocli's escape).
 */
final class StorageOptions {

  static final String BACKEND = "--kvstore-storage-backend";
  static final String EXTRA_CONFIG = "--kvstore-storage-backend-extra-config";

  @Spec(Spec.Target.MIXEE)
  private CommandSpec spec;

  @Option(
      names = BACKEND,
      paramLabel = "memory|file|redis|mooncake",
      description =
          "L3 store under the Host tier (default: none, L3 off); tuned by " + EXTRA_CONFIG + ".")
  private String backend;

  @Option(
      names = EXTRA_CONFIG,
      paramLabel = "JSON|@FILE",
      description = {
        "The backend's settings and the async path's (\"async\": {...}) as one JSON object, or"
            + " =@FILE to read it from a file (docs/l3-configuration.md; default: {}).",
      })
  private String extraConfig;

  /** The {@code --kvstore-storage-backend} value as given, or null. */
  String backend() {
    return backend;
  }

  /** The {@code --kvstore-storage-backend-extra-config} value as given, or null. */
  String extraConfig() {
    return extraConfig;
  }

  /**
   * The L3 settings the flags select: empty without {@code --kvstore-storage-backend}.
   *
   * @throws ParameterException for an unknown backend, an extra configuration without a backend, an
   *     unreadable {@code @FILE} or a configuration {@link StorageExtraConfig#parse} rejects
   */
  Optional<StorageExtraConfig.Resolved> resolve() {
    if (backend == null) {
      if (extraConfig != null) {
        throw usage(
            EXTRA_CONFIG,
            extraConfig,
            EXTRA_CONFIG
                + " needs "
                + BACKEND
                + " ("
                + String.join(", ", StorageExtraConfig.BACKENDS)
                + "); without a backend L3 is off");
      }
      return Optional.empty();
    }
    if (!StorageExtraConfig.BACKENDS.contains(backend)) {
      throw usage(
          BACKEND,
          backend,
          BACKEND
              + "="
              + backend
              + " is not an L3 backend; allowed: "
              + String.join(", ", StorageExtraConfig.BACKENDS));
    }
    String source = EXTRA_CONFIG;
    String json = extraConfig;
    if (extraConfig != null && extraConfig.startsWith("@")) {
      source = EXTRA_CONFIG + "=" + extraConfig;
      json = readFile(extraConfig.substring(1));
    }
    try {
      return Optional.of(StorageExtraConfig.parse(backend, json));
    } catch (IllegalArgumentException e) {
      throw usage(EXTRA_CONFIG, extraConfig, source + ": " + e.getMessage(), e);
    }
  }

  private String readFile(String name) {
    String flag = EXTRA_CONFIG + "=@" + name;
    if (name.isEmpty()) {
      throw usage(EXTRA_CONFIG, "@", EXTRA_CONFIG + "=@ needs a file name after the @");
    }
    try {
      Path file = Path.of(name);
      if (Files.isDirectory(file)) {
        throw usage(EXTRA_CONFIG, "@" + name, flag + " is a directory, not a file");
      }
      return Files.readString(file, StandardCharsets.UTF_8);
    } catch (InvalidPathException e) {
      throw usage(
          EXTRA_CONFIG,
          "@" + name,
          EXTRA_CONFIG + "=@" + FileNames.quote(name) + " " + FileNames.whyInvalid(name, e),
          e);
    } catch (NoSuchFileException e) {
      throw usage(EXTRA_CONFIG, "@" + name, flag + ": no such file", e);
    } catch (AccessDeniedException e) {
      throw usage(EXTRA_CONFIG, "@" + name, flag + ": permission denied", e);
    } catch (CharacterCodingException e) {
      throw usage(EXTRA_CONFIG, "@" + name, flag + ": not valid UTF-8 text", e);
    } catch (IOException e) {
      throw usage(EXTRA_CONFIG, "@" + name, flag + ": cannot be read: " + e.getMessage(), e);
    }
  }

  private ParameterException usage(String option, String value, String message) {
    return usage(option, value, message, null);
  }

  /** A usage error of the command this mixin belongs to, tied to {@code option}. */
  private ParameterException usage(String option, String value, String message, Throwable cause) {
    OptionSpec arg = spec.findOption(option);
    return cause == null
        ? new ParameterException(spec.commandLine(), message, arg, value)
        : new ParameterException(spec.commandLine(), message, cause, arg, value);
  }

  /**
   * Starts an engine serving {@code lm} with {@code config}, with L3 under its Host tier when
   * {@code storage} selects a store; a store that cannot be opened or started is invalid input
   * naming {@value #BACKEND}.
   */
  static Engine startEngine(
      CausalLm lm,
      EngineConfig config,
      OptionalInt eos,
      Optional<StorageExtraConfig.Resolved> storage) {
    if (storage.isEmpty()) {
      return Engine.start(EngineSettings.of(lm, config).eosId(eos).conclude());
    }
    StorageExtraConfig.Resolved l3 = storage.get();
    L3Settings settings = openL3(l3);
    try {
      return Engine.start(EngineSettings.of(lm, config).eosId(eos).l3(settings).conclude());
    } catch (IllegalStateException e) {
      throw new IllegalArgumentException(
          BACKEND + "=" + l3.backend().name() + ": " + e.getMessage(), e);
    }
  }

  /**
   * An engine over {@code model} (on the CPU, as this process's rank of a replica under {@code
   * --tp}, or on a GPU), with L3 under its Host tier when {@code storage} selects a store, its KV
   * named by the model's attention backend; a store that cannot be opened or started is invalid
   * input naming {@value #BACKEND}. The model stays the caller's.
   */
  static Engine startEngine(
      EngineModel model,
      EngineConfig config,
      OptionalInt eos,
      Optional<StorageExtraConfig.Resolved> storage) {
    return startEngine(model, config, eos, storage, PdOptions.FUSED);
  }

  /**
   * {@link #startEngine(EngineModel, EngineConfig, OptionalInt, Optional)} in the role {@code pd}
   * gives (docs/pd.md).
   */
  static Engine startEngine(
      EngineModel model,
      EngineConfig config,
      OptionalInt eos,
      Optional<StorageExtraConfig.Resolved> storage,
      PdOptions pd) {
    return startEngine(model, config, eos, storage, pd, null);
  }

  /**
   * {@link #startEngine(EngineModel, EngineConfig, OptionalInt, Optional, PdOptions)} with the
   * engine's KV events going to {@code kvEvents} (null: none).
   */
  static Engine startEngine(
      EngineModel model,
      EngineConfig config,
      OptionalInt eos,
      Optional<StorageExtraConfig.Resolved> storage,
      PdOptions pd,
      KvEventSink kvEvents) {
    if (storage.isEmpty()) {
      return model.start(config, eos, null, pd, kvEvents);
    }
    StorageExtraConfig.Resolved l3 = storage.get();
    L3Settings settings = openL3(l3);
    try {
      return model.start(config, eos, settings, pd, kvEvents);
    } catch (IllegalStateException e) {
      throw new IllegalArgumentException(
          BACKEND + "=" + l3.backend().name() + ": " + e.getMessage(), e);
    }
  }

  /** Opens the store {@code l3} selects; one that cannot be opened is invalid input. */
  static L3Settings openL3(StorageExtraConfig.Resolved l3) {
    try {
      return L3Settings.open(l3.backend(), l3.runtime());
    } catch (Exception e) {
      throw new IllegalArgumentException(
          BACKEND + "=" + l3.backend().name() + ": the store cannot be opened: " + e, e);
    }
  }
}

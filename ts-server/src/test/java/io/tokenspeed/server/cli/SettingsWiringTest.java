package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.l3.StorageBackend;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.server.config.Origin;
import io.tokenspeed.server.config.SettingsSources;
import io.tokenspeed.server.config.StorageExtraConfig;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.Callable;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@link SettingsSources} wired as a server command is: a subcommand of the {@code tokenspeed}
 * command line with the CLI's own error handling, carrying the shared {@link ModelOptions} and
 * {@link StorageOptions} mixins. A usage error names the setting's source and points at the
 * subcommand's help; the store flags resolve from a YAML file; the help shows the mixins' defaults
 * once.
 */
class SettingsWiringTest {

  static final String PREFIX = "TOKENSPEED_PROBE_";

  @TempDir Path tmp;

  @Command(name = "probe", mixinStandardHelpOptions = true, sortOptions = false)
  static final class Probe implements Callable<Integer> {
    @Mixin ModelOptions model;

    @Mixin StorageOptions storage;

    @Option(names = "--port", paramLabel = "N", description = "Port to listen on.")
    int port = 8000;

    StorageExtraConfig.Resolved resolved;

    @Override
    public Integer call() {
      resolved = storage.resolve().orElse(null);
      return 0;
    }
  }

  record Run(int exitCode, String out, String err, Probe probe, SettingsSources sources) {
    @Override
    public String toString() {
      return "exit=" + exitCode + "\nout:\n" + out + "\nerr:\n" + err;
    }
  }

  static Run run(Map<String, String> env, String... args) {
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    CommandLine cli = TokenSpeedCli.commandLine(null, null);
    Probe probe = new Probe();
    cli.addSubcommand("probe", probe);
    cli.setOut(new PrintWriter(out, true));
    cli.setErr(new PrintWriter(err, true));
    SettingsSources sources =
        SettingsSources.install(cli.getSubcommands().get("probe"), PREFIX, env);
    int code = cli.execute(args);
    return new Run(code, out.toString(), err.toString(), probe, sources);
  }

  @Test
  void shouldResolveTheStoreFromAYamlFile() throws Exception {
    Path store = tmp.resolve("l3");
    Path config = tmp.resolve("serve.yaml");
    Files.writeString(
        config,
        String.join(
            "\n",
            "model: synthetic:llama-100m",
            "kvstore_storage_backend: file",
            "kvstore-storage-backend-extra-config:",
            "  path: " + store,
            "  fsync: false",
            ""));
    Run r = run(Map.of(PREFIX + "PORT", "9000"), "probe", "--config", config.toString());
    assertEquals(0, r.exitCode(), r::toString);
    assertEquals(
        new StorageBackend.File(FileStoreSettings.of(store).withFsync(false)),
        r.probe().resolved.backend());
    assertEquals("synthetic:llama-100m", r.probe().model.model());
    assertEquals(9000, r.probe().port);
    Map<String, Origin> origins = r.sources().origins();
    assertEquals(
        new Origin.ConfigFile(config, 3), origins.get("kvstore-storage-backend-extra-config"));
    assertEquals(new Origin.Environment(PREFIX + "PORT"), origins.get("port"));
    assertEquals(new Origin.BuiltIn(), origins.get("dtype"));
  }

  @Test
  void shouldLetAVariableNameTheExtraConfigFileWithAnAt() throws Exception {
    Path json = tmp.resolve("l3.json");
    Files.writeString(json, "{\"path\": \"" + tmp.resolve("objects") + "\"}");
    Run r =
        run(
            Map.of(
                PREFIX + "KVSTORE_STORAGE_BACKEND",
                "file",
                PREFIX + "KVSTORE_STORAGE_BACKEND_EXTRA_CONFIG",
                "@" + json),
            "probe",
            "--model=synthetic:llama-100m");
    assertEquals(0, r.exitCode(), r::toString);
    assertEquals(
        new StorageBackend.File(FileStoreSettings.of(tmp.resolve("objects"))),
        r.probe().resolved.backend());
  }

  @Test
  void shouldPrintAWrongTypeAsOneUsageLineNamingTheSource() throws Exception {
    Path config = tmp.resolve("serve.yaml");
    Files.writeString(config, "model: m\nport: eighty\n");
    Run r = run(Map.of(), "probe", "--config=" + config);
    assertEquals(CliErrors.EXIT_USAGE, r.exitCode(), r::toString);
    assertEquals(
        "error: port=eighty from "
            + config
            + " line 2: Invalid value for option '--port': 'eighty' is not an int (see"
            + " 'tokenspeed probe --help')",
        r.err().strip());
    assertEquals("", r.out());
  }

  @Test
  void shouldPrintAStoreErrorRaisedAfterParsingWithItsSource() {
    Run r =
        run(
            Map.of(PREFIX + "KVSTORE_STORAGE_BACKEND", "floppy"),
            "probe",
            "--model=synthetic:llama-100m");
    assertEquals(CliErrors.EXIT_USAGE, r.exitCode(), r::toString);
    assertTrue(
        r.err()
            .startsWith(
                "error: "
                    + PREFIX
                    + "KVSTORE_STORAGE_BACKEND=floppy: --kvstore-storage-backend=floppy is not an"
                    + " L3 backend"),
        r::toString);
  }

  @Test
  void shouldPrintAnUnknownVariableWithTheNearestOne() {
    Run r = run(Map.of(PREFIX + "THREDS", "4"), "probe", "--model=m");
    assertEquals(CliErrors.EXIT_USAGE, r.exitCode(), r::toString);
    assertEquals(
        "error: "
            + PREFIX
            + "THREDS is not a setting of tokenspeed probe; did you mean "
            + PREFIX
            + "THREADS? (see 'tokenspeed probe --help')",
        r.err().strip());
  }

  @Test
  void shouldShowTheMixinsDefaultsOnceInTheHelp() {
    Run r = run(Map.of(PREFIX + "SEED", "5"), "probe", "--help");
    assertEquals(0, r.exitCode(), r::toString);
    String help = r.out().replaceAll("\\s+", " ");
    assertTrue(
        help.contains(
            "Weight seed of a synthetic model (default: 0). (env TOKENSPEED_PROBE_SEED; config key"
                + " seed)"),
        r::toString);
    assertTrue(
        help.contains(
            "Weight type of a synthetic model (default: f32). (env TOKENSPEED_PROBE_DTYPE; config"
                + " key dtype)"),
        r::toString);
    assertTrue(
        help.contains(
            "Port to listen on. (default: 8000; env TOKENSPEED_PROBE_PORT; config key port)"),
        r::toString);
    assertTrue(help.contains("Compute threads (default: one per core). (env"), r::toString);
  }

  @Test
  void shouldLeaveTheOtherCommandsWithoutConfig() {
    Run r = run(Map.of(), "generate", "--config", "x.yaml", "--model=m");
    assertEquals(CliErrors.EXIT_USAGE, r.exitCode(), r::toString);
    assertTrue(r.err().contains("--config"), r::toString);
    assertFalse(r.err().contains("x.yaml: no such file"), r::toString);
  }
}

package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.l3.StorageBackend;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.redis.RedisStoreSettings;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.l3.store.memory.MemoryStoreSettings;
import io.tokenspeed.server.config.StorageExtraConfig;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;
import java.util.concurrent.Callable;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.ParameterException;

/**
 * {@link StorageOptions} on a one-line command with the CLI's own error handling: no flags is L3
 * off, the flags resolve to settings, and every bad input is one usage-error line (exit 2) naming
 * the flag and the field.
 */
class StorageOptionsTest {

  @TempDir Path tmp;

  /** The smallest command that carries the mixin and resolves it. */
  @Command(name = "l3probe", mixinStandardHelpOptions = true)
  static final class Probe implements Callable<Integer> {
    @Mixin StorageOptions storage;

    Optional<StorageExtraConfig.Resolved> resolved;

    @Override
    public Integer call() {
      resolved = storage.resolve();
      return 0;
    }
  }

  /** One run: exit code, stdout, stderr and the command (its resolved settings when it ran). */
  record Run(int exitCode, String out, String err, Probe probe) {
    Optional<StorageExtraConfig.Resolved> resolved() {
      return probe.resolved;
    }

    StorageExtraConfig.Resolved settings() {
      assertEquals(0, exitCode, this::toString);
      return probe.resolved.orElseThrow();
    }

    /** Asserts one usage-error line on stderr, nothing on stdout, and returns the line. */
    String usageError() {
      assertEquals(CliErrors.EXIT_USAGE, exitCode, this::toString);
      assertEquals(2, exitCode);
      assertEquals("", out, this::toString);
      assertEquals(1, err.lines().count(), this::toString);
      assertTrue(err.startsWith("error: "), this::toString);
      assertTrue(err.strip().endsWith("(see 'l3probe --help')"), this::toString);
      return err.strip();
    }

    @Override
    public String toString() {
      return "exit=" + exitCode + "\nout:\n" + out + "\nerr:\n" + err;
    }
  }

  static CommandLine commandLine(Probe probe, StringWriter out, StringWriter err) {
    CommandLine cli = new CommandLine(probe);
    cli.setOut(new PrintWriter(out, true));
    cli.setErr(new PrintWriter(err, true));
    CliErrors errors = new CliErrors();
    cli.setParameterExceptionHandler(errors);
    cli.setExecutionExceptionHandler(errors);
    return cli;
  }

  static Run run(String... args) {
    Probe probe = new Probe();
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    int code = commandLine(probe, out, err).execute(args);
    return new Run(code, out.toString(), err.toString(), probe);
  }

  @Test
  void shouldLeaveL3OffWithoutTheFlags() {
    Run r = run();
    assertEquals(0, r.exitCode(), r::toString);
    assertEquals(Optional.empty(), r.resolved());
    assertEquals("", r.err());
  }

  @Test
  void shouldResolveABackendAloneToItsDefaults() {
    StorageExtraConfig.Resolved s = run("--kvstore-storage-backend", "memory").settings();
    assertEquals(new StorageBackend.Memory(MemoryStoreSettings.defaults()), s.backend());
    assertEquals(StorageRuntimeConfig.defaults(), s.runtime());
  }

  @Test
  void shouldResolveInlineJson() {
    StorageExtraConfig.Resolved s =
        run(
                "--kvstore-storage-backend=redis",
                "--kvstore-storage-backend-extra-config",
                "{\"uri\": \"10.1.2.3:6379\", \"connections\": 2, \"async\": {\"put_workers\": 3}}")
            .settings();
    assertEquals(
        new StorageBackend.Redis(RedisStoreSettings.standalone("10.1.2.3:6379").withConnections(2)),
        s.backend());
    assertEquals(3, s.runtime().executor().putWorkers());
  }

  @Test
  void shouldReadTheJsonFromAFileGivenWithEquals() throws Exception {
    Path file = tmp.resolve("l3.json");
    Files.writeString(
        file, "{\n  \"path\": \"" + tmp.resolve("objects") + "\",\n  \"fsync\": false\n}\n");
    StorageExtraConfig.Resolved s =
        run("--kvstore-storage-backend", "file", "--kvstore-storage-backend-extra-config=@" + file)
            .settings();
    assertEquals(
        new StorageBackend.File(FileStoreSettings.of(tmp.resolve("objects")).withFsync(false)),
        s.backend());
    assertFalse(Files.exists(tmp.resolve("objects")), "parsing creates no directory");
  }

  @Test
  void shouldReadTheJsonFromAFileGivenWithPicocliEscape() throws Exception {
    Path file = tmp.resolve("l3.json");
    Files.writeString(file, "{ \"capacity_bytes\": 4096 }");
    StorageExtraConfig.Resolved s =
        run(
                "--kvstore-storage-backend",
                "memory",
                "--kvstore-storage-backend-extra-config",
                "@@" + file)
            .settings();
    assertEquals(
        new StorageBackend.Memory(MemoryStoreSettings.defaults().withCapacityBytes(4096)),
        s.backend());
  }

  /** picocli expands a separate @FILE argument itself (docs/l3-configuration.md says so). */
  @Test
  void shouldFailLoudlyWhenPicocliExpandsASeparateAtFile() throws Exception {
    Path file = tmp.resolve("l3.json");
    Files.writeString(file, "{ \"capacity_bytes\": 4096 }");
    Run r =
        run(
            "--kvstore-storage-backend",
            "memory",
            "--kvstore-storage-backend-extra-config",
            "@" + file);
    r.usageError();
    assertNull(r.resolved(), "the command never ran");
  }

  @Test
  void shouldTreatAnEmptyFileAsEveryDefault() throws Exception {
    Path file = Files.writeString(tmp.resolve("empty.json"), "");
    StorageExtraConfig.Resolved s =
        run("--kvstore-storage-backend=memory", "--kvstore-storage-backend-extra-config=@" + file)
            .settings();
    assertEquals(new StorageBackend.Memory(MemoryStoreSettings.defaults()), s.backend());
  }

  @Test
  void shouldRejectExtraConfigWithoutABackend() {
    Run r = run("--kvstore-storage-backend-extra-config", "{}");
    assertEquals(
        "error: --kvstore-storage-backend-extra-config needs --kvstore-storage-backend (memory,"
            + " file, redis, mooncake); without a backend L3 is off (see 'l3probe --help')",
        r.usageError());
  }

  @Test
  void shouldRejectAnUnknownBackendListingTheAllowedOnes() {
    Run r = run("--kvstore-storage-backend", "s3");
    assertEquals(
        "error: --kvstore-storage-backend=s3 is not an L3 backend; allowed: memory, file, redis,"
            + " mooncake (see 'l3probe --help')",
        r.usageError());
  }

  @Test
  void shouldNameTheFlagAndTheFieldPathOfABadValue() {
    Run r =
        run(
            "--kvstore-storage-backend=file",
            "--kvstore-storage-backend-extra-config={\"async\": {\"soft_deadline_ms\": 0}}");
    assertEquals(
        "error: --kvstore-storage-backend-extra-config: async.soft_deadline_ms=0 must be in [1,"
            + " 3600000] (see 'l3probe --help')",
        r.usageError());
  }

  @Test
  void shouldNameTheFileOfABadFileConfiguration() throws Exception {
    Path file = Files.writeString(tmp.resolve("bad.json"), "{\n  \"fsync\": \"no\"\n}");
    String line =
        run("--kvstore-storage-backend=file", "--kvstore-storage-backend-extra-config=@" + file)
            .usageError();
    assertEquals(
        "error: --kvstore-storage-backend-extra-config=@"
            + file
            + ": fsync=\"no\" must be true or false, not a string (see 'l3probe --help')",
        line);
  }

  @Test
  void shouldKeepAMultiLineMalformedFileToOneLine() throws Exception {
    Path file = Files.writeString(tmp.resolve("bad.json"), "{\n  \"fsync\": tru\n}");
    String line =
        run("--kvstore-storage-backend=file", "--kvstore-storage-backend-extra-config=@" + file)
            .usageError();
    assertTrue(line.contains("=@" + file + ": malformed JSON at line 2"), line);
  }

  @Test
  void shouldRejectAMissingFile() {
    Path file = tmp.resolve("nope.json");
    String line =
        run("--kvstore-storage-backend=memory", "--kvstore-storage-backend-extra-config=@" + file)
            .usageError();
    assertTrue(
        line.startsWith(
            "error: --kvstore-storage-backend-extra-config=@" + file + ": no such file"),
        line);
  }

  @Test
  void shouldRejectADirectory() {
    String line =
        run("--kvstore-storage-backend=memory", "--kvstore-storage-backend-extra-config=@" + tmp)
            .usageError();
    assertTrue(line.contains("=@" + tmp + " is a directory, not a file"), line);
  }

  @Test
  void shouldRejectAnAtWithoutAFileName() {
    String line =
        run("--kvstore-storage-backend=memory", "--kvstore-storage-backend-extra-config=@")
            .usageError();
    assertTrue(line.contains("needs a file name after the @"), line);
  }

  @Test
  void shouldRejectAFileThatIsNotUtf8() throws Exception {
    Path file =
        Files.write(
            tmp.resolve("latin1.json"),
            "{\"path\": \"caf\u00e9\"}".getBytes(StandardCharsets.ISO_8859_1));
    String line =
        run("--kvstore-storage-backend=file", "--kvstore-storage-backend-extra-config=@" + file)
            .usageError();
    assertTrue(line.contains(": not valid UTF-8 text"), line);
  }

  @Test
  void shouldNeverEchoARedisPassword() {
    Run r =
        run(
            "--kvstore-storage-backend=redis",
            "--kvstore-storage-backend-extra-config={\"uri\": \"rediss://bob:topsecret@h:1\"}");
    String line = r.usageError();
    assertFalse(line.contains("topsecret"), line);
    assertTrue(line.contains("uri=rediss://***@h:1 uses rediss:// but tls=false"), line);
  }

  /** resolve() throws picocli's usage error, tied to the option and the command. */
  @Test
  void shouldThrowAParameterExceptionTiedToTheOption() {
    Probe probe = new Probe();
    CommandLine cli = new CommandLine(probe);
    cli.parseArgs("--kvstore-storage-backend=redis", "--kvstore-storage-backend-extra-config={}");
    ParameterException e = assertThrows(ParameterException.class, () -> probe.storage.resolve());
    assertSame(cli, e.getCommandLine());
    assertEquals(
        "--kvstore-storage-backend-extra-config", ((OptionSpec) e.getArgSpec()).longestName());
    assertEquals("{}", e.getValue());
    assertTrue(e.getMessage().contains("uri or cluster is required"), e.getMessage());
    assertTrue(e.getCause() instanceof IllegalArgumentException, String.valueOf(e.getCause()));

    cli.parseArgs("--kvstore-storage-backend=mem");
    ParameterException backend =
        assertThrows(ParameterException.class, () -> probe.storage.resolve());
    assertEquals("--kvstore-storage-backend", ((OptionSpec) backend.getArgSpec()).longestName());
    assertEquals("mem", probe.storage.backend());
  }

  @Test
  void shouldDescribeBothFlagsInTheHelp() {
    Run r = run("--help");
    assertEquals(0, r.exitCode(), r::toString);
    assertTrue(r.out().contains("--kvstore-storage-backend=memory|file|redis|mooncake"), r.out());
    assertTrue(r.out().contains("--kvstore-storage-backend-extra-config=JSON|@FILE"), r.out());
    assertTrue(r.out().contains("L3 off"), r.out());
  }
}

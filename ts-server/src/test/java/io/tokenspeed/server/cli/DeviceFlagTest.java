package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;

/**
 * {@code --device} on every command that runs a model (generate, serve, demo, bench ttft): a form
 * that is not {@code cpu}, {@code cuda} or {@code cuda:N} is a usage error listing them; a GPU with
 * {@code --tp} above 1 is a usage error where only the CPU splits (demo, bench ttft) and checked
 * before any rank starts where the GPUs split (serve, generate); and on this machine, which has no
 * GPU (the CPU suite runs without one), {@code --device cuda} is invalid input naming {@code
 * --device} and what CUDA said, never a stack trace, and the multi-process commands say so before
 * they start any process. The CPU, the default, is the path the other tests of each command run;
 * here the worker processes' command lines are checked to be what they were without the flag.
 */
class DeviceFlagTest {
  @TempDir static Path tmp;

  private static Path llama;

  @BeforeAll
  static void extractFixture() {
    llama = ModelFixtures.extract("llama", tmp);
  }

  /** Each command with the flags it needs to get as far as its device. */
  static Stream<List<String>> commands() {
    return Stream.of(
        List.of("generate", "--model", "LLAMA", "--tokens", "1,2,3", "--max-tokens", "2"),
        List.of("serve", "--model", "LLAMA", "--port", "0", "--warmup-rounds", "0"),
        List.of("demo", "--prefixes", "1", "--prefix-tokens", "64"),
        List.of("bench", "ttft", "--stores", "memory", "--prompts", "1", "--prefix-tokens", "128"));
  }

  private static CliRun run(List<String> command, String... extra) {
    List<String> args = new ArrayList<>();
    for (String a : command) {
      args.add(a.equals("LLAMA") ? llama.toString() : a);
    }
    args.addAll(List.of(extra));
    return CliRun.of(args.toArray(String[]::new));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("commands")
  void shouldRefuseAnUnknownDeviceWithAUsageErrorListingTheForms(List<String> command) {
    for (String bad : List.of("bogus", "cuda:-1", "cuda:x", "gpu")) {
      CliRun r = run(command, "--device=" + bad);
      assertEquals(2, r.exitCode(), r::toString);
      assertTrue(
          r.err()
              .startsWith(
                  "error: --device="
                      + bad
                      + " is not supported; allowed: cpu, cuda, cuda:N (N >= 0)"),
          r::toString);
      assertEquals("", r.out(), r::toString);
    }
  }

  /**
   * demo and bench ttft run their replicas one rank a process on the CPU only: a GPU with {@code
   * --tp} above 1 is a usage error there.
   */
  @ParameterizedTest(name = "{0}")
  @MethodSource("commands")
  void shouldRefuseAGpuWithSeveralTensorParallelRanksWhereOnlyTheCpuSplits(List<String> command) {
    if (command.getFirst().equals("generate") || command.getFirst().equals("serve")) {
      return; // the next test's
    }
    CliRun r = run(command, "--device", "cuda", "--tp", "2");
    assertEquals(2, r.exitCode(), r::toString);
    assertTrue(
        r.err().startsWith("error: --device=cuda with --tp=2 runs under serve and generate"),
        r::toString);
  }

  /**
   * serve and generate run a replica of {@code --tp} ranks on as many GPUs: on this machine, which
   * has none, the launcher says so naming {@code --device} and {@code --tp} before it starts any
   * rank; {@code --tp-kv pages} is the CPU's.
   */
  @ParameterizedTest
  @ValueSource(strings = {"generate", "serve"})
  void shouldCheckTheGpusOfATensorParallelReplicaBeforeStartingItsRanks(String command) {
    List<String> base = commands().filter(c -> c.getFirst().equals(command)).findFirst().get();
    CliRun r = run(base, "--device", "cuda:1", "--tp", "2");
    assertEquals(CliErrors.EXIT_INVALID_INPUT, r.exitCode(), r::toString);
    assertTrue(r.err().startsWith("error: --device=cuda:1 with --tp=2: "), r::toString);
    assertTrue(r.err().contains("not found"), r::toString);
    assertEquals(1, r.err().lines().count(), "one line, no rank started: " + r);
    CliRun pages = run(base, "--device", "cuda", "--tp", "2", "--tp-kv", "pages");
    assertEquals(2, pages.exitCode(), pages::toString);
    assertTrue(
        pages.err().startsWith("error: --tp-kv=pages is for the CPU backend"), pages::toString);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("commands")
  void shouldNameTheDeviceWhenThisMachineHasNoGpu(List<String> command) {
    for (String gpu : List.of("cuda", "cuda:3")) {
      CliRun r = run(command, "--device", gpu, "--deterministic");
      assertEquals(CliErrors.EXIT_INVALID_INPUT, r.exitCode(), r::toString);
      assertTrue(r.err().startsWith("error: --device=" + gpu + ": "), r::toString);
      assertTrue(
          r.err().contains("not found") || r.err().contains("cudaGetDeviceCount"), r::toString);
      assertFalse(r.err().contains("\tat "), r::toString);
      assertEquals(1, r.err().lines().count(), "one line, no process started: " + r);
    }
  }

  @Test
  void shouldNameServesVariableWhenItGivesTheDevice() {
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    int code =
        TokenSpeedCli.commandLine(
                new PrintWriter(out, true),
                new PrintWriter(err, true),
                Map.of("TOKENSPEED_SERVE_DEVICE", "tpu"))
            .execute("serve", "--model", llama.toString());
    assertEquals(2, code, err::toString);
    assertTrue(err.toString().contains("TOKENSPEED_SERVE_DEVICE=tpu"), err::toString);
    assertTrue(err.toString().contains("allowed: cpu, cuda, cuda:N (N >= 0)"), err::toString);
  }

  /** A command with the mixin alone, to read what it hands the worker processes. */
  @Command(name = "probe")
  static final class Probe implements Runnable {
    @Mixin DeviceOptions device;

    @Override
    public void run() {}
  }

  private static DeviceOptions parse(String... args) {
    Probe probe = new Probe();
    new CommandLine(probe).parseArgs(args);
    return probe.device;
  }

  @Test
  void shouldHandWorkersTheGpuAndLeaveTheirCpuCommandLineAsItWas() {
    assertEquals(List.of(), parse().workerArgs(), "the default: no flag added");
    assertEquals(List.of(), parse("--device", "cpu").workerArgs());
    assertEquals(List.of(), parse("--device", "CPU", "--deterministic").workerArgs());
    assertEquals(List.of("--device", "cuda"), parse("--device", "cuda").workerArgs());
    assertEquals(
        List.of("--device", "cuda:1", "--deterministic"),
        parse("--device=cuda:1", "--deterministic").workerArgs());
    assertEquals(List.of("--load-stages", "8"), parse("--load-stages", "8").workerArgs());
    assertEquals(
        List.of("--device", "cuda", "--load-stages", "3"),
        parse("--device", "cuda", "--load-stages=3").workerArgs());
    assertEquals(List.of(), parse("--load-stages", "1").workerArgs(), "the default is not added");
    var zero =
        org.junit.jupiter.api.Assertions.assertThrows(
            picocli.CommandLine.ParameterException.class,
            () -> parse("--load-stages", "0").load(null, "m", null));
    assertEquals("--load-stages=0 must be at least 1", zero.getMessage());
    assertEquals(-1, parse().ordinal());
    assertEquals(0, parse("--device", "cuda").ordinal());
    assertEquals(2, parse("--device", "cuda:2").ordinal());
  }
}

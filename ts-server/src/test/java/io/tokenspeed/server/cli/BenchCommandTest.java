package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** {@code tokenspeed bench}: bad flags are usage errors before any process starts. */
class BenchCommandTest {

  @ParameterizedTest(name = "{0}")
  @CsvSource(
      delimiter = ';',
      value = {
        "bench; a benchmark is required: ttft, serve, trace, route",
        "bench route --replicas 0; --replicas, --groups, --per-group, --suffix-tokens,"
            + " --max-tokens, --concurrency, --repeats must be at least 1",
        "bench route --routings prefix,random; --routing=random is not a routing; allowed:"
            + " prefix, round-robin",
        "bench route --prefix-tokens 4000; --prefix-tokens + --suffix-tokens + --max-tokens=4072"
            + " must fit --max-model-len=2048",
        "bench ttft --stores disk; --stores: disk is not one of: memory, file, redis, mooncake",
        "bench ttft --stores redis; --stores redis needs --redis-uri URI or --redis-cluster",
        "bench ttft --stores redis --redis-uri redis://127.0.0.1:1 --redis-cluster 127.0.0.1:2;"
            + " --stores redis needs --redis-uri URI or --redis-cluster HOST:PORT[,...], one of"
            + " them",
        "bench ttft --get-workers 0; --get-workers=0 must be in [1, 256]",
        "bench ttft --get-workers 257; --get-workers=257 must be in [1, 256]",
        "bench ttft --redis-command-timeout-ms 5000; --redis-command-timeout-ms is for --stores"
            + " redis",
        "bench ttft --stores redis --redis-uri redis://127.0.0.1:1 --redis-command-timeout-ms 9;"
            + " --redis-command-timeout-ms=9 must be in [10, 600000]",
        "bench ttft --stores redis --redis-uri redis://127.0.0.1:1 --redis-command-timeout-ms"
            + " 600001; --redis-command-timeout-ms=600001 must be in [10, 600000]",
        "bench ttft --stores mooncake; --stores mooncake needs --mooncake-master HOST:PORT",
        "bench ttft --stores mooncake --mooncake-master 127.0.0.1:50051; --stores mooncake needs",
        "bench ttft --stores mooncake --mooncake-lib pom.xml; --stores mooncake needs",
        "bench ttft --stores mooncake --mooncake-master 127.0.0.1:50051 --mooncake-lib"
            + " no/such/libmooncake_store.so; --mooncake-lib=no/such/libmooncake_store.so is not a"
            + " file",
        "bench ttft --mooncake-master 127.0.0.1:50051; --mooncake-master and --mooncake-lib are"
            + " for --stores mooncake",
        "bench ttft --prompts 0; --prompts >= 1, --prefix-tokens >= 128",
        "bench ttft --prefix-tokens 64; --prompts >= 1, --prefix-tokens >= 128",
        "bench ttft --pairs 0; --prompts >= 1, --prefix-tokens >= 128",
        "bench ttft --decode-pairs 0; --prompts >= 1, --prefix-tokens >= 128",
        "bench ttft --model synthetic:jamba-tiny --prefix-tokens 4096; --prefix-tokens=4096 +"
            + " --suffix-tokens=64 + --max-tokens=4 = 4164 exceeds the max_position_embeddings of"
            + " synthetic:jamba-tiny (4096)",
        "bench ttft --threads 0; --threads=0 must be at least 1",
        "bench ttft --tp 0; --tp=0 must be in [1, 64]",
        "bench ttft --tp 65; --tp=65 must be in [1, 64]",
        "bench ttft --dtype fp8; --dtype=fp8 is not supported",
      })
  void shouldRejectABadFlagWithAUsageError(String args, String message) {
    assertUsageError(args, message);
  }

  @Test
  void shouldRejectABadMooncakeAddressBeforeAnyProcessStarts(@TempDir Path dir) throws IOException {
    Path lib = Files.createFile(dir.resolve("libmooncake_store.so"));

    // the master address must be a token: no whitespace
    CliRun run =
        CliRun.of(
            "bench",
            "ttft",
            "--stores",
            "mooncake",
            "--mooncake-lib",
            lib.toString(),
            "--mooncake-master",
            "127.0.0.1: 50051");

    assertEquals(2, run.exitCode(), run::toString);
    assertTrue(
        run.err().startsWith("error: mooncake master_server_address='127.0.0.1: 50051'"),
        run::toString);
  }

  @Test
  void shouldReportABandwidthWithinTheLatencyAsSuchNotAsItsCap() {
    assertEquals("within latency", BenchTtftCommand.restoreMbps(1e12));
    assertEquals("2819.1", BenchTtftCommand.restoreMbps(2.8191e9));
    assertEquals("22.4 (2.95)", BenchTtftCommand.breakEven(22.4e6, 2.951));
    assertEquals("prefill not measured", BenchTtftCommand.breakEven(Double.NaN, Double.NaN));
    assertEquals("none (0.01)", BenchTtftCommand.breakEven(Double.POSITIVE_INFINITY, 0.01));
  }

  private static void assertUsageError(String args, String message) {
    CliRun run = CliRun.of(args.split(" "));
    assertEquals(2, run.exitCode(), run::toString);
    assertTrue(run.err().startsWith("error: " + message), run::toString);
  }
}

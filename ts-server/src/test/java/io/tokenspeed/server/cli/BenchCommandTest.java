package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** {@code tokenspeed bench}: bad flags are usage errors before any process starts. */
class BenchCommandTest {

  @ParameterizedTest(name = "{0}")
  @CsvSource(
      delimiter = ';',
      value = {
        "bench; a benchmark is required: ttft, serve",
        "bench ttft --stores disk; --stores: disk is not one of: memory, file, redis",
        "bench ttft --stores redis; --stores redis needs --redis-uri URI",
        "bench ttft --prompts 0; --prompts >= 1, --prefix-tokens >= 128",
        "bench ttft --prefix-tokens 64; --prompts >= 1, --prefix-tokens >= 128",
        "bench ttft --pairs 0; --prompts >= 1, --prefix-tokens >= 128",
        "bench ttft --decode-pairs 0; --prompts >= 1, --prefix-tokens >= 128",
        "bench ttft --threads 0; --threads=0 must be at least 1",
        "bench ttft --tp 0; --tp=0 must be in [1, 64]",
        "bench ttft --tp 65; --tp=65 must be in [1, 64]",
        "bench ttft --dtype fp8; --dtype=fp8 is not supported",
      })
  void shouldRejectABadFlagWithAUsageError(String args, String message) {
    CliRun run = CliRun.of(args.split(" "));
    assertEquals(2, run.exitCode(), run::toString);
    assertTrue(run.err().startsWith("error: " + message), run::toString);
  }
}

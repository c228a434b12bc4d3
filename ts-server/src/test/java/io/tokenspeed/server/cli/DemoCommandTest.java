package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** The demo's flags: every bad combination is a usage error before any process starts. */
class DemoCommandTest {

  @ParameterizedTest(name = "{0}")
  @CsvSource(
      delimiter = ';',
      value = {
        "--backend mooncake; --backend=mooncake is not one of: file, redis",
        "--backend redis; --backend redis needs --redis-uri URI",
        "--redis-uri redis://127.0.0.1:1; --redis-uri is for --backend redis",
        "--kvstore-storage-backend memory; --kvstore-storage-backend=memory lives in one process",
        "--kvstore-storage-backend file --backend file; --backend, --redis-uri and --store-dir are"
            + " shorthands",
        "--prefixes 0; --prefixes=0 must be at least 1",
        "--prefix-tokens 63; --prefix-tokens=63 must be at least one page (64)",
        "--suffix-tokens 0; --suffix-tokens=0 must be at least 1",
        "--max-tokens 0; --max-tokens=0 must be at least 1",
        "--threads 0; --threads=0 must be at least 1",
        "--kvstore-storage-backend-extra-config {}; --kvstore-storage-backend-extra-config needs"
            + " --kvstore-storage-backend",
      })
  void shouldRejectABadFlagWithAUsageError(String flags, String message) {
    String[] args = ("demo " + flags).split(" ");
    CliRun run = CliRun.of(args);
    assertEquals(2, run.exitCode(), run::toString);
    assertEquals("", run.out(), run::toString);
    assertTrue(run.err().startsWith("error: " + message), run::toString);
  }
}

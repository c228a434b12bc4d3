package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.server.cli.JarProcess.Result;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code tokenspeed demo} as users run it: the shaded jar starts the writer and the reader as two
 * more JVMs, over the file store and over a real Redis server. The table must show the L3 cohort
 * restoring every shared prefix's full pages from the store in the fresh reader, with no fallback
 * (the reader warms its L3 path first), and every output must equal the recomputation (a synthetic
 * Jamba-style hybrid: KV and State checkpoints).
 */
class DemoIT {
  private static final long TIMEOUT_SECONDS = 300;

  /** A small demo: two 192-token prefixes (three pages), 16 more tokens, 4 generated. */
  private static final List<String> SMALL =
      List.of(
          "--model",
          "synthetic:jamba-tiny",
          "--prefixes",
          "2",
          "--prefix-tokens",
          "192",
          "--suffix-tokens",
          "16",
          "--max-tokens",
          "4",
          "--threads",
          "1");

  @TempDir Path workDir;

  private Result runDemo(List<String> extra) throws IOException, InterruptedException {
    List<String> args = new ArrayList<>(List.of("demo"));
    args.addAll(SMALL);
    args.addAll(extra);
    return JarProcess.run(workDir, args, TIMEOUT_SECONDS);
  }

  private static String[] row(String out, String cohort) {
    return JarProcess.row(out, cohort);
  }

  private static void assertRestoredAndEqual(Result r) {
    assertEquals(0, r.exitCode(), r::toString);
    assertTrue(
        r.out().contains("outputs match recomputation: 2 of 2 L3 requests and 2 of 2 L2-only"),
        r::toString);
    String[] l3 = row(r.out(), "l3");
    assertEquals("2", l3[2], "requests");
    assertEquals("0 / 192 / 192", l3[5], "the fresh reader restored every full page from L3");
    assertEquals("16", l3[6], "only the suffix is left to compute");
    assertEquals("0", l3[7], "no fallback");
    String[] off = row(r.out(), "cache-off");
    assertEquals("0 / 0 / 0", off[5]);
    assertEquals("208", off[6], "recomputation computes the whole prompt");
    String[] l2 = row(r.out(), "l2-only");
    assertEquals("0", l2[7], "the writer's warm caches hold every prefix");
    assertTrue(r.out().contains("L3 executors closed cleanly: yes"), r::out);
    assertTrue(r.err().contains("[2/2] reader process"), r::err);
    assertTrue(
        r.err()
            .lines()
            .anyMatch(l -> l.matches("  reader: L3 warm-up: prompt 2, [0-9]+ tokens from L3")),
        "the reader warmed its L3 path before the L3 cohort: " + r.err());
    assertTrue(
        r.err().indexOf("  reader: L3 warm-up: prompt 2")
            < r.err().indexOf("  reader: l3: request 1/2"),
        r::err);
    assertTrue(r.err().contains("  reader: l3: request 2/2"), r::err);
  }

  @Test
  void shouldRestoreTheWritersPrefixesInAFreshProcessOverTheFileStore() throws Exception {
    Path store = workDir.resolve("store");
    // the CPU named explicitly: the default's path, the workers' command lines as without it
    Result r = runDemo(List.of("--store-dir", store.toString(), "--device", "cpu"));
    assertRestoredAndEqual(r);
    try (var files = Files.walk(store)) {
      assertTrue(files.anyMatch(Files::isRegularFile), "the store holds the objects");
    }
  }

  @Test
  void shouldRestoreTheWritersPrefixesInAFreshTp2ReplicaOverTheFileStore() throws Exception {
    Path store = workDir.resolve("store-tp");
    Result r = runDemo(List.of("--store-dir", store.toString(), "--tp", "2"));
    assertRestoredAndEqual(r);
    assertTrue(r.err().contains("[rank 1]"), "rank 1 ran in each worker: " + r.err());
  }

  @Test
  void shouldRestoreTheWritersPrefixesInAFreshProcessOverRedis() throws Exception {
    try (RedisServer server = RedisServers.startStandalone(workDir.resolve("redis"))) {
      // the flags generate takes, instead of the --backend/--redis-uri shorthand
      Result r =
          runDemo(
              List.of(
                  "--kvstore-storage-backend",
                  "redis",
                  "--kvstore-storage-backend-extra-config",
                  "{\"uri\": \""
                      + server.uri()
                      + "\", \"async\": {\"min_extension_tokens\": 64}}"));
      assertRestoredAndEqual(r);
    }
  }
}

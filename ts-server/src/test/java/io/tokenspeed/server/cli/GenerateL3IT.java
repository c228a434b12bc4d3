package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Successive {@code tokenspeed generate --json} processes (the shaded jar) pointed at one store,
 * the file store and a real Redis server: the second, with empty local caches, reuses from storage
 * every full page of the prefix the first one computed, and its output equals a recomputation
 * without L3; a token changed inside that prefix changes the output, which still equals its
 * recomputation.
 */
class GenerateL3IT {
  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir Path workDir;

  private JsonNode generate(int[] ids, List<String> l3) throws Exception {
    List<String> args =
        new ArrayList<>(
            List.of(
                "generate",
                "--model",
                "synthetic:jamba-tiny",
                "--tokens",
                IntStream.of(ids).mapToObj(Integer::toString).collect(Collectors.joining(",")),
                "--max-tokens",
                "4",
                "--threads",
                "1",
                "--json"));
    args.addAll(l3);
    JarProcess.Result r =
        JarProcess.run(
            workDir, List.of("--add-modules", "jdk.incubator.vector"), Map.of(), args, 120);
    String stdout = r.out();
    assertEquals(0, r.exitCode(), () -> stdout + r.err());
    return JSON.readTree(stdout);
  }

  private static int[] tokens(JsonNode n) {
    int[] t = new int[n.get("tokens").size()];
    for (int i = 0; i < t.length; i++) {
      t[i] = n.get("tokens").get(i).asInt();
    }
    return t;
  }

  @Test
  void shouldReuseTheFirstProcesssPrefixFromTheFileStoreInTheSecond() throws Exception {
    String config =
        "{\"path\": \""
            + workDir.resolve("store").toString().replace("\\", "\\\\")
            + "\", \"async\": {\"min_extension_tokens\": 64}}";
    reuseAcrossProcesses(
        List.of(
            "--kvstore-storage-backend", "file", "--kvstore-storage-backend-extra-config", config));
  }

  @Test
  void shouldReuseTheFirstProcesssPrefixFromARedisServerInTheSecond() throws Exception {
    try (RedisServer server = RedisServers.startStandalone(workDir.resolve("redis"))) {
      String config =
          "{\"uri\": \"" + server.uri() + "\", \"async\": {\"min_extension_tokens\": 64}}";
      reuseAcrossProcesses(
          List.of(
              "--kvstore-storage-backend",
              "redis",
              "--kvstore-storage-backend-extra-config",
              config));
    }
  }

  /**
   * A writer process, then a fresh reader process that extends its prompt (it restores the writer's
   * full pages from the store and must equal a recomputation), then a fresh process whose prompt
   * changes one token inside that prefix (it can reuse none of the pages after the change, equals
   * its own recomputation, and differs from the unchanged prompt's output).
   */
  private void reuseAcrossProcesses(List<String> l3) throws Exception {
    SplittableRandom rnd = new SplittableRandom(11);
    int[] first = rnd.ints(200, 0, 1024).toArray();
    int[] second = Arrays.copyOf(first, 220);
    for (int i = 200; i < 220; i++) {
      second[i] = rnd.nextInt(1024);
    }
    JsonNode writer = generate(first, l3);
    assertEquals(0, writer.get("reused_storage_tokens").asInt(), writer::toString);
    JsonNode reader = generate(second, l3);
    JsonNode recomputed = generate(second, List.of());

    assertEquals(192, reader.get("reused_storage_tokens").asInt(), reader::toString);
    assertEquals(192, reader.get("reused_host_tokens").asInt(), reader::toString);
    assertEquals(0, reader.get("reused_device_tokens").asInt(), reader::toString);
    assertEquals(220 - 192 + 3, reader.get("computed_tokens").asLong(), reader::toString);
    assertEquals(0, recomputed.get("reused_host_tokens").asInt(), recomputed::toString);
    assertArrayEquals(tokens(recomputed), tokens(reader), "restored from L3 vs recomputed");

    // a prompt that ends one token past the stored prefix, restored, and the same prompt with its
    // prefix's last token changed: only the pages before the change can be reused
    int[] near = Arrays.copyOf(second, 193);
    JsonNode nearRestored = generate(near, l3);
    assertEquals(192, nearRestored.get("reused_storage_tokens").asInt(), nearRestored::toString);
    int[] changed = near.clone();
    changed[191] = (changed[191] + 1) % 1024;
    JsonNode other = generate(changed, l3);
    JsonNode otherRecomputed = generate(changed, List.of());
    assertTrue(
        other.get("reused_storage_tokens").asInt() <= 128,
        () -> "nothing from the changed token on can be reused: " + other);
    assertArrayEquals(tokens(otherRecomputed), tokens(other), "changed prompt vs recomputed");
    assertFalse(
        Arrays.equals(tokens(nearRestored), tokens(other)), "the changed token changes the output");
  }
}

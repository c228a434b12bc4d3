package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Two successive {@code tokenspeed generate --json} processes (the shaded jar) pointed at one file
 * store: the second, with empty local caches, reuses from storage every full page of the prefix the
 * first one computed, and its output equals a third process's recomputation without L3.
 */
class GenerateL3IT {
  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir Path workDir;

  private JsonNode generate(int[] ids, List<String> l3) throws Exception {
    Path jar = Path.of(System.getProperty("tokenspeed.jar", "target/tokenspeed.jar"));
    assertTrue(Files.isRegularFile(jar), () -> "no executable jar at " + jar.toAbsolutePath());
    List<String> command =
        new ArrayList<>(
            List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--add-modules",
                "jdk.incubator.vector",
                "-jar",
                jar.toAbsolutePath().toString(),
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
    command.addAll(l3);
    Path out = workDir.resolve("stdout");
    Path err = workDir.resolve("stderr");
    Process p =
        new ProcessBuilder(command)
            .directory(workDir.toFile())
            .redirectOutput(out.toFile())
            .redirectError(err.toFile())
            .start();
    assertTrue(p.waitFor(120, TimeUnit.SECONDS), "generate timed out");
    String stdout = Files.readString(out, StandardCharsets.UTF_8);
    String stderr = Files.readString(err, StandardCharsets.UTF_8);
    assertEquals(0, p.exitValue(), () -> stdout + stderr);
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
    SplittableRandom rnd = new SplittableRandom(11);
    int[] first = rnd.ints(200, 0, 1024).toArray();
    int[] second = java.util.Arrays.copyOf(first, 220);
    for (int i = 200; i < 220; i++) {
      second[i] = rnd.nextInt(1024);
    }
    String config =
        "{\"path\": \""
            + workDir.resolve("store").toString().replace("\\", "\\\\")
            + "\", \"async\": {\"min_extension_tokens\": 64}}";
    List<String> l3 =
        List.of(
            "--kvstore-storage-backend", "file", "--kvstore-storage-backend-extra-config", config);

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
  }
}

package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.testkit.LiveTree;
import java.io.InputStream;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code tokenspeed serve --tp 2} over real HTTP: the launcher's rank 0 serves, rank 1 computes
 * with it; completions, streamed and not, one at a time and eight at once, equal a single-rank
 * server's (greedy, an untied model whose output depends on its context); SIGTERM to the launcher
 * ends every process of the replica, rank 0 first, without an error. With L3 over the file store,
 * the admin calls that rotate the namespace and update the weight version work at --tp 2.
 */
class ServeTpIT {
  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir Path workDir;

  private List<String> args() throws Exception {
    Path config = workDir.resolve("tiny-untied.json");
    try (InputStream in = getClass().getResourceAsStream("/models/tiny-untied.json")) {
      Files.write(config, in.readAllBytes());
    }
    return new ArrayList<>(
        List.of(
            "--model",
            "synthetic:" + config,
            "--threads",
            "1",
            "--served-model-name",
            "m",
            "--warmup-rounds",
            "1"));
  }

  private static String body(String prompt, boolean stream) {
    return "{\"model\":\"m\",\"prompt\":\""
        + prompt
        + "\",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true"
        + (stream ? ",\"stream\":true}" : "}");
  }

  private static String text(HttpResponse<String> r, boolean stream) throws Exception {
    assertEquals(200, r.statusCode(), r.body());
    if (!stream) {
      return JSON.readTree(r.body()).get("choices").get(0).get("text").asText();
    }
    StringBuilder b = new StringBuilder();
    for (String line : r.body().split("\n")) {
      if (line.startsWith("data: {")) {
        JsonNode event = JSON.readTree(line.substring(6));
        for (JsonNode c : event.path("choices")) {
          b.append(c.path("text").asText());
        }
      }
    }
    assertTrue(r.body().endsWith("data: [DONE]\n\n"), r.body());
    return b.toString();
  }

  private static HttpResponse<String> post(ServeProcess s, String body) {
    return s.send(
        HttpRequest.newBuilder(s.uri("/v1/completions"))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(body))
            .build());
  }

  @Test
  void shouldServeAsASingleRankServerAndStopOnSigterm() throws Exception {
    SplittableRandom random = new SplittableRandom(71);
    List<String> prompts = new ArrayList<>();
    for (int i = 0; i < 8; i++) {
      StringBuilder p = new StringBuilder();
      for (int j = 0, n = 20 + random.nextInt(60); j < n; j++) {
        p.append((char) ('a' + random.nextInt(26)));
      }
      prompts.add(p.toString());
    }
    List<String> want = new ArrayList<>();
    try (ServeProcess one = ServeProcess.start(workDir, args(), 120)) {
      for (String p : prompts) {
        want.add(text(post(one, body(p, false)), false));
      }
    }
    List<String> tp = args();
    tp.addAll(List.of("--tp", "2"));
    ServeProcess two = ServeProcess.start(workDir, tp, 180);
    List<ProcessHandle> replica = two.process.descendants().toList();
    try {
      assertEquals(2, replica.size(), "two ranks under the launcher");
      for (int i = 0; i < prompts.size(); i++) {
        boolean stream = i % 2 == 1;
        assertEquals(want.get(i), text(post(two, body(prompts.get(i), stream)), stream), "" + i);
      }
      List<CompletableFuture<HttpResponse<String>>> together = new ArrayList<>();
      for (String p : prompts) {
        together.add(
            two.client.sendAsync(
                HttpRequest.newBuilder(two.uri("/v1/completions"))
                    .POST(HttpRequest.BodyPublishers.ofString(body(p, true)))
                    .build(),
                HttpResponse.BodyHandlers.ofString()));
      }
      for (int i = 0; i < prompts.size(); i++) {
        assertEquals(
            want.get(i), text(together.get(i).get(60, TimeUnit.SECONDS), true), "together " + i);
      }
      // 143 = 128 + SIGTERM, as for any JVM that a SIGTERM ends; every rank ended on its own
      assertEquals(143, two.terminate(90), two.stderr());
      assertTrue(!two.stderr().contains("exited with status"), two.stderr());
      assertTrue(!two.stderr().contains("killed by signal"), two.stderr());
      assertTrue(!two.stderr().contains("error:"), two.stderr());
      for (ProcessHandle rank : replica) {
        rank.onExit().get(30, TimeUnit.SECONDS);
      }
    } finally {
      two.close();
      replica.forEach(ProcessHandle::destroyForcibly);
    }
  }

  /** Object files under {@code namespace} in a file store rooted at {@code root}. */
  private static long objects(Path root, String namespace) throws Exception {
    Path dir = root.resolve(namespace);
    if (!Files.isDirectory(dir)) {
      return 0;
    }
    return LiveTree.publishedFiles(dir).size();
  }

  /** Waits up to 30 s until {@code namespace} holds an object. */
  private static long awaitObjects(Path root, String namespace) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    long n;
    while ((n = objects(root, namespace)) == 0 && System.nanoTime() < deadline) {
      Thread.sleep(50);
    }
    return n;
  }

  private static JsonNode admin(ServeProcess s, String path, String version) throws Exception {
    HttpResponse<String> r =
        s.send(
            HttpRequest.newBuilder(s.uri(path))
                .header("Content-Type", "application/json")
                .header("Authorization", "Bearer tp-admin-token")
                .POST(
                    HttpRequest.BodyPublishers.ofString("{\"weight_version\":\"" + version + "\"}"))
                .build());
    assertEquals(200, r.statusCode(), path + ": " + r.body());
    return JSON.readTree(r.body());
  }

  /**
   * At --tp 2 with the file store, POST /admin/rotate_namespace and /admin/update_weights work over
   * HTTP: the rotation switches the namespace and leaves the old one's objects; the update deletes
   * the rotated namespace's objects (both ranks') and switches again; completions before and after
   * are the same text; /metrics shows rank 1's executor figures under tp_rank="1".
   */
  @Test
  void shouldRotateAndUpdateWeightsOverHttpOnATp2Replica() throws Exception {
    Path store = workDir.resolve("store");
    List<String> tp = args();
    tp.addAll(
        List.of(
            "--tp",
            "2",
            "--admin-token",
            "tp-admin-token",
            "--kvstore-storage-backend",
            "file",
            "--kvstore-storage-backend-extra-config",
            "{\"path\": \""
                + store.toString().replace("\\", "\\\\")
                + "\", \"async\": {\"min_extension_tokens\": 16}}"));
    StringBuilder p = new StringBuilder();
    SplittableRandom random = new SplittableRandom(73);
    for (int j = 0; j < 90; j++) {
      p.append((char) ('a' + random.nextInt(26)));
    }
    String prompt = p.toString();
    ServeProcess two = ServeProcess.start(workDir, tp, 180);
    List<ProcessHandle> replica = two.process.descendants().toList();
    try {
      String want = text(post(two, body(prompt, false)), false);

      JsonNode rotated = admin(two, "/admin/rotate_namespace", "v2");
      String first = rotated.get("previous_namespace").asText();
      String second = rotated.get("namespace").asText();
      assertTrue(!first.equals(second), rotated.toString());
      assertEquals("v2", rotated.get("weight_version").asText(), rotated.toString());
      long kept = awaitObjects(store, first);
      assertTrue(kept > 0, "the first namespace's objects stay after the rotation");

      assertEquals(want, text(post(two, body(prompt, false)), false), "after the rotation");
      assertTrue(awaitObjects(store, second) > 0, "written under the rotated namespace");

      JsonNode updated = admin(two, "/admin/update_weights", "v3");
      assertEquals(second, updated.get("previous_namespace").asText(), updated.toString());
      String third = updated.get("namespace").asText();
      assertTrue(!third.equals(second), updated.toString());
      assertTrue(updated.get("deleted_objects").asLong() > 0, updated.toString());
      assertEquals(0, objects(store, second), "the update deleted the rotated namespace");
      // a backup of the first namespace in flight at the rotation may land after the count above:
      // what the update must not do is delete any of them
      long firstAfter = objects(store, first);
      assertTrue(
          firstAfter >= kept,
          "the first namespace was not the update's: " + kept + " objects before, " + firstAfter);

      assertEquals(want, text(post(two, body(prompt, true)), true), "after the update");
      assertTrue(awaitObjects(store, third) > 0, "written under the updated namespace");

      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      String metrics;
      do {
        Thread.sleep(200);
        HttpResponse<String> m =
            two.send(HttpRequest.newBuilder(two.uri("/metrics")).GET().build());
        assertEquals(200, m.statusCode(), m.body());
        metrics = m.body();
      } while (!putJobsOfRank1(metrics) && System.nanoTime() < deadline);
      assertTrue(putJobsOfRank1(metrics), "rank 1's PUT jobs under tp_rank=\"1\":\n" + metrics);

      assertEquals(143, two.terminate(90), two.stderr());
      assertTrue(!two.stderr().contains("error:"), two.stderr());
      for (ProcessHandle rank : replica) {
        rank.onExit().get(30, TimeUnit.SECONDS);
      }
    } finally {
      two.close();
      replica.forEach(ProcessHandle::destroyForcibly);
    }
  }

  /** Whether {@code metrics} shows PUT jobs of rank 1 (a positive count under tp_rank="1"). */
  private static boolean putJobsOfRank1(String metrics) {
    for (String line : metrics.split("\n")) {
      if (line.startsWith("tokenspeed:l3_jobs_total{")
          && line.contains("tp_rank=\"1\"")
          && line.contains("kind=\"put\"")) {
        return Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1)) > 0;
      }
    }
    return false;
  }
}

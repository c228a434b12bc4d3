package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
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
 * ends every process of the replica, rank 0 first, without an error.
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
}

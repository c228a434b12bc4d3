package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.io.IOException;
import java.io.InputStream;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code tokenspeed serve} processes of the shaded jar: two long-running servers behind one store
 * (a real Redis server, and the file store), where the second restores from storage the prefix the
 * first computed and answers as a server without storage does; the warm-up; SIGTERM's drain.
 */
class ServeIT {
  private static final ObjectMapper JSON = new ObjectMapper();

  /** A 192-token prefix is worth a storage read (the default asks for a longer extension). */
  private static final String EXTENSION = "\"async\": {\"min_extension_tokens\": 64}";

  @TempDir Path workDir;

  private List<String> model() throws IOException {
    Path config = workDir.resolve("tiny-untied.json");
    try (InputStream in = ServeIT.class.getResourceAsStream("/models/tiny-untied.json")) {
      Files.write(config, in.readAllBytes());
    }
    return List.of(
        "--model",
        "synthetic:" + config,
        "--seed",
        "7",
        "--threads",
        "1",
        "--warmup-rounds",
        "1",
        "--served-model-name",
        "tiny");
  }

  private ServeProcess serve(List<String> l3) throws Exception {
    List<String> args = new ArrayList<>(model());
    args.addAll(l3);
    return ServeProcess.start(workDir, args, 120);
  }

  private static String prompt(long seed, int n) {
    SplittableRandom r = new SplittableRandom(seed);
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < n; i++) {
      sb.append((char) ('a' + r.nextInt(26)));
    }
    return sb.toString();
  }

  private static JsonNode complete(ServeProcess s, String prompt) throws IOException {
    HttpResponse<String> res =
        s.post(
            "/v1/completions",
            "{\"model\":\"tiny\",\"prompt\":\""
                + prompt
                + "\",\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}");
    assertEquals(200, res.statusCode(), res.body());
    return JSON.readTree(res.body());
  }

  /** Waits until the server has no L3 work pending (its backups are in the store). */
  private static void awaitStorageIdle(ServeProcess s) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (System.nanoTime() < deadline) {
      Map<String, PrometheusText.Family> m = s.metrics();
      if (PrometheusText.value(m, "tokenspeed:l3_storage_pending") == 0
          && PrometheusText.value(m, "tokenspeed:l3_ok_keys_total", "kind", "put") > 0) {
        return;
      }
      Thread.sleep(100);
    }
    throw new AssertionError("the first server's backups did not finish");
  }

  @Test
  void shouldRestoreOnTheSecondServerThroughARedisServerWhatTheFirstComputed() throws Exception {
    try (RedisServer redis = RedisServers.startStandalone(workDir.resolve("redis"))) {
      twoServers(
          List.of(
              "--kvstore-storage-backend",
              "redis",
              "--kvstore-storage-backend-extra-config",
              "{\"uri\": \"" + redis.uri() + "\", " + EXTENSION + "}"));
    }
  }

  @Test
  void shouldRestoreOnTheSecondServerThroughAFileStoreWhatTheFirstComputed() throws Exception {
    twoServers(
        List.of(
            "--device", // the default, named: the CPU path as without it
            "cpu",
            "--kvstore-storage-backend",
            "file",
            "--kvstore-storage-backend-extra-config",
            "{\"path\": \""
                + workDir.resolve("store").toString().replace("\\", "\\\\")
                + "\", "
                + EXTENSION
                + "}"));
  }

  private void twoServers(List<String> l3) throws Exception {
    String prompt = prompt(3, 200);
    try (ServeProcess first = serve(l3);
        ServeProcess second = serve(l3);
        ServeProcess off = serve(List.of())) {
      JsonNode a = complete(first, prompt);
      awaitStorageIdle(first);
      Map<String, PrometheusText.Family> before = second.metrics();
      JsonNode b = complete(second, prompt);
      JsonNode c = complete(off, prompt);

      JsonNode details = b.get("usage").get("prompt_tokens_details");
      assertEquals(199, details.get("cached_tokens").asInt(), b::toString);
      assertEquals(199, details.get("cached_tokens_by_source").get("storage").asInt(), b::toString);
      assertEquals(0, details.get("cached_tokens_by_source").get("device").asInt(), b::toString);
      String text = c.get("choices").get(0).get("text").asText();
      assertEquals(text, b.get("choices").get(0).get("text").asText(), "restored vs storage off");
      assertEquals(text, a.get("choices").get(0).get("text").asText(), "first vs storage off");
      assertEquals(
          0, a.get("usage").get("prompt_tokens_details").get("cached_tokens").asInt(), a::toString);

      Map<String, PrometheusText.Family> after = second.metrics();
      String[] get = {"kind", "get"};
      assertTrue(
          PrometheusText.value(after, "tokenspeed:l3_ok_keys_total", get)
              > PrometheusText.value(before, "tokenspeed:l3_ok_keys_total", get),
          "GETs moved on the second server");
      assertEquals(
          199,
          PrometheusText.value(after, "tokenspeed:cached_prompt_tokens_total", "source", "storage")
              - PrometheusText.value(
                  before, "tokenspeed:cached_prompt_tokens_total", "source", "storage"));
      assertTrue(
          PrometheusText.value(first.metrics(), "tokenspeed:l3_put_written_keys_total") > 0,
          "the first server wrote new objects");
    }
  }

  @Test
  void shouldAnswerTheFirstRequestAsFastAsTheTenthAfterItsWarmUp() throws Exception {
    // A first request is a one-off event, and a shared machine can slow any single request: a
    // fresh server is tried up to three times, and one whose first request is within 5x of its
    // tenth passes. A first request that still compiles (no or too little warm-up) is 38-40x its
    // tenth on every server, so it still fails by far. A warmed server's ratio is 1.24x in a lone
    // run of the test, but 1.57-1.69x on all three servers in a clean clone's full run on this
    // 2-core machine (the first request 135-165 ms against 82-98 ms): 2x left too little room
    // for a busier machine, 5x leaves room on both sides.
    List<String> attempts = new ArrayList<>();
    for (int attempt = 0; attempt < 3; attempt++) {
      double[] ttft = tenRequests();
      double ratio = Math.max(ttft[0], ttft[9]) / Math.min(ttft[0], ttft[9]);
      attempts.add(String.format(java.util.Locale.ROOT, "%.2fx %s", ratio, Arrays.toString(ttft)));
      System.out.println("time to first event, ms: " + Arrays.toString(ttft));
      if (ratio <= 5.0) {
        return;
      }
    }
    fail("first vs tenth request's time to first event over 5x on 3 fresh servers: " + attempts);
  }

  /** A fresh warmed server's ten identical streamed requests: each one's time to first event. */
  private double[] tenRequests() throws Exception {
    List<String> args =
        List.of(
            "--model",
            "synthetic:llama-100m",
            "--threads",
            "2",
            "--served-model-name",
            "m",
            "--admin-token",
            "t");
    try (ServeProcess s = ServeProcess.start(workDir, args, 300)) {
      // The measuring client is a JVM too: its own first streamed POST loads and interprets the
      // HTTP client's classes. Requests for a model the server does not serve take that path on
      // the client without reaching the engine, so the figures below are the server's.
      for (int i = 0; i < 50; i++) {
        HttpResponse<java.util.stream.Stream<String>> res =
            s.client.send(
                HttpRequest.newBuilder(s.uri("/v1/completions"))
                    .POST(
                        HttpRequest.BodyPublishers.ofString(
                            "{\"model\":\"not-served\",\"prompt\":\"x\",\"stream\":true}"))
                    .build(),
                HttpResponse.BodyHandlers.ofLines());
        assertEquals(404, res.statusCode());
        try (var lines = res.body()) {
          assertTrue(lines.anyMatch(l -> l.contains("not-served")));
        }
      }
      double[] ttft = new double[10];
      for (int i = 0; i < 10; i++) {
        // Identical work each time: no request finds the prompt cached by the one before.
        HttpResponse<String> cleared =
            s.send(
                HttpRequest.newBuilder(s.uri("/admin/clear_cache"))
                    .header("Authorization", "Bearer t")
                    .POST(HttpRequest.BodyPublishers.noBody())
                    .build());
        assertEquals(200, cleared.statusCode(), cleared::body);
        ttft[i] =
            firstTokenMillis(
                s,
                "{\"model\":\"m\",\"prompt\":\"Warm-up makes the first request fast.\","
                    + "\"max_tokens\":4,\"temperature\":0,"
                    + "\"ignore_eos\":true,\"stream\":true}");
      }
      return ttft;
    }
  }

  /** Milliseconds from sending a streamed request to its first event. */
  private static double firstTokenMillis(ServeProcess s, String body) throws Exception {
    long start = System.nanoTime();
    HttpResponse<java.util.stream.Stream<String>> res =
        s.client.send(
            HttpRequest.newBuilder(s.uri("/v1/completions"))
                .POST(HttpRequest.BodyPublishers.ofString(body))
                .build(),
            HttpResponse.BodyHandlers.ofLines());
    assertEquals(200, res.statusCode());
    double first = -1;
    try (var lines = res.body()) {
      for (var it = lines.iterator(); it.hasNext(); ) {
        String line = it.next();
        if (first < 0 && line.startsWith("data: {")) {
          first = (System.nanoTime() - start) / 1e6;
        }
      }
    }
    return first;
  }

  @Test
  void shouldFinishRequestsInFlightOnSigtermAndRefuseNewOnes() throws Exception {
    List<String> args = new ArrayList<>(model());
    args.addAll(List.of("--shutdown-timeout", "60"));
    ServeProcess s = ServeProcess.start(workDir, args, 120);
    try {
      CompletableFuture<HttpResponse<String>> inFlight =
          s.client.sendAsync(
              HttpRequest.newBuilder(s.uri("/v1/completions"))
                  .POST(
                      HttpRequest.BodyPublishers.ofString(
                          "{\"prompt\":\"abc\",\"max_tokens\":4000,\"temperature\":0,"
                              + "\"ignore_eos\":true,\"stream\":true}"))
                  .build(),
              HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (PrometheusText.value(s.metrics(), "tokenspeed:num_requests_running") < 1) {
        assertTrue(System.nanoTime() < deadline, "the request did not start");
        Thread.sleep(20);
      }
      s.process.destroy(); // SIGTERM
      deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (!s.stderr().contains("shutting down")) {
        assertTrue(System.nanoTime() < deadline, s.stderr());
        Thread.sleep(20);
      }
      HttpResponse<String> refused =
          s.post("/v1/completions", "{\"prompt\":\"late\",\"max_tokens\":2}");
      assertEquals(503, refused.statusCode(), refused.body());
      assertEquals(503, s.get("/ready").statusCode());
      HttpResponse<String> done = inFlight.get(60, TimeUnit.SECONDS);
      assertEquals(200, done.statusCode());
      assertTrue(done.body().endsWith("data: [DONE]\n\n"), "the stream in flight finished");
      assertTrue(s.process.waitFor(60, TimeUnit.SECONDS), s.stderr());
      assertTrue(s.stderr().contains("stopped"), s.stderr());
      assertTrue(s.stderr().contains("1 requests in flight"), s.stderr());
    } finally {
      s.close();
    }
  }

  /**
   * Regression: streams cut at the shutdown deadline ended like finished ones (a final chunk with a
   * null finish_reason, usage, [DONE]) and non-streamed ones got a 200 with truncated text.
   */
  @Test
  void shouldEndRequestsCutAtTheShutdownDeadlineWithAnError() throws Exception {
    List<String> args = new ArrayList<>(model());
    // no time to finish: the requests in flight at SIGTERM are cut at once
    args.addAll(List.of("--shutdown-timeout", "0"));
    ServeProcess s = ServeProcess.start(workDir, args, 120);
    try {
      String body = "{\"prompt\":\"abc\",\"max_tokens\":4000,\"temperature\":0,\"ignore_eos\":true";
      CompletableFuture<HttpResponse<String>> plain =
          s.client.sendAsync(
              HttpRequest.newBuilder(s.uri("/v1/completions"))
                  .POST(HttpRequest.BodyPublishers.ofString(body + "}"))
                  .build(),
              HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
      HttpResponse<InputStream> streamed =
          s.client.send(
              HttpRequest.newBuilder(s.uri("/v1/completions"))
                  .POST(HttpRequest.BodyPublishers.ofString(body + ",\"stream\":true}"))
                  .build(),
              HttpResponse.BodyHandlers.ofInputStream());
      assertEquals(200, streamed.statusCode());
      String text;
      try (InputStream in = streamed.body()) {
        java.io.ByteArrayOutputStream got = new java.io.ByteArrayOutputStream();
        byte[] buf = new byte[4096];
        int n;
        while (!got.toString(StandardCharsets.UTF_8).contains("data: ")
            && (n = in.read(buf)) >= 0) {
          got.write(buf, 0, n);
        }
        s.process.destroy(); // SIGTERM while the stream runs: 4000 tokens are far from done
        in.transferTo(got);
        text = got.toString(StandardCharsets.UTF_8);
      }
      assertTrue(text.endsWith("data: [DONE]\n\n"), text);
      String[] frames = text.split("\n\n");
      JsonNode error = JSON.readTree(frames[frames.length - 2].substring("data: ".length()));
      String tail = text.substring(Math.max(0, text.length() - 1500));
      assertTrue(error.path("error").path("message").asText().contains("shutting down"), tail);
      JsonNode last = JSON.readTree(frames[frames.length - 3].substring("data: ".length()));
      assertEquals("abort", last.path("choices").path(0).path("finish_reason").asText(), tail);
      // cut in flight, or refused at intake if SIGTERM came first: a 503 either way, never a 200
      HttpResponse<String> cut = plain.get(60, TimeUnit.SECONDS);
      assertEquals(503, cut.statusCode(), cut.body());
      assertTrue(
          JSON.readTree(cut.body())
              .path("error")
              .path("message")
              .asText()
              .contains("shutting down"));
      assertTrue(s.process.waitFor(60, TimeUnit.SECONDS), s.stderr());
      assertTrue(s.stderr().contains("requests still in flight"), s.stderr());
    } finally {
      s.close();
    }
  }
}

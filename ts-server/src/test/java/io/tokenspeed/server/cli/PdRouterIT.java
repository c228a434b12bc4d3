package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.pd.PdSecret;
import java.io.IOException;
import java.io.InputStream;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Disaggregated serving as operators run it (docs/pd.md): {@code serve --engine-role decode} and
 * {@code serve --engine-role prefill} processes of the shaded jar sharing a PD secret through the
 * environment, behind a {@code router} process, all on loopback. Greedy completions and chats,
 * streamed and not, answer through the router as a fused {@code serve} answers them; the usage
 * carries the prefill engine's reuse by source; each process's {@code /metrics} carries its {@code
 * engine_role}. Two prefill engines sharing a file store: the second restores from L3 the prefix
 * the first computed, the decode engine's usage says so, and the text is unchanged.
 */
class PdRouterIT {
  private static final ObjectMapper JSON = new ObjectMapper();

  /** A 192-token prefix is worth a storage read (the default asks for a longer extension). */
  private static final String EXTENSION = "\"async\": {\"min_extension_tokens\": 64}";

  @TempDir Path workDir;

  private final Map<String, String> env = Map.of(PdSecret.ENV, PdSecret.generate().toHex());

  private List<String> model() throws IOException {
    Path config = workDir.resolve("tiny-untied.json");
    if (!Files.exists(config)) {
      try (InputStream in = PdRouterIT.class.getResourceAsStream("/models/tiny-untied.json")) {
        Files.write(config, in.readAllBytes());
      }
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

  private Callable<ServeProcess> serve(String role, List<String> more) throws IOException {
    List<String> args = new ArrayList<>(model());
    args.addAll(List.of("--engine-role", role));
    args.addAll(more);
    return () -> ServeProcess.start(workDir, env, "serve", args, 180);
  }

  private ServeProcess router(List<ServeProcess> prefill, ServeProcess decode) throws Exception {
    return ServeProcess.start(
        workDir,
        Map.of(),
        "router",
        List.of(
            "--prefill",
            String.join(",", prefill.stream().map(PdRouterIT::url).toList()),
            "--decode",
            url(decode),
            "--poll-ms",
            "200"),
        60);
  }

  private static String url(ServeProcess s) {
    return "http://127.0.0.1:" + s.port;
  }

  /** Starts the processes side by side (each warms up on its own); closes them all on a failure. */
  @SafeVarargs
  private static List<ServeProcess> startAll(Callable<ServeProcess>... starts) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(starts.length);
    try {
      List<Future<ServeProcess>> futures = new ArrayList<>();
      for (Callable<ServeProcess> s : starts) {
        futures.add(pool.submit(s));
      }
      List<ServeProcess> out = new ArrayList<>();
      Exception failure = null;
      for (Future<ServeProcess> f : futures) {
        try {
          out.add(f.get(300, TimeUnit.SECONDS));
        } catch (Exception e) {
          failure = failure == null ? e : failure;
        }
      }
      if (failure != null) {
        for (ServeProcess s : out) {
          s.close();
        }
        throw failure;
      }
      return out;
    } finally {
      pool.shutdownNow();
    }
  }

  private static String prompt(long seed, int n) {
    SplittableRandom r = new SplittableRandom(seed);
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < n; i++) {
      sb.append((char) ('a' + r.nextInt(26)));
    }
    return sb.toString();
  }

  private static JsonNode json(String text) {
    try {
      return JSON.readTree(text);
    } catch (IOException e) {
      throw new AssertionError("not JSON: " + text, e);
    }
  }

  /** The events of a streamed answer before {@code data: [DONE]}, which must end it. */
  private static List<JsonNode> events(String body) {
    assertTrue(body.endsWith("data: [DONE]\n\n"), body);
    List<JsonNode> out = new ArrayList<>();
    for (String frame : body.split("\n\n")) {
      assertTrue(frame.startsWith("data: "), body);
      String data = frame.substring("data: ".length());
      if (!data.equals("[DONE]")) {
        out.add(json(data));
      }
    }
    return out;
  }

  /** What an answer says, streamed or not: its text, finish reason and usage. */
  private record Said(String text, String finishReason, JsonNode usage) {

    static Said of(HttpResponse<String> r, boolean stream) {
      assertEquals(200, r.statusCode(), r.body());
      if (!stream) {
        JsonNode out = json(r.body());
        JsonNode c = out.get("choices").get(0);
        String text =
            c.has("message") ? c.get("message").get("content").asText() : c.get("text").asText();
        return new Said(text, c.get("finish_reason").asText(), out.get("usage"));
      }
      StringBuilder text = new StringBuilder();
      String reason = null;
      JsonNode usage = null;
      for (JsonNode e : events(r.body())) {
        assertTrue(!e.has("error"), r.body());
        for (JsonNode c : e.path("choices")) {
          text.append(
              c.has("text") ? c.get("text").asText() : c.path("delta").path("content").asText());
          if (c.hasNonNull("finish_reason")) {
            reason = c.get("finish_reason").asText();
          }
        }
        if (e.hasNonNull("usage")) {
          usage = e.get("usage");
        }
      }
      return new Said(text.toString(), reason, usage);
    }

    /** The usage's token counts (not the reuse, which differs between deployments). */
    String counts() {
      return usage == null
          ? "none"
          : usage.get("prompt_tokens")
              + "/"
              + usage.get("completion_tokens")
              + "/"
              + usage.get("total_tokens");
    }

    JsonNode bySource() {
      return usage.get("prompt_tokens_details").get("cached_tokens_by_source");
    }
  }

  @Test
  void shouldAnswerThroughTheRouterAsAFusedServerDoes() throws Exception {
    List<ServeProcess> engines =
        startAll(
            serve("decode", List.of("--pd-port", "0")),
            serve("prefill", List.of()),
            () -> ServeProcess.start(workDir, model(), 180));
    try (ServeProcess decode = engines.get(0);
        ServeProcess prefill = engines.get(1);
        ServeProcess fused = engines.get(2);
        ServeProcess router = router(List.of(prefill), decode)) {
      JsonNode pd = json(decode.get("/pd").body());
      assertEquals("decode", pd.get("role").asText(), pd::toString);
      assertEquals("tiny", pd.get("model").asText(), pd::toString);
      assertTrue(
          pd.get("kv_endpoint").asText().matches("127\\.0\\.0\\.1:[1-9][0-9]*"), pd::toString);
      assertTrue(
          decode.stderr().contains("KV transfer on " + pd.get("kv_endpoint").asText()),
          decode::stderr);
      assertEquals("{\"role\":\"prefill\",\"model\":\"tiny\"}", prefill.get("/pd").body());
      JsonNode ready = json(router.get("/ready").body());
      assertEquals(
          pd.get("kv_endpoint").asText(),
          ready.get("decode").get(0).get("kv_endpoint").asText(),
          ready::toString);

      String long1 = prompt(11, 150);
      List<String[]> requests =
          List.of(
              new String[] {
                "/v1/completions",
                "{\"model\":\"tiny\",\"prompt\":\""
                    + long1
                    + "\",\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}"
              },
              new String[] {
                "/v1/completions",
                "{\"model\":\"tiny\",\"prompt\":\""
                    + prompt(12, 90)
                    + "\",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
                    + "\"stream_options\":{\"include_usage\":true}}"
              },
              new String[] {
                "/v1/chat/completions",
                "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\""
                    + prompt(13, 70)
                    + "\"}],\"max_tokens\":10,\"temperature\":0,\"ignore_eos\":true}"
              },
              new String[] {
                "/v1/chat/completions",
                "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\""
                    + prompt(14, 40)
                    + "\"}],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
                    + "\"stream_options\":{\"include_usage\":true}}"
              },
              // the first prompt again: the prefill engine's Device reuses it, the usage says so
              new String[] {
                "/v1/completions",
                "{\"model\":\"tiny\",\"prompt\":\""
                    + long1
                    + "\",\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}"
              });
      Said last = null;
      for (String[] r : requests) {
        boolean stream = r[1].contains("\"stream\":true");
        Said want = Said.of(fused.post(r[0], r[1]), stream);
        Said got = Said.of(router.post(r[0], r[1]), stream);
        assertEquals(want.text(), got.text(), r[1]);
        assertEquals(want.finishReason(), got.finishReason(), r[1]);
        assertEquals(want.counts(), got.counts(), r[1]);
        JsonNode by = got.bySource();
        assertTrue(by.has("device") && by.has("host") && by.has("storage"), got.usage()::toString);
        last = got;
      }
      assertTrue(last.bySource().get("device").asInt() >= 128, last.usage()::toString);

      // each process labels its series with its role; the engines' transfers both landed them all
      for (var e : Map.of("decode", decode, "prefill", prefill, "fused", fused).entrySet()) {
        Map<String, PrometheusText.Family> m = e.getValue().metrics();
        for (PrometheusText.Family f : m.values()) {
          for (PrometheusText.Sample s : f.samples()) {
            assertEquals(e.getKey(), s.labels().get("engine_role"), s::toString);
          }
        }
      }
      for (ServeProcess side : List.of(decode, prefill)) {
        await(
            () ->
                PrometheusText.value(
                        side.metrics(), "tokenspeed:pd_rooms_ended_total", "outcome", "landed")
                    == requests.size(),
            () -> side.get("/metrics").body());
        Map<String, PrometheusText.Family> m = side.metrics();
        assertEquals(requests.size(), PrometheusText.value(m, "tokenspeed:pd_rooms_opened_total"));
        assertEquals(0, PrometheusText.value(m, "tokenspeed:pd_rooms_open"));
        assertEquals(1, PrometheusText.value(m, "tokenspeed:pd_connections_opened_total"));
      }
      assertTrue(
          PrometheusText.value(decode.metrics(), "tokenspeed:pd_block_bytes_received_total") > 0);
      assertEquals(
          PrometheusText.value(decode.metrics(), "tokenspeed:pd_block_bytes_received_total"),
          PrometheusText.value(prefill.metrics(), "tokenspeed:pd_block_bytes_sent_total"));
      assertTrue(
          router.get("/metrics").body().contains("tokenspeed:router_requests_total"),
          "router metrics");
    }
  }

  @Test
  void shouldRestoreOnTheSecondPrefillEngineWhatTheFirstWroteToTheSharedStore() throws Exception {
    List<String> l3 =
        List.of(
            "--kvstore-storage-backend",
            "file",
            "--kvstore-storage-backend-extra-config",
            "{\"path\": \""
                + workDir.resolve("store").toString().replace("\\", "\\\\")
                + "\", "
                + EXTENSION
                + "}");
    List<ServeProcess> engines =
        startAll(serve("decode", List.of()), serve("prefill", l3), serve("prefill", l3));
    try (ServeProcess decode = engines.get(0);
        ServeProcess first = engines.get(1);
        ServeProcess second = engines.get(2);
        ServeProcess router = router(List.of(first, second), decode)) {
      // the round robin takes the prefill engines in order once both are ready
      await(
          () ->
              json(router.get("/ready").body()).get("prefill").findValues("ready").stream()
                  .allMatch(JsonNode::asBoolean),
          () -> router.get("/ready").body());
      String body =
          "{\"model\":\"tiny\",\"prompt\":\""
              + prompt(3, 200)
              + "\",\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}";
      Said computed = Said.of(router.post("/v1/completions", body), false);
      assertEquals(
          0,
          computed.usage().get("prompt_tokens_details").get("cached_tokens").asInt(),
          computed.usage()::toString);
      assertEquals(
          1,
          PrometheusText.value(first.metrics(), "tokenspeed:pd_rooms_opened_total"),
          "the first prefill engine served it");
      await(
          () -> {
            Map<String, PrometheusText.Family> m = first.metrics();
            return PrometheusText.value(m, "tokenspeed:l3_storage_pending") == 0
                && PrometheusText.value(m, "tokenspeed:l3_ok_keys_total", "kind", "put") > 0;
          },
          () -> first.get("/metrics").body());

      Said restored = Said.of(router.post("/v1/completions", body), false);
      assertEquals(
          1,
          PrometheusText.value(second.metrics(), "tokenspeed:pd_rooms_opened_total"),
          "the second prefill engine served it");
      assertEquals(computed.text(), restored.text(), "restored from L3 vs computed");
      JsonNode details = restored.usage().get("prompt_tokens_details");
      assertEquals(199, details.get("cached_tokens").asInt(), restored.usage()::toString);
      assertEquals(199, restored.bySource().get("storage").asInt(), restored.usage()::toString);
      assertEquals(0, restored.bySource().get("device").asInt(), restored.usage()::toString);
      assertTrue(
          PrometheusText.value(second.metrics(), "tokenspeed:l3_ok_keys_total", "kind", "get") > 0,
          "GETs on the second prefill engine");
      assertEquals(
          199,
          PrometheusText.value(
              decode.metrics(), "tokenspeed:cached_prompt_tokens_total", "source", "storage"),
          "the decode engine counts the prefill engine's reuse");
    }
  }

  private static void await(BooleanSupplier condition, java.util.function.Supplier<String> what)
      throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("not within 30 s: " + what.get());
      }
      Thread.sleep(100);
    }
  }
}

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
import java.time.Duration;
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
import java.util.function.Supplier;

/**
 * The processes of a disaggregated deployment as the multi-process tests start them (docs/pd.md):
 * {@code serve --engine-role decode|prefill} and fused {@code serve} processes of the shaded jar on
 * the tiny untied model, and a {@code router} in front of the roles, all on loopback and sharing
 * one PD secret through the environment. Also what those tests read back: prompts, streamed
 * answers, what an answer says, and a bounded wait.
 */
final class PdDeployment {
  static final ObjectMapper JSON = new ObjectMapper();

  /** How long a process may take to warm up and turn ready on the busy two-core build machine. */
  static final long START_SECONDS = 180;

  /**
   * The L3 extra config's {@code async} field that makes a 192-token prefix worth a storage read
   * (the default asks for a longer extension).
   */
  static final String EXTENSION = "\"async\": {\"min_extension_tokens\": 64}";

  final Path workDir;

  /** The PD secret every engine of the deployment shares. */
  final Map<String, String> env = Map.of(PdSecret.ENV, PdSecret.generate().toHex());

  PdDeployment(Path workDir) {
    this.workDir = workDir;
  }

  /** The model options: the tiny untied model (its output depends on its context), one thread. */
  List<String> model() throws IOException {
    Path config = workDir.resolve("tiny-untied.json");
    if (!Files.exists(config)) {
      try (InputStream in = PdDeployment.class.getResourceAsStream("/models/tiny-untied.json")) {
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

  /** Starts {@code serve --engine-role ROLE MORE} on a free port (for {@link #startAll}). */
  Callable<ServeProcess> serve(String role, List<String> more) throws IOException {
    return serveOn(0, role, more);
  }

  /**
   * {@link #serve} on {@code port} (0: a free one): an engine restarted where the router's backend
   * list names it.
   */
  Callable<ServeProcess> serveOn(int port, String role, List<String> more) throws IOException {
    List<String> args = new ArrayList<>(model());
    args.addAll(List.of("--engine-role", role));
    args.addAll(more);
    return () -> ServeProcess.start(workDir, env, "serve", args, port, START_SECONDS);
  }

  /** Starts a fused {@code serve MORE} (no PD secret: it needs none). */
  Callable<ServeProcess> fused(List<String> more) throws IOException {
    List<String> args = new ArrayList<>(model());
    args.addAll(more);
    return () -> ServeProcess.start(workDir, args, START_SECONDS);
  }

  /**
   * Starts {@code router --prefill … --decode …} polling every 200 ms, and waits until it is ready
   * (a ready backend of each role).
   */
  ServeProcess router(List<ServeProcess> prefill, List<ServeProcess> decode, String... more)
      throws Exception {
    List<String> args = new ArrayList<>();
    args.addAll(
        List.of("--prefill", String.join(",", prefill.stream().map(PdDeployment::url).toList())));
    args.addAll(
        List.of("--decode", String.join(",", decode.stream().map(PdDeployment::url).toList())));
    args.addAll(List.of("--poll-ms", "200"));
    args.addAll(List.of(more));
    return ServeProcess.start(workDir, Map.of(), "router", args, 60);
  }

  static String url(ServeProcess s) {
    return "http://127.0.0.1:" + s.port;
  }

  /** Starts the processes side by side (each warms up on its own); closes them all on a failure. */
  @SafeVarargs
  static List<ServeProcess> startAll(Callable<ServeProcess>... starts) throws Exception {
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

  /** {@code n} seeded random lower-case letters: one token each for the byte-level tokenizer. */
  static String prompt(long seed, int n) {
    SplittableRandom r = new SplittableRandom(seed);
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < n; i++) {
      sb.append((char) ('a' + r.nextInt(26)));
    }
    return sb.toString();
  }

  /**
   * A greedy completion request's body: {@code maxTokens} tokens past the prompt, never stopped
   * early; a stream ends with the usage.
   */
  static String completion(String prompt, int maxTokens, boolean stream) {
    return "{\"model\":\"tiny\",\"prompt\":\""
        + prompt
        + "\",\"max_tokens\":"
        + maxTokens
        + ",\"temperature\":0,\"ignore_eos\":true"
        + (stream ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}" : "")
        + "}";
  }

  /**
   * A greedy chat request's body with {@code prompt} as the user's message, as {@link #completion}.
   */
  static String chat(String prompt, int maxTokens, boolean stream) {
    return "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\""
        + prompt
        + "\"}],\"max_tokens\":"
        + maxTokens
        + ",\"temperature\":0,\"ignore_eos\":true"
        + (stream ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}" : "")
        + "}";
  }

  static JsonNode json(String text) {
    try {
      return JSON.readTree(text);
    } catch (IOException e) {
      throw new AssertionError("not JSON: " + text, e);
    }
  }

  /** The events of a streamed answer before {@code data: [DONE]}, which must end it. */
  static List<JsonNode> events(String body) {
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
  record Said(String text, String finishReason, JsonNode usage) {

    static Said of(HttpResponse<String> r, boolean stream) {
      assertEquals(200, r.statusCode(), r.body());
      return of(r.body(), stream);
    }

    /** What a 200 answer's body says. */
    static Said of(String body, boolean stream) {
      if (!stream) {
        JsonNode out = json(body);
        JsonNode c = out.get("choices").get(0);
        String text =
            c.has("message") ? c.get("message").get("content").asText() : c.get("text").asText();
        return new Said(text, c.get("finish_reason").asText(), out.get("usage"));
      }
      StringBuilder text = new StringBuilder();
      String reason = null;
      JsonNode usage = null;
      for (JsonNode e : events(body)) {
        assertTrue(!e.has("error"), body);
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

  /**
   * Two prefill engines sharing the L3 store of the options {@code l3}, and a decode engine, behind
   * a router: a completion the first prefill engine computes is written through to the store; the
   * same completion, routed to the second (the round robin), restores its prompt from the store,
   * the decode engine's usage says {@code storage}, and the text is the one computed. {@code
   * written} runs once the first engine's writes completed (to look into the store).
   */
  void assertTheSecondPrefillEngineRestores(List<String> l3, Runnable written) throws Exception {
    List<ServeProcess> engines =
        startAll(serve("decode", List.of()), serve("prefill", l3), serve("prefill", l3));
    try (ServeProcess decode = engines.get(0);
        ServeProcess first = engines.get(1);
        ServeProcess second = engines.get(2);
        ServeProcess router = router(List.of(first, second), List.of(decode))) {
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
      written.run();

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

  /** Waits at most 30 s for {@code condition}; the failure quotes {@code what}. */
  static void await(BooleanSupplier condition, Supplier<String> what) throws InterruptedException {
    await(Duration.ofSeconds(30), condition, what);
  }

  /** Waits at most {@code bound} for {@code condition}, polling every 50 ms. */
  static void await(Duration bound, BooleanSupplier condition, Supplier<String> what)
      throws InterruptedException {
    long deadline = System.nanoTime() + bound.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("not within " + bound.toSeconds() + " s: " + what.get());
      }
      Thread.sleep(50);
    }
  }
}

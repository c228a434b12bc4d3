package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.engine.PdOptions;
import io.tokenspeed.pd.PdSecret;
import io.tokenspeed.pd.PdSettings;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A prefill server and a decode server of the tiny untied model in one process, joined by the real
 * KV transfer over loopback, driven the way the router drives them (the same body to both, with
 * {@code pd}): the decode server's answers equal a fused server's, text and usage, streamed and
 * not, completions and chat; {@code /pd} and {@code /metrics} name each role; a transfer that fails
 * is the request's 502 (504 when the prefill half never came) and the servers serve on; a fused
 * server refuses the field.
 */
class PdServingTest {
  @TempDir static Path dir;

  private static final PdSecret SECRET = PdSecret.generate();

  /** Short timings: a decode request whose prefill half never comes fails within a second. */
  private static final PdSettings SETTINGS =
      PdSettings.defaults().withTimingsMs(2_000, 1_000, 200, 3_000);

  private static TestServer fused;
  private static TestServer prefill;
  private static TestServer decode;

  private static final AtomicLong ROOMS = new AtomicLong(Long.MAX_VALUE - 5);

  @BeforeAll
  static void start() {
    fused = TestServer.start(dir.resolve("fused"), null);
    prefill = TestServer.inRole(dir.resolve("prefill"), PdOptions.prefill(SECRET, SETTINGS), null);
    decode =
        TestServer.inRole(
            dir.resolve("decode"),
            PdOptions.decode(
                SECRET, SETTINGS, new InetSocketAddress(InetAddress.getLoopbackAddress(), 0)),
            null);
  }

  @AfterAll
  static void stop() {
    for (TestServer s : new TestServer[] {fused, prefill, decode}) {
      if (s != null) {
        s.close();
      }
    }
  }

  private static String kvEndpoint() {
    return PdServing.hostPort(decode.engine.pdEndpoint().orElseThrow());
  }

  /** Next room: above 2^63 as unsigned values, so their strings exceed a signed long. */
  private static String room() {
    return Long.toUnsignedString(ROOMS.incrementAndGet() * 2 + 1);
  }

  /**
   * Sends {@code body} to the decode server with {@code "pd": {"room": R}} and to the prefill
   * server with {@code "pd": {"room": R, "decode": ...}} and {@code "stream": false}, at once, as
   * the router does; returns the decode server's answer, after checking the prefill server's.
   */
  private static HttpResponse<String> disaggregated(String path, String body) throws Exception {
    String room = room();
    ObjectNode toDecode = (ObjectNode) TestServer.json(body);
    toDecode.putObject("pd").put("room", room);
    ObjectNode toPrefill = (ObjectNode) TestServer.json(body);
    toPrefill.put("stream", false);
    toPrefill.remove("stream_options");
    toPrefill.putObject("pd").put("room", room).put("decode", kvEndpoint());
    CompletableFuture<HttpResponse<String>> d =
        CompletableFuture.supplyAsync(() -> decode.post(path, toDecode.toString()));
    HttpResponse<String> p = prefill.post(path, toPrefill.toString());
    assertEquals(200, p.statusCode(), p.body());
    JsonNode pj = TestServer.json(p.body());
    assertEquals(1, pj.get("usage").get("completion_tokens").asInt(), p.body());
    return d.get(60, TimeUnit.SECONDS);
  }

  @Test
  void shouldAnswerAsAFusedServerDoesCompletionsAndChatStreamedAndNot() throws Exception {
    String prompt = "The disaggregated answer equals the fused one, token for token. ".repeat(3);
    List<String[]> cases =
        List.of(
            new String[] {
              "/v1/completions",
              "{\"prompt\":\"" + prompt + "\",\"max_tokens\":12,\"temperature\":0}"
            },
            new String[] {
              "/v1/chat/completions",
              "{\"messages\":[{\"role\":\"user\",\"content\":\""
                  + prompt
                  + "\"}],\"max_tokens\":9,\"temperature\":0}"
            },
            new String[] {
              "/v1/completions",
              "{\"prompt\":\""
                  + prompt
                  + "\",\"max_tokens\":10,\"temperature\":0,\"stream\":true,"
                  + "\"stream_options\":{\"include_usage\":true}}"
            },
            new String[] {
              "/v1/chat/completions",
              "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1,"
                  + "\"temperature\":0,\"stream\":true}"
            });
    for (String[] c : cases) {
      HttpResponse<String> want = fused.post(c[0], c[1]);
      HttpResponse<String> got = disaggregated(c[0], c[1]);
      assertEquals(200, got.statusCode(), got.body());
      assertEquals(200, want.statusCode(), want.body());
      boolean stream = c[1].contains("\"stream\":true");
      if (stream) {
        List<JsonNode> w = Sse.events(want.body());
        List<JsonNode> g = Sse.events(got.body());
        assertEquals(Sse.text(w, 0), Sse.text(g, 0), c[1]);
        assertEquals(Sse.finishReason(w, 0), Sse.finishReason(g, 0), c[1]);
        if (c[1].contains("include_usage")) {
          JsonNode usage = g.getLast().get("usage");
          assertEquals(usageCounts(w.getLast().get("usage")), usageCounts(usage));
          assertTrue(
              usage.get("prompt_tokens_details").has("cached_tokens_by_source"), g::toString);
        }
      } else {
        JsonNode w = TestServer.json(want.body());
        JsonNode g = TestServer.json(got.body());
        assertEquals(
            w.get("choices").get(0).toString().replace("\"index\":0,", ""),
            g.get("choices").get(0).toString().replace("\"index\":0,", ""),
            c[1]);
        assertEquals(usageCounts(w.get("usage")), usageCounts(g.get("usage")));
        JsonNode by = g.get("usage").get("prompt_tokens_details").get("cached_tokens_by_source");
        assertTrue(by.has("device") && by.has("host") && by.has("storage"), g.toString());
      }
    }
  }

  /** The usage's token counts, without the reuse (which differs between servers). */
  private static String usageCounts(JsonNode usage) {
    return usage.get("prompt_tokens")
        + "/"
        + usage.get("completion_tokens")
        + "/"
        + usage.get("total_tokens");
  }

  @Test
  void shouldReportThePrefillEnginesReuseOnTheDecodeSide() throws Exception {
    String prompt = "A prompt long enough to be cached on the prefill side. ".repeat(6);
    String body = "{\"prompt\":\"" + prompt + "\",\"max_tokens\":3,\"temperature\":0}";
    disaggregated("/v1/completions", body);
    JsonNode again = TestServer.json(disaggregated("/v1/completions", body).body());
    JsonNode details = again.get("usage").get("prompt_tokens_details");
    assertTrue(details.get("cached_tokens").asInt() > 0, again.toString());
    assertTrue(details.get("cached_tokens_by_source").get("device").asInt() > 0, again.toString());
  }

  @Test
  void shouldAnswerPdWithEachRole() {
    JsonNode f = TestServer.json(fused.get("/pd").body());
    assertEquals(
        "{\"role\":\"fused\",\"tp\":1,\"model\":\"" + TestServer.MODEL + "\"}", f.toString());
    JsonNode p = TestServer.json(prefill.get("/pd").body());
    assertEquals(
        "{\"role\":\"prefill\",\"tp\":1,\"model\":\"" + TestServer.MODEL + "\"}", p.toString());
    HttpResponse<String> d = decode.get("/pd");
    assertEquals(200, d.statusCode());
    JsonNode dj = TestServer.json(d.body());
    assertEquals("decode", dj.get("role").asText());
    assertEquals(TestServer.MODEL, dj.get("model").asText());
    assertEquals(kvEndpoint(), dj.get("kv_endpoint").asText());
    assertEquals(1, dj.get("tp").asInt(), d.body());
    assertEquals("[\"" + kvEndpoint() + "\"]", dj.get("kv_endpoints").toString(), d.body());
    assertTrue(dj.get("kv_endpoint").asText().matches("127\\.0\\.0\\.1:[1-9][0-9]*"), d.body());
    HttpResponse<String> post = decode.post("/pd", "{}");
    assertEquals(405, post.statusCode(), post.body());
  }

  @Test
  void shouldLabelTheMetricsWithTheRoleAndExportTheTransfer() {
    for (var s : Map.of("fused", fused, "prefill", prefill, "decode", decode).entrySet()) {
      String text = s.getValue().get("/metrics").body();
      Map<String, PrometheusText.Family> m = PrometheusText.parse(text);
      for (PrometheusText.Family family : m.values()) {
        for (PrometheusText.Sample sample : family.samples()) {
          assertEquals(s.getKey(), sample.labels().get("engine_role"), sample.toString());
        }
      }
      assertEquals(
          !s.getKey().equals("fused"), m.containsKey("tokenspeed:pd_rooms_opened_total"), text);
    }
  }

  @Test
  void shouldAnswer502WhenTheDecodeEngineCannotBeReachedAndServeOn() throws Exception {
    int closed;
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      closed = s.getLocalPort();
    }
    HttpResponse<String> r =
        prefill.post(
            "/v1/completions",
            "{\"prompt\":\"abc\",\"max_tokens\":2,\"pd\":{\"room\":\""
                + room()
                + "\",\"decode\":\"127.0.0.1:"
                + closed
                + "\"}}");
    assertEquals(502, r.statusCode(), r.body());
    JsonNode error = TestServer.json(r.body()).get("error");
    assertEquals("upstream_error", error.get("type").asText(), r.body());
    assertTrue(error.get("message").asText().contains("127.0.0.1:" + closed), r.body());
    assertEquals(200, prefill.get("/ready").statusCode(), "a failed transfer fails no server");
    HttpResponse<String> plain =
        prefill.post("/v1/completions", "{\"prompt\":\"abc\",\"max_tokens\":2}");
    assertEquals(200, plain.statusCode(), plain.body());
  }

  @Test
  void shouldAnswer504WhenThePrefillHalfNeverComes() {
    HttpResponse<String> r =
        decode.post(
            "/v1/completions",
            "{\"prompt\":\"abc\",\"max_tokens\":2,\"pd\":{\"room\":\"" + room() + "\"}}");
    assertEquals(504, r.statusCode(), r.body());
    assertEquals(200, decode.get("/ready").statusCode(), "a failed transfer fails no server");
  }

  @Test
  void shouldEndAStreamWhosePrefillHalfNeverComesWithA504ErrorEvent() {
    HttpResponse<String> r =
        decode.post(
            "/v1/completions",
            "{\"prompt\":\"abc\",\"max_tokens\":2,\"stream\":true,\"pd\":{\"room\":\""
                + room()
                + "\"}}");
    assertEquals(200, r.statusCode(), r.body());
    List<JsonNode> events = Sse.events(r.body());
    assertEquals("error", Sse.finishReason(events, 0), r.body());
    JsonNode error = events.getLast().get("error");
    assertEquals("upstream_error", error.get("type").asText(), r.body());
    assertEquals(504, error.get("code").asInt(), r.body());
  }

  /**
   * The decode half's HTTP client leaves (the prefill engine frozen, so the prefill half waits):
   * the decode server counts it cancelled, and the prefill server counts its half cancelled too,
   * not failed, and answers it as cut, naming why; both serve on.
   */
  @Test
  void shouldCountThePrefillHalfCancelledWhenTheDecodeHalfsClientLeaves() throws Exception {
    String room = room();
    String body = "{\"prompt\":\"the decode half's client leaves\",\"max_tokens\":8";
    Map<String, Double> prefillBefore = finished(prefill);
    Map<String, Double> decodeBefore = finished(decode);
    long opened = decode.engine.pdMetrics().orElseThrow().roomsOpened();
    prefill.engine.freeze().get(10, TimeUnit.SECONDS);
    try {
      CompletableFuture<HttpResponse<String>> pre;
      try (Socket client = new Socket("127.0.0.1", decode.serving.port())) {
        sendRaw(client, body + ",\"pd\":{\"room\":\"" + room + "\"}}");
        awaitInFlight(decode);
        pre =
            CompletableFuture.supplyAsync(
                () ->
                    prefill.post(
                        "/v1/completions",
                        body
                            + ",\"pd\":{\"room\":\""
                            + room
                            + "\",\"decode\":\""
                            + kvEndpoint()
                            + "\"}}"));
        awaitTrue(
            () -> decode.engine.pdMetrics().orElseThrow().roomsOpened() > opened,
            "the BOOTSTRAP reached the decode engine");
      } // the decode half's client leaves
      awaitTrue(
          () -> finished(decode).get("cancelled") == decodeBefore.get("cancelled") + 1,
          "the decode server counts its half cancelled");
      prefill.engine.unfreeze().get(10, TimeUnit.SECONDS);
      HttpResponse<String> p = pre.get(60, TimeUnit.SECONDS);
      assertEquals(503, p.statusCode(), p.body());
      assertTrue(p.body().contains("cancelled by its client"), p.body());
      awaitTrue(
          () -> finished(prefill).get("cancelled") == prefillBefore.get("cancelled") + 1,
          "the prefill server counts its half cancelled");
      assertEquals(prefillBefore.get("error"), finished(prefill).get("error"), "no failure");
      assertEquals(decodeBefore.get("error"), finished(decode).get("error"), "no failure");
    } finally {
      prefill.engine.unfreeze().get(10, TimeUnit.SECONDS);
    }
    assertEquals(200, prefill.get("/ready").statusCode());
    assertEquals(200, disaggregated("/v1/completions", body + "}").statusCode(), "serves on");
  }

  /**
   * The prefill half's HTTP client leaves before its first token (the prefill engine frozen): the
   * decode server counts its half cancelled, not failed, and answers it as cut, naming why.
   */
  @Test
  void shouldCountTheDecodeHalfCancelledWhenThePrefillHalfsClientLeaves() throws Exception {
    String room = room();
    String body = "{\"prompt\":\"the prefill half's client leaves\",\"max_tokens\":8";
    Map<String, Double> prefillBefore = finished(prefill);
    Map<String, Double> decodeBefore = finished(decode);
    long opened = decode.engine.pdMetrics().orElseThrow().roomsOpened();
    prefill.engine.freeze().get(10, TimeUnit.SECONDS);
    try {
      CompletableFuture<HttpResponse<String>> dec =
          CompletableFuture.supplyAsync(
              () -> decode.post("/v1/completions", body + ",\"pd\":{\"room\":\"" + room + "\"}}"));
      awaitInFlight(decode);
      try (Socket client = new Socket("127.0.0.1", prefill.serving.port())) {
        sendRaw(
            client,
            body + ",\"pd\":{\"room\":\"" + room + "\",\"decode\":\"" + kvEndpoint() + "\"}}");
        awaitInFlight(prefill);
        awaitTrue(
            () -> decode.engine.pdMetrics().orElseThrow().roomsOpened() > opened,
            "the BOOTSTRAP reached the decode engine");
      } // the prefill half's client leaves
      HttpResponse<String> d = dec.get(60, TimeUnit.SECONDS);
      assertEquals(503, d.statusCode(), d.body());
      assertTrue(d.body().contains("cancelled by its client"), d.body());
      awaitTrue(
          () -> finished(prefill).get("cancelled") == prefillBefore.get("cancelled") + 1,
          "the prefill server counts its half cancelled");
      awaitTrue(
          () -> finished(decode).get("cancelled") == decodeBefore.get("cancelled") + 1,
          "the decode server counts its half cancelled");
      assertEquals(prefillBefore.get("error"), finished(prefill).get("error"), "no failure");
      assertEquals(decodeBefore.get("error"), finished(decode).get("error"), "no failure");
    } finally {
      prefill.engine.unfreeze().get(10, TimeUnit.SECONDS);
    }
    assertEquals(200, decode.get("/ready").statusCode());
  }

  /** A server's {@code tokenspeed:requests_finished_total} by finish reason. */
  private static Map<String, Double> finished(TestServer s) {
    Map<String, PrometheusText.Family> m = PrometheusText.parse(s.get("/metrics").body());
    Map<String, Double> out = new java.util.HashMap<>();
    for (String reason : List.of("stop", "length", "cancelled", "error")) {
      out.put(
          reason,
          PrometheusText.value(m, "tokenspeed:requests_finished_total", "finish_reason", reason));
    }
    return out;
  }

  /** Sends a completion request over a raw socket (the caller closes it to leave). */
  private static void sendRaw(Socket socket, String body) throws java.io.IOException {
    byte[] bytes = body.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    java.io.OutputStream out = socket.getOutputStream();
    out.write(
        ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + "Content-Length: "
                + bytes.length
                + "\r\n\r\n")
            .getBytes(java.nio.charset.StandardCharsets.US_ASCII));
    out.write(bytes);
    out.flush();
  }

  private static void awaitInFlight(TestServer s) throws InterruptedException {
    awaitTrue(() -> s.state.inFlight() >= 1, "the server holds the request");
  }

  private static void awaitTrue(java.util.function.BooleanSupplier done, String what)
      throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (!done.getAsBoolean()) {
      assertTrue(System.nanoTime() < deadline, "never: " + what);
      Thread.sleep(10);
    }
  }

  @Test
  void shouldRefuseThePdFieldOnAFusedServerAndAnEndpointOnADecodeServer() {
    HttpResponse<String> f =
        fused.post("/v1/completions", "{\"prompt\":\"abc\",\"pd\":{\"room\":\"5\"}}");
    assertEquals(400, f.statusCode(), f.body());
    assertEquals("pd", TestServer.json(f.body()).get("error").get("param").asText());
    HttpResponse<String> d =
        decode.post(
            "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                + "\"pd\":{\"room\":\"5\",\"decode\":\"127.0.0.1:9\"}}");
    assertEquals(400, d.statusCode(), d.body());
    assertEquals("pd", TestServer.json(d.body()).get("error").get("param").asText());
    HttpResponse<String> p =
        prefill.post(
            "/v1/completions",
            "{\"prompt\":\"abc\",\"pd\":{\"room\":\"0\",\"decode\":\"127.0.0.1:9\"}}");
    assertEquals(400, p.statusCode(), p.body());
    assertFalse(p.body().contains("\n"), p.body());
  }
}

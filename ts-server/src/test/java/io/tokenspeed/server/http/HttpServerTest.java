package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.model.sampling.SamplingParams;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** The HTTP server over a real engine, driven by a real HTTP client over loopback. */
class HttpServerTest {
  @TempDir static Path dir;
  static TestServer server;

  @BeforeAll
  static void start() {
    server = TestServer.start(dir, null);
  }

  @AfterAll
  static void stop() {
    server.close();
  }

  /** A prompt of printable ASCII, seeded. */
  static String prompt(long seed, int length) {
    SplittableRandom r = new SplittableRandom(seed);
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < length; i++) {
      sb.append((char) ('a' + r.nextInt(26)));
    }
    return sb.toString();
  }

  /** The text the engine itself generates for {@code prompt}, greedy, without HTTP. */
  static String alone(String prompt, int maxTokens) {
    return server.tokenizer.decode(aloneTokens(prompt, maxTokens), true);
  }

  /** The tokens the engine itself generates for {@code prompt}, greedy, without HTTP. */
  static int[] aloneTokens(String prompt, int maxTokens) {
    int[] ids = server.tokenizer.encode(prompt);
    return server
        .engine
        .submit(ids, SamplingParams.greedy(maxTokens).withIgnoreEos(true))
        .result()
        .join()
        .tokens();
  }

  /**
   * Regression: with Nagle's algorithm on the server's connections, a stream's first event (a small
   * write after the headers' write) waited until the client acknowledged the headers, which it
   * delays: in bench serve the first event's median came 18 to 33 ms after the headers'.
   */
  @Test
  void shouldNotHoldAStreamsEventsBackUntilTheirPredecessorIsAcknowledged() {
    assertTrue(server.serving.tcpNoDelay(), "TCP_NODELAY on accepted connections");
  }

  /**
   * Regression: a burst of connections that used up the process's file descriptors made accept
   * fail, which stops the web server's listener for good (every later request failed, the process
   * alive). The listener holds at most half of the descriptor limit in connections.
   */
  @Test
  void shouldBoundTheListenersConnectionsToHalfTheDescriptorLimit() {
    assertEquals(10_000, WebFront.maxConnections(20_000));
    assertEquals(16, WebFront.maxConnections(10), "a floor for tiny limits");
    assertEquals(-1, WebFront.maxConnections(-1), "no bound where the limit is unknown");
    long limit =
        ((com.sun.management.UnixOperatingSystemMXBean)
                java.lang.management.ManagementFactory.getOperatingSystemMXBean())
            .getMaxFileDescriptorCount();
    assertEquals(WebFront.maxConnections(limit), server.serving.maxTcpConnections());
    assertTrue(server.serving.maxTcpConnections() > 0, "bounded on this platform");
  }

  static String completion(String prompt, int maxTokens, String extra) {
    return "{\"model\":\""
        + TestServer.MODEL
        + "\",\"prompt\":"
        + TestServer.JSON.valueToTree(prompt)
        + ",\"max_tokens\":"
        + maxTokens
        + ",\"temperature\":0,\"ignore_eos\":true"
        + extra
        + "}";
  }

  @Test
  void shouldAnswerACompletionWithTheEnginesTextAndUsage() {
    String p = prompt(1, 150);
    HttpResponse<String> res = server.post("/v1/completions", completion(p, 12, ""));
    assertEquals(200, res.statusCode(), res.body());
    assertEquals("application/json", res.headers().firstValue("content-type").orElse(""));
    JsonNode body = TestServer.json(res.body());
    assertEquals("text_completion", body.get("object").asText());
    assertEquals(TestServer.MODEL, body.get("model").asText());
    assertTrue(body.get("id").asText().startsWith("cmpl-"));
    JsonNode choice = body.get("choices").get(0);
    assertEquals(alone(p, 12), choice.get("text").asText());
    assertEquals("length", choice.get("finish_reason").asText());
    assertTrue(choice.get("logprobs").isNull());
    JsonNode usage = body.get("usage");
    assertEquals(150, usage.get("prompt_tokens").asInt());
    assertEquals(12, usage.get("completion_tokens").asInt());
    assertEquals(162, usage.get("total_tokens").asInt());
    // The alone run above published the prompt's full pages: this identical request reuses them.
    JsonNode details = usage.get("prompt_tokens_details");
    JsonNode by = details.get("cached_tokens_by_source");
    assertEquals(
        details.get("cached_tokens").asInt(),
        by.get("device").asInt() + by.get("host").asInt() + by.get("storage").asInt());
    assertEquals(0, by.get("storage").asInt(), "no L3 on this server");
    HttpResponse<String> again = server.post("/v1/completions", completion(p, 12, ""));
    JsonNode cached = TestServer.json(again.body()).get("usage").get("prompt_tokens_details");
    assertEquals(128, cached.get("cached_tokens").asInt(), "two full 64-token pages reused");
  }

  @Test
  void shouldStreamCompletionsAsServerSentEventsFramedByteForByte() {
    String p = prompt(2, 40);
    String plain =
        TestServer.json(server.post("/v1/completions", completion(p, 20, "")).body())
            .get("choices")
            .get(0)
            .get("text")
            .asText();
    HttpResponse<String> res =
        server.post(
            "/v1/completions",
            completion(p, 20, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}"));
    assertEquals(200, res.statusCode(), res.body());
    assertEquals(
        "text/event-stream; charset=utf-8", res.headers().firstValue("content-type").orElse(""));
    List<JsonNode> events = Sse.events(res.body());
    assertEquals(plain, Sse.text(events, 0));
    assertEquals("length", Sse.finishReason(events, 0));
    JsonNode last = events.getLast();
    assertEquals(0, last.get("choices").size(), "the usage chunk has no choices");
    assertEquals(20, last.get("usage").get("completion_tokens").asInt());
    for (JsonNode e : events) {
      assertEquals("text_completion", e.get("object").asText());
      assertEquals(events.getFirst().get("id"), e.get("id"), "one id for every chunk");
    }
    for (JsonNode e : events.subList(0, events.size() - 1)) {
      assertFalse(e.has("usage"), "usage only in the last chunk");
    }
  }

  @Test
  void shouldServeChatStreamedAndNotWithTheSameText() {
    String body =
        "{\"model\":\"tiny-untied\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
            + "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hello there\"}]}],"
            + "\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true";
    HttpResponse<String> res = server.post("/v1/chat/completions", body + "}");
    assertEquals(200, res.statusCode(), res.body());
    JsonNode json = TestServer.json(res.body());
    assertEquals("chat.completion", json.get("object").asText());
    JsonNode message = json.get("choices").get(0).get("message");
    assertEquals("assistant", message.get("role").asText());
    String text = message.get("content").asText();
    assertEquals(16, json.get("usage").get("completion_tokens").asInt());

    HttpResponse<String> streamed = server.post("/v1/chat/completions", body + ",\"stream\":true}");
    List<JsonNode> events = Sse.events(streamed.body());
    assertEquals(
        "assistant", events.getFirst().get("choices").get(0).get("delta").get("role").asText());
    assertEquals(text, Sse.text(events, 0));
    assertEquals("length", Sse.finishReason(events, 0));
    for (JsonNode e : events) {
      assertEquals("chat.completion.chunk", e.get("object").asText());
      assertFalse(e.has("usage"), "no usage chunk without include_usage");
    }
    // the rendered prompt is the plain template's: the same text as a completion gives the same
    String rendered =
        io.tokenspeed.server.chat.ChatTemplate.plain()
            .render(
                List.of(
                    io.tokenspeed.server.chat.ChatMessage.of("system", "be brief"),
                    io.tokenspeed.server.chat.ChatMessage.of("user", "hello there")),
                true);
    assertEquals(alone(rendered, 16), text);
  }

  @Test
  void shouldGiveThirtyTwoConcurrentStreamsTheirAloneOutputs() throws Exception {
    int n = 32;
    List<String> prompts = new ArrayList<>();
    List<String> expected = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      prompts.add(prompt(100 + i, 20 + 7 * i));
      expected.add(alone(prompts.get(i), 24));
    }
    server.engine.clearCache().get(10, TimeUnit.SECONDS);
    List<CompletableFuture<HttpResponse<String>>> futures = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      futures.add(
          server.client.sendAsync(
              HttpRequest.newBuilder(server.uri("/v1/completions"))
                  .POST(
                      HttpRequest.BodyPublishers.ofString(
                          completion(prompts.get(i), 24, ",\"stream\":true")))
                  .build(),
              HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8)));
    }
    for (int i = 0; i < n; i++) {
      HttpResponse<String> res = futures.get(i).get(120, TimeUnit.SECONDS);
      assertEquals(200, res.statusCode(), res.body());
      assertEquals(expected.get(i), Sse.text(Sse.events(res.body()), 0), "stream " + i);
    }
  }

  @Test
  void shouldCancelAndFreeARequestWhoseClientDisconnectsMidStream() throws Exception {
    double cancelled =
        PrometheusText.value(
            scrape(), "tokenspeed:requests_finished_total", "finish_reason", "cancelled");
    String body = completion(prompt(9, 30), 4000, ",\"stream\":true");
    try (Socket socket = new Socket("127.0.0.1", server.serving.port())) {
      OutputStream out = socket.getOutputStream();
      byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
      out.write(
          ("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  + "Content-Length: "
                  + bytes.length
                  + "\r\n\r\n")
              .getBytes(StandardCharsets.US_ASCII));
      out.write(bytes);
      out.flush();
      InputStream in = socket.getInputStream();
      String seen = "";
      byte[] buf = new byte[256];
      while (!seen.contains("data: ")) {
        int n = in.read(buf);
        assertTrue(n > 0, "the stream started");
        seen += new String(buf, 0, n, StandardCharsets.ISO_8859_1);
      }
    } // closed mid-stream: 4000 tokens are far from done
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while ((server.state.inFlight() > 0 || server.engine.metrics().runningRequests() > 0)
        && System.nanoTime() < deadline) {
      Thread.sleep(20);
    }
    assertEquals(0, server.state.inFlight(), "the server let go of the request");
    Map<String, PrometheusText.Family> after = scrape();
    assertEquals(0, PrometheusText.value(after, "tokenspeed:num_requests_running"));
    assertEquals(
        cancelled + 1,
        PrometheusText.value(
            after, "tokenspeed:requests_finished_total", "finish_reason", "cancelled"));
    assertEquals(0, server.engine.stats().activeRequests());
    for (String tier : List.of("device", "host")) {
      assertEquals(
          0,
          PrometheusText.value(after, "tokenspeed:kv_parents", "tier", tier, "state", "used"),
          tier + ": nothing is held once the request is gone");
    }
  }

  @Test
  void shouldMoveTheRequestMetricsAsTheRequestsPredict() {
    Map<String, PrometheusText.Family> before = scrape();
    String p = prompt(77, 40); // under one page: nothing to reuse
    HttpResponse<String> res = server.post("/v1/completions", completion(p, 9, ""));
    assertEquals(200, res.statusCode(), res.body());
    HttpResponse<String> streamed =
        server.post("/v1/completions", completion(prompt(78, 30), 5, ",\"stream\":true"));
    assertEquals(200, streamed.statusCode());
    Map<String, PrometheusText.Family> after = scrape();
    assertEquals(70, delta(before, after, "tokenspeed:prompt_tokens_total"));
    assertEquals(14, delta(before, after, "tokenspeed:generation_tokens_total"));
    assertEquals(
        2, delta(before, after, "tokenspeed:requests_finished_total", "finish_reason", "length"));
    for (String h :
        List.of(
            "tokenspeed:time_to_first_token_seconds_count",
            "tokenspeed:time_per_output_token_seconds_count",
            "tokenspeed:e2e_request_latency_seconds_count")) {
      assertEquals(2, delta(before, after, h), h);
    }
    for (PrometheusText.Family f : after.values()) {
      for (PrometheusText.Sample sample : f.samples()) {
        assertEquals(TestServer.MODEL, sample.labels().get("model_name"), sample.name());
        assertEquals("fused", sample.labels().get("engine_role"), sample.name());
        assertEquals("0", sample.labels().get("dp_rank"), sample.name());
        assertEquals("0", sample.labels().get("tp_rank"), sample.name());
      }
    }
  }

  static double delta(
      Map<String, PrometheusText.Family> before,
      Map<String, PrometheusText.Family> after,
      String name,
      String... labels) {
    return PrometheusText.value(after, name, labels) - PrometheusText.value(before, name, labels);
  }

  static Map<String, PrometheusText.Family> scrape() {
    HttpResponse<String> res = server.get("/metrics");
    assertEquals(200, res.statusCode());
    return PrometheusText.parse(res.body());
  }

  @ParameterizedTest(name = "{0}")
  @CsvSource(
      delimiter = '|',
      textBlock =
          """
          malformed JSON | {"prompt": "x", | 400 |
          not an object | [1,2,3] | 400 |
          empty body | | 400 |
          prompt missing | {"max_tokens": 3} | 400 | prompt
          prompt of wrong type | {"prompt": 12} | 400 | prompt
          max_tokens as string | {"prompt": "hi", "max_tokens": "5"} | 400 | max_tokens
          max_tokens fraction | {"prompt": "hi", "max_tokens": 2.5} | 400 | max_tokens
          negative max_tokens | {"prompt": "hi", "max_tokens": -1} | 400 | max_tokens
          absurd max_tokens | {"prompt": "hi", "max_tokens": 1000000000000} | 400 | max_tokens
          over the request limit | {"prompt": "hi", "max_tokens": 5000} | 400 | max_tokens
          temperature as string | {"prompt": "hi", "temperature": "hot"} | 400 | temperature
          negative temperature | {"prompt": "hi", "temperature": -1} | 400 | temperature
          top_p zero | {"prompt": "hi", "top_p": 0} | 400 | top_p
          n too large | {"prompt": "hi", "n": 1000} | 400 | n
          stop of wrong type | {"prompt": "hi", "stop": 5} | 400 | stop
          token id out of range | {"prompt": [1, 2, 999]} | 400 | prompt
          stream not boolean | {"prompt": "hi", "stream": "yes"} | 400 | stream
          logprobs too many | {"prompt": "hi", "logprobs": 50} | 400 | logprobs
          unknown model | {"model": "gpt-4", "prompt": "hi"} | 404 | model
          echo unsupported | {"prompt": "hi", "echo": true} | 400 | echo
          presence_penalty above 2 | {"prompt": "hi", "presence_penalty": 2.5} | 400 | presence_penalty
          presence_penalty as string | {"prompt": "hi", "presence_penalty": "1"} | 400 | presence_penalty
          frequency_penalty below -2 | {"prompt": "hi", "frequency_penalty": -2.01} | 400 | frequency_penalty
          repetition_penalty zero | {"prompt": "hi", "repetition_penalty": 0} | 400 | repetition_penalty
          repetition_penalty above 10 | {"prompt": "hi", "repetition_penalty": 10.5} | 400 | repetition_penalty
          """)
  void shouldRefuseBadInputWithAClearErrorAndKeepServing(
      String name, String body, int status, String param) {
    HttpResponse<String> res = server.post("/v1/completions", body == null ? "" : body);
    assertEquals(status, res.statusCode(), name + ": " + res.body());
    JsonNode error = TestServer.json(res.body()).get("error");
    assertTrue(error.get("message").asText().length() > 10, res.body());
    assertTrue(error.has("type") && error.has("param") && error.has("code"), res.body());
    if (param != null) {
      assertEquals(param, error.get("param").asText(), res.body());
      assertTrue(error.get("message").asText().contains(param), res.body());
    }
    HttpResponse<String> ok = server.post("/v1/completions", completion("still there?", 2, ""));
    assertEquals(200, ok.statusCode(), "the server goes on after " + name);
  }

  @Test
  void shouldAnswerACompletionWithPenaltiesWithTheEnginesPenalizedText() {
    String p = prompt(3, 40);
    String extra =
        ",\"frequency_penalty\":1.5,\"presence_penalty\":-0.5,\"repetition_penalty\":1.3";
    HttpResponse<String> res = server.post("/v1/completions", completion(p, 24, extra));
    assertEquals(200, res.statusCode(), res.body());
    JsonNode choice = TestServer.json(res.body()).get("choices").get(0);
    int[] penalized =
        server
            .engine
            .submit(
                server.tokenizer.encode(p),
                SamplingParams.greedy(24).withIgnoreEos(true).withPenalties(-0.5, 1.5, 1.3))
            .result()
            .join()
            .tokens();
    assertEquals(server.tokenizer.decode(penalized, true), choice.get("text").asText());
    assertEquals(24, TestServer.json(res.body()).get("usage").get("completion_tokens").asInt());

    HttpResponse<String> chat =
        server.post(
            "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":8,"
                + "\"temperature\":0,\"frequency_penalty\":2,\"presence_penalty\":2}");
    assertEquals(200, chat.statusCode(), chat.body());
  }

  @Test
  void shouldRefuseInvalidUtf8AndOversizedBodies() {
    byte[] bad = "{\"prompt\": \"caf\u00e9\"}".getBytes(StandardCharsets.ISO_8859_1);
    HttpResponse<String> res =
        server.send(
            HttpRequest.newBuilder(server.uri("/v1/completions"))
                .POST(HttpRequest.BodyPublishers.ofByteArray(bad))
                .build());
    assertEquals(400, res.statusCode());
    assertTrue(res.body().contains("not valid UTF-8 (at byte 15)"), res.body());

    String huge = completion("x".repeat((1 << 20) + 10), 2, "");
    HttpResponse<String> tooBig = server.post("/v1/completions", huge);
    assertEquals(413, tooBig.statusCode());
    assertTrue(
        tooBig.body().contains("exceeds the server's limit of 1048576 bytes"), tooBig.body());

    HttpResponse<String> unknown = server.get("/v1/nothing");
    assertEquals(404, unknown.statusCode());
    assertEquals("not_found", TestServer.json(unknown.body()).get("error").get("code").asText());
    assertEquals(200, server.post("/v1/completions", completion("ok", 1, "")).statusCode());
  }

  @Test
  void shouldListTheModelAndReportHealthAndReadiness() {
    JsonNode models = TestServer.json(server.get("/v1/models").body());
    assertEquals("list", models.get("object").asText());
    assertEquals(TestServer.MODEL, models.get("data").get(0).get("id").asText());
    assertEquals(200, server.get("/health").statusCode());
    HttpResponse<String> ready = server.get("/ready");
    assertEquals(200, ready.statusCode());
    assertEquals("ready", TestServer.json(ready.body()).get("status").asText());
  }

  @Test
  void shouldGiveLogprobsWhoseTopEntryIsTheGreedyToken() {
    HttpResponse<String> res =
        server.post("/v1/completions", completion(prompt(5, 30), 6, ",\"logprobs\":3"));
    assertEquals(200, res.statusCode(), res.body());
    JsonNode lp = TestServer.json(res.body()).get("choices").get(0).get("logprobs");
    assertEquals(6, lp.get("tokens").size());
    assertEquals(6, lp.get("token_logprobs").size());
    for (int i = 0; i < 6; i++) {
      JsonNode top = lp.get("top_logprobs").get(i);
      // tokens whose text is equal (bytes of one character each decode to U+FFFD) share a key
      assertTrue(top.size() >= 1 && top.size() <= 3, top::toString);
      double best = Double.NEGATIVE_INFINITY;
      for (JsonNode v : top) {
        best = Math.max(best, v.asDouble());
      }
      double own = lp.get("token_logprobs").get(i).asDouble();
      assertEquals(best, own, 1e-6, "greedy picks the most likely token");
      assertTrue(own <= 0);
    }
    HttpResponse<String> chat =
        server.post(
            "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,"
                + "\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":2}");
    JsonNode content =
        TestServer.json(chat.body()).get("choices").get(0).get("logprobs").get("content");
    assertEquals(3, content.size(), chat.body());
    for (JsonNode token : content) {
      JsonNode top = token.get("top_logprobs");
      assertEquals(2, top.size(), "chat lists alternatives, equal texts included");
      assertEquals(top.get(0).get("logprob").asDouble(), token.get("logprob").asDouble(), 1e-6);
      assertTrue(top.get(0).get("logprob").asDouble() >= top.get(1).get("logprob").asDouble());
    }
  }

  @Test
  void shouldEndTheTextBeforeAStopStringAndAtAStopToken() {
    String p = prompt(6, 30);
    String full = alone(p, 40);
    String stop = full.substring(10, 13);
    int cut = full.indexOf(stop);
    for (String stream : List.of("", ",\"stream\":true")) {
      HttpResponse<String> res =
          server.post(
              "/v1/completions",
              completion(p, 40, ",\"stop\":[" + TestServer.JSON.valueToTree(stop) + "]" + stream));
      assertEquals(200, res.statusCode(), res.body());
      String text;
      String reason;
      if (stream.isEmpty()) {
        JsonNode c = TestServer.json(res.body()).get("choices").get(0);
        text = c.get("text").asText();
        reason = c.get("finish_reason").asText();
      } else {
        List<JsonNode> events = Sse.events(res.body());
        text = Sse.text(events, 0);
        reason = Sse.finishReason(events, 0);
      }
      assertEquals(full.substring(0, cut), text, "stream=" + !stream.isEmpty());
      assertEquals("stop", reason);
    }
    int[] ids = aloneTokens(p, 40);
    int stopId = ids[5];
    int first = 0;
    while (ids[first] != stopId) {
      first++;
    }
    HttpResponse<String> res =
        server.post("/v1/completions", completion(p, 40, ",\"stop_token_ids\":[" + stopId + "]"));
    JsonNode body = TestServer.json(res.body());
    JsonNode c = body.get("choices").get(0);
    assertEquals(
        server.tokenizer.decode(java.util.Arrays.copyOf(ids, first), true), c.get("text").asText());
    assertEquals("stop", c.get("finish_reason").asText());
    assertEquals(
        first + 1, body.get("usage").get("completion_tokens").asInt(), "the stop token counts");
  }

  @Test
  void shouldReplaySeededChoicesAndGiveEachItsOwnSeed() {
    String body =
        "{\"prompt\":\"once upon a time\",\"max_tokens\":12,\"temperature\":1.0,\"n\":3,"
            + "\"seed\":42,\"ignore_eos\":true}";
    JsonNode a = TestServer.json(server.post("/v1/completions", body).body());
    JsonNode b = TestServer.json(server.post("/v1/completions", body).body());
    assertEquals(3, a.get("choices").size());
    for (int i = 0; i < 3; i++) {
      assertEquals(i, a.get("choices").get(i).get("index").asInt());
      assertEquals(
          a.get("choices").get(i).get("text"), b.get("choices").get(i).get("text"), "seeded");
    }
    assertNotEquals(
        a.get("choices").get(0).get("text").asText() + a.get("choices").get(1).get("text").asText(),
        a.get("choices").get(1).get("text").asText() + a.get("choices").get(0).get("text").asText(),
        "choices draw differently");
    assertEquals(36, a.get("usage").get("completion_tokens").asInt());
    assertEquals(16, a.get("usage").get("prompt_tokens").asInt(), "the prompt counts once");
  }

  @Test
  void shouldRefuseAdministrationWithoutTheTokenAndReportWhatItDid() {
    HttpResponse<String> none = server.post("/admin/clear_cache", "");
    assertEquals(401, none.statusCode());
    HttpResponse<String> wrong =
        server.send(
            HttpRequest.newBuilder(server.uri("/admin/clear_cache"))
                .header("Authorization", "Bearer nope")
                .POST(HttpRequest.BodyPublishers.noBody())
                .build());
    assertEquals(401, wrong.statusCode());
    for (String action : List.of("clear_cache", "clear_device_cache")) {
      HttpResponse<String> ok = admin("/admin/" + action, "");
      assertEquals(200, ok.statusCode(), ok.body());
      JsonNode body = TestServer.json(ok.body());
      assertEquals(action, body.get("action").asText());
      assertTrue(body.get("did").asText().startsWith("dropped"));
    }
    HttpResponse<String> missing = admin("/admin/update_weights", "{}");
    assertEquals(400, missing.statusCode());
    assertEquals(
        "weight_version", TestServer.json(missing.body()).get("error").get("param").asText());
    HttpResponse<String> update = admin("/admin/update_weights", "{\"weight_version\":\"v2\"}");
    assertEquals(200, update.statusCode(), update.body());
    JsonNode updated = TestServer.json(update.body());
    assertEquals("v2", updated.get("weight_version").asText());
    // no L3 here: nothing deleted, nothing can have stayed, no pass run
    assertEquals(0, updated.get("deleted_objects").asLong(), update.body());
    assertEquals(0, updated.get("remaining_objects").asLong(), update.body());
    assertEquals(0, updated.get("deletion_passes").asInt(), update.body());
    assertEquals("", updated.get("remaining_reason").asText(), update.body());
    assertEquals("v2", server.engine.weightVersion());
    HttpResponse<String> rotate = admin("/admin/rotate_namespace", "{\"weight_version\":\"v3\"}");
    assertEquals(200, rotate.statusCode(), rotate.body());
    JsonNode rotated = TestServer.json(rotate.body());
    assertEquals("rotate_namespace", rotated.get("action").asText());
    assertEquals("v2", rotated.get("previous_weight_version").asText());
    assertEquals("v3", server.engine.weightVersion());
  }

  /**
   * A freeze and its lift need the admin token like every administrative call; a completion asked
   * for while frozen is answered once the freeze lifts, with the text it has unfrozen.
   */
  @Test
  void shouldFreezeAndUnfreezeWithTheAdminToken() throws Exception {
    for (String action : List.of("freeze", "unfreeze")) {
      assertEquals(401, server.post("/admin/" + action, "").statusCode(), action);
    }
    String body = "{\"prompt\":\"frozen a while\",\"max_tokens\":6,\"temperature\":0}";
    JsonNode want = TestServer.json(server.post("/v1/completions", body).body());
    HttpResponse<String> frozen = admin("/admin/freeze", "");
    assertEquals(200, frozen.statusCode(), frozen.body());
    assertTrue(TestServer.json(frozen.body()).get("frozen").asBoolean(), frozen.body());
    assertTrue(server.engine.frozen());
    CompletableFuture<HttpResponse<String>> waiting;
    try {
      waiting = CompletableFuture.supplyAsync(() -> server.post("/v1/completions", body));
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (server.engine.stats().activeRequests() == 0 && System.nanoTime() < deadline) {
        Thread.sleep(2); // the request reaches the frozen loop
      }
      assertEquals(1, server.engine.stats().activeRequests(), "the request waits in the loop");
      assertFalse(waiting.isDone(), "not answered while frozen");
    } finally {
      HttpResponse<String> lifted = admin("/admin/unfreeze", "");
      assertEquals(200, lifted.statusCode(), lifted.body());
      assertFalse(TestServer.json(lifted.body()).get("frozen").asBoolean(), lifted.body());
    }
    JsonNode answered = TestServer.json(waiting.get(60, TimeUnit.SECONDS).body());
    assertEquals(
        want.get("choices").get(0).get("text"),
        answered.get("choices").get(0).get("text"),
        "the same text as unfrozen");
    assertFalse(server.engine.frozen());
  }

  @Test
  void shouldStreamSeveralChoicesEachAsItsNonStreamedText() {
    String body =
        "{\"prompt\":\"several choices\",\"max_tokens\":10,\"temperature\":0.8,\"n\":3,"
            + "\"seed\":5,\"ignore_eos\":true";
    JsonNode plain = TestServer.json(server.post("/v1/completions", body + "}").body());
    List<JsonNode> events =
        Sse.events(server.post("/v1/completions", body + ",\"stream\":true}").body());
    for (int i = 0; i < 3; i++) {
      assertEquals(plain.get("choices").get(i).get("text").asText(), Sse.text(events, i));
      assertEquals("length", Sse.finishReason(events, i));
    }
  }

  static HttpResponse<String> admin(String path, String body) {
    return server.send(
        HttpRequest.newBuilder(server.uri(path))
            .header("Authorization", "Bearer " + TestServer.ADMIN_TOKEN)
            .POST(
                body.isEmpty()
                    ? HttpRequest.BodyPublishers.noBody()
                    : HttpRequest.BodyPublishers.ofString(body))
            .build());
  }
}

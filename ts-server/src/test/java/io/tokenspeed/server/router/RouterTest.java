package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.server.http.WebFront;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The router against stub prefill and decode engines, all on loopback: the choice of backends, what
 * each backend receives, the answer's passage to the client, and every failure's answer, with the
 * other upstream request cancelled (the stub sees its connection closed).
 */
class RouterTest {
  private static final long WAIT_MS = 10_000;

  private RouterRig rig;

  @AfterEach
  void stop() {
    if (rig != null) {
      rig.close();
    }
  }

  static String completion(boolean stream) {
    return "{\"model\":\"stub-model\",\"prompt\":\"hello\",\"max_tokens\":4,\"stream\":"
        + stream
        + (stream ? ",\"stream_options\":{\"include_usage\":true}" : "")
        + ",\"pd\":{\"room\":\"1\",\"decode\":\"evil:1\"}}";
  }

  /** {@code n} completion chunks and [DONE], as an engine streams them; seeded text. */
  static List<String> events(long seed, int n) {
    SplittableRandom r = new SplittableRandom(seed);
    List<String> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      StringBuilder text = new StringBuilder();
      for (int k = 1 + r.nextInt(6); k > 0; k--) {
        text.append((char) ('a' + r.nextInt(26)));
      }
      out.add(
          "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
              + "\"text\":\""
              + text
              + "\",\"finish_reason\":null}]}\n\n");
    }
    out.add("data: [DONE]\n\n");
    return out;
  }

  private static JsonNode error(HttpResponse<String> res) {
    assertEquals("application/json", res.headers().firstValue("content-type").orElse(""));
    JsonNode body = RouterRig.json(res.body());
    JsonNode error = body.get("error");
    assertTrue(error != null && error.isObject(), res.body());
    assertTrue(
        error.has("message") && error.has("type") && error.has("param") && error.has("code"));
    return error;
  }

  @Test
  void shouldChooseBackendsRoundRobinOverTwoPrefillAndTwoDecodeEngines() throws Exception {
    rig = new RouterRig(2, 2, 11);
    List<String> rooms = new ArrayList<>();
    for (int i = 0; i < 6; i++) {
      HttpResponse<String> res = rig.post("/v1/completions", completion(false));
      assertEquals(200, res.statusCode(), res.body());
      // decode answers the client, so its request arrived before the answer
      StubBackend d = rig.decode.get(i % 2);
      assertEquals(i / 2 + 1, d.received.size(), "request " + i + " went to decode " + i % 2);
      rooms.add(d.bodies().getLast().at("/pd/room").asText());
    }
    assertEquals(6, rooms.stream().distinct().count(), "a fresh room per request: " + rooms);
    for (int k = 0; k < 2; k++) {
      // prefill's requests may still be on their way when the client has its answer
      List<String> got =
          rig.prefill.get(k).awaitReceived(3, WAIT_MS).stream()
              .map(r -> r.body().at("/pd/room").asText())
              .sorted()
              .toList();
      List<String> want =
          List.of(rooms.get(k), rooms.get(k + 2), rooms.get(k + 4)).stream().sorted().toList();
      assertEquals(
          want, got, "prefill " + k + " served requests " + k + ", " + (k + 2) + ", " + (k + 4));
    }
  }

  @Test
  void shouldSendTheSameRoomToBothAndTheDecodeEnginesKvEndpointToPrefill() throws Exception {
    rig = new RouterRig(1, 1, 12);
    rig.decode.getFirst().script = new StubBackend.Stream(events(1, 2), 0, false, -1, -1);
    HttpResponse<String> res = rig.post("/v1/completions", completion(true));
    assertEquals(200, res.statusCode(), res.body());
    JsonNode p = rig.prefill.getFirst().awaitReceived(1, WAIT_MS).getFirst().body();
    JsonNode d = rig.decode.getFirst().bodies().getFirst();
    String room = d.at("/pd/room").asText();
    assertTrue(d.at("/pd/room").isTextual(), "the room is a decimal string: " + d);
    assertNotEquals(0L, Long.parseUnsignedLong(room));
    assertEquals(room, p.at("/pd/room").asText());
    assertEquals(1, d.get("pd").size(), "decode gets the room only (the client's pd replaced)");
    assertEquals("10.0.0.1:7000", p.at("/pd/decode").asText());
    assertFalse(p.get("stream").asBoolean(), "prefill never streams");
    assertFalse(p.has("stream_options"), "stream_options goes with stream");
    assertTrue(d.get("stream").asBoolean(), "decode keeps the client's stream flag");
    assertTrue(d.at("/stream_options/include_usage").asBoolean());
    assertEquals("hello", p.get("prompt").asText());
    assertEquals("hello", d.get("prompt").asText());
    assertEquals("/v1/completions", rig.decode.getFirst().received.getFirst().path());
    HttpResponse<String> chat =
        rig.post(
            "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":false}");
    assertEquals(200, chat.statusCode(), chat.body());
    assertEquals(
        "/v1/chat/completions", rig.prefill.getFirst().awaitReceived(2, WAIT_MS).get(1).path());
    assertEquals("/v1/chat/completions", rig.decode.getFirst().received.get(1).path());
  }

  @Test
  void shouldPassAStreamThroughByteForByteEachEventAsItArrives() throws Exception {
    rig = new RouterRig(1, 1, 13);
    List<String> events = events(2, 8);
    // the events after the first wait for the client to have read the first: passed on one by
    // one as they arrive, not after the stream ends; each is split over two chunks
    rig.decode.getFirst().script = new StubBackend.Stream(events, 5, true, -1, 1);
    HttpResponse<InputStream> res = rig.postStreaming("/v1/completions", completion(true));
    assertEquals(200, res.statusCode());
    assertEquals(
        "text/event-stream; charset=utf-8", res.headers().firstValue("content-type").orElse(""));
    try (InputStream in = res.body()) {
      assertFirstEvent(in, events);
      rig.decode.getFirst().gate.countDown();
      assertRestOfStream(in, events);
    }
    assertEquals(0, rig.decode.getFirst().cancellations.get());
  }

  @Test
  void shouldLetTheStreamsInFlightFinishWhileDrainingAndRefuseNewOnes() throws Exception {
    rig = new RouterRig(1, 1, 24);
    List<String> events = events(6, 5);
    rig.decode.getFirst().script = new StubBackend.Stream(events, 5, true, -1, 1);
    HttpResponse<InputStream> res = rig.postStreaming("/v1/completions", completion(true));
    assertEquals(200, res.statusCode());
    try (InputStream in = res.body()) {
      assertFirstEvent(in, events);
      assertEquals(1, rig.router.inFlight());
      var drained = new java.util.concurrent.CompletableFuture<Integer>();
      Thread.ofVirtual()
          .start(
              () -> {
                try {
                  drained.complete(rig.router.drain(Duration.ofMillis(WAIT_MS)));
                } catch (Throwable t) {
                  drained.completeExceptionally(t);
                }
              });
      // while it drains: new completions and /ready are answered 503, the stream goes on
      long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
      HttpResponse<String> refused;
      do {
        refused =
            rig.client.send(
                HttpRequest.newBuilder(rig.uri("/v1/completions"))
                    .POST(HttpRequest.BodyPublishers.ofString(completion(false)))
                    .build(),
                HttpResponse.BodyHandlers.ofString());
      } while (refused.statusCode() != 503 && System.nanoTime() < deadline);
      assertEquals(503, refused.statusCode(), refused.body());
      assertTrue(error(refused).get("message").asText().contains("shutting down"));
      HttpResponse<String> ready =
          rig.client.send(
              HttpRequest.newBuilder(rig.uri("/ready")).GET().build(),
              HttpResponse.BodyHandlers.ofString());
      assertEquals(503, ready.statusCode());
      assertEquals("draining", RouterRig.json(ready.body()).get("status").asText());
      assertFalse(drained.isDone(), "the drain waits for the stream");
      rig.decode.getFirst().gate.countDown();
      assertRestOfStream(in, events);
      assertEquals(0, drained.get(WAIT_MS, TimeUnit.MILLISECONDS), "left in flight");
    }
    assertEquals(0, rig.router.inFlight());
    assertEquals(0, rig.decode.getFirst().cancellations.get());
    assertEquals(0, rig.prefill.getFirst().cancellations.get());
  }

  @Test
  void shouldPassANonStreamedAnswerThroughWithItsStatusAndContentType() {
    rig = new RouterRig(1, 1, 14);
    String answer = "{\"id\":\"cmpl-9\",\"choices\":[{\"text\":\" caf\\u00e9\"}],\"usage\":{}}";
    rig.decode.getFirst().script = new StubBackend.Answer(200, answer);
    HttpResponse<String> res = rig.post("/v1/completions", completion(false));
    assertEquals(200, res.statusCode());
    assertEquals("application/json", res.headers().firstValue("content-type").orElse(""));
    assertEquals(answer, res.body());
    String refusal = "{\"error\":{\"message\":\"max_tokens too large\",\"type\":\"x\"}}";
    rig.decode.getFirst().script = new StubBackend.Answer(400, refusal);
    HttpResponse<String> refused = rig.post("/v1/completions", completion(false));
    assertEquals(400, refused.statusCode());
    assertEquals(refusal, refused.body());
  }

  @Test
  void shouldAnswer502AndCancelDecodeWhenPrefillAnswersAnErrorFirst() throws Exception {
    rig = new RouterRig(1, 1, 15);
    rig.prefill.getFirst().script =
        new StubBackend.Answer(500, "{\"error\":{\"message\":\"INTERNAL-DETAIL\"}}");
    rig.prefill.getFirst().before = rig.decode.getFirst().receivedOne;
    rig.decode.getFirst().script = new StubBackend.Hold();
    HttpResponse<String> res = rig.post("/v1/completions", completion(true));
    assertEquals(502, res.statusCode(), res.body());
    JsonNode error = error(res);
    assertTrue(error.get("message").asText().contains(rig.prefill.getFirst().url()), res.body());
    assertTrue(error.get("message").asText().contains("prefill"), res.body());
    assertFalse(res.body().contains("INTERNAL-DETAIL"), "never the backend's internals");
    assertEquals("bad_gateway", error.get("code").asText());
    assertTrue(rig.decode.getFirst().awaitCancellations(1, WAIT_MS), "decode was cancelled");
  }

  @Test
  void shouldAnswer502AndCancelDecodeWhenPrefillDropsItsConnectionFirst() throws Exception {
    rig = new RouterRig(1, 1, 16);
    rig.prefill.getFirst().script = new StubBackend.Drop();
    rig.prefill.getFirst().before = rig.decode.getFirst().receivedOne;
    rig.decode.getFirst().script = new StubBackend.Hold();
    HttpResponse<String> res = rig.post("/v1/completions", completion(false));
    assertEquals(502, res.statusCode(), res.body());
    assertTrue(error(res).get("message").asText().contains(rig.prefill.getFirst().url()));
    assertTrue(rig.decode.getFirst().awaitCancellations(1, WAIT_MS), "decode was cancelled");
  }

  @Test
  void shouldPassPrefillsRefusalOfTheRequestThroughAndCancelDecode() throws Exception {
    rig = new RouterRig(1, 1, 17);
    String refusal =
        "{\"error\":{\"message\":\"temperature must be >= 0\",\"type\":\"invalid_request_error\","
            + "\"param\":\"temperature\",\"code\":null}}";
    rig.prefill.getFirst().script = new StubBackend.Answer(400, refusal);
    rig.prefill.getFirst().before = rig.decode.getFirst().receivedOne;
    rig.decode.getFirst().script = new StubBackend.Hold();
    HttpResponse<String> res = rig.post("/v1/completions", completion(true));
    assertEquals(400, res.statusCode(), res.body());
    assertEquals(refusal, res.body());
    assertTrue(rig.decode.getFirst().awaitCancellations(1, WAIT_MS), "decode was cancelled");
  }

  /**
   * A decode engine that goes away fails its prefill too (the prefill cannot reach its KV
   * endpoint), and the prefill's failure often reaches the router first: the 502 names the decode
   * backend, the cause, whichever failure came first. Both stubs fail once both have read their
   * requests, so the two orders race; five rounds (each with fresh stubs and router) see either.
   */
  @Test
  void shouldNameTheDecodeBackendWhenBothFailBeforeDecodeStarted() throws Exception {
    for (int round = 0; round < 5; round++) {
      if (rig != null) {
        rig.close(); // a failed backend is chosen again only once a poll finds it ready
      }
      rig = new RouterRig(1, 1, 21 + round);
      StubBackend p = rig.prefill.getFirst();
      StubBackend d = rig.decode.getFirst();
      p.script = new StubBackend.Answer(502, "{\"error\":{\"message\":\"no route to decode\"}}");
      p.before = d.receivedOne;
      d.script = new StubBackend.Drop();
      d.before = p.receivedOne;
      HttpResponse<String> res = rig.post("/v1/completions", completion(round % 2 == 0));
      assertEquals(502, res.statusCode(), res.body());
      String message = error(res).get("message").asText();
      assertTrue(message.contains(d.url()), "round " + round + ": " + res.body());
      assertTrue(message.contains("decode"), "round " + round + ": " + res.body());
      assertFalse(message.contains(p.url()), "round " + round + ": " + res.body());
    }
  }

  @Test
  void shouldAnswer502AndCancelPrefillWhenDecodeFailsBeforeItStarts() throws Exception {
    rig = new RouterRig(1, 1, 18);
    rig.prefill.getFirst().script = new StubBackend.Hold();
    rig.decode.getFirst().script = new StubBackend.Drop();
    rig.decode.getFirst().before = rig.prefill.getFirst().receivedOne;
    HttpResponse<String> res = rig.post("/v1/completions", completion(true));
    assertEquals(502, res.statusCode(), res.body());
    JsonNode error = error(res);
    assertTrue(error.get("message").asText().contains(rig.decode.getFirst().url()), res.body());
    assertTrue(error.get("message").asText().contains("decode"), res.body());
    assertTrue(rig.prefill.getFirst().awaitCancellations(1, WAIT_MS), "prefill was cancelled");
  }

  @Test
  void shouldEndTheStreamWithAnErrorEventWhenDecodeBreaksOffMidStream() throws Exception {
    rig = new RouterRig(1, 1, 19);
    List<String> events = events(3, 6);
    rig.decode.getFirst().script = new StubBackend.Stream(events, 2, true, 3, -1);
    HttpResponse<String> res = rig.post("/v1/completions", completion(true));
    assertEquals(200, res.statusCode());
    String body = res.body();
    String passed = String.join("", events.subList(0, 3));
    assertTrue(body.startsWith(passed), body);
    String tail = body.substring(passed.length());
    assertTrue(tail.endsWith("\n\ndata: [DONE]\n\n"), tail);
    String errorEvent = tail.substring(0, tail.length() - "data: [DONE]\n\n".length());
    assertTrue(errorEvent.startsWith("data: {") && errorEvent.endsWith("}\n\n"), errorEvent);
    JsonNode error = RouterRig.json(errorEvent.substring(6).strip()).get("error");
    assertEquals("upstream_error", error.get("type").asText());
    assertTrue(error.get("param").isNull());
    assertEquals(502, error.get("code").asInt());
    assertTrue(error.get("message").asText().contains(rig.decode.getFirst().url()), tail);
  }

  /**
   * A stream that D itself ends with an error event (serve's: its KV transfer failed after the
   * stream started, as a chat's does with its first event) passes through untouched, but is a
   * failed request: counted {@code upstream_failed}, not {@code ok}, and P is cancelled.
   */
  @Test
  void shouldCountAStreamThatDecodeEndedWithAnErrorEventAsFailedAndCancelPrefill()
      throws Exception {
    rig = new RouterRig(1, 1, 25);
    List<String> events = new ArrayList<>(events(7, 3));
    events.add(
        events.size() - 1,
        new String(
            WebFront.errorEvent("the KV transfer failed", "upstream_error", 502),
            StandardCharsets.UTF_8));
    rig.prefill.getFirst().script = new StubBackend.Hold();
    rig.decode.getFirst().script = new StubBackend.Stream(events, 1, true, -1, -1);
    HttpResponse<String> res = rig.post("/v1/completions", completion(true));
    assertEquals(200, res.statusCode());
    assertEquals(String.join("", events), res.body(), "passed through byte for byte");
    assertEquals(
        1.0,
        PrometheusText.value(
            rig.metrics(),
            "tokenspeed:router_requests_total",
            "endpoint",
            "/v1/completions",
            "outcome",
            "upstream_failed"));
    assertEquals(
        0.0,
        PrometheusText.value(
            rig.metrics(),
            "tokenspeed:router_requests_total",
            "endpoint",
            "/v1/completions",
            "outcome",
            "ok"));
    assertTrue(rig.prefill.getFirst().awaitCancellations(1, WAIT_MS), "prefill was cancelled");
  }

  @Test
  void shouldLeaveTheStreamAloneWhenPrefillFailsAfterDecodeStarted() throws Exception {
    rig = new RouterRig(1, 1, 20);
    List<String> events = events(4, 5);
    StubBackend p = rig.prefill.getFirst();
    StubBackend d = rig.decode.getFirst();
    p.script = new StubBackend.Drop();
    p.before = d.firstEventSent; // prefill drops its connection once decode streams
    d.script = new StubBackend.Stream(events, 1, false, -1, 2); // and decode waits for that
    CompletableFuture<HttpResponse<String>> answer =
        rig.client.sendAsync(
            HttpRequest.newBuilder(rig.uri("/v1/completions"))
                .POST(HttpRequest.BodyPublishers.ofString(completion(true)))
                .build(),
            HttpResponse.BodyHandlers.ofString());
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
    while (prefillFailures("unreachable") < 1) {
      assertTrue(System.nanoTime() - deadline < 0, "the prefill's failure is counted");
      Thread.sleep(5);
    }
    d.gate.countDown();
    HttpResponse<String> res = answer.get(WAIT_MS, TimeUnit.MILLISECONDS);
    assertEquals(200, res.statusCode());
    assertEquals(String.join("", events), res.body(), "the stream went on untouched");
    assertEquals(0, d.cancellations.get(), "decode was left alone");
    assertEquals(1.0, prefillFailures("unreachable"));
  }

  /** Reads the first of {@code events} off the stream, and only that. */
  private static void assertFirstEvent(InputStream in, List<String> events) throws IOException {
    byte[] first = in.readNBytes(events.getFirst().length());
    assertEquals(events.getFirst(), new String(first, StandardCharsets.UTF_8));
  }

  /** Reads the stream to its end: the rest of {@code events}, byte for byte. */
  private static void assertRestOfStream(InputStream in, List<String> events) throws IOException {
    String rest = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(String.join("", events.subList(1, events.size())), rest);
  }

  private double prefillFailures(String kind) {
    return PrometheusText.value(
        rig.metrics(),
        "tokenspeed:router_upstream_failures_total",
        "role",
        "prefill",
        "kind",
        kind);
  }

  @Test
  void shouldCancelBothWhenTheClientLeavesMidStream() throws Exception {
    rig = new RouterRig(1, 1, 21);
    rig.prefill.getFirst().script = new StubBackend.Hold();
    rig.decode.getFirst().script = new StubBackend.Stream(events(5, 10_000), 20, false, -1, -1);
    try (Socket s = new Socket("127.0.0.1", rig.port())) {
      String body = completion(true);
      OutputStream out = s.getOutputStream();
      out.write(
          ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + "Content-Length: "
                  + body.getBytes(StandardCharsets.UTF_8).length
                  + "\r\n\r\n"
                  + body)
              .getBytes(StandardCharsets.UTF_8));
      out.flush();
      InputStream in = s.getInputStream();
      StringBuilder seen = new StringBuilder();
      while (!seen.toString().contains("data: {")) {
        int c = in.read();
        assertTrue(c >= 0, "the stream started: " + seen);
        seen.append((char) c);
      }
      assertTrue(rig.prefill.getFirst().receivedOne.await(WAIT_MS, TimeUnit.MILLISECONDS));
    } // the client leaves mid-stream
    assertTrue(rig.decode.getFirst().awaitCancellations(1, WAIT_MS), "decode was cancelled");
    assertTrue(rig.prefill.getFirst().awaitCancellations(1, WAIT_MS), "prefill was cancelled");
  }

  @Test
  void shouldCancelBothWhenTheClientLeavesBeforeTheAnswer() throws Exception {
    rig = new RouterRig(1, 1, 22);
    rig.prefill.getFirst().script = new StubBackend.Hold();
    rig.decode.getFirst().script = new StubBackend.Hold();
    try (Socket s = new Socket("127.0.0.1", rig.port())) {
      String body = completion(false);
      s.getOutputStream()
          .write(
              ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                      + body.length()
                      + "\r\n\r\n"
                      + body)
                  .getBytes(StandardCharsets.UTF_8));
      s.getOutputStream().flush();
      long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
      while (rig.decode.getFirst().received.isEmpty()
          || rig.prefill.getFirst().received.isEmpty()) {
        assertTrue(System.nanoTime() - deadline < 0, "both backends got the request");
        Thread.sleep(5);
      }
    } // the client leaves while nothing is written to it
    assertTrue(rig.decode.getFirst().awaitCancellations(1, WAIT_MS), "decode was cancelled");
    assertTrue(rig.prefill.getFirst().awaitCancellations(1, WAIT_MS), "prefill was cancelled");
  }

  @Test
  void shouldAnswer504AndCancelPrefillWhenDecodeDoesNotAnswerInTime() throws Exception {
    rig = new RouterRig(1, 1, 23, 300, 2000, 1L << 20);
    rig.prefill.getFirst().script = new StubBackend.Hold();
    rig.decode.getFirst().script = new StubBackend.Hold();
    HttpResponse<String> res = rig.post("/v1/completions", completion(false));
    assertEquals(504, res.statusCode(), res.body());
    assertEquals("gateway_timeout", error(res).get("code").asText());
    assertTrue(rig.prefill.getFirst().awaitCancellations(1, WAIT_MS), "prefill was cancelled");
    assertTrue(rig.decode.getFirst().awaitCancellations(1, WAIT_MS), "decode was cancelled");
  }

  @Test
  void shouldNotChooseABackendWhoseConnectionFailedUntilAPollFindsItReady() {
    rig = new RouterRig(1, 2, 24);
    StubBackend d0 = rig.decode.get(0);
    StubBackend d1 = rig.decode.get(1);
    d0.down(true); // every connection to it closes at once; it has not been polled since
    HttpResponse<String> failed = rig.post("/v1/completions", completion(false));
    assertEquals(502, failed.statusCode(), "d0 was chosen first and failed: " + failed.body());
    for (int i = 0; i < 4; i++) {
      assertEquals(200, rig.post("/v1/completions", completion(false)).statusCode());
    }
    assertEquals(4, d1.received.size(), "d0 was not chosen again");
    rig.poll();
    JsonNode polled = RouterRig.json(rig.get("/ready").body()).at("/decode/0");
    assertFalse(polled.get("ready").asBoolean(), "polled while down: still out " + polled);
    d0.down(false); // up again, but not polled yet
    assertEquals(200, rig.post("/v1/completions", completion(false)).statusCode());
    assertEquals(0, d0.received.size(), "not chosen before a poll");
    rig.poll();
    for (int i = 0; i < 4; i++) {
      assertEquals(200, rig.post("/v1/completions", completion(false)).statusCode());
    }
    assertEquals(2, d0.received.size(), "chosen again after the poll, in turn");
  }

  @Test
  void shouldAnswer503AndNotBeReadyWhileARoleHasNoReadyBackend() {
    rig = new RouterRig(1, 1, 25);
    assertEquals(200, rig.get("/ready").statusCode());
    rig.prefill.getFirst().readyStatus = 503;
    rig.poll();
    HttpResponse<String> ready = rig.get("/ready");
    assertEquals(503, ready.statusCode());
    JsonNode body = RouterRig.json(ready.body());
    assertEquals("not_ready", body.get("status").asText());
    assertEquals("[\"prefill\"]", body.get("missing").toString());
    assertTrue(body.at("/prefill/0/reason").asText().contains("503"), ready.body());
    HttpResponse<String> res = rig.post("/v1/completions", completion(false));
    assertEquals(503, res.statusCode());
    assertTrue(error(res).get("message").asText().contains("prefill"), res.body());
    assertEquals(0, rig.decode.getFirst().received.size(), "nothing was sent");
    rig.decode.getFirst().readyStatus = 500;
    rig.poll();
    assertEquals(
        "[\"prefill\",\"decode\"]",
        RouterRig.json(rig.get("/ready").body()).get("missing").toString());
    assertEquals(200, rig.get("/health").statusCode(), "healthy while it runs");
    assertEquals(503, rig.get("/v1/models").statusCode());
  }

  @Test
  void shouldNotUseABackendWhosePdNamesAnotherRole() {
    rig = new RouterRig(1, 2, 26);
    rig.decode.get(0).pdRole = "prefill";
    rig.poll();
    HttpResponse<String> ready = rig.get("/ready");
    assertEquals(200, ready.statusCode(), "one decode backend is enough");
    JsonNode d0 = RouterRig.json(ready.body()).at("/decode/0");
    assertFalse(d0.get("ready").asBoolean());
    assertTrue(d0.get("reason").asText().contains("MISCONFIGURED"), d0.toString());
    for (int i = 0; i < 3; i++) {
      assertEquals(200, rig.post("/v1/completions", completion(false)).statusCode());
    }
    assertEquals(0, rig.decode.get(0).received.size());
    assertEquals(3, rig.decode.get(1).received.size());
  }

  @Test
  void shouldListADecodeBackendsModels() {
    rig = new RouterRig(1, 1, 27);
    HttpResponse<String> res = rig.get("/v1/models");
    assertEquals(200, res.statusCode(), res.body());
    assertEquals(
        rig.decode.getFirst().url(), RouterRig.json(res.body()).at("/data/0/from").asText());
    assertEquals("{\"status\":\"ok\"}", rig.get("/health").body());
  }

  @Test
  void shouldSendTheDecodeReplicasEndpointsByRankAndThePrefillReplicasSize() throws Exception {
    rig = new RouterRig(1, 1, 28);
    rig.prefill.getFirst().pdAnswer = "{\"role\":\"prefill\",\"tp\":2,\"model\":\"stub-model\"}";
    rig.decode.getFirst().pdAnswer =
        "{\"role\":\"decode\",\"tp\":3,\"kv_endpoint\":\"10.0.0.1:7000\","
            + "\"kv_endpoints\":[\"10.0.0.1:7000\",\"10.0.0.1:7001\",\"[::1]:7002\"],"
            + "\"model\":\"stub-model\"}";
    rig.poll();
    assertEquals(200, rig.post("/v1/completions", completion(false)).statusCode());
    JsonNode p = rig.prefill.getFirst().awaitReceived(1, WAIT_MS).getFirst().body();
    JsonNode d = rig.decode.getFirst().bodies().getFirst();
    assertEquals(
        "[\"10.0.0.1:7000\",\"10.0.0.1:7001\",\"[::1]:7002\"]", p.at("/pd/decode").toString());
    assertFalse(p.get("pd").has("prefill_ranks"), p.toString());
    assertEquals(2, d.at("/pd/prefill_ranks").asInt(), d.toString());
    assertTrue(d.at("/pd/prefill_ranks").isInt(), "a JSON integer: " + d);
    assertEquals(d.at("/pd/room").asText(), p.at("/pd/room").asText());
    JsonNode ready = RouterRig.json(rig.get("/ready").body());
    assertEquals(3, ready.at("/decode/0/tp").asInt(), ready.toString());
    assertEquals(
        "[\"10.0.0.1:7000\",\"10.0.0.1:7001\",\"[::1]:7002\"]",
        ready.at("/decode/0/kv_endpoints").toString());
    assertEquals(2, ready.at("/prefill/0/tp").asInt(), ready.toString());

    // one rank on each side again: the plain string, and no prefill_ranks (its default is 1)
    rig.prefill.getFirst().pdAnswer = "{\"role\":\"prefill\",\"tp\":1,\"model\":\"stub-model\"}";
    rig.decode.getFirst().pdAnswer =
        "{\"role\":\"decode\",\"tp\":1,\"kv_endpoint\":\"10.0.0.9:7000\","
            + "\"kv_endpoints\":[\"10.0.0.9:7000\"],\"model\":\"stub-model\"}";
    rig.poll();
    assertEquals(200, rig.post("/v1/completions", completion(false)).statusCode());
    JsonNode p2 = rig.prefill.getFirst().awaitReceived(2, WAIT_MS).get(1).body();
    JsonNode d2 = rig.decode.getFirst().bodies().get(1);
    assertEquals("\"10.0.0.9:7000\"", p2.at("/pd/decode").toString());
    assertEquals(1, d2.get("pd").size(), d2.toString());
  }

  @Test
  void shouldNotChooseADecodeReplicaWhosePdIsIncompleteOrMalformed() {
    rig = new RouterRig(1, 2, 29);
    StubBackend d0 = rig.decode.get(0);
    List<String[]> cases =
        List.of(
            new String[] {
              "{\"role\":\"decode\",\"tp\":2,\"kv_endpoint\":\"10.0.0.1:7000\"}",
              "no kv_endpoints yet"
            },
            new String[] {
              "{\"role\":\"decode\",\"tp\":2,\"kv_endpoints\":[\"10.0.0.1:7000\"]}",
              "not an array of its 2 ranks"
            },
            new String[] {
              "{\"role\":\"decode\",\"tp\":2,\"kv_endpoints\":[\"10.0.0.1:7000\",7001]}",
              "not host:port"
            },
            new String[] {
              "{\"role\":\"decode\",\"kv_endpoints\":\"10.0.0.1:7000\"}", "not an array"
            },
            new String[] {
              "{\"role\":\"decode\",\"tp\":\"2\",\"kv_endpoint\":\"10.0.0.1:7000\"}",
              "not an integer in [1, 256]"
            },
            new String[] {
              "{\"role\":\"decode\",\"tp\":0,\"kv_endpoint\":\"10.0.0.1:7000\"}",
              "not an integer in [1, 256]"
            },
            new String[] {"{\"role\":\"decode\",\"tp\":1}", "no kv_endpoint host:port"});
    int sent = 0;
    for (String[] c : cases) {
      d0.pdAnswer = c[0];
      rig.poll();
      JsonNode state = RouterRig.json(rig.get("/ready").body()).at("/decode/0");
      assertFalse(state.get("ready").asBoolean(), c[0]);
      assertTrue(state.get("reason").asText().contains(c[1]), () -> c[0] + ": " + state);
      for (int i = 0; i < 2; i++) {
        assertEquals(200, rig.post("/v1/completions", completion(false)).statusCode());
        sent++;
      }
      assertEquals(0, d0.received.size(), c[0]);
      assertEquals(sent, rig.decode.get(1).received.size(), c[0]);
    }
    // every rank's endpoint reported: chosen again, in turn
    d0.pdAnswer =
        "{\"role\":\"decode\",\"tp\":2,\"kv_endpoint\":\"10.0.0.1:7000\","
            + "\"kv_endpoints\":[\"10.0.0.1:7000\",\"10.0.0.1:7001\"]}";
    rig.poll();
    for (int i = 0; i < 4; i++) {
      assertEquals(200, rig.post("/v1/completions", completion(false)).statusCode());
    }
    assertEquals(2, d0.received.size(), "chosen again once complete");
  }
}

package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
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
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Requests that do not end by themselves: cut by the server (a shutdown's deadline), and left by
 * their client (a closed connection while nothing is being written). A cut request never looks
 * finished; a departed client's request is cancelled within a bounded time and logged as one line.
 */
class CutAndDepartureTest {
  @TempDir Path dir;

  private static String completion(String prompt, int maxTokens, String extra) {
    return HttpServerTest.completion(prompt, maxTokens, extra);
  }

  /** Sends a completion request over a raw socket (the caller closes it to leave). */
  private static void send(Socket socket, String body) throws java.io.IOException {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    OutputStream out = socket.getOutputStream();
    out.write(
        ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + "Content-Length: "
                + bytes.length
                + "\r\n\r\n")
            .getBytes(StandardCharsets.US_ASCII));
    out.write(bytes);
    out.flush();
  }

  private static HttpRequest post(TestServer s, String body) {
    return HttpRequest.newBuilder(s.uri("/v1/completions"))
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body))
        .build();
  }

  /**
   * Waits until the server holds {@code n} engine requests (submitted by their HTTP exchanges; the
   * engine's metrics snapshot, published about once a second, could miss requests this short).
   */
  private static void awaitRunning(TestServer s, int n) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (s.state.inFlight() < n) {
      assertTrue(System.nanoTime() < deadline, "the requests did not start");
      Thread.sleep(1);
    }
  }

  @Test
  void shouldEndRequestsCutAtShutdownWithAnErrorNeverAsFinished() throws Exception {
    try (TestServer s = TestServer.start(dir, null)) {
      CompletableFuture<HttpResponse<String>> streamed =
          s.client.sendAsync(
              post(
                  s,
                  completion(
                      "the stream",
                      4000,
                      ",\"stream\":true,\"stream_options\":{\"include_usage\":true}")),
              HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
      CompletableFuture<HttpResponse<String>> plain =
          s.client.sendAsync(
              post(s, completion("the plain one", 4000, "")),
              HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
      awaitRunning(s, 2);
      // what serve's SIGTERM does at its deadline: stop intake, then cancel what is left
      s.state.drain();
      s.state.cancelAll();

      HttpResponse<String> stream = streamed.get(30, TimeUnit.SECONDS);
      assertEquals(200, stream.statusCode());
      assertTrue(stream.body().endsWith("data: [DONE]\n\n"), stream.body());
      List<JsonNode> events = new ArrayList<>();
      for (String frame : stream.body().split("\n\n")) {
        assertTrue(frame.startsWith("data: "), frame);
        String data = frame.substring(6);
        if (!data.equals("[DONE]")) {
          events.add(TestServer.json(data));
        }
      }
      JsonNode error = events.getLast();
      assertTrue(error.has("error"), "an error event before [DONE]: " + error);
      assertTrue(
          error.get("error").get("message").asText().contains("shutting down"), error.toString());
      assertEquals("service_unavailable", error.get("error").get("type").asText());
      JsonNode usage = events.get(events.size() - 2);
      assertTrue(usage.has("usage"), "the usage chunk comes before the error: " + usage);
      JsonNode last = null;
      for (JsonNode e : events) {
        if (e.has("choices") && e.get("choices").size() > 0) {
          JsonNode reason = e.get("choices").get(0).get("finish_reason");
          if (!reason.isNull()) {
            assertNull(last, "one final chunk");
            last = e;
          }
        }
      }
      assertEquals("abort", last.get("choices").get(0).get("finish_reason").asText());

      HttpResponse<String> cut = plain.get(30, TimeUnit.SECONDS);
      assertEquals(503, cut.statusCode(), cut.body());
      JsonNode body = TestServer.json(cut.body());
      assertTrue(body.get("error").get("message").asText().contains("shutting down"), cut.body());
      assertFalse(body.has("choices"), "no truncated text is answered as a completion");
    }
  }

  @Test
  void shouldCancelANonStreamedRequestWhoseClientLeavesAndLogItAsOneLine() throws Exception {
    List<LogRecord> records = new ArrayList<>();
    Handler capture =
        new Handler() {
          @Override
          public synchronized void publish(LogRecord r) {
            records.add(r);
          }

          @Override
          public void flush() {}

          @Override
          public void close() {}
        };
    List<Logger> loggers =
        List.of(
            Logger.getLogger(Completions.class.getName()),
            Logger.getLogger(HttpFrontend.class.getName()),
            Logger.getLogger("io.helidon"));
    loggers.forEach(l -> l.addHandler(capture));
    try (TestServer s = TestServer.start(dir, null)) {
      double cancelled = cancelled(s);
      try (Socket socket = new Socket("127.0.0.1", s.serving.port())) {
        send(socket, completion("leave me", 4000, ""));
        awaitRunning(s, 1);
      } // the client leaves while the server writes nothing
      long leftNs = System.nanoTime();
      while (s.engine.stats().activeRequests() > 0 || s.state.inFlight() > 0) {
        assertTrue(
            System.nanoTime() - leftNs < TimeUnit.SECONDS.toNanos(10),
            "the request was not cancelled within 10 s of its client leaving");
        Thread.sleep(10);
      }
      long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - leftNs);
      assertTrue(tookMs < 5000, "noticed " + tookMs + " ms after the client left");
      assertEquals(cancelled + 1, cancelled(s));
    } finally {
      loggers.forEach(l -> l.removeHandler(capture));
    }
    List<LogRecord> departures = new ArrayList<>();
    synchronized (capture) {
      for (LogRecord r : records) {
        assertTrue(
            r.getLevel().intValue() < Level.WARNING.intValue(), "no warning: " + r.getMessage());
        if (r.getMessage().contains("client went away")) {
          departures.add(r);
        }
      }
    }
    assertEquals(1, departures.size(), "one line for the departure");
    assertEquals(Level.INFO, departures.getFirst().getLevel());
    assertNull(departures.getFirst().getThrown(), "no stack trace");
    assertFalse(departures.getFirst().getMessage().contains("\n"), "one line");
  }

  @Test
  void shouldCancelAStreamWhoseClientLeavesWithoutReading() throws Exception {
    try (TestServer s = TestServer.start(dir, null)) {
      double cancelled = cancelled(s);
      try (Socket socket = new Socket("127.0.0.1", s.serving.port())) {
        send(socket, completion("stream to nobody", 4000, ",\"stream\":true"));
        InputStream in = socket.getInputStream();
        assertTrue(in.read() >= 0, "the stream began");
        awaitRunning(s, 1);
      }
      long leftNs = System.nanoTime();
      while (s.engine.stats().activeRequests() > 0 || s.state.inFlight() > 0) {
        assertTrue(System.nanoTime() - leftNs < TimeUnit.SECONDS.toNanos(10), "not cancelled");
        Thread.sleep(10);
      }
      assertEquals(cancelled + 1, cancelled(s));
    }
  }

  @Test
  void shouldCountARequestOfSeveralChoicesOnceWithItsPromptOnce() throws Exception {
    try (TestServer s = TestServer.start(dir, null)) {
      Map<String, PrometheusText.Family> before = PrometheusText.parse(s.get("/metrics").body());
      String prompt = "count me once";
      HttpResponse<String> res = s.post("/v1/completions", completion(prompt, 5, ",\"n\":3"));
      assertEquals(200, res.statusCode(), res.body());
      assertEquals(3, TestServer.json(res.body()).get("choices").size());
      Map<String, PrometheusText.Family> after = PrometheusText.parse(s.get("/metrics").body());
      assertEquals(
          1,
          PrometheusText.value(
                  after, "tokenspeed:requests_finished_total", "finish_reason", "length")
              - PrometheusText.value(
                  before, "tokenspeed:requests_finished_total", "finish_reason", "length"),
          "one request");
      assertEquals(
          prompt.length(),
          PrometheusText.value(after, "tokenspeed:prompt_tokens_total")
              - PrometheusText.value(before, "tokenspeed:prompt_tokens_total"),
          "its prompt once");
      assertEquals(
          15,
          PrometheusText.value(after, "tokenspeed:generation_tokens_total")
              - PrometheusText.value(before, "tokenspeed:generation_tokens_total"),
          "every choice's tokens");
      assertEquals(
          1,
          PrometheusText.value(after, "tokenspeed:e2e_request_latency_seconds_count")
              - PrometheusText.value(before, "tokenspeed:e2e_request_latency_seconds_count"));
      assertEquals(
          1,
          PrometheusText.value(after, "tokenspeed:time_to_first_token_seconds_count")
              - PrometheusText.value(before, "tokenspeed:time_to_first_token_seconds_count"));
    }
  }

  private static double cancelled(TestServer s) {
    return PrometheusText.value(
        PrometheusText.parse(s.get("/metrics").body()),
        "tokenspeed:requests_finished_total",
        "finish_reason",
        "cancelled");
  }
}

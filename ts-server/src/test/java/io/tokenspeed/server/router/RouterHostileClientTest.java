package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The router against clients that do not play by the rules, over raw sockets: it answers them as
 * {@code serve} does (the same web server conventions, {@code WebFront}), and none of their
 * requests reaches a backend.
 */
class RouterHostileClientTest {
  private static final long MAX_BODY = 2048;
  private static final long HEADER_TIMEOUT_MS = 300;

  static RouterRig rig;

  @BeforeAll
  static void start() {
    rig = new RouterRig(1, 1, 41, 20_000, HEADER_TIMEOUT_MS, MAX_BODY);
  }

  @AfterAll
  static void stop() {
    rig.close();
  }

  /** What came back on one connection, and whether the router closed it. */
  record Exchange(String text, boolean closed) {
    List<Integer> statuses() {
      List<Integer> out = new ArrayList<>();
      Matcher m = Pattern.compile("HTTP/1\\.1 (\\d{3}) ").matcher(text);
      while (m.find()) {
        out.add(Integer.parseInt(m.group(1)));
      }
      return out;
    }

    /** The first answer's body (after its head; a Content-Length body). */
    JsonNode firstBody() {
      int start = text.indexOf("\r\n\r\n") + 4;
      Matcher m = Pattern.compile("(?i)content-length: (\\d+)").matcher(text);
      assertTrue(m.find(), text);
      return RouterRig.json(text.substring(start, start + Integer.parseInt(m.group(1))));
    }
  }

  private static Exchange exchange(byte[] request) throws IOException {
    try (Socket s = new Socket("127.0.0.1", rig.port())) {
      s.setSoTimeout(5000);
      s.getOutputStream().write(request);
      s.getOutputStream().flush();
      InputStream in = s.getInputStream();
      ByteArrayOutputStream got = new ByteArrayOutputStream();
      byte[] buffer = new byte[8192];
      boolean closed = false;
      try {
        for (int n; (n = in.read(buffer)) >= 0; ) {
          got.write(buffer, 0, n);
        }
        closed = true;
      } catch (SocketTimeoutException e) {
        // still open
      } catch (IOException e) {
        closed = true; // reset
      }
      return new Exchange(got.toString(StandardCharsets.UTF_8), closed);
    }
  }

  private static byte[] post(String path, String contentType, byte[] body, boolean close) {
    String head =
        "POST "
            + path
            + " HTTP/1.1\r\nHost: x\r\n"
            + (contentType == null ? "" : "Content-Type: " + contentType + "\r\n")
            + (close ? "Connection: close\r\n" : "")
            + "Content-Length: "
            + body.length
            + "\r\n\r\n";
    byte[] h = head.getBytes(StandardCharsets.US_ASCII);
    byte[] out = new byte[h.length + body.length];
    System.arraycopy(h, 0, out, 0, h.length);
    System.arraycopy(body, 0, out, h.length, body.length);
    return out;
  }

  /** Upstream requests sent so far (counted as they are sent, before any answer). */
  private static double routed() {
    return io.tokenspeed.core.metrics.PrometheusText.samples(
            rig.metrics(), "tokenspeed:router_routed_requests_total")
        .stream()
        .mapToDouble(io.tokenspeed.core.metrics.PrometheusText.Sample::value)
        .sum();
  }

  @ParameterizedTest(name = "{0}")
  @CsvSource(
      delimiter = '|',
      value = {
        "malformed JSON|{\"prompt\": |is not valid JSON",
        "two JSON values|{\"prompt\":\"a\"} {\"prompt\":\"b\"}|is not valid JSON",
        "an array|[1, 2]|must be a JSON object, not an array",
        "a string|\"hello\"|must be a JSON object, not a string",
        "a number|42|must be a JSON object, not a number",
        "null|null|must be a JSON object, not null"
      })
  void shouldRefuseABodyThatIsNotOneJsonObject(String name, String body, String says)
      throws Exception {
    double before = routed();
    Exchange e =
        exchange(
            post(
                "/v1/completions",
                "application/json",
                body.getBytes(StandardCharsets.UTF_8),
                true));
    assertEquals(List.of(400), e.statuses(), e.text());
    JsonNode error = e.firstBody().get("error");
    assertEquals("invalid_request_error", error.get("type").asText());
    assertTrue(error.get("message").asText().contains(says), error.toString());
    assertEquals(before, routed(), "nothing reached a backend");
  }

  @Test
  void shouldRefuseABodyThatIsNotUtf8OrEmpty() throws Exception {
    double before = routed();
    byte[] bad = {'{', '"', 'p', '"', ':', '"', (byte) 0xC3, '(', '"', '}'};
    Exchange e = exchange(post("/v1/chat/completions", "application/json", bad, true));
    assertEquals(List.of(400), e.statuses(), e.text());
    assertTrue(e.firstBody().at("/error/message").asText().contains("not valid UTF-8 (at byte 6)"));
    Exchange empty = exchange(post("/v1/completions", "application/json", new byte[0], true));
    assertEquals(List.of(400), empty.statuses(), empty.text());
    assertEquals(before, routed());
  }

  @Test
  void shouldRefuseABodyOverTheLimitWith413() throws Exception {
    double before = routed();
    byte[] big = new byte[(int) MAX_BODY * 4];
    java.util.Arrays.fill(big, (byte) ' ');
    Exchange declared = exchange(post("/v1/completions", "application/json", big, false));
    assertEquals(List.of(413), declared.statuses(), declared.text());
    assertEquals("request_too_large", declared.firstBody().at("/error/code").asText());
    assertTrue(declared.closed(), "the connection ends with the refusal");
    // chunked: no declared length, refused once the limit is passed
    StringBuilder chunked =
        new StringBuilder(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + "Transfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 6; i++) {
      chunked.append("400\r\n").append(" ".repeat(1024)).append("\r\n");
    }
    chunked.append("0\r\n\r\n");
    Exchange streamed = exchange(chunked.toString().getBytes(StandardCharsets.US_ASCII));
    assertEquals(413, streamed.statuses().getFirst(), streamed.text());
    assertEquals(before, routed());
  }

  @Test
  void shouldTakeAJsonBodyWhateverItsContentTypeAsServeDoes() throws Exception {
    int before = rig.decode.getFirst().received.size();
    Exchange e =
        exchange(
            post(
                "/v1/completions",
                "text/plain",
                RouterTest.completion(false).getBytes(StandardCharsets.UTF_8),
                true));
    assertEquals(List.of(200), e.statuses(), e.text());
    assertEquals(before + 1, rig.decode.getFirst().received.size());
  }

  @Test
  void shouldAnswerUnknownPathsAndWrongMethodsInTheErrorShape() throws Exception {
    Exchange unknown =
        exchange("GET /v2/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".getBytes());
    assertEquals(List.of(404), unknown.statuses());
    assertEquals("not_found", unknown.firstBody().at("/error/code").asText());
    Exchange wrong =
        exchange("GET /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".getBytes());
    assertEquals(List.of(405), wrong.statuses());
    assertTrue(wrong.text().contains("Allow: POST"), wrong.text());
  }

  @Test
  void shouldNeverReadAnUnreadBodyAsARequest() throws Exception {
    double before = routed();
    String smuggled = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
    byte[] first = post("/no/such/path", "application/json", smuggled.getBytes(), false);
    byte[] second = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".getBytes();
    byte[] both = new byte[first.length + second.length];
    System.arraycopy(first, 0, both, 0, first.length);
    System.arraycopy(second, 0, both, first.length, second.length);
    Exchange e = exchange(both);
    assertEquals(List.of(404, 200), e.statuses(), e.text());
    assertEquals(before, routed(), "the smuggled completion never ran");
  }

  @Test
  void shouldAnswerPipelinedCompletionsInOrderAndCloseOnConnectionClose() throws Exception {
    double before = routed();
    byte[] body =
        "{\"model\":\"stub-model\",\"prompt\":\"hi\",\"max_tokens\":2}"
            .getBytes(StandardCharsets.UTF_8);
    byte[] first = post("/v1/completions", "application/json", body, false);
    byte[] second = post("/v1/completions", "application/json", body, true);
    byte[] both = new byte[first.length + second.length];
    System.arraycopy(first, 0, both, 0, first.length);
    System.arraycopy(second, 0, both, first.length, second.length);
    Exchange e = exchange(both);
    assertEquals(List.of(200, 200), e.statuses(), e.text());
    assertTrue(e.closed(), "closed after the answer to Connection: close");
    assertEquals(before + 4, routed(), "each completion went to a prefill and a decode backend");
  }

  @Test
  void shouldRouteNothingForAClientThatLeavesMidBodyAndServeTheNext() throws Exception {
    double before = routed();
    try (Socket s = new Socket("127.0.0.1", rig.port())) {
      s.getOutputStream()
          .write(
              ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      + "Content-Length: 500\r\n\r\n{\"prompt\": \"hal")
                  .getBytes(StandardCharsets.US_ASCII));
      s.getOutputStream().flush();
    } // leaves with 485 bytes of the body unsent
    Exchange e =
        exchange("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".getBytes());
    assertEquals(List.of(200), e.statuses(), e.text());
    assertEquals(before, routed(), "the half-sent completion reached no backend");
  }

  @Test
  void shouldCloseAConnectionWhoseHeadArrivesTooSlowly() throws Exception {
    double before = routed();
    try (Socket s = new Socket("127.0.0.1", rig.port())) {
      s.setSoTimeout(5000);
      s.getOutputStream().write("POST /v1/completions HTTP/1.1\r\nHo".getBytes());
      s.getOutputStream().flush();
      long start = System.nanoTime();
      int read;
      try {
        read = s.getInputStream().read();
      } catch (IOException e) {
        read = -1; // reset
      }
      long waitedMs = (System.nanoTime() - start) / 1_000_000;
      assertEquals(-1, read, "closed without an answer");
      assertTrue(waitedMs < 4000, "closed after about the header timeout: " + waitedMs + " ms");
    }
    assertEquals(before, routed(), "nothing reached a backend");
  }
}

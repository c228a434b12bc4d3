package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * An engine whose intake is full refuses with 429 (rate_limit_error), not 503: the server maps the
 * engine's {@code IntakeFullException}, whatever its message says.
 */
class IntakeFullTest {
  @TempDir Path dir;

  @Test
  void shouldAnswer429WhenTheEnginesIntakeIsFull() {
    // max_queued 1: one request of the sixteen choices is accepted; the loop counts it as waiting
    // from the moment it takes it until its round ends, far longer than the next submission takes
    try (TestServer server = TestServer.over(TestServer.load(dir), null, 1 << 20, true, null, 1)) {
      HttpResponse<String> full =
          server.post(
              "/v1/completions",
              "{\"prompt\":\"hello\",\"max_tokens\":64,\"temperature\":1.0,\"n\":16}");
      assertEquals(429, full.statusCode(), full.body());
      JsonNode error = TestServer.json(full.body()).get("error");
      assertEquals("rate_limit_error", error.get("type").asText(), full.body());
      assertTrue(error.get("message").asText().contains("max_queued=1"), full.body());
      // the accepted choice was cancelled with the refusal: the door opens again once it ended
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      HttpResponse<String> again;
      do {
        again = server.post("/v1/completions", "{\"prompt\":\"again\",\"max_tokens\":4}");
      } while (again.statusCode() == 429 && System.nanoTime() < deadline && pause());
      assertEquals(200, again.statusCode(), "the server goes on serving: " + again.body());
    }
  }

  private static boolean pause() {
    try {
      Thread.sleep(10);
      return true;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }
}

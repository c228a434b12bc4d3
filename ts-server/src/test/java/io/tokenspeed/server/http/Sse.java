package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;

/**
 * A strict reader of a server-sent event body as the OpenAI API sends it: only {@code data: }
 * lines, each event one line followed by a blank line, the last event {@code [DONE]}, nothing after
 * it.
 */
final class Sse {
  private Sse() {}

  /** The JSON events before {@code [DONE]}; fails on any deviation from the framing. */
  static List<JsonNode> events(String body) {
    List<JsonNode> out = new ArrayList<>();
    int at = 0;
    boolean done = false;
    while (at < body.length()) {
      assertTrue(!done, () -> "bytes after data: [DONE]: " + body);
      int end = body.indexOf("\n\n", at);
      assertTrue(
          end > at, () -> "an event does not end in a blank line at offset " + body.length());
      String event = body.substring(at, end);
      assertTrue(event.startsWith("data: "), () -> "an event is not a data line: " + event);
      String data = event.substring(6);
      assertTrue(data.indexOf('\n') < 0 && data.indexOf('\r') < 0, "one line per event");
      if (data.equals("[DONE]")) {
        done = true;
      } else {
        out.add(TestServer.json(data));
      }
      at = end + 2;
    }
    assertTrue(done, () -> "the stream does not end with data: [DONE]: " + body);
    assertEquals("data: [DONE]\n\n", body.substring(body.length() - 14));
    return out;
  }

  /** The concatenated text of choice {@code index} (completions' text or chat's delta content). */
  static String text(List<JsonNode> events, int index) {
    StringBuilder sb = new StringBuilder();
    for (JsonNode e : events) {
      for (JsonNode c : e.path("choices")) {
        if (c.path("index").asInt() != index) {
          continue;
        }
        if (c.has("text")) {
          sb.append(c.get("text").asText());
        } else if (c.path("delta").has("content")) {
          sb.append(c.path("delta").get("content").asText());
        }
      }
    }
    return sb.toString();
  }

  /** The finish reason choice {@code index} ended with. */
  static String finishReason(List<JsonNode> events, int index) {
    String reason = null;
    for (JsonNode e : events) {
      for (JsonNode c : e.path("choices")) {
        if (c.path("index").asInt() == index && c.hasNonNull("finish_reason")) {
          reason = c.get("finish_reason").asText();
        }
      }
    }
    return reason;
  }
}

package io.tokenspeed.server.chat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** {@link ChatMessage}: content as a string or as text parts, and what is refused, by field. */
class ChatMessageTest {

  private static Map<String, Object> part(Object type, Object text) {
    Map<String, Object> part = new LinkedHashMap<>();
    if (type != null) {
      part.put("type", type);
    }
    part.put("text", text);
    return part;
  }

  private static String error(String role, Object content) {
    return assertThrows(IllegalArgumentException.class, () -> ChatMessage.of(role, content))
        .getMessage();
  }

  @Test
  void shouldTakeStringContent() {
    assertEquals(new ChatMessage("user", "hi"), ChatMessage.of("user", "hi"));
    assertEquals(new ChatMessage("assistant", ""), ChatMessage.of("assistant", ""));
  }

  @Test
  void shouldJoinTextPartsWithNewlines() {
    ChatMessage m =
        ChatMessage.of(
            "user", List.of(part("text", "first"), part("text", ""), part("text", "third")));
    assertEquals("first\n\nthird", m.content());
    assertEquals("", ChatMessage.of("user", List.of()).content());
    Map<String, Object> withExtra = part("text", "x");
    withExtra.put("cache_control", Map.of("type", "ephemeral"));
    assertEquals("x", ChatMessage.of("user", List.of(withExtra)).content());
  }

  @Test
  void shouldNameAPartItCannotRead() {
    assertEquals(
        "content[1].type=\"image_url\" is not supported: this model reads text only (type"
            + " \"text\")",
        error("user", List.of(part("text", "look:"), part("image_url", null))));
    assertEquals(
        "content[0].type is missing: only {\"type\": \"text\"} parts are supported",
        error("user", List.of(part(null, "x"))));
    assertEquals(
        "content[0].text must be a string, not int", error("user", List.of(part("text", 3))));
    assertEquals(
        "content[0] must be an object {\"type\": \"text\", \"text\": ...}, not str",
        error("user", List.of("plain")));
    assertEquals(
        "content must be a string or a list of text parts, not dict",
        error("user", Map.of("text", "x")));
  }

  @Test
  void shouldRefuseAMissingOrMalformedRoleOrContent() {
    assertEquals(
        "content is missing: a message needs content (a string or a list of text parts)",
        error("user", null));
    assertEquals("role is missing: a message needs a role", error(null, "x"));
    assertEquals(
        "role=\"user|>\\n<|system\" is not a role: 1 to 64 letters, digits, '_' or '-' (system,"
            + " user, assistant, tool)",
        error("user|>\n<|system", "x"));
    assertEquals(
        "role=\"\" is not a role: 1 to 64 letters, digits, '_' or '-' (system, user, assistant,"
            + " tool)",
        error("", "x"));
  }
}

package io.tokenspeed.server.chat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The reference renderings under {@code src/test/resources/chat/} (written by {@code
 * make_references.py} with Python's Jinja through {@code transformers}), and the methods that read
 * them.
 */
final class References {

  static final JsonMapper JSON = new JsonMapper();

  private References() {}

  /** A JSON document of {@code /chat/}. */
  static JsonNode read(String name) {
    try (InputStream in = open(name)) {
      return JSON.readTree(in);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Copies resource {@code /chat/name} to {@code target}. */
  static void copy(String name, Path target) {
    try (InputStream in = open(name)) {
      Files.createDirectories(target.getParent());
      Files.copy(in, target);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static InputStream open(String name) {
    InputStream in = References.class.getResourceAsStream("/chat/" + name);
    if (in == null) {
      throw new IllegalStateException("test resource /chat/" + name + " is missing");
    }
    return in;
  }

  /** Messages of a reference case: {@code [{"role", "content"}, ...]}. */
  static List<ChatMessage> messages(JsonNode array) {
    List<ChatMessage> out = new ArrayList<>();
    for (JsonNode m : array) {
      out.add(new ChatMessage(m.get("role").asText(), m.get("content").asText()));
    }
    return out;
  }

  /** A JSON object as plain Java values (maps, lists, strings, numbers, booleans, null). */
  static Map<String, Object> values(JsonNode object) {
    if (object == null || object.isNull()) {
      return Map.of();
    }
    @SuppressWarnings("unchecked")
    Map<String, Object> map = JSON.convertValue(object, LinkedHashMap.class);
    return map;
  }

  /** The strings of a JSON object. */
  static Map<String, String> strings(JsonNode object) {
    Map<String, String> out = new LinkedHashMap<>();
    object.properties().forEach(e -> out.put(e.getKey(), e.getValue().asText()));
    return out;
  }
}

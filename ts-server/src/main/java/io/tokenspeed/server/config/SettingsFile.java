package io.tokenspeed.server.config;

import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.dataformat.yaml.YAMLMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLParser;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The text of a configuration file read into its top-level entries, each with the line it is on.
 *
 * <p>A file whose name ends in {@code .json} is read as strict JSON; any other as YAML (of which
 * JSON is a subset), so that each gets its own parser's error. The top level must be one mapping. A
 * scalar keeps the text it was written with ({@code 1.10} stays {@code 1.10}, {@code yes} stays
 * {@code yes}): the command converts it, not YAML. A nested mapping or list is kept as a tree, to
 * be written back as JSON. YAML aliases are refused: Jackson's tree would hold the anchor's name in
 * their place.
 */
final class SettingsFile {

  /** A top-level value. */
  sealed interface Value {
    /** A scalar with the text it was written with. */
    record Scalar(String text) implements Value {}

    /** {@code ~}, {@code null} or nothing after the colon. */
    record Null() implements Value {}

    /** A list; {@code scalars} holds its items' texts when every item is a scalar, else null. */
    record Sequence(JsonNode json, List<String> scalars) implements Value {}

    /** A mapping. */
    record Mapping(JsonNode json) implements Value {}
  }

  /** One top-level key as written, where it is, and its value. */
  record Entry(String key, int line, int column, Value value) {}

  private static final ObjectMapper JSON =
      JsonMapper.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();

  private static final ObjectMapper YAML =
      YAMLMapper.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();

  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  /** A place as SnakeYAML's messages write it. */
  private static final Pattern YAML_MARK =
      Pattern.compile("^ in '[^']*', line (\\d+), column (\\d+):$", Pattern.MULTILINE);

  private SettingsFile() {}

  /** Whether a file of this name is read as JSON rather than YAML. */
  static boolean isJson(String fileName) {
    return fileName.toLowerCase(Locale.ROOT).endsWith(".json");
  }

  /** JSON text of a nested value, for a setting whose value is JSON text. */
  static String toJson(JsonNode node) {
    try {
      return JSON.writeValueAsString(node);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("a tree read from a file cannot be written as JSON", e);
    }
  }

  /**
   * The top-level entries of {@code text}, in file order; an empty file has none.
   *
   * @param where the file as the operator named it, for messages ({@code --config=/etc/ts.yaml})
   * @throws ConfigException naming {@code where}, the line and the column when the text is not
   *     valid JSON or YAML, holds more than one document, is not a mapping at the top level or uses
   *     a YAML alias
   */
  static List<Entry> parse(String text, boolean json, String where) {
    String format = json ? "JSON" : "YAML";
    ObjectMapper mapper = json ? JSON : YAML;
    try (JsonParser p = mapper.createParser(text)) {
      JsonToken first = p.nextToken();
      if (first == null) {
        return List.of();
      }
      if (first == JsonToken.VALUE_NULL) {
        // An empty YAML document ("---", "~"): no settings.
        refuseMore(p, json, where);
        return List.of();
      }
      if (first != JsonToken.START_OBJECT) {
        throw new ConfigException(
            where
                + ": the top level must be a mapping of settings (port: 8000), not "
                + kind(first));
      }
      List<Entry> entries = new ArrayList<>();
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        JsonLocation at = p.currentTokenLocation();
        String key = p.currentName();
        p.nextToken();
        refuseAlias(p, where);
        entries.add(new Entry(key, at.getLineNr(), at.getColumnNr(), topValue(p, where)));
      }
      refuseMore(p, json, where);
      return entries;
    } catch (JsonProcessingException e) {
      throw new ConfigException(
          where + ": " + position(e) + ": not valid " + format + ": " + problem(e), e);
    } catch (IOException e) {
      throw new ConfigException(where + ": cannot be read: " + e.getMessage(), e);
    }
  }

  /** Fails unless the text ends after the top-level value. */
  private static void refuseMore(JsonParser p, boolean json, String where) throws IOException {
    if (p.nextToken() != null) {
      throw new ConfigException(
          where
              + ": "
              + position(p.currentTokenLocation())
              + ": "
              + (json
                  ? "more text after the top-level object"
                  : "a second YAML document; the settings must be one mapping"));
    }
  }

  private static Value topValue(JsonParser p, String where) throws IOException {
    return switch (p.currentToken()) {
      case VALUE_NULL -> new Value.Null();
      case START_OBJECT -> new Value.Mapping(tree(p, where));
      case START_ARRAY -> sequence(p, where);
      default -> new Value.Scalar(p.getText());
    };
  }

  private static Value.Sequence sequence(JsonParser p, String where) throws IOException {
    ArrayNode array = NODES.arrayNode();
    List<String> scalars = new ArrayList<>();
    while (p.nextToken() != JsonToken.END_ARRAY) {
      refuseAlias(p, where);
      JsonToken t = p.currentToken();
      if (scalars != null && t.isScalarValue() && t != JsonToken.VALUE_NULL) {
        scalars.add(p.getText());
      } else {
        scalars = null;
      }
      array.add(tree(p, where));
    }
    return new Value.Sequence(array, scalars == null ? null : List.copyOf(scalars));
  }

  /** The value at the parser's current token as a tree, numbers kept exact. */
  private static JsonNode tree(JsonParser p, String where) throws IOException {
    refuseAlias(p, where);
    JsonToken t = p.currentToken();
    return switch (t) {
      case START_OBJECT -> {
        ObjectNode object = NODES.objectNode();
        while (p.nextToken() == JsonToken.FIELD_NAME) {
          String name = p.currentName();
          p.nextToken();
          object.set(name, tree(p, where));
        }
        yield object;
      }
      case START_ARRAY -> {
        ArrayNode array = NODES.arrayNode();
        while (p.nextToken() != JsonToken.END_ARRAY) {
          array.add(tree(p, where));
        }
        yield array;
      }
      case VALUE_STRING -> NODES.textNode(p.getText());
      case VALUE_NUMBER_INT -> NODES.numberNode(p.getBigIntegerValue());
      case VALUE_NUMBER_FLOAT -> floatNode(p, where);
      case VALUE_TRUE -> NODES.booleanNode(true);
      case VALUE_FALSE -> NODES.booleanNode(false);
      case VALUE_NULL -> NODES.nullNode();
      default ->
          throw new ConfigException(
              where
                  + ": "
                  + position(p.currentTokenLocation())
                  + ": unexpected "
                  + t
                  + " in a value");
    };
  }

  private static JsonNode floatNode(JsonParser p, String where) throws IOException {
    try {
      return NODES.numberNode(p.getDecimalValue());
    } catch (NumberFormatException e) {
      throw new ConfigException(
          where
              + ": "
              + position(p.currentTokenLocation())
              + ": "
              + p.getText()
              + " has no JSON form (JSON numbers are finite)",
          e);
    }
  }

  private static void refuseAlias(JsonParser p, String where) {
    if (p instanceof YAMLParser yaml && yaml.isCurrentAlias()) {
      throw new ConfigException(
          where
              + ": "
              + position(p.currentTokenLocation())
              + ": YAML aliases (*"
              + safeText(p)
              + ") are not supported; write the value out");
    }
  }

  private static String safeText(JsonParser p) {
    try {
      return p.getText();
    } catch (IOException e) {
      return "";
    }
  }

  private static String kind(JsonToken t) {
    return switch (t) {
      case START_ARRAY -> "a list";
      default -> "a single value";
    };
  }

  /**
   * Where a parser failed: for YAML the first place SnakeYAML's message marks (where the construct
   * it could not finish began), which Jackson's location does not always match; else Jackson's.
   */
  static String position(JsonProcessingException e) {
    String original = e.getOriginalMessage();
    Matcher mark = original == null ? null : YAML_MARK.matcher(original);
    if (mark != null && mark.find()) {
      return "line " + mark.group(1) + ", column " + mark.group(2);
    }
    return position(e.getLocation());
  }

  static String position(JsonLocation at) {
    return at == null
        ? "at an unknown place"
        : "line " + at.getLineNr() + ", column " + at.getColumnNr();
  }

  /**
   * The parser's complaint without its position and excerpt: SnakeYAML's message carries "in
   * 'reader', line L, column C:" lines and a copy of the line with a caret, which the position
   * already says.
   */
  static String problem(JsonProcessingException e) {
    String original = e.getOriginalMessage();
    if (original == null) {
      return "(no reason given)";
    }
    List<String> parts = new ArrayList<>();
    for (String line : original.split("\\R")) {
      if (!line.isBlank() && !Character.isWhitespace(line.charAt(0))) {
        parts.add(line.strip());
      }
    }
    return parts.isEmpty() ? original.strip() : String.join("; ", parts);
  }
}

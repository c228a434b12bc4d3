package io.tokenspeed.model.checkpoint;

import io.tokenspeed.core.OneLine;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small strict JSON reader (RFC 8259) for checkpoint headers and {@code config.json}.
 *
 * <p>Values map to: object → {@link LinkedHashMap} (insertion order kept, duplicate keys rejected),
 * array → {@link List}, string → {@link String}, number → {@link Long} when it has no fraction or
 * exponent and fits, else {@link Double}, {@code true}/{@code false} → {@link Boolean}, {@code
 * null} → {@code null}. Anything else — trailing commas, comments, single quotes, leading zeros,
 * bare control characters, lone surrogates, content after the value — is an error whose message
 * gives the character offset. Nesting is limited to {@link #MAX_DEPTH} so a hostile header cannot
 * exhaust the stack.
 */
public final class Json {

  /** Deepest nesting accepted. */
  public static final int MAX_DEPTH = 64;

  private final String text;
  private int pos;

  private Json(String text) {
    this.text = text;
  }

  /**
   * Parses one JSON value that spans the whole text (surrounding whitespace allowed).
   *
   * @throws IllegalArgumentException with the offset and what was expected
   */
  public static Object parse(String text) {
    Json p = new Json(text);
    p.skipWhitespace();
    Object value = p.value(0);
    p.skipWhitespace();
    if (p.pos != text.length()) {
      throw p.error("unexpected content after the value");
    }
    return value;
  }

  /** Parses text whose top level must be an object. */
  @SuppressWarnings("unchecked")
  public static Map<String, Object> parseObject(String text) {
    Object v = parse(text);
    if (!(v instanceof Map)) {
      throw new IllegalArgumentException("top-level JSON value is not an object");
    }
    return (Map<String, Object>) v;
  }

  private Object value(int depth) {
    if (depth > MAX_DEPTH) {
      throw error("nesting deeper than " + MAX_DEPTH);
    }
    if (pos >= text.length()) {
      throw error("unexpected end of input, expected a value");
    }
    char c = text.charAt(pos);
    return switch (c) {
      case '{' -> object(depth);
      case '[' -> array(depth);
      case '"' -> string();
      case 't' -> literal("true", Boolean.TRUE);
      case 'f' -> literal("false", Boolean.FALSE);
      case 'n' -> literal("null", null);
      default -> {
        if (c == '-' || (c >= '0' && c <= '9')) {
          yield number();
        }
        throw error("unexpected character '" + printable(c) + "', expected a value");
      }
    };
  }

  private Map<String, Object> object(int depth) {
    pos++; // '{'
    Map<String, Object> map = new LinkedHashMap<>();
    skipWhitespace();
    if (peek() == '}') {
      pos++;
      return map;
    }
    while (true) {
      skipWhitespace();
      if (peek() != '"') {
        throw error("expected a string key");
      }
      int keyAt = pos;
      String key = string();
      if (map.containsKey(key)) {
        pos = keyAt;
        throw error("duplicate key \"" + key + "\"");
      }
      skipWhitespace();
      expect(':');
      skipWhitespace();
      map.put(key, value(depth + 1));
      skipWhitespace();
      char c = peek();
      if (c == ',') {
        pos++;
      } else if (c == '}') {
        pos++;
        return map;
      } else {
        throw error("expected ',' or '}' in an object");
      }
    }
  }

  private List<Object> array(int depth) {
    pos++; // '['
    List<Object> list = new ArrayList<>();
    skipWhitespace();
    if (peek() == ']') {
      pos++;
      return list;
    }
    while (true) {
      skipWhitespace();
      list.add(value(depth + 1));
      skipWhitespace();
      char c = peek();
      if (c == ',') {
        pos++;
      } else if (c == ']') {
        pos++;
        return list;
      } else {
        throw error("expected ',' or ']' in an array");
      }
    }
  }

  private String string() {
    pos++; // '"'
    StringBuilder sb = new StringBuilder();
    while (true) {
      if (pos >= text.length()) {
        throw error("unterminated string");
      }
      char c = text.charAt(pos++);
      if (c == '"') {
        return sb.toString();
      }
      if (c < 0x20) {
        pos--;
        throw error("control character U+" + hex4(c) + " inside a string");
      }
      if (Character.isSurrogate(c)) {
        pos--;
        appendSurrogatePair(sb, c);
        continue;
      }
      if (c != '\\') {
        sb.append(c);
        continue;
      }
      if (pos >= text.length()) {
        throw error("unterminated escape");
      }
      char e = text.charAt(pos++);
      switch (e) {
        case '"' -> sb.append('"');
        case '\\' -> sb.append('\\');
        case '/' -> sb.append('/');
        case 'b' -> sb.append('\b');
        case 'f' -> sb.append('\f');
        case 'n' -> sb.append('\n');
        case 'r' -> sb.append('\r');
        case 't' -> sb.append('\t');
        case 'u' -> {
          char u = hexEscape();
          if (Character.isHighSurrogate(u)) {
            if (!text.startsWith("\\u", pos)) {
              throw error("lone high surrogate \\u" + hex4(u));
            }
            pos += 2;
            char low = hexEscape();
            if (!Character.isLowSurrogate(low)) {
              throw error("high surrogate \\u" + hex4(u) + " not followed by a low surrogate");
            }
            sb.append(u).append(low);
          } else if (Character.isLowSurrogate(u)) {
            throw error("lone low surrogate \\u" + hex4(u));
          } else {
            sb.append(u);
          }
        }
        default -> {
          pos--;
          throw error("invalid escape '\\" + printable(e) + "'");
        }
      }
    }
  }

  private void appendSurrogatePair(StringBuilder sb, char c) {
    if (Character.isHighSurrogate(c)
        && pos + 1 < text.length()
        && Character.isLowSurrogate(text.charAt(pos + 1))) {
      sb.append(c).append(text.charAt(pos + 1));
      pos += 2;
      return;
    }
    throw error("lone surrogate U+" + hex4(c) + " inside a string");
  }

  private char hexEscape() {
    if (pos + 4 > text.length()) {
      throw error("truncated \\u escape");
    }
    int v = 0;
    for (int i = 0; i < 4; i++) {
      int d = Character.digit(text.charAt(pos + i), 16);
      if (d < 0) {
        throw error("invalid hex digit in \\u escape");
      }
      v = v * 16 + d;
    }
    pos += 4;
    return (char) v;
  }

  private Object number() {
    int start = pos;
    boolean integral = true;
    if (peek() == '-') {
      pos++;
    }
    if (peek() == '0') {
      pos++;
      if (isDigit(peek())) {
        throw error("leading zero in a number");
      }
    } else if (isDigit(peek())) {
      while (isDigit(peek())) {
        pos++;
      }
    } else {
      throw error("expected a digit");
    }
    if (peek() == '.') {
      integral = false;
      pos++;
      if (!isDigit(peek())) {
        throw error("expected a digit after the decimal point");
      }
      while (isDigit(peek())) {
        pos++;
      }
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      pos++;
      if (peek() == '+' || peek() == '-') {
        pos++;
      }
      if (!isDigit(peek())) {
        throw error("expected a digit in the exponent");
      }
      while (isDigit(peek())) {
        pos++;
      }
    }
    String literal = text.substring(start, pos);
    if (integral) {
      try {
        return Long.parseLong(literal);
      } catch (NumberFormatException tooLarge) {
        // falls through to a double
      }
    }
    return Double.parseDouble(literal);
  }

  private Object literal(String word, Object value) {
    if (!text.startsWith(word, pos)) {
      throw error("invalid literal, expected " + word);
    }
    pos += word.length();
    return value;
  }

  private void expect(char c) {
    if (peek() != c) {
      throw error("expected '" + c + "'");
    }
    pos++;
  }

  private char peek() {
    return pos < text.length() ? text.charAt(pos) : '\0';
  }

  private static boolean isDigit(char c) {
    return c >= '0' && c <= '9';
  }

  private void skipWhitespace() {
    while (pos < text.length()) {
      char c = text.charAt(pos);
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        pos++;
      } else {
        return;
      }
    }
  }

  private IllegalArgumentException error(String what) {
    // one line: a key or string quoted in `what` may hold a line break
    return new IllegalArgumentException(
        OneLine.of("malformed JSON at offset " + pos + ": " + what));
  }

  private static String hex4(char c) {
    return String.format("%04X", (int) c);
  }

  private static String printable(char c) {
    return c < 0x20 || c > 0x7e ? "U+" + hex4(c) : String.valueOf(c);
  }
}

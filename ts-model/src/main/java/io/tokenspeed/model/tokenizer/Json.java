package io.tokenspeed.model.tokenizer;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A strict JSON reader for tokenizer files: objects become {@link LinkedHashMap}s (key order kept),
 * arrays {@link ArrayList}s, numbers {@link Long} or {@link Double}, plus {@link String}, {@link
 * Boolean} and {@code null}. A {@code tokenizer.json} is a few megabytes read once, so a plain
 * recursive descent over the string is enough; errors name the character offset.
 */
final class Json {

  private static final int MAX_DEPTH = 256;

  private final String text;
  private int pos;

  private Json(String text) {
    this.text = text;
  }

  /** Parses one JSON document; anything but whitespace after it is an error. */
  static Object parse(String text) {
    Json json = new Json(text);
    json.skipWhitespace();
    Object value = json.readValue(0);
    json.skipWhitespace();
    if (json.pos != text.length()) {
      throw json.error("trailing characters after the JSON value");
    }
    return value;
  }

  private Object readValue(int depth) {
    if (depth > MAX_DEPTH) {
      throw error("nesting deeper than " + MAX_DEPTH);
    }
    if (pos >= text.length()) {
      throw error("unexpected end of input");
    }
    char c = text.charAt(pos);
    return switch (c) {
      case '{' -> readObject(depth);
      case '[' -> readArray(depth);
      case '"' -> readString();
      case 't' -> readLiteral("true", Boolean.TRUE);
      case 'f' -> readLiteral("false", Boolean.FALSE);
      case 'n' -> readLiteral("null", null);
      default -> {
        if (c == '-' || (c >= '0' && c <= '9')) {
          yield readNumber();
        }
        throw error("unexpected character '" + c + "'");
      }
    };
  }

  private Map<String, Object> readObject(int depth) {
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
      String key = readString();
      skipWhitespace();
      expect(':');
      skipWhitespace();
      map.put(key, readValue(depth + 1));
      skipWhitespace();
      char c = peek();
      pos++;
      if (c == '}') {
        return map;
      }
      if (c != ',') {
        pos--;
        throw error("expected ',' or '}' in an object");
      }
    }
  }

  private List<Object> readArray(int depth) {
    pos++; // '['
    List<Object> list = new ArrayList<>();
    skipWhitespace();
    if (peek() == ']') {
      pos++;
      return list;
    }
    while (true) {
      skipWhitespace();
      list.add(readValue(depth + 1));
      skipWhitespace();
      char c = peek();
      pos++;
      if (c == ']') {
        return list;
      }
      if (c != ',') {
        pos--;
        throw error("expected ',' or ']' in an array");
      }
    }
  }

  private String readString() {
    pos++; // '"'
    int start = pos;
    // Fast path: no escapes.
    while (pos < text.length()) {
      char c = text.charAt(pos);
      if (c == '"') {
        return text.substring(start, pos++);
      }
      if (c == '\\') {
        break;
      }
      if (c < 0x20) {
        throw error("control character in a string");
      }
      pos++;
    }
    StringBuilder sb = new StringBuilder(text.length() - start < 64 ? 64 : 16);
    sb.append(text, start, pos);
    while (pos < text.length()) {
      char c = text.charAt(pos++);
      if (c == '"') {
        return sb.toString();
      }
      if (c < 0x20) {
        pos--;
        throw error("control character in a string");
      }
      if (c != '\\') {
        sb.append(c);
        continue;
      }
      if (pos >= text.length()) {
        break;
      }
      char e = text.charAt(pos++);
      switch (e) {
        case '"', '\\', '/' -> sb.append(e);
        case 'b' -> sb.append('\b');
        case 'f' -> sb.append('\f');
        case 'n' -> sb.append('\n');
        case 'r' -> sb.append('\r');
        case 't' -> sb.append('\t');
        case 'u' -> {
          if (pos + 4 > text.length()) {
            throw error("truncated \\u escape");
          }
          int cp = 0;
          for (int i = 0; i < 4; i++) {
            int digit = Character.digit(text.charAt(pos++), 16);
            if (digit < 0) {
              pos--;
              throw error("bad hex digit in a \\u escape");
            }
            cp = cp * 16 + digit;
          }
          sb.append((char) cp);
        }
        default -> {
          pos--;
          throw error("bad escape '\\" + e + "'");
        }
      }
    }
    throw error("unterminated string");
  }

  private Object readNumber() {
    int start = pos;
    boolean integral = true;
    if (peek() == '-') {
      pos++;
    }
    while (pos < text.length()) {
      char c = text.charAt(pos);
      if (c >= '0' && c <= '9') {
        pos++;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        integral = false;
        pos++;
      } else {
        break;
      }
    }
    String number = text.substring(start, pos);
    try {
      if (integral) {
        return Long.parseLong(number);
      }
      return Double.parseDouble(number);
    } catch (NumberFormatException e) {
      pos = start;
      throw error("bad number '" + number + "'");
    }
  }

  private Object readLiteral(String literal, Object value) {
    if (!text.startsWith(literal, pos)) {
      throw error("unexpected token");
    }
    pos += literal.length();
    return value;
  }

  private void expect(char c) {
    if (peek() != c) {
      throw error("expected '" + c + "'");
    }
    pos++;
  }

  private char peek() {
    if (pos >= text.length()) {
      throw error("unexpected end of input");
    }
    return text.charAt(pos);
  }

  private void skipWhitespace() {
    while (pos < text.length()) {
      char c = text.charAt(pos);
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
        return;
      }
      pos++;
    }
  }

  private TokenizerFormatException error(String what) {
    return new TokenizerFormatException("malformed JSON at offset " + pos + ": " + what);
  }
}

package io.tokenspeed.server.chat;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.Map;

/**
 * JSON text exactly as Python's {@code json.dumps} writes it, which is what the {@code tojson}
 * filter of a Hugging Face chat template produces: {@code ", "} and {@code ": "} between items
 * unless an indent is given (then {@code ","} and a newline), keys in the map's own order unless
 * sorted, non-ASCII characters written as themselves unless {@code ensureAscii}, floats in Python's
 * shortest round-trip form ({@code 1.0}, {@code 1e+20}, {@code NaN}).
 *
 * <p>Values are the ones a template sees: {@code null}, booleans, numbers, character sequences,
 * maps, collections and arrays. Anything else has no JSON form and is refused (Python raises a
 * {@code TypeError} there too).
 */
final class PyJson {

  /** How to write: {@code json.dumps}' keyword arguments. */
  record Options(
      boolean ensureAscii,
      String indent,
      String itemSeparator,
      String keySeparator,
      boolean sortKeys) {

    /** {@code json.dumps(x, ensure_ascii=False)}: the defaults of the chat-template filter. */
    static final Options TOJSON = new Options(false, null, ", ", ": ", false);
  }

  private final Options options;
  private final long maxChars;
  private final StringBuilder out = new StringBuilder();

  private PyJson(Options options, long maxChars) {
    this.options = options;
    this.maxChars = maxChars;
  }

  /**
   * Writes {@code value}.
   *
   * @param maxChars the longest text allowed; a longer one fails with a {@link
   *     StringLimitException}
   * @throws IllegalArgumentException if a value has no JSON form
   */
  static String dumps(Object value, Options options, long maxChars) {
    PyJson json = new PyJson(options, maxChars);
    json.write(value, 0, 0);
    json.checkLength();
    return json.out.toString();
  }

  private void write(Object value, int level, int depth) {
    if (depth > PyValues.MAX_NESTING) {
      throw new IllegalArgumentException(
          "tojson: value nested deeper than " + PyValues.MAX_NESTING + " levels");
    }
    checkLength();
    value = PyValues.unwrap(value);
    if (value == null) {
      out.append("null");
    } else if (value instanceof Boolean b) {
      out.append(b ? "true" : "false");
    } else if (value instanceof CharSequence s) {
      writeString(s.toString());
    } else if (value instanceof Number n) {
      writeNumber(n);
    } else if (value instanceof Map<?, ?> map) {
      writeMap(map, level, depth);
    } else if (value instanceof Collection<?> c) {
      writeList(new ArrayList<>(c), level, depth);
    } else if (value instanceof Object[] array) {
      writeList(List.of(array), level, depth);
    } else {
      throw new IllegalArgumentException(
          "tojson: a value of type " + PyValues.typeName(value) + " has no JSON form");
    }
  }

  private void checkLength() {
    if (out.length() > maxChars) {
      throw new StringLimitException("tojson output", maxChars);
    }
  }

  private void writeMap(Map<?, ?> map, int level, int depth) {
    if (map.isEmpty()) {
      out.append("{}");
      return;
    }
    List<Map.Entry<String, Object>> entries = new ArrayList<>(map.size());
    for (Map.Entry<?, ?> e : map.entrySet()) {
      entries.add(new AbstractMap.SimpleImmutableEntry<>(key(e.getKey()), e.getValue()));
    }
    if (options.sortKeys()) {
      entries.sort(Comparator.comparing(Map.Entry::getKey, PyValues::compareStrings));
    }
    out.append('{');
    boolean first = true;
    for (Map.Entry<String, Object> e : entries) {
      if (!first) {
        out.append(options.itemSeparator());
      }
      first = false;
      newline(level + 1);
      writeString(e.getKey());
      out.append(options.keySeparator());
      write(e.getValue(), level + 1, depth + 1);
    }
    newline(level);
    out.append('}');
  }

  private void writeList(List<?> list, int level, int depth) {
    if (list.isEmpty()) {
      out.append("[]");
      return;
    }
    out.append('[');
    boolean first = true;
    for (Object item : list) {
      if (!first) {
        out.append(options.itemSeparator());
      }
      first = false;
      newline(level + 1);
      write(item, level + 1, depth + 1);
    }
    newline(level);
    out.append(']');
  }

  private void newline(int level) {
    if (options.indent() != null) {
      out.append('\n');
      out.append(options.indent().repeat(level));
    }
  }

  /** Python turns keys that are not strings into strings: numbers, booleans and None. */
  private static String key(Object key) {
    key = PyValues.unwrap(key);
    if (key instanceof CharSequence s) {
      return s.toString();
    }
    if (key == null) {
      return "null";
    }
    if (key instanceof Boolean b) {
      return b ? "true" : "false";
    }
    if (key instanceof Number n) {
      return numberText(n);
    }
    throw new IllegalArgumentException(
        "tojson: keys must be str, int, float, bool or None, not " + PyValues.typeName(key));
  }

  private void writeNumber(Number n) {
    out.append(numberText(n));
  }

  private static String numberText(Number n) {
    if (n instanceof Double || n instanceof Float) {
      double d = n.doubleValue();
      if (Double.isNaN(d)) {
        return "NaN";
      }
      if (Double.isInfinite(d)) {
        return d > 0 ? "Infinity" : "-Infinity";
      }
      return PyValues.floatRepr(d);
    }
    if (n instanceof BigDecimal d) {
      return PyValues.floatRepr(d.doubleValue());
    }
    if (n instanceof BigInteger i) {
      return i.toString();
    }
    return Long.toString(n.longValue());
  }

  private void writeString(String s) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        case '\b' -> out.append("\\b");
        case '\f' -> out.append("\\f");
        default -> {
          if (c < 0x20 || (options.ensureAscii() && c > 0x7e)) {
            // Python escapes DEL too when ensure_ascii is on; a surrogate pair becomes two escapes.
            out.append("\\u");
            String hex = Integer.toHexString(c);
            out.append("0".repeat(4 - hex.length())).append(hex);
          } else {
            out.append(c);
          }
        }
      }
    }
    out.append('"');
  }
}

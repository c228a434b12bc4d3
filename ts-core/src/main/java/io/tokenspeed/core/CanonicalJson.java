package io.tokenspeed.core;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Canonical JSON: object keys sorted by their UTF-16 code units, no insignificant whitespace,
 * integers in plain decimal, strings with the minimal escapes. Two equal values always give the
 * same bytes, which is what a hash over a configuration needs. Supported values: {@code null},
 * {@link String}, {@link Boolean}, {@link Integer}/{@link Long}, {@link List} and {@link Map} with
 * string keys.
 */
public final class CanonicalJson {

  private CanonicalJson() {}

  /** Writes {@code value} canonically. */
  public static String write(Object value) {
    StringBuilder sb = new StringBuilder(256);
    append(sb, value);
    return sb.toString();
  }

  private static void append(StringBuilder sb, Object value) {
    switch (value) {
      case null -> sb.append("null");
      case String s -> appendString(sb, s);
      case Boolean b -> sb.append(b);
      case Integer i -> sb.append(i);
      case Long l -> sb.append(l);
      case List<?> list -> {
        sb.append('[');
        for (int i = 0; i < list.size(); i++) {
          if (i > 0) {
            sb.append(',');
          }
          append(sb, list.get(i));
        }
        sb.append(']');
      }
      case Map<?, ?> map -> {
        TreeMap<String, Object> sorted = new TreeMap<>();
        for (Map.Entry<?, ?> e : map.entrySet()) {
          if (!(e.getKey() instanceof String k)) {
            throw new IllegalArgumentException("JSON object key " + e.getKey() + " is not text");
          }
          sorted.put(k, e.getValue());
        }
        sb.append('{');
        boolean first = true;
        for (Map.Entry<String, Object> e : sorted.entrySet()) {
          if (!first) {
            sb.append(',');
          }
          first = false;
          appendString(sb, e.getKey());
          sb.append(':');
          append(sb, e.getValue());
        }
        sb.append('}');
      }
      default ->
          throw new IllegalArgumentException(
              "value of type " + value.getClass().getName() + " has no canonical JSON form");
    }
  }

  private static void appendString(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> sb.append("\\\"");
        case '\\' -> sb.append("\\\\");
        case '\n' -> sb.append("\\n");
        case '\r' -> sb.append("\\r");
        case '\t' -> sb.append("\\t");
        case '\b' -> sb.append("\\b");
        case '\f' -> sb.append("\\f");
        default -> {
          if (c < 0x20) {
            sb.append(String.format("\\u%04x", (int) c));
          } else {
            sb.append(c);
          }
        }
      }
    }
    sb.append('"');
  }
}

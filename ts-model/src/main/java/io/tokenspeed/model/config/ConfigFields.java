package io.tokenspeed.model.config;

import java.util.List;
import java.util.Map;

/**
 * Typed reads of {@code config.json} fields. Every error names the field, the value found and what
 * was expected; {@link ModelConfigs#parse} prefixes the file.
 */
final class ConfigFields {
  private final Map<String, Object> json;

  ConfigFields(Map<String, Object> json) {
    this.json = json;
  }

  boolean has(String field) {
    return json.containsKey(field) && json.get(field) != null;
  }

  Object raw(String field) {
    return json.get(field);
  }

  int requireInt(String field) {
    if (!has(field)) {
      throw new IllegalArgumentException(field + " is missing");
    }
    return toInt(field, json.get(field));
  }

  int optInt(String field, int fallback) {
    return has(field) ? toInt(field, json.get(field)) : fallback;
  }

  double optDouble(String field, double fallback) {
    if (!has(field)) {
      return fallback;
    }
    return toDouble(field, json.get(field));
  }

  boolean optBool(String field, boolean fallback) {
    if (!has(field)) {
      return fallback;
    }
    if (!(json.get(field) instanceof Boolean b)) {
      throw new IllegalArgumentException(field + "=" + json.get(field) + " must be true or false");
    }
    return b;
  }

  String optString(String field, String fallback) {
    if (!has(field)) {
      return fallback;
    }
    if (!(json.get(field) instanceof String s)) {
      throw new IllegalArgumentException(field + "=" + json.get(field) + " must be a string");
    }
    return s;
  }

  @SuppressWarnings("unchecked")
  Map<String, Object> optObject(String field) {
    if (!has(field)) {
      return null;
    }
    if (!(json.get(field) instanceof Map<?, ?> m)) {
      throw new IllegalArgumentException(field + "=" + json.get(field) + " must be an object");
    }
    return (Map<String, Object>) m;
  }

  List<?> optList(String field) {
    if (!has(field)) {
      return null;
    }
    if (!(json.get(field) instanceof List<?> l)) {
      throw new IllegalArgumentException(field + "=" + json.get(field) + " must be an array");
    }
    return l;
  }

  static int toInt(String field, Object v) {
    if (v instanceof Long l && l >= Integer.MIN_VALUE && l <= Integer.MAX_VALUE) {
      return (int) (long) l;
    }
    throw new IllegalArgumentException(field + "=" + v + " must be an integer");
  }

  static double toDouble(String field, Object v) {
    if (v instanceof Long l) {
      return l;
    }
    if (v instanceof Double d) {
      return d;
    }
    throw new IllegalArgumentException(field + "=" + v + " must be a number");
  }
}

package io.tokenspeed.server.config;

import java.util.Locale;

/**
 * Operator input that cannot become a valid configuration. The message is one line that names the
 * field, the value and what is allowed, ready to print after {@code error: }. A line break that the
 * input carried into the message (a field name or flag value with a newline in it) is written as an
 * escape (backslash, u, four hex digits), so that the message stays one line.
 */
public final class ConfigException extends IllegalArgumentException {

  public ConfigException(String message) {
    super(oneLine(message));
  }

  public ConfigException(String message, Throwable cause) {
    super(oneLine(message), cause);
  }

  /** {@code message} with control characters and line separators written as escapes. */
  static String oneLine(String message) {
    if (message == null) {
      return null;
    }
    StringBuilder sb = new StringBuilder(message.length());
    for (int i = 0; i < message.length(); i++) {
      char c = message.charAt(i);
      if (c < 0x20 || c == 0x7f || c == 0x85 || c == 0x2028 || c == 0x2029) {
        sb.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
      } else {
        sb.append(c);
      }
    }
    return sb.toString();
  }
}

package io.tokenspeed.core;

import java.util.Locale;

/**
 * Keeps an error message on one line whatever outside input it quotes: a control character (C0, DEL
 * or C1) or line separator (a name with a line break in it, from a file, a flag or a request) is
 * written as an escape — a backslash, {@code u} and four hex digits. Logs and clients read one
 * refusal per line.
 */
public final class OneLine {
  private OneLine() {}

  /** {@code message} with control characters and line separators escaped (null stays null). */
  public static String of(String message) {
    if (message == null) {
      return null;
    }
    StringBuilder sb = null;
    for (int i = 0; i < message.length(); i++) {
      char c = message.charAt(i);
      boolean escape = Character.isISOControl(c) || c == 0x2028 || c == 0x2029;
      if (escape && sb == null) {
        sb = new StringBuilder(message.length() + 16).append(message, 0, i);
      }
      if (sb != null) {
        if (escape) {
          sb.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
        } else {
          sb.append(c);
        }
      }
    }
    return sb == null ? message : sb.toString();
  }
}

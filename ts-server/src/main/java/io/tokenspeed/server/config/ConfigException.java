package io.tokenspeed.server.config;

import io.tokenspeed.core.OneLine;

/**
 * Operator input that cannot become a valid configuration. The message is one line that names the
 * field, the value and what is allowed, ready to print after {@code error: }. A line break that the
 * input carried into the message (a field name or flag value with a newline in it) is written as an
 * escape (backslash, u, four hex digits), so that the message stays one line.
 */
public final class ConfigException extends IllegalArgumentException {

  public ConfigException(String message) {
    super(OneLine.of(message));
  }

  public ConfigException(String message, Throwable cause) {
    super(OneLine.of(message), cause);
  }
}

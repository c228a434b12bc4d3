package io.tokenspeed.server.config;

/**
 * Operator input that cannot become a valid configuration. The message is one line that names the
 * field, the value and what is allowed, ready to print after {@code error: }.
 */
public final class ConfigException extends IllegalArgumentException {

  public ConfigException(String message) {
    super(message);
  }

  public ConfigException(String message, Throwable cause) {
    super(message, cause);
  }
}

package io.tokenspeed.server.cli;

import io.tokenspeed.server.http.HttpFrontend;
import picocli.CommandLine.Option;

/**
 * The HTTP front end's limits on what a client may send, the same flags for {@code serve} and
 * {@code router}: the largest request body, and how long a request's line and headers may take.
 */
final class WebLimitsOptions {

  /** The smallest {@code --max-body-bytes} taken. */
  static final long MIN_BODY_BYTES = 1024;

  /** The largest {@code --max-body-bytes} taken (1 GiB). */
  static final long MAX_BODY_BYTES = 1L << 30;

  /** The longest {@code --header-timeout} taken, in seconds. */
  static final int MAX_HEADER_TIMEOUT_S = 3600;

  @Option(
      names = "--max-body-bytes",
      paramLabel = "BYTES",
      description = "Largest request body taken; larger ones are answered 413.")
  long maxBodyBytes = HttpFrontend.DEFAULT_MAX_BODY_BYTES;

  @Option(
      names = "--header-timeout",
      paramLabel = "SECONDS",
      description =
          "How long a request's line and headers may take to arrive; also how long an idle"
              + " keep-alive connection stays open.")
  int headerTimeout = HttpFrontend.DEFAULT_HEADER_TIMEOUT_S;

  /** A flag whose value is out of its range, and the message that says so. */
  record Invalid(String flag, Object value, String message) {}

  /** The first flag out of its range, or null when both are in range. */
  Invalid invalid() {
    if (maxBodyBytes < MIN_BODY_BYTES || maxBodyBytes > MAX_BODY_BYTES) {
      return new Invalid(
          "--max-body-bytes",
          maxBodyBytes,
          "--max-body-bytes="
              + maxBodyBytes
              + " must be in ["
              + MIN_BODY_BYTES
              + ", "
              + MAX_BODY_BYTES
              + "]");
    }
    if (headerTimeout < 1 || headerTimeout > MAX_HEADER_TIMEOUT_S) {
      return new Invalid(
          "--header-timeout",
          headerTimeout,
          "--header-timeout=" + headerTimeout + " must be in [1, " + MAX_HEADER_TIMEOUT_S + "]");
    }
    return null;
  }

  /** {@code --header-timeout} in milliseconds. */
  long headerTimeoutMs() {
    return headerTimeout * 1000L;
  }
}

package io.tokenspeed.server.router;

import io.tokenspeed.server.metrics.RouterMetrics;

/**
 * How a client's request to the router ended; its {@link #label} is the metrics' {@code outcome}
 * ({@link RouterMetrics#OUTCOMES}).
 */
enum Outcome {
  /** A backend's 2xx answer, passed through whole. */
  OK("ok"),
  /** The router's own 4xx: a body that is not a JSON object, too large, unreadable. */
  REFUSED("refused"),
  /** A backend's non-2xx answer, passed through. */
  BACKEND_ERROR("backend_error"),
  /** 503: no ready backend of a role. */
  UNAVAILABLE("unavailable"),
  /** 502 or 504, or a stream ended by an error event: an upstream request failed. */
  UPSTREAM_FAILED("upstream_failed"),
  /** The client left first; both upstream requests were cancelled. */
  CLIENT_GONE("client_gone"),
  /** A bug in the router: 500. */
  INTERNAL_ERROR("internal_error");

  private final String label;

  Outcome(String label) {
    this.label = label;
  }

  String label() {
    return label;
  }

  /** The outcome of a request the router answered with {@code status} itself. */
  static Outcome ofRefusal(int status) {
    if (status == 503) {
      return UNAVAILABLE;
    }
    if (status == 502 || status == 504) {
      return UPSTREAM_FAILED;
    }
    return status >= 500 ? INTERNAL_ERROR : REFUSED;
  }
}

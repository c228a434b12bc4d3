package io.tokenspeed.server.router;

import io.tokenspeed.server.metrics.RouterMetrics;

/**
 * How an upstream request failed; its {@link #label} is the metrics' {@code kind} ({@link
 * RouterMetrics#FAILURE_KINDS}).
 */
enum FailureKind {
  /** No connection, or it broke before any answer: the backend is not chosen until a poll. */
  UNREACHABLE("unreachable", true),
  /** No answer within the upstream timeout, or a body that stalled that long. */
  TIMEOUT("timeout", false),
  /** A non-2xx answer. */
  STATUS("status", false),
  /** The answer started and then broke off: the backend is not chosen until a poll. */
  BROKEN("broken", true);

  private final String label;
  private final boolean connectionLevel;

  FailureKind(String label, boolean connectionLevel) {
    this.label = label;
    this.connectionLevel = connectionLevel;
  }

  String label() {
    return label;
  }

  /** Whether the connection itself failed, which takes the backend out until its next poll. */
  boolean connectionLevel() {
    return connectionLevel;
  }
}

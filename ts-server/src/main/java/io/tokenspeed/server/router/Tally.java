package io.tokenspeed.server.router;

import io.tokenspeed.server.metrics.RouterMetrics;

/**
 * Counts one client request's outcome in the metrics, once, and before the answer's last bytes go
 * out: a client that scrapes {@code /metrics} after its answer finds its request counted.
 *
 * <p>Not thread-safe: the request's own thread uses it.
 */
final class Tally {
  private final RouterMetrics metrics;
  private final String endpoint;
  private Outcome counted;

  Tally(RouterMetrics metrics, String endpoint) {
    this.metrics = metrics;
    this.endpoint = endpoint;
  }

  /** Counts {@code outcome} unless an outcome was counted already. */
  void count(Outcome outcome) {
    if (counted == null) {
      counted = outcome;
      metrics.onRequest(endpoint, outcome.label());
    }
  }
}

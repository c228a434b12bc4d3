package io.tokenspeed.server.http;

import io.tokenspeed.engine.RequestMetrics;

/** What the server tells its metrics about each engine request that ended. */
public interface RequestObserver {
  /**
   * @param metrics the engine's figures of the request (null when the engine refused it at intake)
   * @param generatedTokens tokens returned to the client
   * @param e2eNanos from the HTTP request's arrival to the request's end
   * @param finishReason {@code stop}, {@code length}, {@code cancelled} (a disconnect, a shutdown)
   *     or {@code error}
   */
  void onRequestFinished(
      RequestMetrics metrics, int generatedTokens, long e2eNanos, String finishReason);

  /** An observer that records nothing. */
  RequestObserver NONE = (m, g, e, f) -> {};
}

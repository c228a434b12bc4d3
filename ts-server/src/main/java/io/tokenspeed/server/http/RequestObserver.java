package io.tokenspeed.server.http;

import io.tokenspeed.engine.RequestMetrics;

/**
 * What the server tells its metrics about each request that ended: once per prompt of an HTTP
 * request, whatever its {@code n} (a request of two prompts with {@code n = 3} ends twice).
 */
public interface RequestObserver {
  /**
   * @param metrics the engine's figures of the prompt's choice whose first token came first (null
   *     when the engine refused it at intake)
   * @param generatedTokens tokens returned to the client, all the prompt's choices together
   * @param e2eNanos from the HTTP request's arrival to the request's end
   * @param finishReason {@code stop}, {@code length}, {@code cancelled} (a disconnect, a shutdown)
   *     or {@code error}: the most severe of its choices' (error, cancelled, length, stop)
   */
  void onRequestFinished(
      RequestMetrics metrics, int generatedTokens, long e2eNanos, String finishReason);

  /** An observer that records nothing. */
  RequestObserver NONE = (m, g, e, f) -> {};
}

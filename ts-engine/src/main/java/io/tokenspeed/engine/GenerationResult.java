package io.tokenspeed.engine;

import java.util.Optional;

/**
 * How a request ended.
 *
 * @param requestId the engine's id
 * @param tokens every generated token id, in order
 * @param finishReason {@code stop}, {@code length}, {@code cancelled} or {@code error}
 * @param error the message of a rejected or failed request; of a cancelled one that its own client
 *     did not cancel, why (the engine closed; the other half of a disaggregated request was
 *     cancelled by its client, docs/pd.md); else null
 * @param metrics the request's figures (null for a request rejected at intake)
 */
public record GenerationResult(
    long requestId, int[] tokens, String finishReason, String error, RequestMetrics metrics) {

  public GenerationResult {
    tokens = tokens.clone();
  }

  /**
   * The message, when the request was rejected or failed, or was cancelled other than by its own
   * client (see {@code error}; {@link #finishReason} tells a failure from a cancellation).
   */
  public Optional<String> failure() {
    return Optional.ofNullable(error);
  }
}

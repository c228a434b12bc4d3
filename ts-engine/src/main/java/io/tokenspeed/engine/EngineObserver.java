package io.tokenspeed.engine;

/**
 * What the loop thread tells an observer (tests and diagnostics): every round's end, and the logits
 * each sampled token was drawn from. It runs on the loop thread and must not block or keep the
 * array.
 */
interface EngineObserver {
  /** After a round: the scheduler, cache and tiers are between rounds and may be checked. */
  default void afterRound(EngineView view) {}

  /**
   * Whether this observer wants {@link #onLogits}: the forward step then asks the model to keep the
   * logits on the host, which a model that samples on the device would otherwise not copy there.
   */
  default boolean wantsLogits() {
    return false;
  }

  /**
   * The logits row the request's token {@code step} (0 = the first generated token) was sampled
   * from; called only when {@link #wantsLogits}.
   */
  default void onLogits(long requestId, int step, float[] logits) {}

  /** A metrics snapshot the loop just published (the façade's {@code metrics()} reads it). */
  default void onMetrics(EngineMetrics metrics) {}

  /** An observer that does nothing. */
  EngineObserver NONE = new EngineObserver() {};
}

package io.tokenspeed.engine;

/**
 * A snapshot the loop publishes after every round (observability; safe to read from any thread).
 *
 * @param rounds rounds run so far
 * @param activeRequests requests the loop serves
 * @param endedRequests requests the loop ended since start (finished, cancelled, or rejected when
 *     it took them in)
 * @param deviceCachedBlocks published Device blocks no request holds (reusable, evictable)
 * @param hostCachedBlocks published Host blocks no operation holds
 * @param deviceFreeParents free Device LCM parents
 * @param retractions requests retracted for lack of Device memory since start
 * @param imageBlocks blocks of retracted requests' exact images saved to the Host since start
 * @param copiedBytes bytes the copy thread moved between the tiers since start
 * @param copyNanos nanoseconds the copy thread spent moving them
 * @param loadedBytes of {@code copiedBytes}, those copied Host→Device (blocks reused from the Host
 *     tier or restored from L3, going up to the Device tier that computes: GPU memory on a GPU)
 * @param loadNanos of {@code copyNanos}, the part spent on {@code loadedBytes} (a batch's time is
 *     shared out by bytes when it also holds copies the other way)
 * @param stagedLoadedBytes of {@code loadedBytes}, those copied in stages of layers while the
 *     forward computed (each layer starting once its stage was in), not before it
 * @param roundNanos nanoseconds the loop spent in its rounds since start (idle waits excluded)
 * @param forwardNanos the part of them inside the model's forward pass and its sampling (which a
 *     device model does on the device); the rest is the loop's own work (intake, scheduler, block
 *     tables, copies waited for, streaming the tokens)
 * @param copyWaitNanos the part of {@code roundNanos} outside the forward pass that the loop spent
 *     waiting for Device/Host copies: loads the forward needs, the demotions' fence before the Host
 *     publishes them, State checkpoint copies
 */
public record EngineStats(
    long rounds,
    int activeRequests,
    long endedRequests,
    int deviceCachedBlocks,
    int hostCachedBlocks,
    int deviceFreeParents,
    long retractions,
    long imageBlocks,
    long copiedBytes,
    long copyNanos,
    long loadedBytes,
    long loadNanos,
    long stagedLoadedBytes,
    long roundNanos,
    long forwardNanos,
    long copyWaitNanos) {

  /** Before the first round. */
  static final EngineStats NONE = new EngineStats(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}

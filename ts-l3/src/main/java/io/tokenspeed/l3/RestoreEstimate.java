package io.tokenspeed.l3;

/**
 * What this rank's store costs to restore from, as the executor measured it over real calls: the
 * fixed latency of one call and the bandwidth of its GETs beyond that latency. A rank-local
 * observation: the TP leader's becomes part of the replica's agreed cost figures; it never feeds a
 * decision on its own.
 *
 * @param latencyNs the moving average of a QUERY's wall time (an existence check moves no payload,
 *     so its time is the store's fixed cost per call), 0 before the first
 * @param bytesPerSecond the moving average of the GETs' bytes over their wall time less that
 *     latency, or the rate of a GET still running where that is lower; 0 before any GET moved bytes
 * @param calls QUERY calls measured
 * @param gets GETs measured (finished)
 */
public record RestoreEstimate(double latencyNs, double bytesPerSecond, long calls, long gets) {
  /**
   * The bandwidth of GETs that took no longer than the latency estimate: the model then costs a
   * restore at its latency alone.
   */
  public static final double UNBOUNDED_BYTES_PER_SECOND = 1e12;

  /** Nothing measured. */
  public static final RestoreEstimate NONE = new RestoreEstimate(0, 0, 0, 0);

  /** Whether a GET was measured, finished or running: the bandwidth is known. */
  public boolean known() {
    return bytesPerSecond > 0;
  }
}

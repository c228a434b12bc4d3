package io.tokenspeed.l3;

/**
 * Moving averages of the store's restore cost over the executor's real calls ({@link
 * RestoreEstimate}). A call's wall time is modelled as a fixed latency plus its bytes over a
 * bandwidth: QUERY calls, which move no payload (health probes among them), measure the latency;
 * GETs measure the bandwidth of what they took beyond it. The bandwidth is the ratio of two moving
 * averages — bytes and transfer time — rather than an average of per-call ratios, so that a small
 * GET, whose time is mostly latency, cannot swing it.
 *
 * <p>Only calls that reached the store and answered without an outage are measured: a rejected,
 * cancelled or failed call says nothing about how fast the store reads. Guarded by the executor's
 * lock.
 */
final class RestoreEstimator {
  /** The weight of the newest call in each average: about the last five calls. */
  static final double WEIGHT = 0.2;

  /** A GET faster than the latency estimate counts as this fast (bytes per second). */
  static final double MAX_BYTES_PER_SECOND = RestoreEstimate.UNBOUNDED_BYTES_PER_SECOND;

  private double latencyNs;
  private long calls;
  private double bytes;
  private double transferNs;
  private long gets;

  /** A QUERY call that took {@code ns}. */
  void onQuery(long ns) {
    latencyNs = calls == 0 ? ns : latencyNs + WEIGHT * (ns - latencyNs);
    calls++;
  }

  /** A GET call that moved {@code movedBytes} in {@code ns}. */
  void onGet(long movedBytes, long ns) {
    if (movedBytes <= 0) {
      return; // a miss: no bandwidth in it
    }
    double t = Math.max(0, ns - latencyNs);
    if (gets == 0) {
      bytes = movedBytes;
      transferNs = t;
    } else {
      bytes += WEIGHT * (movedBytes - bytes);
      transferNs += WEIGHT * (t - transferNs);
    }
    gets++;
  }

  /** The latency estimate (0 before the first QUERY). */
  double latencyNs() {
    return latencyNs;
  }

  /**
   * The estimate now. {@code inflightBytesPerSecond}, when above 0, is the rate a GET still running
   * read its first wave at: the bandwidth is at most that (the store is slower now than its
   * finished calls said), and stands in for it before any GET finished.
   */
  RestoreEstimate snapshot(double inflightBytesPerSecond) {
    double bw =
        gets == 0
            ? 0
            : transferNs <= bytes / MAX_BYTES_PER_SECOND * 1e9
                ? MAX_BYTES_PER_SECOND
                : bytes / transferNs * 1e9;
    if (inflightBytesPerSecond > 0) {
      bw = bw == 0 ? inflightBytesPerSecond : Math.min(bw, inflightBytesPerSecond);
    }
    return new RestoreEstimate(latencyNs, bw, calls, gets);
  }

  /** The estimate from finished calls alone. */
  RestoreEstimate snapshot() {
    return snapshot(0);
  }
}

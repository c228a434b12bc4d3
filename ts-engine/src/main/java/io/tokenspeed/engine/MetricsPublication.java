package io.tokenspeed.engine;

import java.util.concurrent.TimeUnit;

/**
 * When the loop takes a new {@link EngineMetrics} snapshot: the specification's publication rule,
 * kept apart from the loop so that it can be checked against a manual clock.
 *
 * <pre>
 *   after a round       due when the last snapshot is INTERVAL old, or the loop turned idle or busy,
 *                       or storage turned pending or idle since the last snapshot
 *   in an idle wait     due when rounds ran since the last snapshot and it is INTERVAL old
 * </pre>
 *
 * Every transition is published, so comparing with the last snapshot is comparing with the last
 * round. Snapshots taken while busy are therefore at least {@link #INTERVAL_NS} apart, and the
 * figures an idle loop shows are at most {@code INTERVAL_NS} plus one idle wait older than its last
 * round. Loop thread only; holds no lock.
 */
final class MetricsPublication {

  /** The shortest time between two snapshots without a transition between them. */
  static final long INTERVAL_NS = TimeUnit.SECONDS.toNanos(1);

  private boolean published;
  private long lastNs;
  private boolean lastIdle;
  private boolean lastPending;

  /** A round ran since the last snapshot. */
  private boolean dirty;

  /**
   * Whether the round that just ended, with the loop {@code idle} and storage {@code pending},
   * should publish.
   */
  boolean dueAfterRound(long nowNs, boolean idle, boolean pending) {
    boolean due =
        !published || idle != lastIdle || pending != lastPending || nowNs - lastNs >= INTERVAL_NS;
    if (!due) {
      dirty = true;
    }
    return due;
  }

  /** Whether an idle wait that ran no round should publish (rounds ran since the last snapshot). */
  boolean dueWhileIdle(long nowNs) {
    return dirty && nowNs - lastNs >= INTERVAL_NS;
  }

  /** A snapshot was taken at {@code nowNs} in this state. */
  void published(long nowNs, boolean idle, boolean pending) {
    published = true;
    lastNs = nowNs;
    lastIdle = idle;
    lastPending = pending;
    dirty = false;
  }
}

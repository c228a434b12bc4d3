package io.tokenspeed.core.storage;

/**
 * The executor's three pressure observations, taken with its completions under one lock. Across
 * owners they are MAX-reduced; the scheduler compares them with its watermarks.
 *
 * @param queuedJobs QUERY, GET and PUT jobs waiting for a worker
 * @param queuedPayloadBytes payload bytes of the queued GET and PUT jobs (QUERY counts zero)
 * @param oldestAgeNs age of the oldest queued or running job, 0 when idle
 */
public record PressureSnapshot(int queuedJobs, long queuedPayloadBytes, long oldestAgeNs) {
  /** No pressure at all. */
  public static final PressureSnapshot IDLE = new PressureSnapshot(0, 0, 0);

  public PressureSnapshot {
    if (queuedJobs < 0 || queuedPayloadBytes < 0 || oldestAgeNs < 0) {
      throw new IllegalArgumentException(
          "pressure queued_jobs="
              + queuedJobs
              + " queued_payload_bytes="
              + queuedPayloadBytes
              + " oldest_age_ns="
              + oldestAgeNs
              + " must be >= 0");
    }
  }

  /** The component-wise maximum (the cross-owner reduction). */
  public PressureSnapshot max(PressureSnapshot other) {
    return new PressureSnapshot(
        Math.max(queuedJobs, other.queuedJobs),
        Math.max(queuedPayloadBytes, other.queuedPayloadBytes),
        Math.max(oldestAgeNs, other.oldestAgeNs));
  }
}

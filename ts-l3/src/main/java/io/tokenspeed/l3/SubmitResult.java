package io.tokenspeed.l3;

/**
 * The executor's answer to a submission. A rejection is not an error: the job's attempt still
 * completes, with a record (every row FAILED, retired, no object evidence) that {@link
 * L3Executor#poll()} delivers like any other, so the owners agree on it through the usual path.
 */
public enum SubmitResult {
  /** Queued for a worker. */
  QUEUED,
  /** Queued as the single recovery probe after a cooldown. */
  QUEUED_AS_PROBE,
  /** Rejected: the kind's queue is full. */
  REJECTED_QUEUE_FULL,
  /** Rejected: the total outstanding-operation limit is reached. */
  REJECTED_OPERATION_LIMIT,
  /** Rejected: the backend is cooling down after an outage (or a probe is in flight). */
  REJECTED_UNHEALTHY,
  /** Rejected: an unretired result quarantined the executor; restart the process. */
  REJECTED_QUARANTINED;

  /** True when the job will run. */
  public boolean accepted() {
    return this == QUEUED || this == QUEUED_AS_PROBE;
  }
}

package io.tokenspeed.l3;

/**
 * The executor's runtime limits (part of {@code StorageRuntimeConfig}): worker and queue sizes per
 * kind, the total outstanding-operation limit, the health cooldown and the close deadline. Every
 * default is a documented constant; a bad value is rejected with the field, the value and the
 * range.
 *
 * @param queryWorkers threads serving QUERY jobs
 * @param getWorkers threads serving GET jobs
 * @param putWorkers threads serving PUT jobs
 * @param queryQueueCapacity QUERY jobs that may wait for a worker
 * @param getQueueCapacity GET jobs that may wait for a worker
 * @param putQueueCapacity PUT jobs that may wait for a worker
 * @param maxOutstandingOperations queued jobs + running jobs + undelivered results, all kinds
 * @param healthCooldownMs how long submissions are rejected after an outage signal
 * @param closeJoinDeadlineMs how long {@code close} waits for running store calls
 */
public record L3ExecutorConfig(
    int queryWorkers,
    int getWorkers,
    int putWorkers,
    int queryQueueCapacity,
    int getQueueCapacity,
    int putQueueCapacity,
    int maxOutstandingOperations,
    long healthCooldownMs,
    long closeJoinDeadlineMs) {

  public static final int DEFAULT_QUERY_WORKERS = 2;
  public static final int DEFAULT_GET_WORKERS = 4;
  public static final int DEFAULT_PUT_WORKERS = 2;
  public static final int DEFAULT_QUERY_QUEUE_CAPACITY = 256;
  public static final int DEFAULT_GET_QUEUE_CAPACITY = 256;
  public static final int DEFAULT_PUT_QUEUE_CAPACITY = 256;
  public static final int DEFAULT_MAX_OUTSTANDING_OPERATIONS = 1024;
  public static final long DEFAULT_HEALTH_COOLDOWN_MS = 5_000;
  public static final long DEFAULT_CLOSE_JOIN_DEADLINE_MS = 10_000;

  /** Upper bound for worker counts per kind. */
  public static final int MAX_WORKERS = 256;

  /** Upper bound for any queue capacity and the outstanding limit. */
  public static final int MAX_CAPACITY = 1 << 20;

  public L3ExecutorConfig {
    range("query_workers", queryWorkers, 1, MAX_WORKERS);
    range("get_workers", getWorkers, 1, MAX_WORKERS);
    range("put_workers", putWorkers, 1, MAX_WORKERS);
    range("query_queue_capacity", queryQueueCapacity, 1, MAX_CAPACITY);
    range("get_queue_capacity", getQueueCapacity, 1, MAX_CAPACITY);
    range("put_queue_capacity", putQueueCapacity, 1, MAX_CAPACITY);
    range("max_outstanding_operations", maxOutstandingOperations, 1, MAX_CAPACITY);
    range("health_cooldown_ms", healthCooldownMs, 0, 3_600_000);
    range("close_join_deadline_ms", closeJoinDeadlineMs, 0, 3_600_000);
  }

  /** The documented defaults. */
  public static L3ExecutorConfig defaults() {
    return new L3ExecutorConfig(
        DEFAULT_QUERY_WORKERS,
        DEFAULT_GET_WORKERS,
        DEFAULT_PUT_WORKERS,
        DEFAULT_QUERY_QUEUE_CAPACITY,
        DEFAULT_GET_QUEUE_CAPACITY,
        DEFAULT_PUT_QUEUE_CAPACITY,
        DEFAULT_MAX_OUTSTANDING_OPERATIONS,
        DEFAULT_HEALTH_COOLDOWN_MS,
        DEFAULT_CLOSE_JOIN_DEADLINE_MS);
  }

  private static void range(String field, long value, long min, long max) {
    if (value < min || value > max) {
      throw new IllegalArgumentException(
          field + "=" + value + " must be in [" + min + ", " + max + "]");
    }
  }
}

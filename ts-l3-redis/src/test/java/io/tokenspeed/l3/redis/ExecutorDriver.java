package io.tokenspeed.l3.redis;

import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.l3.L3Executor;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * Plays the event loop's part for one executor in a test: polls completion records and keeps them
 * by operation id. Every wait is bounded.
 */
final class ExecutorDriver {

  private final L3Executor executor;
  private final Map<Long, StorageDone> records = new HashMap<>();

  ExecutorDriver(L3Executor executor) {
    this.executor = executor;
  }

  /** Polls once; returns the records that arrived with this poll. */
  List<StorageDone> poll() {
    List<StorageDone> fresh = new ArrayList<>(executor.poll().completions());
    for (StorageDone d : fresh) {
      records.put(d.operationId(), d);
    }
    return fresh;
  }

  /** The record of {@code operationId}, waiting for it at most {@code timeout}. */
  StorageDone await(long operationId, Duration timeout) {
    long deadlineNs = System.nanoTime() + timeout.toNanos();
    while (!records.containsKey(operationId)) {
      if (System.nanoTime() - deadlineNs > 0) {
        throw new AssertionError(
            "no record of operation " + operationId + " within " + timeout + ": " + metrics());
      }
      long seen = executor.recordsProduced();
      poll();
      if (!records.containsKey(operationId) && executor.recordsProduced() == seen) {
        LockSupport.parkNanos(TimeUnit.MICROSECONDS.toNanos(200));
      }
    }
    return records.get(operationId);
  }

  /** Every record received so far. */
  Map<Long, StorageDone> records() {
    return records;
  }

  String metrics() {
    return executor.metrics().toString();
  }
}

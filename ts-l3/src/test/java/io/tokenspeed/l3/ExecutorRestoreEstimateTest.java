package io.tokenspeed.l3;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The executor measures its store over the calls it runs, on its own clock: a QUERY's time is the
 * latency, a GET's time beyond it carries its bytes; a PUT, a miss and a cancelled queued job
 * measure nothing.
 */
class ExecutorRestoreEstimateTest {
  private final Arena arena = Arena.ofConfined();
  private final MemorySegment host = arena.allocate(1 << 16);
  private final ManualClock clock = new ManualClock();
  private final ScriptedStore store = new ScriptedStore();

  @AfterEach
  void tearDown() {
    arena.close();
  }

  private static StorageJob job(long id, StorageKind kind, String key, int bytes) {
    JobRow row =
        kind == StorageKind.QUERY ? JobRow.query(key) : JobRow.owned(key, new HostRange(0, bytes));
    return new StorageJob(id, kind, List.of(row));
  }

  /** Runs {@code job} as its worker would, the store call taking {@code ms} of the clock. */
  private void run(L3Executor ex, StorageJob job, long ms) {
    ex.submit(job);
    Runnable call = ex.takeWork(job.kind());
    clock.advanceMs(ms);
    call.run();
    ex.poll();
  }

  @Test
  void shouldMeasureTheLatencyOnQueriesAndTheBandwidthOnGets() throws Exception {
    L3Executor ex = L3Executor.startStepped(store, L3ExecutorConfig.defaults(), host, clock);
    assertEquals(RestoreEstimate.NONE, ex.restoreEstimate());
    run(ex, job(1, StorageKind.PUT, "ns_a", 4096), 50);
    assertEquals(0, ex.restoreEstimate().calls(), "a write measures nothing");
    run(ex, job(2, StorageKind.QUERY, "ns_a", 4096), 2);
    assertEquals(2_000_000, ex.restoreEstimate().latencyNs(), 1);
    run(ex, job(3, StorageKind.GET, "ns_missing", 4096), 40);
    assertFalse(ex.restoreEstimate().known(), "a miss moves no bytes");
    run(ex, job(4, StorageKind.GET, "ns_a", 4096), 6);
    RestoreEstimate r = ex.restoreEstimate();
    assertTrue(r.known());
    assertEquals(4096 / 0.004, r.bytesPerSecond(), 1, "4096 bytes in 6 ms less 2 ms of latency");
    assertEquals(1, r.gets());
    ex.close();
  }
}

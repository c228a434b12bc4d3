package io.tokenspeed.l3;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The executor without worker threads ({@link L3Executor#startStepped}): the caller takes each unit
 * of work and decides when its store call runs, on its own thread.
 */
class L3ExecutorSteppedTest {
  private final Arena arena = Arena.ofConfined();
  private final MemorySegment host = arena.allocate(1 << 16);
  private final ManualClock clock = new ManualClock();
  private final ScriptedStore store = new ScriptedStore();

  @AfterEach
  void tearDown() {
    arena.close();
  }

  private static StorageJob job(long id, StorageKind kind, String key) {
    return new StorageJob(id, kind, List.of(JobRow.owned(key, new HostRange(0, 256))));
  }

  @Test
  void shouldRunAStoreCallOnlyWhenTheCallerRunsIt() throws Exception {
    L3Executor ex = L3Executor.startStepped(store, L3ExecutorConfig.defaults(), host, clock);
    for (int i = 0; i < 256; i++) {
      host.set(ValueLayout.JAVA_BYTE, i, (byte) i);
    }
    ex.submit(job(1, StorageKind.PUT, "ns_a"));
    assertNull(ex.takeWork(StorageKind.GET), "no GET is queued");
    clock.advanceMs(30);
    Runnable put = ex.takeWork(StorageKind.PUT);
    assertEquals(0, store.calls.get(), "taking the work calls nothing");
    assertNull(ex.takeWork(StorageKind.PUT), "the one job is taken");
    assertTrue(ex.poll().completions().isEmpty(), "a taken call has no record before it runs");
    assertEquals(1, ex.metrics().put().runningJobs(), "a taken job is running");
    put.run();
    assertEquals(1, store.calls.get());
    List<StorageDone> done = ex.poll().completions();
    assertEquals(1, done.size());
    assertEquals(List.of(KeyOutcome.OK), done.getFirst().outcomes());

    host.asSlice(0, 256).fill((byte) 0);
    ex.submit(job(2, StorageKind.GET, "ns_a"));
    Runnable get = ex.takeWork(StorageKind.GET);
    assertTrue(ex.cancel(2), "a running job is detached");
    get.run();
    StorageDone g = ex.poll().completions().getFirst();
    assertTrue(g.detached(), "its record comes back detached");
    assertEquals(KeyOutcome.OK, g.outcomes().getFirst());
    assertEquals((byte) 255, host.get(ValueLayout.JAVA_BYTE, 255), "the bytes landed");
    assertTrue(ex.close().storeClosed(), "nothing inside the store: it closes");
  }

  @Test
  void shouldKeepTheStoreWhenATakenCallNeverRan() throws Exception {
    L3Executor ex = L3Executor.startStepped(store, L3ExecutorConfig.defaults(), host, clock);
    ex.submit(job(1, StorageKind.GET, "ns_b"));
    ex.takeWork(StorageKind.GET);
    CloseReport report = ex.close();
    assertTrue(report.restartRequired(), report::message);
    assertEquals(0, store.closes.get(), "the store may still be inside the call");
  }

  @Test
  void shouldRefuseSteppingAnExecutorWithWorkers() throws Exception {
    L3Executor ex = L3Executor.start(store, L3ExecutorConfig.defaults(), host, clock);
    try {
      assertThrows(IllegalStateException.class, () -> ex.takeWork(StorageKind.GET));
    } finally {
      ex.close();
    }
  }
}

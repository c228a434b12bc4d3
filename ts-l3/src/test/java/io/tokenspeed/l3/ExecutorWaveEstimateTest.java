package io.tokenspeed.l3;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The restore estimate while a GET of several shares runs, on a stepped executor and a manual
 * clock: once the GET's first wave of small shares returned, the bandwidth is at most that wave's
 * rate (its bytes over its call, less the latency), known even before any GET finished; the cap
 * holds still while the later shares run and goes with the GET. A store that reads steadily is
 * never reported slower while one of its GETs runs, whatever the landings of its shares.
 */
class ExecutorWaveEstimateTest {
  private static final int ROW = 64 << 10;
  private static final int ROWS = 256; // 16 MiB: 16 shares' worth

  /** The engine agrees on a bandwidth below this share of the last at once (CostReporter). */
  private static final double SLOWDOWN = 0.5;

  private final Arena arena = Arena.ofConfined();
  private final MemorySegment host = arena.allocate((long) ROWS * ROW);
  private final ManualClock clock = new ManualClock();
  private final ScriptedStore store = new ScriptedStore();
  private L3Executor ex;
  private long nextId = 1;

  @BeforeEach
  void everyRowIsThere() {
    store.script(
        (op, keys, segments) -> {
          List<RowResult> rows = new ArrayList<>();
          for (int i = 0; i < keys.size(); i++) {
            rows.add(
                op.equals("exists")
                    ? new RowResult.Ok(0, false)
                    : new RowResult.Ok(segments.get(i).byteSize(), false));
          }
          return StoreResult.of(rows);
        });
  }

  @AfterEach
  void tearDown() {
    if (ex != null) {
      ex.close();
    }
    arena.close();
  }

  private void start(int getWorkers, boolean landingListener) throws Exception {
    ex =
        L3Executor.startStepped(
            store,
            new L3ExecutorConfig(1, getWorkers, 1, 64, 64, 64, 256, 1_000, 60_000),
            host,
            clock);
    if (landingListener) {
      ex.onLanded((operationId, rows) -> {});
    }
  }

  private StorageJob get(int rows) {
    List<JobRow> list = new ArrayList<>();
    for (int i = 0; i < rows; i++) {
      list.add(JobRow.owned("ns_" + i, new HostRange((long) i * ROW, ROW)));
    }
    return new StorageJob(nextId++, StorageKind.GET, list);
  }

  /** Runs a job of one call that takes {@code ms} of the clock. */
  private void runWhole(StorageJob job, long ms) {
    ex.submit(job);
    Runnable call = ex.takeWork(job.kind());
    clock.advanceMs(ms);
    call.run();
    assertNull(ex.takeWork(job.kind()), "one call");
    ex.poll();
  }

  @Test
  void shouldCapTheBandwidthByARunningGetsFirstWaveUntilItCompletes() throws Exception {
    start(2, true); // a GET of 16 MiB: 8 shares, a wave of 2 then 6 of 42 rows
    runWhole(get(16), 1); // 1 MiB in one call of 1 ms
    RestoreEstimate finished = ex.restoreEstimate();
    assertEquals(16.0 * ROW / 1e-3, finished.bytesPerSecond(), 1e-3);

    StorageJob slow = get(ROWS);
    ex.submit(slow);
    long startNs = clock.getAsLong();
    Runnable first = ex.takeWork(StorageKind.GET);
    Runnable second = ex.takeWork(StorageKind.GET);
    clock.advanceMs(50);
    first.run();
    assertEquals(finished, ex.restoreEstimate(), "half a wave caps nothing");
    second.run();
    RestoreEstimate capped = ex.restoreEstimate();
    long landed = 4L * ROW; // the wave: 2 shares of 2 rows
    assertTrue(capped.known());
    assertEquals(1, capped.gets(), "the running GET is not counted as measured");
    double want = landed * 1e9 / (clock.getAsLong() - startNs);
    assertEquals(want, capped.bytesPerSecond(), want * 1e-9, "the wave's bytes over its time");
    assertTrue(capped.bytesPerSecond() < finished.bytesPerSecond());

    List<Runnable> later = new ArrayList<>();
    later.add(ex.takeWork(StorageKind.GET));
    later.add(ex.takeWork(StorageKind.GET));
    for (int ms = 0; ms < 400; ms += 50) {
      clock.advanceMs(50);
      assertEquals(capped, ex.restoreEstimate(), "held while the later shares run");
    }
    int calls = 2;
    while (!later.isEmpty()) {
      assertEquals(capped, ex.restoreEstimate(), "held until the GET completes");
      later.remove(0).run();
      calls++;
      Runnable r = ex.takeWork(StorageKind.GET);
      if (r != null) {
        later.add(r);
        clock.advanceMs(42);
      }
    }
    assertEquals(8, calls);
    assertTrue(
        ex.poll().completions().stream().anyMatch(d -> d.operationId() == slow.operationId()));
    RestoreEstimate after = ex.restoreEstimate();
    RestoreEstimator finishedOnly = new RestoreEstimator();
    finishedOnly.onGet(16L * ROW, 1_000_000L);
    finishedOnly.onGet((long) ROWS * ROW, clock.getAsLong() - startNs);
    assertEquals(finishedOnly.snapshot(), after, "the cap went with the GET");
    assertEquals(2, after.gets());
    assertTrue(after.bytesPerSecond() > capped.bytesPerSecond());
  }

  @Test
  void shouldMeasureTheWaveLessTheLatencyBeforeAnyGetFinished() throws Exception {
    start(2, true);
    StorageJob query = new StorageJob(nextId++, StorageKind.QUERY, List.of(JobRow.query("ns_0")));
    runWhole(query, 2);
    assertFalse(ex.restoreEstimate().known(), "a QUERY measures the latency alone");
    StorageJob slow = get(ROWS);
    ex.submit(slow);
    Runnable first = ex.takeWork(StorageKind.GET);
    Runnable second = ex.takeWork(StorageKind.GET);
    clock.advanceMs(10);
    first.run();
    assertFalse(ex.restoreEstimate().known(), "half a wave");
    second.run();
    RestoreEstimate r = ex.restoreEstimate();
    assertTrue(r.known(), "known from a running GET's wave: " + r);
    assertEquals(0, r.gets());
    assertEquals(2_000_000, r.latencyNs(), 1);
    double want = 4.0 * ROW * 1e9 / 8_000_000; // 10 ms less 2 ms of latency
    assertEquals(want, r.bytesPerSecond(), want * 1e-9);
    Runnable next;
    while ((next = ex.takeWork(StorageKind.GET)) != null) {
      next.run();
    }
    ex.poll();
  }

  /**
   * A store whose workers each read one row a millisecond: its GETs' shares land one by one, and
   * between landings the bytes of the returned shares over the time since the GET started fall far
   * below the store's rate; the estimate never does. On 64d8b29 it fell to a twentieth of the
   * steady rate before a GET's second wave landed (with a landing listener), and to a quarter once
   * the first of four even shares landed (4 workers without one).
   */
  @ParameterizedTest(name = "workers={0} landing listener={1}")
  @CsvSource({"2, true", "4, true", "2, false", "4, false"})
  void shouldNotTakeASteadyStoreForASlowerOneWhileItsGetRuns(int workers, boolean listener)
      throws Exception {
    start(workers, listener);
    int n = Math.min(listener ? workers * L3Executor.LANDING_SHARES_PER_WORKER : workers, 16);
    runSteadily(get(ROWS), workers, n, () -> {});
    RestoreEstimate finished = ex.restoreEstimate();
    assertEquals(1, finished.gets());
    double steady = workers * (double) ROW * 1e3; // rows per ms, all workers together
    assertEquals(steady, finished.bytesPerSecond(), steady * 1e-9, "the first GET measured it");
    List<Double> seen = new ArrayList<>();
    runSteadily(
        get(ROWS),
        workers,
        n,
        () -> {
          double bw = ex.restoreEstimate().bytesPerSecond();
          seen.add(bw);
          assertTrue(
              bw >= SLOWDOWN * finished.bytesPerSecond(),
              "a steady store reported at " + bw + " against " + finished.bytesPerSecond());
        });
    assertTrue(seen.size() > 60, "checked at every landing and millisecond: " + seen.size());
    assertEquals(2, ex.restoreEstimate().gets());
    assertEquals(steady, ex.restoreEstimate().bytesPerSecond(), steady * 1e-9);
  }

  /**
   * Runs {@code job} as {@code workers} workers would on a store that reads one row a millisecond
   * per call: each worker takes the next share as soon as its call returns. {@code check} runs
   * after every landing and every millisecond of the clock.
   */
  private void runSteadily(StorageJob job, int workers, int n, Runnable check) {
    int lead = workers;
    int[] cuts = L3Executor.shareCuts(job.rows().size(), n, lead);
    ex.submit(job);
    Runnable[] call = new Runnable[workers];
    long[] endNs = new long[workers];
    int next = 0;
    for (int w = 0; w < workers && next < n; w++, next++) {
      call[w] = ex.takeWork(StorageKind.GET);
      assertNotNull(call[w], "share " + next);
      endNs[w] = clock.getAsLong() + (cuts[next + 1] - cuts[next]) * 1_000_000L;
    }
    while (true) {
      int w = -1;
      for (int i = 0; i < workers; i++) {
        if (call[i] != null && (w < 0 || endNs[i] < endNs[w])) {
          w = i;
        }
      }
      if (w < 0) {
        break;
      }
      while (clock.getAsLong() < endNs[w]) {
        clock.advanceMs(1);
        check.run();
      }
      call[w].run();
      call[w] = null;
      check.run();
      if (next < n) {
        call[w] = ex.takeWork(StorageKind.GET);
        assertNotNull(call[w], "share " + next);
        endNs[w] = clock.getAsLong() + (cuts[next + 1] - cuts[next]) * 1_000_000L;
        next++;
      }
    }
    assertEquals(n, next);
    assertTrue(
        ex.poll().completions().stream().anyMatch(d -> d.operationId() == job.operationId()));
  }
}

package io.tokenspeed.l3;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * GET and PUT jobs of at least twice {@link L3Executor#SHARE_MIN_BYTES} run as contiguous shares of
 * their rows on several workers at once, and still complete exactly once with the facts of all
 * their calls.
 */
class L3ExecutorSharesTest {
  private static final int HOST_BYTES = 32 << 20;
  private static final int ROW = 256 << 10;

  private final Arena arena = Arena.ofShared();
  private final MemorySegment host = arena.allocate(HOST_BYTES);
  private final Map<Long, StorageDone> done = new HashMap<>();
  private final ManualClock clock = new ManualClock();
  private ScriptedStore store;
  private L3Executor executor;
  private long nextId = 1;

  @AfterEach
  void tearDown() {
    if (executor != null) {
      store.openGate();
      executor.close();
    }
    arena.close();
  }

  private void start(int workers) throws Exception {
    store = new ScriptedStore();
    executor =
        L3Executor.start(
            store,
            new L3ExecutorConfig(workers, workers, workers, 64, 64, 64, 256, 1_000, 60_000),
            host,
            clock);
  }

  /** {@code rows} rows of {@link #ROW} bytes from {@code offset}, keyed by the job's id. */
  private StorageJob job(StorageKind kind, long offset, int rows) {
    long id = nextId++;
    List<JobRow> list = new ArrayList<>();
    for (int i = 0; i < rows; i++) {
      list.add(JobRow.owned("ns_" + i, new HostRange(offset + (long) i * ROW, ROW)));
    }
    return new StorageJob(id, kind, list);
  }

  private StorageDone await(long id) {
    Awaits.until(
        "record of operation " + id,
        () -> {
          for (StorageDone d : executor.poll().completions()) {
            assertFalse(done.containsKey(d.operationId()), "record delivered twice: " + d);
            done.put(d.operationId(), d);
          }
          return done.containsKey(id);
        });
    return done.get(id);
  }

  private static int expectedShares(int workers, int rows) {
    long bytes = (long) rows * ROW;
    int n = (int) Math.min(Math.min(workers, rows), bytes / L3Executor.SHARE_MIN_BYTES);
    return n < 2 ? 1 : n;
  }

  @Test
  void shouldRunTheSharesOfOneBigGetAtOnceOnIdleWorkersAndDeliverOneRecord() throws Exception {
    start(4);
    for (int i = 0; i < 8 << 20; i++) {
      host.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 7 + i / 4099));
    }
    StorageJob put = job(StorageKind.PUT, 0, 32);
    assertTrue(executor.submit(put).accepted());
    assertEquals(List.of(32), List.of(await(put.operationId()).okCount()));
    assertEquals(4, store.calls.get(), "8 MiB of PUT in four shares");

    store.gate();
    store.seenKeys.clear();
    StorageJob get = job(StorageKind.GET, 16 << 20, 32);
    assertTrue(executor.submit(get).accepted());
    store.awaitEntered(4); // all four shares are inside the store together
    assertTrue(executor.poll().completions().isEmpty(), "no record before the last share");
    store.release(3);
    Thread.sleep(20);
    assertTrue(executor.poll().completions().isEmpty(), "still none with one share running");
    store.openGate();
    StorageDone g = await(get.operationId());
    assertEquals(32, g.okCount());
    assertTrue(g.retired());
    assertEquals(32L * ROW, g.bytes());
    assertArrayEquals(
        host.asSlice(0, 8 << 20).toArray(ValueLayout.JAVA_BYTE),
        host.asSlice(16 << 20, 8 << 20).toArray(ValueLayout.JAVA_BYTE),
        "every byte came back to its own row");
    List<String> seen = new ArrayList<>();
    List<List<String>> calls = new ArrayList<>(store.seenKeys);
    calls.sort((a, b) -> Integer.compare(index(a.get(0)), index(b.get(0))));
    for (List<String> c : calls) {
      assertEquals(8, c.size(), "equal contiguous shares");
      seen.addAll(c);
    }
    List<String> want = new ArrayList<>();
    for (int i = 0; i < 32; i++) {
      want.add("ns_" + i);
    }
    assertEquals(want, seen, "the shares cover the job's rows once, in order");
    assertEquals(8, executor.metrics().backendCalls(), "one call per share");
  }

  private static int index(String key) {
    return Integer.parseInt(key.substring(3));
  }

  @Test
  void shouldRunASmallJobInOneCall() throws Exception {
    start(4);
    StorageJob put = job(StorageKind.PUT, 0, 7); // 1.75 MiB: under two shares' worth
    executor.submit(put);
    assertEquals(7, await(put.operationId()).okCount());
    assertEquals(1, store.calls.get());
  }

  @Test
  void shouldFailTheWholeJobWhenOneShareFailsAndCountItOnce() throws Exception {
    start(4);
    store.script(
        (op, keys, segs) -> {
          if (keys.contains("ns_9")) {
            throw new IOException("connection reset");
          }
          List<RowResult> rows = new ArrayList<>();
          for (int i = 0; i < keys.size(); i++) {
            rows.add(new RowResult.Ok(ROW, false));
          }
          return StoreResult.of(rows);
        });
    StorageJob put = job(StorageKind.PUT, 0, 16);
    executor.submit(put);
    StorageDone d = await(put.operationId());
    assertEquals(Collections.nCopies(16, KeyOutcome.FAILED), d.outcomes());
    assertTrue(d.retired(), "this store's failures retire");
    assertEquals(4, store.calls.get(), "every share ran");
    assertEquals(1, executor.metrics().workerFaults());
    assertEquals("COOLDOWN", executor.metrics().healthState(), "a failed call is an outage");
  }

  @Test
  void shouldQuarantineWhenOneShareCannotProveRetirement() throws Exception {
    start(2);
    store.script(
        (op, keys, segs) -> {
          List<RowResult> rows = new ArrayList<>();
          for (int i = 0; i < keys.size(); i++) {
            rows.add(new RowResult.Ok(ROW, false));
          }
          return new StoreResult(rows, !keys.contains("ns_0"));
        });
    StorageJob put = job(StorageKind.PUT, 0, 8);
    executor.submit(put);
    StorageDone d = await(put.operationId());
    assertFalse(d.retired(), "one share's unretired answer makes the job unretired");
    assertTrue(executor.quarantined());
    assertEquals(2, store.calls.get());
  }

  @Test
  void shouldDeliverACancelledSplitJobAsDetachedOnceEveryShareReturned() throws Exception {
    start(3);
    store.gate();
    StorageJob put = job(StorageKind.PUT, 0, 12);
    executor.submit(put);
    store.awaitEntered(3);
    assertTrue(executor.cancel(put.operationId()));
    store.release(2);
    Thread.sleep(20);
    assertTrue(executor.poll().completions().isEmpty(), "one share is still inside the store");
    store.openGate();
    StorageDone d = await(put.operationId());
    assertTrue(d.detached());
    assertEquals(12, d.okCount(), "the calls went on and their facts are real");
  }

  /**
   * Seeded workloads of GETs and PUTs of many sizes on 1 to 4 workers, with store calls that throw,
   * answer with the wrong number of rows or succeed: each operation completes exactly once, its
   * calls cover its rows exactly once, it has one call per expected share, and its outcomes are all
   * OK exactly when every call succeeded.
   */
  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8})
  void shouldCompleteEverySplitJobOnceWithTheFactsOfAllItsCalls(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    int workers = 2 + rnd.nextInt(3);
    start(workers);
    Map<String, Long> failing = new java.util.concurrent.ConcurrentHashMap<>();
    Set<Long> broken = java.util.concurrent.ConcurrentHashMap.newKeySet();
    Map<Long, List<List<String>>> callsOf = new java.util.concurrent.ConcurrentHashMap<>();
    store.script(
        (op, keys, segs) -> {
          long id = Long.parseLong(keys.get(0).substring(1, keys.get(0).indexOf('_')));
          callsOf
              .computeIfAbsent(id, k -> Collections.synchronizedList(new ArrayList<>()))
              .add(List.copyOf(keys));
          int roll = Math.floorMod(keys.get(0).hashCode() * 31 + (int) seed, 30);
          if (roll == 0) {
            broken.add(id);
            throw new IOException("reset");
          }
          List<RowResult> rows = new ArrayList<>();
          for (int i = 0; i < keys.size() - (roll == 1 ? 1 : 0); i++) {
            rows.add(new RowResult.Ok(segs.get(i).byteSize(), false));
          }
          if (roll == 1) {
            broken.add(id);
          }
          return StoreResult.of(rows);
        });
    List<StorageJob> jobs = new ArrayList<>();
    Set<Long> probes = new HashSet<>();
    List<StorageJob> batch = new ArrayList<>();
    for (int j = 0; j < 24; j++) {
      int rows = 1 + rnd.nextInt(40);
      long id = nextId++;
      List<JobRow> list = new ArrayList<>();
      for (int i = 0; i < rows; i++) {
        list.add(JobRow.owned("j" + id + "_" + i, new HostRange((long) i * ROW, ROW)));
      }
      StorageJob job =
          new StorageJob(id, rnd.nextBoolean() ? StorageKind.GET : StorageKind.PUT, list);
      SubmitResult r = executor.submit(job);
      if (r.accepted()) {
        jobs.add(job);
        batch.add(job);
        if (r == SubmitResult.QUEUED_AS_PROBE) {
          probes.add(id); // a probe runs in one call
        }
      } else {
        await(id); // refused (an outage's cooldown): its record still comes, once
        clock.advanceMs(1_000); // the next submission is the recovery probe
      }
      // up to three jobs at a time: their shares interleave, and an outage stops only those
      if (batch.size() == 3 || probes.contains(id) || rnd.nextInt(3) == 0) {
        for (StorageJob b : batch) {
          await(b.operationId());
        }
        batch.clear();
      }
    }
    int verified = 0;
    int split = 0;
    for (StorageJob job : jobs) {
      StorageDone d = await(job.operationId());
      int rows = job.rows().size();
      List<List<String>> calls = callsOf.getOrDefault(job.operationId(), List.of());
      if (calls.isEmpty()) {
        continue; // rejected from the queue by an earlier job's outage: no call reached the store
      }
      assertEquals(
          probes.contains(job.operationId()) ? 1 : expectedShares(workers, rows),
          calls.size(),
          "calls of " + job.operationId());
      verified++;
      split += calls.size() > 1 ? 1 : 0;
      Set<String> covered = new HashSet<>();
      for (List<String> c : calls) {
        for (String k : c) {
          assertTrue(covered.add(k), "row " + k + " was in two calls");
        }
      }
      assertEquals(rows, covered.size(), "every row in some call");
      boolean ok = !broken.contains(job.operationId());
      assertEquals(
          Collections.nCopies(rows, ok ? KeyOutcome.OK : KeyOutcome.FAILED),
          d.outcomes(),
          "outcomes of " + job.operationId());
    }
    assertTrue(executor.poll().completions().isEmpty(), "no record beyond one per operation");
    assertTrue(
        verified >= 8 && split >= 5,
        "the workload reached the store: " + verified + " jobs checked, " + split + " split");
  }

  @ParameterizedTest
  @ValueSource(longs = {1, 2, 3, 4, 5, 6})
  void shouldTellTheLandingListenerEachRowThatLandedInFullBeforeTheJobsRecord(long seed)
      throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    int workers = 1 + rnd.nextInt(4);
    start(workers);
    List<long[]> told = Collections.synchronizedList(new ArrayList<>());
    executor.onLanded(
        (op, rows) -> {
          for (int r : rows) {
            told.add(new long[] {op, r, executor.recordsProduced()});
          }
        });
    int rows = 8 + rnd.nextInt(25);
    Set<Integer> missing = new HashSet<>();
    for (int i = 0; i < rows; i++) {
      if (rnd.nextInt(5) == 0) {
        missing.add(i);
      } else {
        store.objects.put("ns_" + i, new byte[ROW]);
      }
    }
    long before = executor.recordsProduced();
    StorageJob get = job(StorageKind.GET, 0, rows);
    assertTrue(executor.submit(get).accepted());
    StorageDone d = await(get.operationId());
    Set<Integer> landed = new HashSet<>();
    for (long[] t : told) {
      assertEquals(get.operationId(), t[0]);
      assertTrue(landed.add((int) t[1]), "row " + t[1] + " told twice");
      assertEquals(before, t[2], "told before the job's record was produced");
    }
    for (int i = 0; i < rows; i++) {
      assertEquals(!missing.contains(i), landed.contains(i), "row " + i + " landed");
      assertEquals(
          missing.contains(i) ? KeyOutcome.MISSING : KeyOutcome.OK,
          d.outcomes().get(i),
          "row " + i);
    }
    int calls = store.calls.get();
    int shares =
        (int)
            Math.min(
                Math.min((long) workers * L3Executor.LANDING_SHARES_PER_WORKER, rows),
                (long) rows * ROW / L3Executor.SHARE_MIN_BYTES);
    assertEquals(Math.max(1, shares), calls, "finer shares with a landing listener");
  }

  @Test
  void shouldNotTellTheLandingListenerOfPutsOrOfRowsReadShort() throws Exception {
    start(2);
    List<Integer> told = Collections.synchronizedList(new ArrayList<>());
    executor.onLanded(
        (op, rows) -> {
          for (int r : rows) {
            told.add(r);
          }
        });
    StorageJob put = job(StorageKind.PUT, 0, 8);
    assertTrue(executor.submit(put).accepted());
    assertEquals(8, await(put.operationId()).okCount());
    assertTrue(told.isEmpty(), "a PUT lands nothing: " + told);
    store.script(
        (op, keys, segments) -> {
          List<RowResult> out = new ArrayList<>();
          for (int i = 0; i < keys.size(); i++) {
            out.add(new RowResult.Ok(ROW - 1, false)); // one byte short
          }
          return StoreResult.of(out);
        });
    StorageJob get = job(StorageKind.GET, 4 << 20, 8);
    assertTrue(executor.submit(get).accepted());
    StorageDone d = await(get.operationId());
    assertEquals(0, d.okCount());
    assertTrue(told.isEmpty(), "a short read is no landing: " + told);
  }
}

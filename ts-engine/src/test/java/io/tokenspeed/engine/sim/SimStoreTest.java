package io.tokenspeed.engine.sim;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.engine.sim.SimStore.Fault;
import io.tokenspeed.engine.sim.SimStore.Faults;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The simulated store under stepped executors: seeded faults, simulated time, exact replay. */
class SimStoreTest {

  private static final int ROW_BYTES = 256;
  private static final int SLOTS = 64;
  private static final int MAX_ROWS = 4;
  private static final L3ExecutorConfig CONFIG = L3ExecutorConfig.defaults();

  private final Arena arena = Arena.ofShared();
  private final AtomicLong clockNs = new AtomicLong(1_000_000_000L);

  @AfterEach
  void tearDown() {
    arena.close();
  }

  /** One rank's executor over its own Host allocation, jobs in slots of {@code MAX_ROWS} rows. */
  private final class Rank {
    final MemorySegment host = arena.allocate((long) SLOTS * MAX_ROWS * ROW_BYTES);
    final L3Executor executor;
    final Map<Long, StorageJob> jobs = new HashMap<>();
    final Map<Long, Integer> slots = new HashMap<>();
    final ArrayDeque<Integer> freeSlots = new java.util.ArrayDeque<>();
    long nextId = 1;

    Rank(SimStore store) throws Exception {
      executor = L3Executor.startStepped(store, CONFIG, host, clockNs::get);
      store.attach(executor, CONFIG);
      for (int i = 0; i < SLOTS; i++) {
        freeSlots.add(i);
      }
    }

    StorageJob submit(StorageKind kind, List<String> keys) {
      long id = nextId++;
      int slot = freeSlots.removeFirst(); // a slot's bytes are the job's until its record
      slots.put(id, slot);
      List<JobRow> rows = new ArrayList<>();
      for (int i = 0; i < keys.size(); i++) {
        HostRange range = new HostRange(((long) slot * MAX_ROWS + i) * ROW_BYTES, ROW_BYTES);
        if (kind == StorageKind.QUERY) {
          rows.add(JobRow.query(keys.get(i)));
        } else {
          rows.add(JobRow.owned(keys.get(i), range));
          MemorySegment bytes = host.asSlice(range.offset(), ROW_BYTES);
          if (kind == StorageKind.PUT) {
            fill(bytes, keys.get(i));
          } else {
            bytes.fill((byte) 0);
          }
        }
      }
      StorageJob job = new StorageJob(id, kind, rows);
      jobs.put(id, job);
      executor.submit(job);
      return job;
    }

    /** Polls; returns each record, a GET's OK rows checked against the bytes their PUT wrote. */
    List<String> poll(int[] wrongOkRows) {
      return poll(wrongOkRows, new HashMap<>());
    }

    /** The same, counting the records' outcomes into {@code outcomes}. */
    List<String> poll(int[] wrongOkRows, Map<KeyOutcome, Integer> outcomes) {
      List<String> out = new ArrayList<>();
      for (StorageDone d : executor.poll().completions()) {
        for (KeyOutcome o : d.outcomes()) {
          outcomes.merge(o, 1, Integer::sum);
        }
        StorageJob job = jobs.remove(d.operationId());
        freeSlots.add(slots.remove(d.operationId()));
        if (job != null && d.kind() == StorageKind.GET) {
          for (int i = 0; i < d.outcomes().size(); i++) {
            JobRow row = job.rows().get(i);
            if (d.outcomes().get(i) == KeyOutcome.OK
                && !matches(host.asSlice(row.range().offset(), ROW_BYTES), row.key())) {
              wrongOkRows[0]++;
            }
          }
        }
        out.add(d.toString());
      }
      return out;
    }
  }

  private static void fill(MemorySegment bytes, String key) {
    SplittableRandom r = new SplittableRandom(key.hashCode());
    for (long i = 0; i < bytes.byteSize(); i++) {
      bytes.set(ValueLayout.JAVA_BYTE, i, (byte) r.nextInt());
    }
  }

  private static boolean matches(MemorySegment bytes, String key) {
    SplittableRandom r = new SplittableRandom(key.hashCode());
    for (long i = 0; i < bytes.byteSize(); i++) {
      if (bytes.get(ValueLayout.JAVA_BYTE, i) != (byte) r.nextInt()) {
        return false;
      }
    }
    return true;
  }

  /** What a run produced. */
  private record Run(
      SimStore store, List<String> records, int wrongOkRows, Map<KeyOutcome, Integer> outcomes) {}

  /** Two ranks submit seeded jobs over {@code ticks} ticks of up to 2 ms each. */
  private Run run(long seed, Faults faults, int ticks) throws Exception {
    SimStore store = new SimStore(seed, clockNs::get, faults, true);
    List<Rank> ranks = List.of(new Rank(store), new Rank(store));
    SplittableRandom workload = new SplittableRandom(seed * 31 + 7);
    List<String> records = new ArrayList<>();
    int[] wrong = new int[1];
    Map<KeyOutcome, Integer> outcomes = new HashMap<>();
    for (int t = 0; t < ticks; t++) {
      clockNs.addAndGet(workload.nextLong(2_000_000));
      for (Rank k : ranks) {
        if (workload.nextInt(3) == 0 && !k.freeSlots.isEmpty()) {
          StorageKind kind = StorageKind.values()[workload.nextInt(3)];
          List<String> keys = new ArrayList<>();
          int n = 1 + workload.nextInt(MAX_ROWS);
          for (int i = 0; i < n; i++) {
            keys.add("ns_k" + workload.nextInt(200));
          }
          k.submit(kind, keys);
        }
      }
      store.step();
      for (Rank k : ranks) {
        for (String r : k.poll(wrong, outcomes)) {
          records.add(t + " " + r);
        }
      }
    }
    return new Run(store, records, wrong[0], outcomes);
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3})
  void shouldReplayTheSameCallsAndRecordsWhenRunTwiceWithOneSeed(long seed) throws Exception {
    Run first = run(seed, Faults.HOSTILE, 3_000);
    clockNs.set(1_000_000_000L);
    Run second = run(seed, Faults.HOSTILE, 3_000);
    assertFalse(first.store().log().isEmpty());
    assertEquals(first.store().log(), second.store().log());
    assertEquals(first.store().logDigest(), second.store().logDigest());
    assertEquals(first.records(), second.records());
    clockNs.set(1_000_000_000L);
    Run other = run(seed + 100, Faults.HOSTILE, 3_000);
    assertNotEquals(first.store().logDigest(), other.store().logDigest());
  }

  @Test
  void shouldInjectEveryFaultOfACorrectStoreAndNeverAnswerOkWithWrongBytesWhenHostile()
      throws Exception {
    Run run = run(42, Faults.HOSTILE, 40_000);
    for (Fault f : Fault.values()) {
      if (f != Fault.UNRETIRED && f != Fault.WRONG_BYTES && f != Fault.WRONG_WRITE) {
        assertTrue(run.store().count(f) > 0, f + " never happened");
      }
    }
    assertEquals(0, run.store().count(Fault.UNRETIRED));
    assertEquals(0, run.store().count(Fault.WRONG_BYTES));
    assertEquals(0, run.store().count(Fault.WRONG_WRITE));
    assertEquals(0, run.wrongOkRows(), "a GET answered OK with bytes its PUT did not write");
    for (KeyOutcome o : KeyOutcome.values()) {
      assertTrue(run.outcomes().getOrDefault(o, 0) > 0, o + " never came back");
    }
  }

  @Test
  void shouldLandWrongBytesThatAnswerOkWhenTheBugIsPlanted() throws Exception {
    Run run = run(43, Faults.NONE.with(Fault.WRONG_BYTES, 0.05), 5_000);
    assertTrue(run.store().count(Fault.WRONG_BYTES) > 0);
    assertTrue(run.wrongOkRows() > 0, "no wrong bytes reached the Host buffers as OK");
  }

  @Test
  void shouldWriteWrongBytesThatReadBackOkWhenTheBugIsPlanted() throws Exception {
    Run run = run(44, Faults.NONE.with(Fault.WRONG_WRITE, 0.05), 5_000);
    assertTrue(run.store().count(Fault.WRONG_WRITE) > 0);
    assertTrue(run.wrongOkRows() > 0, "no wrongly written object read back as OK");
  }

  @Test
  void shouldTellEveryWriteAndHandBackOnlyIntactObjects() throws Exception {
    SimStore store = new SimStore(11, clockNs::get, Faults.NONE, true);
    List<String> written = new ArrayList<>();
    store.onWrite((key, bytes) -> written.add(key + "=" + bytes.length));
    Rank k = new Rank(store);
    runAlone(store, k, StorageKind.PUT, List.of("ns_a", "ns_b"));
    runAlone(store, k, StorageKind.PUT, List.of("ns_a")); // already there: nothing is written
    assertEquals(2, written.size(), written.toString());
    List<String> intact = new ArrayList<>();
    store.forEachIntact((key, bytes) -> intact.add(key));
    assertEquals(List.of("ns_a", "ns_b"), intact.stream().sorted().toList());
  }

  @Test
  void shouldDropTheCallsOfADetachedExecutorAndTakeNoMoreOfItsWork() throws Exception {
    SimStore store = new SimStore(12, clockNs::get, Faults.NONE.with(Fault.HUNG, 1), true);
    Rank k = new Rank(store);
    k.submit(StorageKind.PUT, List.of("ns_a"));
    store.step();
    assertEquals(1, store.inFlight());
    assertEquals(1, store.detach(List.of(0)));
    assertEquals(0, store.inFlight());
    assertEquals(0, store.hungCalls());
    k.submit(StorageKind.PUT, List.of("ns_b"));
    clockNs.addAndGet(1_000_000_000L);
    assertEquals(0, store.step(), "a detached executor's work is never taken");
    assertEquals(0, store.size());
  }

  @Test
  void shouldCompleteACallOnlyOnceTheClockPassesItsDueTime() throws Exception {
    SimStore store = new SimStore(7, clockNs::get, Faults.NONE, true);
    Rank k = new Rank(store);
    k.submit(StorageKind.PUT, List.of("ns_a"));
    assertEquals(0, store.step(), "nothing is due when it is taken");
    assertEquals(1, store.inFlight());
    long due = store.nextDueNs();
    assertTrue(due - clockNs.get() >= Faults.NONE.minLatencyNs());
    clockNs.set(due - 1);
    assertEquals(0, store.step());
    assertTrue(k.poll(new int[1]).isEmpty());
    clockNs.set(due);
    assertEquals(1, store.step());
    List<String> done = k.poll(new int[1]);
    assertEquals(1, done.size());
    assertTrue(done.getFirst().contains("[OK]"), done.getFirst());
    assertEquals(Long.MAX_VALUE, store.nextDueNs());
  }

  /** Submits one job on an idle store, runs its call when due, and returns its record. */
  private StorageDone runAlone(SimStore store, Rank k, StorageKind kind, List<String> keys) {
    k.submit(kind, keys);
    store.step();
    clockNs.set(store.nextDueNs());
    assertEquals(1, store.step());
    return k.executor.poll().completions().getFirst();
  }

  @Test
  void shouldHoldAHungCallUntilTheStoreRestartsAndThenFailItRetired() throws Exception {
    SimStore store = new SimStore(8, clockNs::get, Faults.NONE.with(Fault.HUNG, 1), true);
    Rank k = new Rank(store);
    k.submit(StorageKind.GET, List.of("ns_a"));
    store.step();
    clockNs.addAndGet(3_600_000_000_000L);
    assertEquals(0, store.step(), "a hung call never comes due");
    assertEquals(1, store.hungCalls());
    assertEquals(Long.MAX_VALUE, store.nextDueNs());
    store.restart();
    assertEquals(0, store.inFlight());
    StorageDone done = k.executor.poll().completions().getFirst();
    assertEquals(List.of(KeyOutcome.FAILED), done.outcomes());
    assertTrue(done.retired(), "the restart ended the call: its buffers are retired");
    assertFalse(k.executor.quarantined());
  }

  @Test
  void shouldQuarantineTheExecutorWhenACallAnswersUnretired() throws Exception {
    SimStore store = new SimStore(9, clockNs::get, Faults.NONE.with(Fault.UNRETIRED, 1), true);
    Rank k = new Rank(store);
    StorageDone done = runAlone(store, k, StorageKind.PUT, List.of("ns_a"));
    assertFalse(done.retired());
    assertTrue(k.executor.quarantined());
    assertEquals(1, store.count(Fault.UNRETIRED));
  }

  @Test
  void shouldRefusePutsPastItsCapacityAndTakeThemAgainOnceANamespaceIsDeleted() throws Exception {
    Faults two = new Faults(1, 2, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0); // room for two objects
    SimStore store = new SimStore(10, clockNs::get, two, true);
    Rank k = new Rank(store);
    StorageDone done = runAlone(store, k, StorageKind.PUT, List.of("ns_a", "ns_b", "ns_c"));
    assertEquals(List.of(KeyOutcome.OK, KeyOutcome.OK, KeyOutcome.FAILED), done.outcomes());
    assertTrue(done.retired(), "a refusal is retired");
    assertEquals(1, store.count(Fault.REFUSED));
    assertEquals(2, store.deleteNamespace("ns"));
    assertEquals(
        List.of(KeyOutcome.OK), runAlone(store, k, StorageKind.PUT, List.of("ns_c")).outcomes());
  }
}

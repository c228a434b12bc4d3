package io.tokenspeed.l3;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreConfigurationException;
import io.tokenspeed.l3.spi.StoreResult;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class L3ExecutorTest {

  private static final int HOST_BYTES = 1 << 20;

  private final Arena arena = Arena.ofShared();
  private final MemorySegment host = arena.allocate(HOST_BYTES);
  private final ManualClock clock = new ManualClock();
  private final Map<Long, StorageDone> done = new HashMap<>();
  private PressureSnapshot lastPressure = PressureSnapshot.IDLE;
  private L3Executor executor;
  private ScriptedStore store;
  private long nextId = 1;

  @AfterEach
  void tearDown() {
    if (executor != null) {
      store.openGate();
      executor.close();
    }
    arena.close();
  }

  /**
   * A config whose join deadline is far beyond any scheduling delay: tests that are about the
   * deadline set their own, the others must not depend on how fast a loaded machine joins.
   */
  private L3ExecutorConfig config(int workers, int queue, int maxOutstanding, long cooldownMs) {
    return new L3ExecutorConfig(
        workers, workers, workers, queue, queue, queue, maxOutstanding, cooldownMs, 60_000);
  }

  private void start(ScriptedStore s, L3ExecutorConfig c) throws Exception {
    store = s;
    executor = L3Executor.start(s, c, host, clock);
  }

  private StorageJob query(String... keys) {
    List<JobRow> rows = new ArrayList<>();
    for (String k : keys) {
      rows.add(JobRow.query(k));
    }
    return new StorageJob(nextId++, StorageKind.QUERY, rows);
  }

  private StorageJob rw(StorageKind kind, long offset, int length, String... keys) {
    List<JobRow> rows = new ArrayList<>();
    for (int i = 0; i < keys.length; i++) {
      rows.add(JobRow.owned(keys[i], new HostRange(offset + (long) i * length, length)));
    }
    return new StorageJob(nextId++, kind, rows);
  }

  /** Polls until the record of {@code id} arrived. */
  private StorageDone await(long id) {
    Awaits.until(
        "record of operation " + id,
        () -> {
          L3Poll p = executor.poll();
          lastPressure = p.pressure();
          for (StorageDone d : p.completions()) {
            assertFalse(done.containsKey(d.operationId()), "record delivered twice: " + d);
            done.put(d.operationId(), d);
          }
          return done.containsKey(id);
        });
    return done.get(id);
  }

  private void fill(long offset, int length, int seed) {
    for (int i = 0; i < length; i++) {
      host.set(ValueLayout.JAVA_BYTE, offset + i, (byte) (i * 31 + seed));
    }
  }

  @Test
  void shouldRoundTripBytesThroughTheStore() throws Exception {
    start(new ScriptedStore(), L3ExecutorConfig.defaults());
    fill(4096, 8192, 7);
    StorageJob put = rw(StorageKind.PUT, 4096, 4096, "ns_a", "ns_b");
    assertEquals(SubmitResult.QUEUED, executor.submit(put));
    StorageDone p = await(put.operationId());
    assertEquals(List.of(KeyOutcome.OK, KeyOutcome.OK), p.outcomes());
    assertTrue(p.retired());
    assertEquals(8192, p.bytes());
    StorageJob get = rw(StorageKind.GET, 65536, 4096, "ns_a", "ns_b");
    executor.submit(get);
    StorageDone g = await(get.operationId());
    assertEquals(2, g.okCount());
    assertEquals(
        -1L,
        host.asSlice(4096, 8192).mismatch(host.asSlice(65536, 8192)),
        "bytes read back equal bytes written");
    L3Metrics m = executor.metrics();
    assertEquals(2, m.putsNewlyWritten());
    assertEquals(8192, m.get().payloadBytes());
  }

  @Test
  void shouldReportAlreadyExistedSeparatelyFromNewlyWritten() throws Exception {
    start(new ScriptedStore(), L3ExecutorConfig.defaults());
    await(submitted(rw(StorageKind.PUT, 0, 128, "ns_x")));
    await(submitted(rw(StorageKind.PUT, 0, 128, "ns_x", "ns_y")));
    L3Metrics m = executor.metrics();
    assertEquals(2, m.putsNewlyWritten());
    assertEquals(1, m.putsAlreadyExisted());
    assertEquals(3, m.put().okKeys());
  }

  private long submitted(StorageJob job) {
    assertTrue(executor.submit(job).accepted(), "accepted " + job.operationId());
    return job.operationId();
  }

  @Test
  void shouldRejectWhenAKindsQueueIsFullWithoutTouchingOtherKinds() throws Exception {
    ScriptedStore s = new ScriptedStore();
    s.gate();
    start(s, config(1, 2, 100, 1_000));
    long running = submitted(rw(StorageKind.GET, 0, 64, "ns_r"));
    s.awaitEntered(1);
    submitted(rw(StorageKind.GET, 0, 64, "ns_q1"));
    submitted(rw(StorageKind.GET, 0, 64, "ns_q2"));
    StorageJob overflow = rw(StorageKind.GET, 0, 64, "ns_q3");
    assertEquals(SubmitResult.REJECTED_QUEUE_FULL, executor.submit(overflow));
    StorageDone rejected = await(overflow.operationId());
    assertEquals(List.of(KeyOutcome.FAILED), rejected.outcomes());
    assertTrue(rejected.retired());
    assertFalse(rejected.detached());
    assertEquals(
        SubmitResult.QUEUED, executor.submit(query("ns_other")), "QUERY has its own queue");
    assertEquals(2, lastPressure.queuedJobs(), "two GETs wait");
    s.openGate();
    await(running);
  }

  @Test
  void shouldCountQueuedRunningAndUndeliveredJobsAgainstTheOperationLimit() throws Exception {
    ScriptedStore s = new ScriptedStore();
    start(s, config(2, 10, 3, 1_000));
    long a = submitted(query("ns_a"));
    long b = submitted(query("ns_b"));
    Awaits.until("two completions", () -> executor.metrics().query().completedJobs() == 2);
    long c = submitted(query("ns_c"));
    // a and b finished but are undelivered: with c that is the limit of 3
    StorageJob d = query("ns_d");
    assertEquals(SubmitResult.REJECTED_OPERATION_LIMIT, executor.submit(d));
    await(a);
    await(b);
    await(c);
    assertTrue(done.containsKey(d.operationId()));
    assertEquals(SubmitResult.QUEUED, executor.submit(query("ns_e")), "polling freed the credits");
  }

  @Test
  void shouldAcknowledgeQueuedCancellationWhileEveryWorkerIsBusy() throws Exception {
    ScriptedStore s = new ScriptedStore();
    s.gate();
    start(s, config(1, 4, 100, 1_000));
    long running = submitted(rw(StorageKind.PUT, 0, 64, "ns_busy"));
    s.awaitEntered(1);
    long queued = submitted(rw(StorageKind.PUT, 64, 64, "ns_waiting"));
    assertTrue(executor.cancel(queued));
    StorageDone c = await(queued);
    assertTrue(c.detached());
    assertTrue(c.retired());
    assertEquals(List.of(KeyOutcome.FAILED), c.outcomes());
    assertEquals(1, s.calls.get(), "the cancelled job never reached the store");
    assertFalse(executor.cancel(queued), "cancelling twice is a no-op");
    s.openGate();
    assertFalse(await(running).detached());
  }

  @Test
  void shouldCallTheCompletionListenerOnceForEveryRecordWhateverProducedIt() throws Exception {
    ScriptedStore s = new ScriptedStore();
    s.gate();
    start(s, config(1, 1, 100, 1_000));
    java.util.concurrent.atomic.AtomicInteger calls =
        new java.util.concurrent.atomic.AtomicInteger();
    executor.onCompletion(calls::incrementAndGet);
    long running = submitted(rw(StorageKind.PUT, 0, 64, "ns_running"));
    s.awaitEntered(1);
    long queued = submitted(rw(StorageKind.PUT, 64, 64, "ns_queued"));
    assertEquals(0, calls.get(), "nothing has completed yet");
    StorageJob full = rw(StorageKind.PUT, 128, 64, "ns_full");
    assertEquals(SubmitResult.REJECTED_QUEUE_FULL, executor.submit(full));
    assertEquals(1, calls.get(), "a refusal is a record: the caller's thread runs the listener");
    assertTrue(executor.cancel(queued));
    assertEquals(2, calls.get(), "so is a queued job's cancellation");
    s.openGate();
    Awaits.until("the running job's record", () -> calls.get() == 3);
    assertEquals(executor.recordsProduced(), calls.get());
    await(running);
    await(queued);
    await(full.operationId());
    assertEquals(3, calls.get(), "polling produces no record");
  }

  @Test
  void shouldDeliverARunningCancelledJobsResultAsDetached() throws Exception {
    ScriptedStore s = new ScriptedStore();
    s.gate();
    start(s, config(1, 4, 100, 1_000));
    fill(0, 64, 3);
    long id = submitted(rw(StorageKind.PUT, 0, 64, "ns_k"));
    s.awaitEntered(1);
    assertTrue(executor.cancel(id));
    s.openGate();
    StorageDone d = await(id);
    assertTrue(d.detached());
    assertTrue(d.retired());
    assertEquals(List.of(KeyOutcome.OK), d.outcomes(), "the call went on and its facts are real");
  }

  /** A script whose call for {@code slowKey} waits until the test opens its latch. */
  private static ScriptedStore.Script holding(
      String slowKey,
      java.util.concurrent.CountDownLatch entered,
      java.util.concurrent.CountDownLatch release,
      String failingKey) {
    return (op, keys, segs) -> {
      if (keys.contains(slowKey)) {
        entered.countDown();
        release.await();
      }
      if (keys.contains(failingKey)) {
        throw new IOException("connection reset");
      }
      List<RowResult> rows = new ArrayList<>();
      for (int i = 0; i < keys.size(); i++) {
        rows.add(op.equals("get") ? RowResult.MISSING : new RowResult.Ok(0, false));
      }
      return StoreResult.of(rows);
    };
  }

  @Test
  void shouldNotLetAStaleSuccessUndoANewerOutage() throws Exception {
    ScriptedStore s = new ScriptedStore();
    start(s, config(2, 4, 100, 1_000));
    var entered = new java.util.concurrent.CountDownLatch(1);
    var release = new java.util.concurrent.CountDownLatch(1);
    s.script(holding("ns_slow", entered, release, "ns_fail"));
    long slow = submitted(query("ns_slow"));
    entered.await();
    await(submitted(query("ns_fail"))); // the outage lands while the slow call is running
    assertEquals("COOLDOWN", executor.metrics().healthState());
    release.countDown();
    assertEquals(List.of(KeyOutcome.OK), await(slow).outcomes(), "the slow call succeeded");
    L3Metrics m = executor.metrics();
    assertEquals("COOLDOWN", m.healthState(), "its success is older than the outage");
    assertEquals(1, m.healthEpoch());
    assertEquals(SubmitResult.REJECTED_UNHEALTHY, executor.submit(query("ns_during")));
  }

  @Test
  void shouldAdmitExactlyOneProbeAfterTheCooldown() throws Exception {
    ScriptedStore s = new ScriptedStore();
    start(s, config(2, 4, 100, 1_000));
    s.script(
        (op, keys, segs) -> {
          throw new IOException("down");
        });
    await(submitted(query("ns_1")));
    assertEquals(SubmitResult.REJECTED_UNHEALTHY, executor.submit(query("ns_2")));
    clock.advanceMs(999);
    assertEquals(SubmitResult.REJECTED_UNHEALTHY, executor.submit(query("ns_3")));
    clock.advanceMs(1);
    for (int i = 0; i < 3; i++) {
      assertEquals("COOLDOWN", executor.metrics().healthState(), "reading health is free");
    }
    s.gate();
    s.script(null);
    StorageJob probe = query("ns_probe");
    assertEquals(SubmitResult.QUEUED_AS_PROBE, executor.submit(probe));
    assertEquals(SubmitResult.REJECTED_UNHEALTHY, executor.submit(query("ns_4")), "one probe");
    s.openGate();
    await(probe.operationId());
    assertEquals("HEALTHY", executor.metrics().healthState());
    assertEquals(SubmitResult.QUEUED, executor.submit(query("ns_5")));
  }

  @Test
  void shouldOfferANewProbeWhenTheProbeIsCancelledBeforeRunning() throws Exception {
    ScriptedStore s = new ScriptedStore();
    start(s, config(1, 4, 100, 0));
    var entered = new java.util.concurrent.CountDownLatch(1);
    var release = new java.util.concurrent.CountDownLatch(1);
    s.script(holding("ns_block", entered, release, "ns_fail"));
    long blocker = submitted(rw(StorageKind.GET, 0, 8, "ns_block")); // occupies the GET worker
    entered.await();
    await(submitted(query("ns_fail")));
    StorageJob probe = rw(StorageKind.GET, 0, 8, "ns_probe");
    assertEquals(SubmitResult.QUEUED_AS_PROBE, executor.submit(probe), "queued behind the blocker");
    assertEquals(SubmitResult.REJECTED_UNHEALTHY, executor.submit(query("ns_2")), "one probe");
    assertTrue(executor.cancel(probe.operationId()));
    assertTrue(await(probe.operationId()).detached());
    StorageJob second = query("ns_probe2");
    assertEquals(SubmitResult.QUEUED_AS_PROBE, executor.submit(second), "a new probe is offered");
    await(second.operationId());
    assertEquals("HEALTHY", executor.metrics().healthState());
    release.countDown();
    await(blocker);
  }

  @Test
  void shouldTreatMissesAndRetiredRejectionsAsHealthy() throws Exception {
    ScriptedStore s = new ScriptedStore();
    start(s, config(1, 4, 100, 1_000));
    StorageDone miss = await(submitted(rw(StorageKind.GET, 0, 64, "ns_nothing")));
    assertEquals(List.of(KeyOutcome.MISSING), miss.outcomes());
    s.script((op, keys, segs) -> StoreResult.of(List.of(new RowResult.Rejected(-200))));
    StorageDone full = await(submitted(rw(StorageKind.PUT, 0, 64, "ns_full")));
    assertEquals(List.of(KeyOutcome.FAILED), full.outcomes());
    assertTrue(full.retired());
    assertEquals("HEALTHY", executor.metrics().healthState());
    assertFalse(executor.quarantined());
  }

  @Test
  void shouldQuarantineOnAnUnretiredResultAndRefuseToCloseTheStore() throws Exception {
    ScriptedStore s = new ScriptedStore(false, 256);
    start(s, config(1, 4, 100, 0));
    s.script((op, keys, segs) -> StoreResult.of(List.of(new RowResult.Unknown(-1))));
    StorageDone d = await(submitted(rw(StorageKind.GET, 0, 64, "ns_torn")));
    assertFalse(d.retired());
    assertEquals(0, d.bytes());
    assertTrue(executor.quarantined());
    StorageJob next = query("ns_after");
    assertEquals(SubmitResult.REJECTED_QUARANTINED, executor.submit(next));
    assertTrue(await(next.operationId()).retired());
    CloseReport r = executor.close();
    assertTrue(r.restartRequired());
    assertFalse(r.storeClosed());
    assertEquals(1, r.quarantinedJobs());
    assertFalse(s.closed.get(), "the store keeps the Host registration for the process");
    assertEquals(1, executor.metrics().unprovenRetirements());
    executor = null;
  }

  @Test
  void shouldQuarantineWhenAStoreWhoseFailuresDoNotRetireThrowsOnAPut() throws Exception {
    ScriptedStore s = new ScriptedStore(false, 256);
    start(s, config(1, 4, 100, 0));
    s.script(
        (op, keys, segs) -> {
          throw new IOException("native call failed after submission");
        });
    StorageDone d = await(submitted(rw(StorageKind.PUT, 0, 64, "ns_p")));
    assertFalse(d.retired());
    assertTrue(executor.quarantined());
    StorageDone q = await(submittedOrRejected(query("ns_q")));
    assertTrue(q.retired(), "a QUERY touches no payload");
    executor.close();
    executor = null;
  }

  private long submittedOrRejected(StorageJob job) {
    executor.submit(job);
    return job.operationId();
  }

  @Test
  void shouldKeepServingWhenStoreCallsFailInALoop() throws Exception {
    ScriptedStore s = new ScriptedStore(true, 256);
    start(s, config(1, 4, 100, 0));
    int faults = 0;
    for (int i = 0; i < 60; i++) {
      int kind = i % 4;
      s.script(
          (op, keys, segs) ->
              switch (kind) {
                case 0 -> throw new IllegalStateException("boom " + op);
                case 1 -> throw new IOException("io " + op);
                case 2 -> null; // malformed: no result at all
                default -> StoreResult.of(List.of()); // malformed: wrong row count
              });
      StorageDone d = await(submittedOrRejected(rw(StorageKind.GET, 0, 64, "ns_" + i)));
      assertEquals(List.of(KeyOutcome.FAILED), d.outcomes(), "round " + i);
      assertTrue(d.retired(), "this store's failures retire");
      faults += kind < 2 ? 1 : 0;
      clock.advanceMs(1);
    }
    s.script(null);
    fill(0, 64, 9);
    StorageDone ok = await(submitted(rw(StorageKind.PUT, 0, 64, "ns_final")));
    assertEquals(List.of(KeyOutcome.OK), ok.outcomes(), "the worker still serves");
    assertEquals(faults, executor.metrics().workerFaults());
    assertEquals("HEALTHY", executor.metrics().healthState());
  }

  @Test
  void shouldCopyOnlyOwnedRowsAndReportOthersAsRetiredSuccessWithoutBytes() throws Exception {
    ScriptedStore s = new ScriptedStore();
    start(s, L3ExecutorConfig.defaults());
    fill(0, 256, 5);
    StorageJob put =
        new StorageJob(
            nextId++,
            StorageKind.PUT,
            List.of(
                JobRow.owned("ns_r0", new HostRange(0, 128)),
                JobRow.notOwned("ns_r1"),
                JobRow.owned("ns_r2", new HostRange(128, 128))));
    StorageDone p = await(submitted(put));
    assertEquals(List.of("ns_r0", "ns_r2"), s.seenKeys.get(0), "only owned rows reach the store");
    assertEquals(256, p.bytes());
    StorageJob get =
        new StorageJob(
            nextId++,
            StorageKind.GET,
            List.of(JobRow.notOwned("ns_r0"), JobRow.owned("ns_missing", new HostRange(0, 8))));
    StorageDone g = await(submitted(get));
    assertEquals(List.of(KeyOutcome.OK, KeyOutcome.MISSING), g.outcomes());
    assertEquals(0, g.bytes());
    StorageJob none =
        new StorageJob(nextId++, StorageKind.GET, List.of(JobRow.notOwned("ns_elsewhere")));
    int before = s.calls.get();
    StorageDone n = await(submitted(none));
    assertEquals(List.of(KeyOutcome.OK), n.outcomes());
    assertTrue(n.retired());
    assertEquals(before, s.calls.get(), "nothing owned, no store call");
  }

  @Test
  void shouldRejectBadInputAtOnceAndSubmitNothing() throws Exception {
    ScriptedStore s = new ScriptedStore(true, 16);
    start(s, L3ExecutorConfig.defaults());
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> executor.submit(query("ns_" + "k".repeat(20))));
    assertTrue(e.getMessage().contains("exceeds the scripted store's limit of 16"), e.getMessage());
    e =
        assertThrows(
            IllegalArgumentException.class,
            () -> executor.submit(rw(StorageKind.GET, HOST_BYTES - 8, 16, "ns_end")));
    assertTrue(e.getMessage().contains("outside the Host allocation"), e.getMessage());
    assertThrows(IllegalArgumentException.class, () -> new HostRange(0, 0));
    assertThrows(IllegalArgumentException.class, () -> new HostRange(-1, 8));
    StorageJob ok = query("ns_ok");
    executor.submit(ok);
    StorageJob reused = new StorageJob(ok.operationId(), StorageKind.QUERY, ok.rows());
    e = assertThrows(IllegalArgumentException.class, () -> executor.submit(reused));
    assertTrue(e.getMessage().contains("never reused"), e.getMessage());
    await(ok.operationId());
    assertEquals(1, s.calls.get());
    assertEquals(1, done.size());
    executor.close();
    IllegalStateException closed =
        assertThrows(IllegalStateException.class, () -> executor.submit(query("ns_late")));
    assertTrue(closed.getMessage().contains("closed"), closed.getMessage());
    executor = null;
  }

  @Test
  void shouldReportPressureOfQueuedJobsAndTheOldestAge() throws Exception {
    ScriptedStore s = new ScriptedStore();
    s.gate();
    start(s, config(1, 8, 100, 1_000));
    long running = submitted(rw(StorageKind.GET, 0, 1000, "ns_run"));
    submitted(query("ns_run_q"));
    submitted(rw(StorageKind.PUT, 0, 10, "ns_run_p"));
    s.awaitEntered(3); // every kind's only worker is busy
    clock.advanceMs(5);
    submitted(rw(StorageKind.GET, 0, 300, "ns_a", "ns_b"));
    submitted(query("ns_q"));
    submitted(rw(StorageKind.PUT, 0, 50, "ns_p"));
    PressureSnapshot p = executor.poll().pressure();
    assertEquals(3, p.queuedJobs());
    assertEquals(650, p.queuedPayloadBytes(), "GET 600 + PUT 50; a QUERY carries no payload");
    assertEquals(5_000_000L, p.oldestAgeNs(), "the running job is the oldest");
    s.openGate();
    await(running);
  }

  @Test
  void shouldCloseTheStoreWhenEverythingRetiredAndCancelQueuedJobs() throws Exception {
    ScriptedStore s = new ScriptedStore();
    start(s, config(1, 4, 100, 1_000));
    s.gate();
    long running = submitted(query("ns_run"));
    s.awaitEntered(1);
    long queued = submitted(query("ns_queued"));
    java.util.concurrent.CompletableFuture<CloseReport> closing =
        java.util.concurrent.CompletableFuture.supplyAsync(executor::close);
    Awaits.until(
        "close cancels the queued job", () -> executor.metrics().query().queuedJobs() == 0);
    s.openGate(); // the running call returns within the join deadline
    CloseReport r = closing.get(10, java.util.concurrent.TimeUnit.SECONDS);
    assertTrue(r.storeClosed(), r.message());
    assertFalse(r.restartRequired());
    assertTrue(s.closed.get());
    assertEquals(1, s.calls.get(), "the queued job never ran");
    L3Poll p = executor.poll();
    Map<Long, StorageDone> byId = new HashMap<>();
    p.completions().forEach(d -> byId.put(d.operationId(), d));
    assertTrue(byId.get(queued).detached(), "queued work is cancelled by close");
    assertFalse(byId.get(running).detached());
    executor = null;
  }

  @Test
  void shouldKeepTheStoreWhenAWorkerOutlivesTheJoinDeadline() throws Exception {
    ScriptedStore s = new ScriptedStore();
    store = s;
    executor =
        L3Executor.start(s, new L3ExecutorConfig(1, 1, 1, 4, 4, 4, 100, 1_000, 50), host, clock);
    s.gate();
    submitted(rw(StorageKind.GET, 0, 64, "ns_stuck"));
    s.awaitEntered(1);
    CloseReport r = executor.close();
    assertTrue(r.restartRequired(), r.message());
    assertEquals(1, r.unjoinedWorkers());
    assertFalse(s.closed.get());
    s.openGate();
    executor = null;
  }

  @Test
  void shouldQuarantineWhenAStoreCallThrowsAnError() throws Exception {
    ScriptedStore s = new ScriptedStore(true, 256);
    start(s, config(1, 4, 100, 0));
    s.script(
        (op, keys, segs) -> {
          throw new StackOverflowError("simulated");
        });
    StorageDone d = await(submitted(rw(StorageKind.GET, 0, 64, "ns_err")));
    assertEquals(List.of(KeyOutcome.FAILED), d.outcomes(), "the fact still comes back");
    assertTrue(executor.quarantined(), "a dying worker stops new work instead of vanishing");
    assertEquals(SubmitResult.REJECTED_QUARANTINED, executor.submit(query("ns_next")));
  }

  // ---------------------------------------------------------------- configuration failures

  @Test
  void shouldCountAConfigurationFailureWithoutCoolingDownWhenTheStoreRefusesEveryCall()
      throws Exception {
    ScriptedStore s = new ScriptedStore(false, 256); // failures of this store do not retire
    start(s, config(1, 4, 100, 1_000));
    String refusal = "scripted store refused command=SET for user=limited (NOPERM)";
    s.script(
        (op, keys, segs) -> {
          throw new StoreConfigurationException(refusal, null);
        });
    int jobs = 30;
    for (int i = 0; i < jobs; i++) {
      StorageKind kind = StorageKind.values()[i % 3];
      StorageJob job =
          kind == StorageKind.QUERY ? query("ns_q" + i) : rw(kind, 0, 64, "ns_" + i, "ns_b" + i);
      assertEquals(SubmitResult.QUEUED, executor.submit(job), "job " + i + " is never refused");
      StorageDone d = await(job.operationId());
      assertTrue(d.outcomes().stream().allMatch(o -> o == KeyOutcome.FAILED), d.toString());
      assertTrue(d.retired(), "a refusal happens before any transfer: " + d);
      assertEquals(0, d.bytes());
    }
    L3Metrics m = executor.metrics();
    assertEquals(jobs, s.calls.get(), "every job reached the store");
    assertEquals(jobs, m.backendCalls());
    assertEquals(jobs, m.configurationFailures());
    assertEquals(refusal, m.lastConfigurationFailure());
    assertEquals("HEALTHY", m.healthState());
    assertEquals(0, m.healthEpoch());
    assertEquals(0, m.outages());
    assertEquals(0, m.workerFaults(), "a configuration failure is not a fault");
    assertFalse(m.quarantined());
    assertEquals(0, m.unprovenRetirements());
    assertTrue(executor.close().storeClosed());
    executor = null;
  }

  // ---------------------------------------------------------------- health: probes and cooldown

  @Test
  void shouldNotLetAJobThatOwnsNoRowsBeTheProbeOrEndAnOutage() throws Exception {
    ScriptedStore s = new ScriptedStore();
    start(s, config(1, 4, 100, 1_000));
    s.script(
        (op, keys, segs) -> {
          throw new IOException("down");
        });
    await(submitted(query("ns_fail")));
    assertEquals("COOLDOWN", executor.metrics().healthState());
    clock.advanceMs(1_000); // the cooldown is over: the next backend job is the probe
    s.script(null);
    int callsBefore = s.calls.get();
    StorageJob elsewhere =
        new StorageJob(nextId++, StorageKind.GET, List.of(JobRow.notOwned("ns_other_rank")));
    assertEquals(SubmitResult.QUEUED, executor.submit(elsewhere), "nothing to do is no probe");
    StorageDone d = await(elsewhere.operationId());
    assertEquals(List.of(KeyOutcome.OK), d.outcomes());
    assertTrue(d.retired());
    assertEquals(callsBefore, s.calls.get(), "it never reached the store");
    L3Metrics m = executor.metrics();
    assertEquals("COOLDOWN", m.healthState(), "a job without a store call heals nothing");
    assertEquals(1, m.healthEpoch());
    StorageJob probe = query("ns_probe");
    assertEquals(SubmitResult.QUEUED_AS_PROBE, executor.submit(probe), "the probe is still free");
    await(probe.operationId());
    assertEquals(callsBefore + 1, s.calls.get());
    assertEquals("HEALTHY", executor.metrics().healthState(), "the real probe heals");
  }

  @Test
  void shouldRejectJobsQueuedBeforeAnOutageInsteadOfRunningThemDuringTheCooldown()
      throws Exception {
    ScriptedStore s = new ScriptedStore();
    start(s, config(1, 8, 100, 60_000));
    var entered = new java.util.concurrent.CountDownLatch(1);
    var release = new java.util.concurrent.CountDownLatch(1);
    s.script(holding("ns_fail", entered, release, "ns_fail"));
    long failing = submitted(rw(StorageKind.GET, 0, 64, "ns_fail"));
    entered.await(); // the only GET worker is inside the store
    List<Long> queued = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      queued.add(submitted(rw(StorageKind.GET, 64L * (i + 1), 64, "ns_queued" + i)));
    }
    assertEquals(3, executor.metrics().get().queuedJobs());
    release.countDown(); // the running call fails: an outage
    assertEquals(List.of(KeyOutcome.FAILED), await(failing).outcomes());
    for (long id : queued) {
      StorageDone d = await(id);
      assertEquals(List.of(KeyOutcome.FAILED), d.outcomes(), "no object evidence: " + d);
      assertTrue(d.retired(), d.toString());
      assertFalse(d.detached(), "rejected, not cancelled: " + d);
      assertEquals(0, d.bytes());
    }
    L3Metrics m = executor.metrics();
    assertEquals(1, s.calls.get(), "no queued job reached the backend during the cooldown");
    assertEquals(1, m.healthEpoch(), "one outage, one epoch");
    assertEquals(1, m.outages());
    assertEquals(3, m.queuedRejectedByOutage());
    assertEquals("COOLDOWN", m.healthState());
    assertEquals(0, m.get().queuedJobs());
  }

  // ---------------------------------------------------------------- close

  @Test
  void shouldCloseTheStoreExactlyOnceWhenManyThreadsRaceClose() throws Exception {
    ScriptedStore s = new ScriptedStore();
    // a join deadline far beyond any scheduling delay: it is not what this test is about
    start(s, new L3ExecutorConfig(1, 1, 1, 4, 4, 4, 100, 1_000, 600_000));
    s.gate();
    long running = submitted(rw(StorageKind.GET, 0, 64, "ns_running"));
    s.awaitEntered(1); // the first close waits for this call; the others must wait for it
    int threads = 8;
    List<Thread> closers = new ArrayList<>();
    CloseReport[] reports = new CloseReport[threads];
    for (int i = 0; i < threads; i++) {
      int slot = i;
      Thread t = Thread.ofPlatform().start(() -> reports[slot] = executor.close());
      closers.add(t);
    }
    Awaits.until(
        "every closer waits inside close",
        () -> closers.stream().allMatch(L3ExecutorTest::waitsInsideClose));
    s.openGate();
    for (Thread t : closers) {
      t.join(10_000);
      assertFalse(t.isAlive(), "a closer returned");
    }
    assertEquals(1, s.closes.get(), "the store is closed exactly once");
    for (CloseReport r : reports) {
      assertSame(reports[0], r, "every caller gets the one report");
    }
    assertTrue(reports[0].storeClosed(), reports[0].message());
    assertFalse(await(running).detached());
    assertSame(reports[0], executor.close(), "a later close returns the same report");
    executor = null;
  }

  /**
   * Whether {@code t} is parked inside {@link L3Executor#close} (joining or awaiting), not lock.
   */
  private static boolean waitsInsideClose(Thread t) {
    Thread.State state = t.getState();
    if (state != Thread.State.WAITING && state != Thread.State.TIMED_WAITING) {
      return false;
    }
    boolean inClose = false;
    boolean parkedForLock = false;
    boolean parkedInClose = false;
    for (StackTraceElement f : t.getStackTrace()) {
      String m = f.getMethodName();
      if (f.getClassName().equals(L3Executor.class.getName()) && m.equals("close")) {
        inClose = true;
      }
      if (m.equals("lock") && f.getClassName().contains("ReentrantLock")) {
        parkedForLock = true;
      }
      if (m.equals("join") || m.equals("awaitUninterruptibly")) {
        parkedInClose = true;
      }
    }
    return inClose && parkedInClose && !parkedForLock;
  }

  @Test
  void shouldCloseTheStoreOfAnIdleExecutorWhenTheJoinDeadlineIsZero() throws Exception {
    ScriptedStore s = new ScriptedStore();
    store = s;
    executor =
        L3Executor.start(s, new L3ExecutorConfig(8, 8, 8, 4, 4, 4, 100, 1_000, 0), host, clock);
    await(submitted(query("ns_once")));
    CloseReport r = executor.close();
    assertTrue(r.storeClosed(), r.message());
    assertFalse(r.restartRequired(), r.message());
    assertEquals(0, r.unjoinedWorkers(), r.message());
    assertEquals(0, r.quarantinedJobs(), r.message());
    assertTrue(s.closed.get());
    executor = null;
  }

  @Test
  void shouldCountAJobHungInsideTheStoreAsNeverProvenRetiredInTheCloseReport() throws Exception {
    ScriptedStore s = new ScriptedStore();
    store = s;
    executor =
        L3Executor.start(s, new L3ExecutorConfig(1, 1, 1, 4, 4, 4, 100, 1_000, 50), host, clock);
    s.gate();
    long hung = submitted(rw(StorageKind.GET, 0, 64, "ns_hung"));
    s.awaitEntered(1); // inside the store until the test opens the gate
    CloseReport r = executor.close();
    assertTrue(r.restartRequired(), r.message());
    assertFalse(r.storeClosed());
    assertEquals(1, r.unjoinedWorkers(), r.message());
    assertEquals(1, r.quarantinedJobs(), r.message());
    assertTrue(r.message().contains("1 job(s) never proven retired"), r.message());
    assertEquals(1, executor.metrics().unprovenRetirements());
    assertTrue(executor.quarantined());
    s.openGate();
    await(hung); // its late record still comes back, and is not counted twice
    assertEquals(1, executor.metrics().unprovenRetirements());
    assertFalse(s.closed.get(), "the store stays open for the life of the process");
    executor = null;
  }

  @Test
  void shouldCountAJobEndedByAnErrorAsNeverProvenRetiredInTheCloseReport() throws Exception {
    ScriptedStore s = new ScriptedStore(true, 256);
    start(s, config(1, 4, 100, 0));
    s.script(
        (op, keys, segs) -> {
          throw new StackOverflowError("simulated");
        });
    StorageDone d = await(submitted(rw(StorageKind.PUT, 0, 64, "ns_err")));
    assertFalse(d.retired(), "a worker that died mid-call proves nothing: " + d);
    CloseReport r = executor.close();
    assertTrue(r.restartRequired(), r.message());
    assertEquals(1, r.quarantinedJobs(), r.message());
    assertTrue(r.message().contains("Error"), r.message());
    assertEquals(1, executor.metrics().unprovenRetirements());
    executor = null;
  }
}

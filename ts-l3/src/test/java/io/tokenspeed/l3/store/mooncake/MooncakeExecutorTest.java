package io.tokenspeed.l3.store.mooncake;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.CloseReport;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.SubmitResult;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The executor over the Mooncake binding, across the real native boundary (the in-memory stub): the
 * specification's result codes end as the right facts, health and quarantine decisions.
 */
class MooncakeExecutorTest {

  private static final String NS = "tsl3-" + "ab".repeat(32);

  private Arena arena;
  private MemorySegment host;
  private L3Executor executor;
  private long nextId = 1;

  @BeforeEach
  void start() throws Exception {
    MooncakeStub.reset();
    arena = Arena.ofShared();
    host = arena.allocate(1 << 20, 4096);
    for (int i = 0; i < 4096; i++) {
      host.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 13));
    }
    executor =
        L3Executor.start(
            MooncakeStore.open(MooncakeStub.settings(256)),
            new L3ExecutorConfig(1, 1, 1, 8, 8, 8, 64, 0, 2_000),
            host,
            System::nanoTime);
  }

  @AfterEach
  void stop() {
    if (executor != null) {
      executor.close();
    }
    arena.close();
  }

  private StorageDone run(StorageKind kind, long offset, String... hashes) {
    StorageJob job = job(kind, offset, hashes);
    SubmitResult r = executor.submit(job);
    assertTrue(r.accepted(), r.name());
    return await(job);
  }

  private StorageJob job(StorageKind kind, long offset, String... hashes) {
    List<JobRow> rows =
        java.util.Arrays.stream(hashes)
            .map(h -> JobRow.owned(NS + "_" + h + "|g0|o0|r0", new HostRange(offset, 4096)))
            .toList();
    return new StorageJob(nextId++, kind, rows);
  }

  private StorageJob query(String hash) {
    return new StorageJob(
        nextId++, StorageKind.QUERY, List.of(JobRow.query(NS + "_" + hash + "|g0|o0|r0")));
  }

  private StorageDone await(StorageJob job) {
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (System.nanoTime() - deadline < 0) {
      for (StorageDone d : executor.poll().completions()) {
        if (d.operationId() == job.operationId()) {
          return d;
        }
      }
      LockSupport.parkNanos(200_000);
    }
    throw new AssertionError("no record for operation " + job.operationId());
  }

  @Test
  void shouldRoundTripAndReadARepeatedPutAsSuccess() {
    assertEquals(List.of(KeyOutcome.OK), run(StorageKind.PUT, 0, "aa").outcomes());
    StorageDone again = run(StorageKind.PUT, 0, "aa"); // 0, as the real client answers
    assertEquals(List.of(KeyOutcome.OK), again.outcomes());
    assertEquals(2, executor.metrics().putsNewlyWritten());
    assertEquals(0, executor.metrics().putsAlreadyExisted());
    MooncakeStub.injectRows("batch_put_from", MooncakeCodes.OBJECT_ALREADY_EXISTS, 1);
    assertEquals(List.of(KeyOutcome.OK), run(StorageKind.PUT, 0, "aa").outcomes());
    assertEquals(1, executor.metrics().putsAlreadyExisted(), "-705 is still idempotent success");
    StorageDone get = run(StorageKind.GET, 65536, "aa");
    assertEquals(4096, get.bytes());
    assertEquals(-1L, host.asSlice(0, 4096).mismatch(host.asSlice(65536, 4096)));
  }

  @Test
  void shouldTurnMissesAndNoSpaceIntoRetiredFactsWithoutAnOutage() {
    assertEquals(List.of(KeyOutcome.MISSING), run(StorageKind.GET, 0, "nothing").outcomes());
    MooncakeStub.injectRows("batch_put_from", MooncakeCodes.NO_AVAILABLE_HANDLE, 1);
    StorageDone full = run(StorageKind.PUT, 0, "bb");
    assertEquals(List.of(KeyOutcome.FAILED), full.outcomes());
    assertTrue(full.retired());
    assertEquals("HEALTHY", executor.metrics().healthState());
    assertFalse(executor.quarantined());
    assertEquals(List.of(KeyOutcome.OK), run(StorageKind.PUT, 0, "bb").outcomes(), "re-offered");
  }

  @Test
  void shouldRetireAReplicaNotReadyOrAnExpiredLeaseWithoutEvidenceOrOutage() {
    run(StorageKind.PUT, 0, "ff");
    MooncakeStub.injectRows("batch_get_into", MooncakeCodes.REPLICA_IS_NOT_READY, 1);
    StorageDone notReady = run(StorageKind.GET, 65536, "ff");
    MooncakeStub.injectRows("batch_get_into", MooncakeCodes.LEASE_EXPIRED, 1);
    StorageDone expired = run(StorageKind.GET, 65536, "ff");

    for (StorageDone d : List.of(notReady, expired)) {
      assertEquals(List.of(KeyOutcome.FAILED), d.outcomes(), "no MISSING or INVALID evidence");
      assertTrue(d.retired());
    }
    assertEquals("HEALTHY", executor.metrics().healthState());
    assertFalse(executor.quarantined());
    assertEquals(List.of(KeyOutcome.OK), run(StorageKind.GET, 65536, "ff").outcomes());
  }

  @Test
  void shouldRetireAnRpcTimeoutButReportAnOutage() {
    run(StorageKind.PUT, 0, "gg");
    MooncakeStub.injectRows("batch_get_into", MooncakeCodes.RPC_TIMEOUT, 1);
    StorageDone d = run(StorageKind.GET, 65536, "gg");

    assertEquals(List.of(KeyOutcome.FAILED), d.outcomes());
    assertTrue(d.retired());
    assertFalse(executor.quarantined(), "retired: no restart needed");
    assertFalse("HEALTHY".equals(executor.metrics().healthState()), "an outage signal");
  }

  @Test
  void shouldTreatAShortReadAsAnInvalidObject() {
    run(StorageKind.PUT, 0, "cc");
    MooncakeStub.shortReads(1, 1);
    StorageDone d = run(StorageKind.GET, 65536, "cc");
    assertEquals(List.of(KeyOutcome.INVALID), d.outcomes());
    assertTrue(d.retired());
    assertFalse(executor.quarantined());
  }

  @Test
  void shouldQuarantineAReadLongerThanItsDestination() {
    run(StorageKind.PUT, 0, "ee");
    MooncakeStub.shortReads(1, -5); // the SDK answers 4,101 bytes for a 4,096-byte destination
    StorageDone d = run(StorageKind.GET, 65536, "ee");
    assertEquals(List.of(KeyOutcome.FAILED), d.outcomes(), "no INVALID object evidence");
    assertFalse(d.retired());
    assertEquals(0, d.bytes());
    assertTrue(executor.quarantined());
    CloseReport report = executor.close();
    assertTrue(report.restartRequired(), report.message());
    assertEquals(1, report.quarantinedJobs(), report.message());
    executor = null;
  }

  @Test
  void shouldQuarantineOnAGenericNegativeTransferCode() {
    run(StorageKind.PUT, 0, "dd");
    MooncakeStub.injectRows("batch_get_into", -1, 1);
    StorageDone d = run(StorageKind.GET, 65536, "dd");
    assertEquals(List.of(KeyOutcome.FAILED), d.outcomes());
    assertFalse(d.retired());
    assertTrue(executor.quarantined());
    CloseReport report = executor.close();
    assertTrue(report.restartRequired(), report.message());
    assertFalse(report.storeClosed(), "the client keeps its Host registration");
    executor = null;
  }

  // --- a master restart -------------------------------------------------------------------------

  private static final long COOLDOWN_MS = 1_000;

  /** Replaces the executor by one whose health cooldown runs on {@code clock}. */
  private void withCooldownOn(AtomicLong clock) throws Exception {
    executor.close();
    executor =
        L3Executor.start(
            MooncakeStore.open(MooncakeStub.settings(256)),
            new L3ExecutorConfig(1, 1, 1, 8, 8, 8, 64, COOLDOWN_MS, 2_000),
            host,
            clock::get);
  }

  @Test
  void shouldRecoverFromAMasterRestartInOneCooldown() throws Exception {
    AtomicLong clock = new AtomicLong();
    withCooldownOn(clock);
    assertEquals(List.of(KeyOutcome.OK), run(StorageKind.PUT, 0, "aa").outcomes());

    MooncakeStub.masterStop();
    MooncakeStub.masterStart(2); // back at once; the client's pool holds two stale connections
    StorageDone failed = run(StorageKind.GET, 65536, "aa");
    assertEquals(List.of(KeyOutcome.FAILED), failed.outcomes());
    assertTrue(failed.retired(), "RPC_FAIL comes before any transfer");
    assertEquals("COOLDOWN", executor.metrics().healthState());

    StorageJob duringCooldown = query("aa");
    assertEquals(SubmitResult.REJECTED_UNHEALTHY, executor.submit(duringCooldown));
    assertEquals(List.of(KeyOutcome.FAILED), await(duringCooldown).outcomes());

    clock.addAndGet(TimeUnit.MILLISECONDS.toNanos(COOLDOWN_MS));
    StorageJob probe = query("aa");
    assertEquals(SubmitResult.QUEUED_AS_PROBE, executor.submit(probe));
    StorageDone answered = await(probe);
    assertEquals(
        List.of(KeyOutcome.FAILED), answered.outcomes(), "absent: the new master has none");
    assertTrue(answered.retired());

    assertEquals("HEALTHY", executor.metrics().healthState(), "the first probe recovered");
    assertEquals(1, executor.metrics().outages(), "one outage, one cooldown");
    assertEquals(2, MooncakeStub.staleFailures(), "the GET and a reconnect round trip");
    assertFalse(executor.quarantined());
    assertEquals(List.of(KeyOutcome.OK), run(StorageKind.PUT, 0, "aa").outcomes());
    assertEquals(List.of(KeyOutcome.OK), run(StorageKind.GET, 65536, "aa").outcomes());
  }

  @Test
  void shouldFailTheProbeWhileTheMasterIsDownAndRecoverAtTheNextOne() throws Exception {
    AtomicLong clock = new AtomicLong();
    withCooldownOn(clock);
    run(StorageKind.PUT, 0, "bb");

    MooncakeStub.masterStop();
    run(StorageKind.GET, 65536, "bb");
    clock.addAndGet(TimeUnit.MILLISECONDS.toNanos(COOLDOWN_MS));
    StorageJob early = job(StorageKind.PUT, 0, "bb");
    assertEquals(SubmitResult.QUEUED_AS_PROBE, executor.submit(early));
    assertEquals(List.of(KeyOutcome.FAILED), await(early).outcomes());
    assertEquals("COOLDOWN", executor.metrics().healthState(), "still down: a new cooldown");
    assertEquals(2, executor.metrics().outages());

    MooncakeStub.masterStart(1);
    clock.addAndGet(TimeUnit.MILLISECONDS.toNanos(COOLDOWN_MS));
    StorageJob probe = job(StorageKind.PUT, 0, "bb");
    assertEquals(SubmitResult.QUEUED_AS_PROBE, executor.submit(probe));
    assertEquals(List.of(KeyOutcome.OK), await(probe).outcomes());
    assertEquals("HEALTHY", executor.metrics().healthState());
    assertEquals(2, executor.metrics().outages());
  }
}

package io.tokenspeed.scheduler;

import static io.tokenspeed.scheduler.StmFixture.allOk;
import static io.tokenspeed.scheduler.StmFixture.fact;
import static io.tokenspeed.scheduler.StmFixture.only;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.Admission;
import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class StorageTransferManagerTest {

  private static final long MS = 1_000_000L;

  private StmFixture f;
  private List<HeldBlock> extraHolders = List.of();

  @AfterEach
  void invariants() {
    if (f != null) {
      f.checkInvariants(extraHolders);
    }
  }

  private StorageOp.Query query(StorageTransferManager.Preparation p) {
    assertTrue(p.waiting(), "expected a query, got " + p.bypass());
    return (StorageOp.Query) only(f.drain(), StorageOp.Query.class);
  }

  @Test
  void shouldRestoreAPrefixThroughQueryGetAndReady() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 1);
    f.put(Tier.DEVICE, f.cache.neededKeys(p, 64)); // the Device already holds the first page
    f.stm.onTick(0);
    StorageTransferManager.Preparation prep = f.stm.prepare(7, p, true);
    StorageOp.Query q = query(prep);
    for (CacheKey k : q.keys()) {
      assertFalse(f.cache.device().contains(k), "never ask for what the Device holds: " + k);
    }
    assertEquals(0, f.cache.host().pool().heldBlocks(), "a query reserves nothing");
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    assertEquals(f.cache.missingKeys(p, 299).size(), g.keys().size());
    assertEquals(prep.lease().operationId(), g.operationId(), "the lease moved to the GET");
    f.stm.onCompletion(allOk(g));
    List<Wakeup> w = f.stm.drainWakeups();
    assertEquals(1, w.size());
    assertEquals(Wakeup.Reason.READ_COMPLETE, w.get(0).reason());
    StorageLease ready = w.get(0).ready();
    assertNotNull(ready);
    assertEquals(299, f.cache.probe(p, 299).hostHit(), "the exact tail is now a Host hit");
    assertEquals(1, f.stm.readyHolds());
    Admission a = f.cache.admit(p, 299, 1); // ordinary admission takes the Host sources
    assertEquals(299, a.hit());
    ready.close();
    assertEquals(0, f.stm.readyHolds());
    assertEquals(0, f.stm.hostCreditsInUse());
    f.cache.finishCopies(a, true);
    f.cache.release(a);
  }

  @Test
  void shouldPublishOnlyTheLegalPrefixOfPartialResults() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 2);
    // The Host already has what 256 needs beyond the rows a read for 299 brings: its checkpoint
    // and the window row holding tokens [160, 192).
    f.put(Tier.HOST, List.of(p.checkpointKey(2, 256), p.keyOf(1, 5, 256)));
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    Set<CacheKey> ok = new HashSet<>(g.keys());
    ok.remove(p.checkpointKey(2, 299)); // the prompt-end checkpoint failed on some owner
    f.stm.onCompletion(fact(g, ok, true));
    Wakeup w = f.stm.drainWakeups().get(0);
    assertEquals(Wakeup.Reason.READ_COMPLETE, w.reason());
    assertFalse(f.cache.host().contains(p.checkpointKey(2, 299)), "failed rows never publish");
    assertEquals(256, f.cache.probe(p, 299).hostHit(), "a shorter legal prefix");
    w.ready().close();
  }

  @Test
  void shouldNeverPublishALateCompletionOfADetachedRead() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 3);
    f.stm.onTick(0);
    StorageTransferManager.Preparation prep = f.stm.prepare(1, p, true);
    StorageOp.Query q = query(prep);
    f.stm.onTick(0); // the next round: its tick, the issuing round's clock, starts the deadline
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    f.stm.onTick(StorageConfig.DEFAULT_SOFT_DEADLINE_MS * MS); // deadline from query issue
    Wakeup w = f.stm.drainWakeups().get(0);
    assertEquals(Wakeup.Reason.SOFT_TIMEOUT, w.reason());
    assertNull(w.ready());
    assertFalse(prep.lease().live());
    assertEquals(
        g.operationId(),
        ((StorageOp.Cancel) only(f.drain(), StorageOp.Cancel.class)).operationId());
    assertTrue(f.stm.hostCreditsInUse() > 0, "native I/O stays charged until retirement");
    f.stm.onCompletion(allOk(g));
    assertEquals(0, f.cache.probe(p, 299).hostHit(), "a detached read publishes nothing");
    assertEquals(0, f.stm.hostCreditsInUse());
    assertEquals(1, f.stm.counters().softTimeouts());
    assertEquals(0, f.stm.counters().clientDetaches());
  }

  @Test
  void shouldExpireWhileTheQueryIsQueuedAndKeepItsCreditUntilTheFact() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 4);
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onTick(0); // the next round: its tick, the issuing round's clock, starts the deadline
    f.stm.onTick(StorageConfig.DEFAULT_SOFT_DEADLINE_MS * MS - 1);
    assertTrue(f.stm.drainWakeups().isEmpty());
    f.stm.onTick(StorageConfig.DEFAULT_SOFT_DEADLINE_MS * MS);
    assertEquals(Wakeup.Reason.SOFT_TIMEOUT, f.stm.drainWakeups().get(0).reason());
    assertEquals(1, f.stm.operationsInUse());
    f.stm.onCompletion(allOk(q));
    assertTrue(
        f.drain().stream().noneMatch(StorageOp.Get.class::isInstance),
        "no GET for a request that stopped waiting");
    assertEquals(0, f.stm.operationsInUse());
  }

  @Test
  void shouldExpireAReadyHoldOnItsOwn() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 5);
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    f.stm.onTick(10 * MS);
    f.stm.onCompletion(allOk(g));
    StorageLease ready = f.stm.drainWakeups().get(0).ready();
    f.stm.onTick(10 * MS); // the next round: the hold starts with the publishing round's clock
    f.stm.onTick(10 * MS + StorageConfig.DEFAULT_READY_HOLD_MS * MS);
    assertFalse(ready.live());
    assertEquals(1, f.stm.counters().readyExpired());
    assertEquals(0, f.stm.counters().softTimeouts(), "different counters");
    assertEquals(0, f.stm.hostCreditsInUse());
    assertEquals(299, f.cache.probe(p, 299).hostHit(), "the blocks stay cached, only unprotected");
    ready.close(); // idempotent
  }

  @Test
  void shouldQuarantineAnUnretiredReadForever() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 6);
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    BitSet ok = new BitSet();
    ok.set(0, g.keys().size());
    f.stm.onCompletion(Facts.of(g, ok, new BitSet(), false, false));
    assertEquals(Wakeup.Reason.READ_FAILED, f.stm.drainWakeups().get(0).reason());
    assertEquals(0, f.cache.probe(p, 299).hostHit(), "never published");
    assertEquals(g.keys().size(), f.stm.quarantinedRefs());
    assertTrue(f.stm.quarantined());
    assertEquals(Bypass.QUARANTINED, f.stm.prepare(2, f.prompt(300, 7), true).bypass());
    f.stm.rejectAll();
    assertEquals(g.keys().size(), f.stm.hostCreditsInUse(), "a clear never frees quarantine");
  }

  @Test
  void shouldRememberConfirmedMissingObjectsAndSkipTheirBoundaries() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 8);
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    CacheKey lost = p.checkpointKey(2, 299);
    int idx = g.keys().indexOf(lost);
    BitSet ok = new BitSet();
    ok.set(0, g.keys().size());
    ok.clear(idx);
    BitSet failed = new BitSet();
    failed.set(idx);
    f.stm.onCompletion(Facts.of(g, ok, failed, true, false));
    assertTrue(f.stm.knownMissing(lost));
    Wakeup w = f.stm.drainWakeups().get(0);
    w.ready().close();
    StorageOp.Query again = query(f.stm.prepare(2, p, true));
    assertFalse(again.keys().contains(lost), "a confirmed-missing key is not asked again");
  }

  @Test
  void shouldShortenTheRestoreWhenAWarmBlockIsEvictedBetweenQueryAndGet() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 9);
    f.put(Tier.HOST, f.cache.neededKeys(p, 128));
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    assertTrue(q.keys().contains(p.checkpointKey(2, 299)));
    assertFalse(q.keys().contains(p.keyOf(0, 5, 128)), "row 5 was local when the query left");
    f.cache.host().evict(f.cache.host().lookup(p.keyOf(0, 5, 128))); // row 5 lies in page 1
    f.stm.onCompletion(allOk(q));
    assertTrue(
        f.drain().stream().noneMatch(StorageOp.Get.class::isInstance),
        "every boundary above the floor now needs row 5, which nobody asked for");
    assertEquals(Wakeup.Reason.NOTHING_RESTORED, f.stm.drainWakeups().get(0).reason());
    assertEquals(0, f.stm.hostCreditsInUse(), "no destination was reserved");
    assertEquals(0, f.cache.probe(p, 299).hostHit(), "admission matches the real cache again");
  }

  @Test
  void shouldBypassWhenTheLocalHitCoversTheBoundOrTheExtensionIsShort() {
    f = new StmFixture(StorageConfig.defaults(), 64, 256);
    PromptKeys p = f.prompt(300, 10);
    f.put(Tier.HOST, f.cache.neededKeys(p, 299));
    assertEquals(Bypass.LOCAL_HIT, f.stm.prepare(1, p, true).bypass());
    PromptKeys q = f.prompt(200, 11);
    assertEquals(Bypass.SHORT_EXTENSION, f.stm.prepare(2, q, true).bypass(), "199 < 256 tokens");
    assertEquals(Bypass.NOT_PERMITTED, f.stm.prepare(3, q, false).bypass());
    assertTrue(f.drain().isEmpty());
  }

  @Test
  void shouldShrinkTheReservationToTheCreditsAndThenRejectNewQueries() {
    // 299 needs 19 full rows, 4 window rows and a checkpoint (24); 256 needs 16 + 3 + 1 = 20.
    f = new StmFixture(StmFixture.config().withCredits(8, 20), 64, 256);
    PromptKeys p = f.prompt(300, 12);
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    assertEquals(20, g.keys().size(), "shortened from 299 to 256 to fit the Host credits");
    assertEquals(20, f.stm.hostCreditsInUse());
    assertEquals(
        Bypass.NO_HOST_CREDITS,
        f.stm.prepare(2, f.prompt(300, 13), true).bypass(),
        "Host-credit exhaustion rejects a new query before any backend work");
    f.stm.onCompletion(allOk(g));
    assertEquals(256, f.cache.probe(p, 299).hostHit());
    f.stm.drainWakeups().get(0).ready().close();
  }

  @Test
  void shouldBackUpPublishedBlocksAndSkipEvictedCandidates() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(128, 14);
    List<CacheKey> keys = f.cache.neededKeys(p, 64);
    f.put(Tier.HOST, keys);
    for (CacheKey k : keys) {
      f.stm.offerBackup(k);
    }
    f.stm.offerBackup(keys.get(0)); // coalesced, not a loss
    f.cache.host().evict(f.cache.host().lookup(keys.get(1)));
    StorageOp.Put put = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    assertEquals(keys.size() - 1, put.keys().size());
    assertEquals(1, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.UNAVAILABLE));
    assertEquals(0, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.OVERFLOW));
    for (int b : put.hostBlocks()) {
      assertEquals(1, f.cache.host().pool().refCount(b), "sources are pinned while the PUT runs");
    }
    BitSet ok = new BitSet();
    ok.set(1, put.keys().size()); // row 0 refused for lack of space: offered again
    f.stm.onCompletion(Facts.of(put, ok, new BitSet(), true, false));
    assertEquals(0, f.stm.queuedCandidates(), "deferred: no dispatchable work before its tick");
    assertEquals(1, f.stm.deferredCandidates());
    assertTrue(f.drain().isEmpty());
    f.stm.onTick(0); // the next round: the backoff starts
    f.stm.onTick(StorageConfig.DEFAULT_BACKUP_RETRY_BACKOFF_MS * MS);
    assertEquals(1, f.stm.queuedCandidates());
    StorageOp.Put retry = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    assertEquals(List.of(put.keys().get(0)), retry.keys());
    f.stm.onCompletion(allOk(retry));
  }

  @Test
  void shouldNeverLetBackupsTakeTheCreditsReadsNeed() {
    f = new StmFixture(StmFixture.config().withCredits(4, 0), 64, 512);
    for (int i = 0; i < 8; i++) {
      PromptKeys p = f.prompt(64, 100 + i);
      List<CacheKey> keys = f.cache.neededKeys(p, 64);
      f.put(Tier.HOST, keys);
      keys.forEach(f.stm::offerBackup);
      assertFalse(f.drain().isEmpty() && f.stm.operationsInUse() > 2, "at most half");
    }
    assertEquals(2, f.stm.operationsInUse(), "backups stop at half of the operation credits");
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, f.prompt(300, 15), true));
    f.stm.onCompletion(allOk(q));
    assertEquals(
        1, f.drain().stream().filter(StorageOp.Get.class::isInstance).count(), "reads still fit");
    f.stm.rejectAll();
  }

  @Test
  void shouldAdmitReadsButNoBackupsWithOneCreditAndRejectCandidatesWithoutAWriteBudget() {
    f = new StmFixture(StmFixture.config().withCredits(1, 0), 64, 256);
    PromptKeys p = f.prompt(128, 16);
    List<CacheKey> keys = f.cache.neededKeys(p, 64);
    f.put(Tier.HOST, keys);
    f.stm.offerBackup(keys.get(0));
    assertEquals(1, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.DISABLED));
    assertEquals(0, f.stm.queuedCandidates(), "a zero write budget rejects at once");
    f.stm.onTick(0);
    assertTrue(f.stm.prepare(1, f.prompt(300, 17), true).waiting(), "a read still fits");
    f.stm.rejectAll();
  }

  @Test
  void shouldCloseThePressureGateAndReopenOnlyBelowEveryLowWatermark() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    f.stm.onTick(0);
    StorageTransferManager.Preparation waiting = f.stm.prepare(1, f.prompt(300, 18), true);
    query(waiting);
    PromptKeys p = f.prompt(128, 19);
    List<CacheKey> keys = f.cache.neededKeys(p, 64);
    f.put(Tier.HOST, keys);
    f.stm.offerBackup(keys.get(0));
    f.stm.onPressure(new PressureSnapshot(StorageConfig.DEFAULT_HIGH_QUEUED_JOBS, 0, 0));
    assertTrue(f.stm.gateClosed());
    assertEquals(Wakeup.Reason.PRESSURE, f.stm.drainWakeups().get(0).reason());
    assertFalse(waiting.lease().live());
    assertEquals(1, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.PRESSURE));
    assertEquals(Bypass.PRESSURE, f.stm.prepare(2, f.prompt(300, 20), true).bypass());
    f.stm.offerBackup(keys.get(1));
    assertEquals(2, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.PRESSURE));
    f.stm.onPressure(
        new PressureSnapshot(
            StorageConfig.DEFAULT_LOW_QUEUED_JOBS, StorageConfig.DEFAULT_HIGH_QUEUED_BYTES - 1, 0));
    assertTrue(f.stm.gateClosed(), "bytes are still above their low watermark");
    f.stm.onPressure(new PressureSnapshot(StorageConfig.DEFAULT_LOW_QUEUED_JOBS, 0, 0));
    assertFalse(f.stm.gateClosed());
    assertEquals(1, f.stm.counters().pressureBypasses());
    f.drain().stream()
        .filter(StorageOp.Query.class::isInstance)
        .forEach(o -> f.stm.onCompletion(allOk(o)));
  }

  @Test
  void shouldRaiseProtocolErrorsForImpossibleFacts() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, f.prompt(300, 21), true));
    int n = q.keys().size();
    BitSet all = new BitSet();
    all.set(0, n + 1);
    assertThrows(
        ProtocolError.class,
        () ->
            f.stm.onCompletion(Facts.of(StorageKind.QUERY, 999, 1, all, new BitSet(), true, false)),
        "unknown operation");
    assertThrows(
        ProtocolError.class,
        () ->
            f.stm.onCompletion(
                Facts.of(
                    StorageKind.QUERY, q.operationId(), n + 1, all, new BitSet(), true, false)),
        "mask of the wrong length");
    assertThrows(
        ProtocolError.class,
        () ->
            f.stm.onCompletion(
                Facts.of(StorageKind.GET, q.operationId(), n, all, new BitSet(), true, false)),
        "a GET fact for a QUERY operation");
    BitSet both = new BitSet();
    both.set(0);
    assertThrows(
        IllegalArgumentException.class,
        () -> Facts.of(StorageKind.QUERY, q.operationId(), n, new BitSet(), both, true, false),
        "a QUERY cannot even carry an object failure");
    assertEquals(1, f.stm.operationsInUse(), "nothing changed");
    f.stm.onCompletion(allOk(q));
    assertThrows(ProtocolError.class, () -> f.stm.onCompletion(allOk(q)), "twice");
    f.stm.rejectAll();
    f.drain().stream()
        .filter(StorageOp.Get.class::isInstance)
        .forEach(o -> f.stm.onCompletion(allOk(o)));
  }

  @Test
  void shouldKeepOperationIdsIncreasingAcrossClears() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    f.stm.onTick(0);
    StorageOp.Query a = query(f.stm.prepare(1, f.prompt(300, 22), true));
    f.stm.rejectAll();
    assertEquals(Wakeup.Reason.CLEARED, f.stm.drainWakeups().get(0).reason());
    f.drain();
    StorageOp.Query b = query(f.stm.prepare(2, f.prompt(300, 23), true));
    assertTrue(b.operationId() > a.operationId());
    f.stm.onCompletion(allOk(a));
    f.stm.rejectAll();
    f.stm.onCompletion(allOk(b));
  }

  @Test
  void shouldLetSubmittedReadsFinishAndReadyResultsServeWhileTheGateIsClosed() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 30);
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    f.stm.onPressure(new PressureSnapshot(StorageConfig.DEFAULT_HIGH_QUEUED_JOBS, 0, 0));
    assertTrue(f.stm.gateClosed());
    assertTrue(f.drain().stream().noneMatch(StorageOp.Cancel.class::isInstance), "GET goes on");
    f.stm.onCompletion(allOk(g));
    Wakeup w = f.stm.drainWakeups().get(0);
    assertEquals(Wakeup.Reason.READ_COMPLETE, w.reason(), "a submitted GET still publishes");
    assertEquals(299, f.cache.probe(p, 299).hostHit(), "and its Ready result is usable");
    w.ready().close();
  }

  @Test
  void shouldRecordATailHintOnlyAfterAnAttachedRetiredReadPublishedIt() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 31); // reusable bound 299 is a tail
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    assertEquals(0, f.cache.tails().size(), "no hint before the read published");
    f.stm.onCompletion(allOk(g));
    assertEquals(1, f.cache.tails().size());
    f.stm.drainWakeups().get(0).ready().close();

    PromptKeys other = f.prompt(300, 32);
    StorageTransferManager.Preparation prep = f.stm.prepare(2, other, true);
    StorageOp.Query q2 = query(prep);
    f.stm.onCompletion(allOk(q2));
    StorageOp.Get g2 = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    prep.lease().close(); // detached before the read retired
    f.drain();
    f.stm.onCompletion(allOk(g2));
    assertEquals(1, f.cache.tails().size(), "a detached read records no hint");
  }

  @Test
  void shouldCoalesceACandidateWithAPendingPutWithoutCountingALoss() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 33), 64);
    f.put(Tier.HOST, keys);
    f.stm.offerBackup(keys.get(0));
    StorageOp.Put put = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.offerBackup(keys.get(0)); // already in flight
    assertEquals(0, f.stm.queuedCandidates());
    for (StorageCounters.DropReason r : StorageCounters.DropReason.values()) {
      assertEquals(0, f.stm.counters().droppedBackupKeys(r), r.name());
    }
    f.stm.onCompletion(allOk(put));
    assertTrue(f.drain().isEmpty());
  }

  @Test
  void shouldDropTheOldestCandidateOnOverflowAndCountIt() {
    StorageConfig small =
        new StorageConfig(
            64, 0, 25, 200, 1000, 1, 131072, 4096, 16, 2, 256, 192, 64, 4L << 30, 1L << 30, 2000,
            500, 10_000);
    f = new StmFixture(small, 64, 256);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 34), 64);
    f.put(Tier.HOST, keys);
    f.stm.onPressure(new PressureSnapshot(StorageConfig.DEFAULT_HIGH_QUEUED_JOBS, 0, 0));
    f.stm.onPressure(PressureSnapshot.IDLE); // open again; nothing was queued
    for (int i = 0; i < 3; i++) {
      f.stm.offerBackup(keys.get(i));
    }
    assertEquals(2, f.stm.queuedCandidates());
    assertEquals(1, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.OVERFLOW));
    StorageOp.Put put = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    assertEquals(List.of(keys.get(1), keys.get(2)), put.keys(), "the oldest went");
    f.stm.onCompletion(allOk(put));
  }

  @Test
  void shouldHoldAFinishedQueryThroughFrozenRoundsAndTimeItOutThere() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 35);
    f.stm.onTick(0);
    StorageTransferManager.Preparation prep = f.stm.prepare(1, p, true);
    StorageOp.Query q = query(prep);
    f.stm.onTick(0); // the next round: its tick, the issuing round's clock, starts the deadline
    f.stm.beginRound(false); // frozen
    f.stm.onCompletion(allOk(q));
    assertTrue(f.stm.drainOps(false).isEmpty(), "no GET without storage permission");
    assertTrue(prep.lease().live(), "the request still waits");
    assertEquals(1, f.stm.operationsInUse());
    assertEquals(0, f.cache.host().pool().heldBlocks(), "nothing reserved while parked");
    f.stm.onTick(StorageConfig.DEFAULT_SOFT_DEADLINE_MS * MS);
    assertEquals(Wakeup.Reason.SOFT_TIMEOUT, f.stm.drainWakeups().get(0).reason());
    assertEquals(0, f.stm.operationsInUse(), "a parked query has no I/O left: it goes at once");
    f.stm.beginRound(true);
    assertTrue(f.drain().isEmpty());
  }

  // ---------------------------------------------------------------- regressions

  @Test
  void shouldNotRememberNegativeFactsOfAGetIssuedBeforeAClear() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 40);
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    f.stm.rejectAll(); // empties the negative metadata
    f.drain();
    BitSet missing = new BitSet();
    missing.set(0, g.keys().size());
    f.stm.onCompletion(Facts.of(g, new BitSet(), missing, true, false));
    for (CacheKey k : g.keys()) {
      assertFalse(f.stm.knownMissing(k), "a fact from before the clear came back: " + k);
    }
    assertTrue(query(f.stm.prepare(2, p, true)).keys().containsAll(g.keys()), "asked again");
    f.stm.rejectAll();
  }

  @Test
  void shouldNotReofferAPutRefusedBeforeAClear() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 41), 64);
    f.put(Tier.HOST, keys);
    keys.forEach(f.stm::offerBackup);
    StorageOp.Put put = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.rejectAll();
    f.stm.onCompletion(Facts.of(put, new BitSet(), new BitSet(), true, false)); // refused
    assertEquals(0, f.stm.queuedCandidates(), "an old-generation block is not offered again");
    assertTrue(f.drain().isEmpty());
    for (CacheKey k : keys) {
      assertFalse(f.cache.host().contains(k), "unpublished at retirement: " + k);
    }
  }

  @Test
  void shouldKeepQuarantinedPutSourcesUnmatchableButAllocatedAfterAClear() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(128, 42);
    List<CacheKey> keys = f.cache.neededKeys(p, 64);
    f.put(Tier.HOST, keys);
    keys.forEach(f.stm::offerBackup);
    StorageOp.Put put = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.onCompletion(Facts.of(put, new BitSet(), new BitSet(), false, false)); // unretired
    assertTrue(f.stm.quarantined());
    f.stm.rejectAll();
    assertEquals(0, f.cache.probe(p, p.reusableBound()).hostHit(), "nothing of it is matchable");
    for (CacheKey k : keys) {
      assertFalse(f.cache.host().contains(k), "not in the index: " + k);
    }
    for (int b : put.hostBlocks()) {
      assertTrue(f.cache.host().pool().isAllocated(b), "never freed: " + b);
      assertTrue(f.cache.host().isWithdrawn(b), "withdrawn, still referenced: " + b);
    }
    assertEquals(put.hostBlocks().size(), f.stm.quarantinedRefs());
  }

  @Test
  void shouldStartTheSoftDeadlineAtTheTickAfterTheQueryNotBeforeAnIdleGap() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 44);
    long beforeGap = 5 * MS; // the clock of the last round before a one-second idle gap
    long issued = beforeGap + 1_000 * MS; // the clock of the round that issues the query
    long soft = StorageConfig.DEFAULT_SOFT_DEADLINE_MS * MS;
    f.stm.onTick(beforeGap); // the first round after the gap still carries the old clock
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onTick(issued); // one round late: the clock of the round that issued the query
    assertTrue(f.stm.drainWakeups().isEmpty(), "the idle gap before the query does not count");
    f.stm.onTick(issued + soft - 1);
    assertTrue(f.stm.drainWakeups().isEmpty());
    f.stm.onTick(issued + soft);
    assertEquals(Wakeup.Reason.SOFT_TIMEOUT, f.stm.drainWakeups().get(0).reason());
    f.stm.onCompletion(allOk(q));
    assertEquals(0, f.stm.operationsInUse());
  }

  @Test
  void shouldStartTheReadyHoldAtTheTickAfterTheReadNotBeforeAnIdleGap() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    PromptKeys p = f.prompt(300, 45);
    long hold = StorageConfig.DEFAULT_READY_HOLD_MS * MS;
    f.stm.onTick(0);
    StorageOp.Query q = query(f.stm.prepare(1, p, true));
    f.stm.onTick(1 * MS);
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    f.stm.onTick(2 * MS); // the round after the GET's; then the loop waits 1.5 s for it
    f.stm.onCompletion(allOk(g)); // the first round after the wait: its tick is still 2 ms
    StorageLease ready = f.stm.drainWakeups().get(0).ready();
    long published = 2 * MS + 1_500 * MS; // the clock of the round that published the read
    f.stm.onTick(published);
    assertTrue(ready.live(), "the wait before the read's round does not count");
    f.stm.onTick(published + hold - 1);
    assertTrue(ready.live());
    f.stm.onTick(published + hold);
    assertFalse(ready.live());
    assertEquals(1, f.stm.counters().readyExpired());
  }

  @Test
  void shouldHoldEveryBackupAfterARefusalThenProbeWithOnePageAndRampUp() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 46), 64);
    List<CacheKey> more = f.cache.neededKeys(f.prompt(128, 146), 64);
    f.put(Tier.HOST, keys);
    f.put(Tier.HOST, more);
    keys.forEach(f.stm::offerBackup);
    f.stm.onTick(0);
    StorageOp.Put put = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.onTick(1 * MS);
    f.stm.onCompletion(Facts.of(put, new BitSet(), new BitSet(), true, false)); // no space
    more.forEach(f.stm::offerBackup); // pages of a new prompt: held back with the refused ones
    int all = keys.size() + more.size();
    assertEquals(0, f.stm.queuedCandidates(), "held-back candidates are no dispatchable work");
    assertTrue(f.drain().isEmpty(), "no PUT in the round that learned of the refusal");
    assertEquals(all, f.stm.deferredCandidates());
    assertEquals(1 * MS, f.stm.nextBackupRetryNs(), "the hold starts at the next tick");
    long backoff = StorageConfig.DEFAULT_BACKUP_RETRY_BACKOFF_MS * MS;
    assertEquals(backoff, f.stm.backupBackoffNs());
    f.stm.onTick(2 * MS);
    assertTrue(f.drain().isEmpty(), "nor in the next one");
    assertEquals(2 * MS + backoff, f.stm.nextBackupRetryNs());
    f.stm.onTick(2 * MS + backoff - 1);
    assertTrue(f.drain().isEmpty());
    f.stm.onTick(2 * MS + backoff);
    assertEquals(all, f.stm.queuedCandidates());
    assertEquals(Long.MAX_VALUE, f.stm.nextBackupRetryNs());
    StorageOp.Put probe = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    assertEquals(List.of(put.keys().get(0)), probe.keys(), "one page, the oldest candidate");
    assertTrue(f.drain().isEmpty(), "nothing beside the probe");
    f.stm.onCompletion(allOk(probe));
    assertEquals(0, f.stm.backupBackoffNs(), "the store took it: no backoff");
    List<Integer> want = new ArrayList<>();
    for (int left = all - 1, window = 2; left > 0; window *= 2) {
      want.add(Math.min(window, left));
      left -= Math.min(window, left);
    }
    List<Integer> sizes = new ArrayList<>();
    List<CacheKey> sent = new ArrayList<>(probe.keys());
    for (int round = 0; round < 20 && sent.size() < all; round++) {
      List<StorageOp> ops = f.drain();
      int keysThisRound = 0;
      for (StorageOp op : ops) {
        sent.addAll(((StorageOp.Put) op).keys());
        keysThisRound += Facts.keysOf(op);
      }
      sizes.add(keysThisRound);
      ops.forEach(op -> f.stm.onCompletion(allOk(op)));
    }
    assertEquals(want, sizes, "the window doubles per round trip (" + all + " pages)");
    assertEquals(all, new java.util.HashSet<>(sent).size(), "every refused page went again");
    assertEquals(0, f.stm.trackedRefusals(), "an accepted key leaves no bookkeeping");
    f.checkInvariants(List.of());
  }

  @Test
  void shouldProbeARefusingStoreWithOnePagePerHoldAndKeepItsPages() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 48), 64);
    f.put(Tier.HOST, keys);
    keys.forEach(f.stm::offerBackup);
    List<Long> putTicks = new ArrayList<>();
    List<Integer> putKeys = new ArrayList<>();
    List<StorageOp> inFlight = new ArrayList<>();
    for (int round = 0; round < 5_000; round++) { // a round every millisecond, for five seconds
      long tick = round * MS;
      f.stm.onTick(tick);
      for (StorageOp op : inFlight) { // a store that refuses every PUT, one round later
        f.stm.onCompletion(Facts.of(op, new BitSet(), new BitSet(), true, false));
      }
      inFlight.clear();
      for (StorageOp op : f.drain()) {
        putTicks.add(tick);
        putKeys.add(Facts.keysOf(op));
        inFlight.add(op);
      }
      f.stm.checkInvariants();
    }
    // 0 ms, then a probe 100, 200, 400, 800, 1600 ms after each refusal was learned
    assertEquals(6, putTicks.size(), "ticks " + putTicks);
    assertEquals(keys.size(), putKeys.get(0));
    for (int i = 1; i < putTicks.size(); i++) {
      assertEquals(1, putKeys.get(i), "a probe is one page: " + putKeys);
      // refused a round after dispatch, the hold starts a round later
      assertEquals(
          2 * MS + BackupPacer.backoffNs(i, StorageConfig.DEFAULT_MAX_BACKUP_BACKOFF_MS),
          putTicks.get(i) - putTicks.get(i - 1),
          "attempt " + (i + 1) + " of " + putTicks);
    }
    assertEquals(
        0,
        f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.REFUSED),
        "a probe's refusal is the store's, not its page's: nothing used up its attempts");
    assertEquals(0, f.stm.queuedCandidates());
    assertEquals(0, f.stm.deferredCandidates(), "refusing persistently: no pending work");
    assertEquals(keys.size(), f.stm.heldCandidates(), "but the pages are kept");
    assertTrue(f.stm.nextBackupRetryNs() < Long.MAX_VALUE, "and probed again later");
    for (CacheKey k : keys) {
      assertTrue(f.cache.host().contains(k), "a refused page stays usable locally: " + k);
    }
  }

  @Test
  void shouldCapTheHoldAtTheConfiguredBackoff() {
    f = new StmFixture(StmFixture.config().withMaxBackupBackoffMs(400), 64, 256);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 58), 64);
    f.put(Tier.HOST, keys);
    keys.forEach(f.stm::offerBackup);
    List<Long> putTicks = new ArrayList<>();
    for (int round = 0; round < 3_000; round++) {
      long tick = round * MS;
      f.stm.onTick(tick);
      for (StorageOp op : f.drain()) {
        putTicks.add(tick);
        f.stm.onCompletion(Facts.of(op, new BitSet(), new BitSet(), true, false));
      }
    }
    List<Long> gaps = new ArrayList<>();
    for (int i = 1; i < putTicks.size(); i++) {
      gaps.add((putTicks.get(i) - putTicks.get(i - 1)) / MS);
    }
    // refused in the round that sent it, the hold starts at the next tick
    assertEquals(List.of(101L, 201L, 401L, 401L, 401L, 401L, 401L, 401L), gaps.subList(0, 8));
  }

  @Test
  void shouldTakeNoPaceFromTheAnswersOfPutsSentBeforeTheRefusal() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    List<List<CacheKey>> prompts = new ArrayList<>();
    List<StorageOp.Put> burst = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 60 + i), 64);
      prompts.add(keys);
      f.put(Tier.HOST, keys);
      keys.forEach(f.stm::offerBackup);
      burst.add((StorageOp.Put) only(f.drain(), StorageOp.Put.class));
    }
    f.stm.onTick(0);
    f.stm.onCompletion(Facts.of(burst.get(0), new BitSet(), new BitSet(), true, false));
    f.stm.onCompletion(Facts.of(burst.get(1), new BitSet(), new BitSet(), true, false));
    f.stm.onCompletion(allOk(burst.get(2))); // sent before the refusal: reopens nothing
    f.stm.onTick(1 * MS);
    long backoff = StorageConfig.DEFAULT_BACKUP_RETRY_BACKOFF_MS * MS;
    assertEquals(1 * MS + backoff, f.stm.nextBackupRetryNs(), "one refusal, not two");
    assertTrue(f.drain().isEmpty(), "still held");
    f.stm.onTick(1 * MS + backoff);
    StorageOp.Put probe = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    assertEquals(1, probe.keys().size());
    f.stm.onCompletion(allOk(probe));
    f.checkInvariants(List.of());
  }

  /**
   * A store that refuses one page (say, on a full Cluster master) and takes the others, while
   * prompts keep publishing pages: the page is dropped after its attempts, probes aside, and no
   * other page is.
   */
  @Test
  void shouldDropAKeyTheStoreKeepsRefusingWhileItTakesOthers() {
    f = new StmFixture(StmFixture.config(), 64, 1024);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 59), 64);
    f.put(Tier.HOST, keys);
    keys.forEach(f.stm::offerBackup);
    CacheKey bad = keys.get(3);
    int sentBad = 0;
    for (int round = 0; round < 20_000; round++) {
      f.stm.onTick(round * MS);
      if (round % 500 == 0 && round < 15_000) {
        List<CacheKey> more = f.cache.neededKeys(f.prompt(128, 1_000 + round), 64);
        f.put(Tier.HOST, more);
        more.forEach(f.stm::offerBackup);
      }
      for (StorageOp op : f.drain()) {
        List<CacheKey> put = ((StorageOp.Put) op).keys();
        BitSet ok = new BitSet();
        for (int i = 0; i < put.size(); i++) {
          ok.set(i, !put.get(i).equals(bad));
          sentBad += put.get(i).equals(bad) ? 1 : 0;
        }
        f.stm.onCompletion(Facts.of(op, ok, new BitSet(), true, false));
      }
      f.stm.checkInvariants();
    }
    assertEquals(
        1,
        f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.REFUSED),
        "that page, and only that one");
    assertTrue(
        sentBad >= StorageConfig.DEFAULT_MAX_BACKUP_ATTEMPTS,
        "its attempts, and probes between some of them: " + sentBad);
    assertEquals(0, f.stm.trackedRefusals());
    assertEquals(0, f.stm.queuedCandidates() + f.stm.deferredCandidates());
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {11, 12, 13, 14})
  void shouldForgetEveryRefusalOnceKeysAreAcceptedDroppedOrCleared(long seed) {
    java.util.Random rnd = new java.util.Random(seed);
    StorageConfig small =
        new StorageConfig(
            64,
            0,
            StorageConfig.DEFAULT_RETRACTION_RESERVE_PERCENT,
            200,
            1000,
            1,
            131072,
            4096,
            16,
            6 + rnd.nextInt(20),
            1 + rnd.nextInt(6),
            192,
            64,
            4L << 30,
            1L << 30,
            2000,
            500,
            10_000);
    f = new StmFixture(small, 64, 512);
    List<CacheKey> keys = new ArrayList<>();
    for (int i = 0; i < 12; i++) {
      keys.addAll(f.cache.neededKeys(f.prompt(128, 200 + i), 64));
    }
    f.put(Tier.HOST, keys);
    long[] tick = {0};
    List<StorageOp> inFlight = new ArrayList<>();
    java.util.function.IntConsumer rounds =
        acceptPercent -> {
          tick[0] += (1 + rnd.nextInt(150)) * MS;
          f.stm.onTick(tick[0]);
          for (StorageOp op : inFlight) {
            BitSet ok = new BitSet();
            for (int i = 0; i < Facts.keysOf(op); i++) {
              ok.set(i, rnd.nextInt(100) < acceptPercent);
            }
            f.stm.onCompletion(Facts.of(op, ok, new BitSet(), true, false));
          }
          inFlight.clear();
          if (acceptPercent < 100) {
            for (int i = rnd.nextInt(6); i > 0; i--) {
              f.stm.offerBackup(keys.get(rnd.nextInt(keys.size())));
            }
          }
          inFlight.addAll(f.drain());
          f.checkInvariants(List.of());
        };
    for (int i = 0; i < 300; i++) {
      rounds.accept(30); // mostly refused
    }
    assertTrue(
        f.stm.trackedRefusals()
                + f.stm.deferredCandidates()
                + f.stm.heldCandidates()
                + f.stm.queuedCandidates()
                + inFlight.size()
            > 0,
        "refused pages wait: " + f.stm.counters());
    for (int i = 0;
        i < 1_000
            && (!inFlight.isEmpty()
                || f.stm.deferredCandidates() + f.stm.heldCandidates() + f.stm.queuedCandidates()
                    > 0);
        i++) {
      rounds.accept(100); // the store accepts everything now; nothing new is offered
    }
    assertTrue(inFlight.isEmpty());
    assertEquals(0, f.stm.deferredCandidates() + f.stm.heldCandidates());
    assertEquals(0, f.stm.queuedCandidates());
    assertEquals(0, f.stm.trackedRefusals(), "accepted keys are forgotten");
    assertEquals(0, f.stm.pendingPutKeys());
    for (int i = 0; i < 300; i++) {
      rounds.accept(30);
    }
    f.stm.rejectAll();
    for (StorageOp op : inFlight) {
      f.stm.onCompletion(Facts.of(op, new BitSet(), new BitSet(), true, false));
    }
    f.drain();
    assertEquals(0, f.stm.deferredCandidates() + f.stm.heldCandidates());
    assertEquals(0, f.stm.queuedCandidates());
    assertEquals(0, f.stm.trackedRefusals(), "a clear forgets every refusal");
    assertEquals(0, f.stm.pendingPutKeys());
    assertEquals(0, f.stm.operationsInUse());
    assertEquals(0, f.stm.hostCreditsInUse());
    assertEquals(Long.MAX_VALUE, f.stm.nextBackupRetryNs());
  }

  private long farTick;

  /**
   * Ends any hold of earlier refusals (ticks far apart), then offers {@code key}, dispatches it and
   * has the store refuse it: it is held back with the other candidates.
   */
  private StorageOp.Put refuseOnce(CacheKey key) {
    f.stm.onTick(farTick += 60_000 * MS);
    f.stm.onTick(farTick += 60_000 * MS);
    f.stm.offerBackup(key);
    StorageOp.Put put = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.onCompletion(Facts.of(put, new BitSet(), new BitSet(), true, false));
    assertEquals(1, f.stm.deferredCandidates());
    return put;
  }

  @Test
  void shouldDropHeldBackCandidatesOnPressureFrozenRoundsAndClears() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 49), 64);
    f.put(Tier.HOST, keys);
    f.stm.onTick(0);
    refuseOnce(keys.get(0));
    f.stm.onPressure(new PressureSnapshot(StorageConfig.DEFAULT_HIGH_QUEUED_JOBS, 0, 0));
    assertEquals(0, f.stm.deferredCandidates());
    assertEquals(1, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.PRESSURE));
    f.stm.onPressure(PressureSnapshot.IDLE);
    refuseOnce(keys.get(1));
    f.stm.beginRound(false);
    assertEquals(0, f.stm.deferredCandidates());
    assertEquals(1, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.CLEANUP));
    f.stm.beginRound(true);
    refuseOnce(keys.get(2));
    f.stm.rejectAll();
    assertEquals(0, f.stm.deferredCandidates());
    assertEquals(2, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.CLEANUP));
    f.stm.offerBackup(keys.get(3));
    StorageOp.Put put = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.onPressure(new PressureSnapshot(StorageConfig.DEFAULT_HIGH_QUEUED_JOBS, 0, 0));
    f.stm.onCompletion(Facts.of(put, new BitSet(), new BitSet(), true, false));
    assertEquals(0, f.stm.deferredCandidates(), "a refusal under pressure is not kept");
    assertEquals(2, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.PRESSURE));
    assertEquals(0, f.stm.trackedRefusals());
    assertEquals(Long.MAX_VALUE, f.stm.nextBackupRetryNs());
  }

  @Test
  void shouldBoundTheHeldBackCandidatesAndCountTheOverflow() {
    StorageConfig small =
        new StorageConfig(
            64, 0, 25, 200, 1000, 1, 131072, 4096, 16, 2, 256, 192, 64, 4L << 30, 1L << 30, 2000,
            500, 10_000);
    f = new StmFixture(small, 64, 256);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 50), 64);
    f.put(Tier.HOST, keys);
    f.stm.offerBackup(keys.get(0));
    f.stm.offerBackup(keys.get(1));
    StorageOp.Put first = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.offerBackup(keys.get(2));
    StorageOp.Put second = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.onCompletion(Facts.of(first, new BitSet(), new BitSet(), true, false));
    f.stm.onCompletion(Facts.of(second, new BitSet(), new BitSet(), true, false));
    assertEquals(2, f.stm.deferredCandidates(), "bounded like the candidate queue");
    assertEquals(1, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.OVERFLOW));
    f.stm.offerBackup(keys.get(1)); // held back: coalesced
    assertEquals(0, f.stm.queuedCandidates());
    f.stm.onTick(0);
    f.stm.onTick(StorageConfig.DEFAULT_BACKUP_RETRY_BACKOFF_MS * MS);
    StorageOp.Put probe = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    assertEquals(List.of(keys.get(1)), probe.keys(), "the oldest refusal went");
    f.stm.onCompletion(allOk(probe));
    StorageOp.Put rest = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    assertEquals(List.of(keys.get(2)), rest.keys());
    f.stm.onCompletion(allOk(rest));
    assertEquals(0, f.stm.trackedRefusals());
  }

  @Test
  void shouldDropQueuedCandidatesAndRejectNewOnesOnceQuarantined() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 47), 64);
    f.put(Tier.HOST, keys);
    f.stm.onTick(0);
    f.stm.offerBackup(keys.get(0));
    StorageOp.Put refused = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.offerBackup(keys.get(1));
    StorageOp.Put unretired = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.offerBackup(keys.get(4));
    StorageOp.Put late = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.onCompletion(Facts.of(refused, new BitSet(), new BitSet(), true, false));
    f.stm.offerBackup(keys.get(2));
    f.stm.offerBackup(keys.get(3));
    assertEquals(0, f.stm.queuedCandidates(), "held back after the refusal");
    assertEquals(3, f.stm.deferredCandidates(), "the refused page and the two new ones");
    f.stm.onCompletion(Facts.of(unretired, new BitSet(), new BitSet(), false, false));
    assertTrue(f.stm.quarantined());
    assertEquals(0, f.stm.queuedCandidates(), "quarantine drops the candidates");
    assertEquals(0, f.stm.deferredCandidates(), "held back or not");
    assertEquals(3, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.DISABLED));
    f.stm.offerBackup(keys.get(5));
    assertEquals(0, f.stm.queuedCandidates(), "and queues nothing new");
    f.stm.onCompletion(Facts.of(late, new BitSet(), new BitSet(), true, false));
    assertEquals(0, f.stm.deferredCandidates(), "nor defers a later refusal");
    assertEquals(5, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.DISABLED));
    for (long tick = 0; tick < 5_000 * MS; tick += 50 * MS) {
      f.stm.onTick(tick);
      f.stm.beginRound(true);
      assertTrue(f.drain().isEmpty(), "no storage op after quarantine");
    }
    assertEquals(Long.MAX_VALUE, f.stm.nextBackupRetryNs());
    assertEquals(0, f.stm.inFlightOperations(), "the quarantined PUT is not waited for");
    assertEquals(0, f.stm.trackedRefusals());
  }

  @Test
  void shouldCountInFlightOperationsUntilTheirIoRetires() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    f.stm.onTick(0);
    StorageTransferManager.Preparation prep = f.stm.prepare(1, f.prompt(300, 51), true);
    StorageOp.Query q = query(prep);
    assertEquals(1, f.stm.inFlightOperations());
    f.stm.beginRound(false);
    f.stm.onCompletion(allOk(q));
    assertEquals(0, f.stm.inFlightOperations(), "a parked query holds no executor work");
    f.stm.beginRound(true);
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    assertEquals(1, f.stm.inFlightOperations());
    StorageTransferManager.Preparation other = f.stm.prepare(2, f.prompt(300, 52), true);
    StorageOp.Query q2 = query(other);
    other.lease().close(); // detached: its I/O still runs
    f.drain();
    assertEquals(2, f.stm.inFlightOperations());
    f.stm.onCompletion(allOk(q2));
    f.stm.onCompletion(allOk(g));
    assertEquals(0, f.stm.inFlightOperations(), "a Ready hold holds no executor work");
    assertEquals(1, f.stm.readyHolds());
    f.stm.drainWakeups().get(0).ready().close();
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 53), 64);
    f.put(Tier.HOST, keys);
    keys.forEach(f.stm::offerBackup);
    StorageOp.Put put = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    assertEquals(1, f.stm.inFlightOperations());
    f.stm.onCompletion(Facts.of(put, new BitSet(), new BitSet(), false, false));
    assertEquals(0, f.stm.inFlightOperations(), "quarantined I/O is never waited for");
    assertEquals(keys.size(), f.stm.quarantinedRefs());
  }

  @Test
  void shouldCountBackupKeysTheEngineDropped() {
    f = new StmFixture(StmFixture.config(), 64, 256);
    f.stm.onBackupsDropped(StorageCounters.DropReason.UNAVAILABLE, 3);
    f.stm.onBackupsDropped(StorageCounters.DropReason.UNAVAILABLE, 0);
    assertEquals(3, f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.UNAVAILABLE));
    assertThrows(
        IllegalArgumentException.class,
        () -> f.stm.onBackupsDropped(StorageCounters.DropReason.UNAVAILABLE, -1));
    assertThrows(IllegalArgumentException.class, () -> f.stm.onBackupsDropped(null, 1));
  }

  @Test
  void shouldDiscardQueuedBackupCandidatesInAFrozenRound() {
    f = new StmFixture(StmFixture.config().withCredits(2, 0), 64, 256);
    List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 43), 64);
    f.put(Tier.HOST, keys);
    keys.forEach(f.stm::offerBackup);
    assertEquals(keys.size(), f.stm.queuedCandidates());
    f.stm.beginRound(false);
    assertEquals(0, f.stm.queuedCandidates(), "frozen-round cleanup discards queued work");
    assertEquals(
        keys.size(), f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.CLEANUP));
    f.stm.beginRound(true);
    assertTrue(f.drain().isEmpty());
  }
}

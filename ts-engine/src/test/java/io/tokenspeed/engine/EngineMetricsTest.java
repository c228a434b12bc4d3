package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineMetrics.Transfers;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.scheduler.StorageCounters.DropReason;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * The metrics snapshot the loop publishes ({@link Engine#metrics}): it counts running and waiting
 * requests and the tiers' parents, reads idle once requests finish, is retaken while busy at most
 * once a second unless the loop or storage changes state, and, with L3 over the in-memory store,
 * its executor and transfer-manager counters move exactly as the store's own calls say they must.
 * Invariants are checked after every round.
 */
class EngineMetricsTest extends WithContextLlama {
  private static final int P = 4;

  /** Checks invariants and keeps every snapshot the loop publishes, in order. */
  static final class Snapshots extends Checked {
    final List<EngineMetrics> published = new CopyOnWriteArrayList<>();

    @Override
    public void onMetrics(EngineMetrics m) {
      published.add(m);
    }

    /**
     * Two consecutive snapshots are a second apart, or the requests or storage changed state
     * between them.
     */
    void assertPublishedOnlyWhenDue() {
      for (int i = 1; i < published.size(); i++) {
        EngineMetrics a = published.get(i - 1);
        EngineMetrics b = published.get(i);
        boolean due =
            b.timeNs() - a.timeNs() >= MetricsPublication.INTERVAL_NS
                || a.idle() != b.idle()
                || pending(a) != pending(b);
        assertTrue(due, "snapshots " + (i - 1) + " and " + i + " without a reason: " + a + b);
      }
    }
  }

  private static boolean pending(EngineMetrics m) {
    return m.storage().map(EngineMetrics.Storage::pending).orElse(false);
  }

  /**
   * Returns once every round before this call has ended (and published whatever it had to): an
   * administrative task runs at the start of the next round.
   */
  private static void barrier(Engine e) throws Exception {
    e.storageBusyNow();
  }

  /** Waits (up to 10 s) until no L3 work is pending, then for the round in progress. */
  private static void awaitStorageIdle(Engine e) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (e.storageBusyNow()) {
      assertTrue(System.nanoTime() < deadline, "storage still pending after 10 s");
      Thread.sleep(2);
    }
    barrier(e);
  }

  @Test
  void shouldReadIdleWhenRequestsFinishAndPublishAtMostOncePerSecondWhileBusy() throws Exception {
    Snapshots rec = new Snapshots();
    SplittableRandom rnd = new SplittableRandom(5);
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256)).observer(rec).paused().conclude())) {
      EngineMetrics fresh = e.metrics();
      assertNotNull(fresh, "a snapshot exists before the first round");
      assertTrue(fresh.idle());
      assertEquals(new EngineMetrics.TierUsage(256, 0, 256), fresh.device());
      assertEquals(0, fresh.host().usedParents());
      assertEquals(fresh.host().totalParents(), fresh.host().freeParents());
      assertTrue(fresh.storage().isEmpty(), "no storage figures without a backend");

      // more requests than max_running (8) in the intake before the loop starts
      List<RequestHandle> handles = new ArrayList<>();
      for (int i = 0; i < 10; i++) {
        handles.add(
            e.submit(rnd.ints(21, 0, model.vocabSize()).toArray(), SamplingParams.greedy(40)));
      }
      e.resume();
      for (RequestHandle h : handles) {
        rec.await(h);
      }
      barrier(e);

      EngineMetrics first = rec.published.get(1); // after the first round, which took all ten
      assertEquals(10, first.runningRequests() + first.waitingRequests(), first.toString());
      assertTrue(first.runningRequests() >= 1 && first.runningRequests() <= 8, first.toString());
      assertTrue(first.device().usedParents() > 0, "admitted requests hold Device blocks");

      EngineMetrics idle = e.metrics();
      assertSame(rec.published.getLast(), idle, "metrics() is the latest published snapshot");
      assertEquals(0, idle.runningRequests());
      assertEquals(0, idle.waitingRequests());
      assertEquals(fresh.device().usedParents(), idle.device().usedParents(), "Device: idle");
      assertEquals(fresh.host().usedParents(), idle.host().usedParents(), "Host: idle");
      assertTrue(idle.device().cachedParents() > 0, "the finished prompts stay cached");
      assertTrue(
          idle.timeNs() > first.timeNs() && idle.timeNs() <= System.nanoTime(), idle.toString());

      long rounds = rec.rounds.get();
      assertTrue(rounds >= 40, "40 decode steps at least: " + rounds);
      assertTrue(
          rec.published.size() < rounds,
          "snapshots " + rec.published.size() + " vs rounds " + rounds);
      rec.assertPublishedOnlyWhenDue();

      // an idle engine's administrative round leaves the snapshot stale for a second at most
      e.clearCache().get(10, TimeUnit.SECONDS);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
      while (e.metrics().device().cachedParents() > 0) {
        assertTrue(System.nanoTime() < deadline, "a cleared cache still shows cached parents");
        Thread.sleep(20);
      }
      assertEquals(new EngineMetrics.TierUsage(256, 0, 256), e.metrics().device());
      rec.assertPublishedOnlyWhenDue();
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  /** The in-memory store, counting what the executor asks of it, key by key. */
  static final class CountingStore extends ForwardingStore {
    final AtomicLong calls = new AtomicLong();
    final AtomicLong queryKeys = new AtomicLong();
    final AtomicLong getKeys = new AtomicLong();
    final AtomicLong putKeys = new AtomicLong();
    final AtomicLong newKeys = new AtomicLong();
    final AtomicLong existingKeys = new AtomicLong();
    private final Set<String> written = new HashSet<>();

    CountingStore() {
      super(new MemoryStore());
    }

    @Override
    public StoreResult exists(List<String> keys) throws Exception {
      calls.incrementAndGet();
      queryKeys.addAndGet(keys.size());
      return super.exists(keys);
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      calls.incrementAndGet();
      getKeys.addAndGet(keys.size());
      return super.get(keys, destinations);
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      calls.incrementAndGet();
      putKeys.addAndGet(keys.size());
      synchronized (written) {
        for (String k : keys) {
          (written.add(k) ? newKeys : existingKeys).incrementAndGet();
        }
      }
      return super.put(keys, sources);
    }
  }

  private static L3Settings l3(CountingStore store) {
    return EngineL3Test.l3(
        store, StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(60_000));
  }

  /** The executor's counters agree with the store's own count of calls and keys. */
  private static void assertExecutorMatchesStore(L3Metrics m, CountingStore store, String when) {
    assertEquals(store.calls.get(), m.backendCalls(), when + ": backend calls");
    assertEquals(store.queryKeys.get(), m.query().keys(), when + ": query keys");
    assertEquals(store.getKeys.get(), m.get().keys(), when + ": GET keys");
    assertEquals(store.getKeys.get(), m.get().okKeys(), when + ": every GET key read");
    assertEquals(store.putKeys.get(), m.put().keys(), when + ": PUT keys");
    assertEquals(store.putKeys.get(), m.put().okKeys(), when + ": every PUT key taken");
    assertEquals(store.newKeys.get(), m.putsNewlyWritten(), when + ": PUT keys newly written");
    assertEquals(store.existingKeys.get(), m.putsAlreadyExisted(), when + ": PUT keys existing");
    for (L3Metrics.Kind k : List.of(m.query(), m.get(), m.put())) {
      assertEquals(0, k.queuedJobs() + k.runningJobs(), when + ": no job queued or running");
    }
    assertEquals("HEALTHY", m.healthState(), when);
    assertEquals(0, m.healthEpoch(), when);
    assertEquals(0, m.unprovenRetirements(), when);
  }

  /** Storage idle: nothing held, nothing in use, nothing queued. */
  private static void assertTransfersIdle(Transfers t, String when) {
    assertEquals(0, t.readyHolds(), when + ": Ready holds");
    assertEquals(0, t.quarantinedRefs(), when + ": quarantined references");
    assertEquals(0, t.operationsInUse(), when + ": operation credits");
    assertEquals(0, t.hostCreditsInUse(), when + ": Host credits");
    assertEquals(
        0,
        t.queuedCandidates() + t.deferredCandidates() + t.heldCandidates(),
        when + ": backup candidates");
    assertEquals(0, t.backupBackoffMs(), when + ": backup hold");
    assertFalse(t.gateClosed() || t.quarantined(), when);
    for (DropReason r : DropReason.values()) {
      assertEquals(0L, t.droppedBackupKeys().get(r), when + ": dropped " + r);
    }
  }

  /**
   * Clear, then reuse: a prompt is served and its prefix written through (PUTs, no GET); the cache
   * is cleared; a prompt that extends it is served, and restores the prefix from the store with
   * GETs. After each phase the snapshot is idle, storage is not pending, and every executor counter
   * equals what the store saw; the transfer manager issued one job per executor job.
   */
  @Test
  void shouldMoveL3CountersAsTheStoreSeesAClearThenAReuse() throws Exception {
    SplittableRandom rnd = new SplittableRandom(43);
    int[] written = rnd.ints(41, 0, model.vocabSize()).toArray();
    int[] extended = EngineL3Test.extend(written, 53, model.vocabSize(), rnd);
    CountingStore store = new CountingStore();
    Snapshots rec = new Snapshots();
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(rec)
                .l3(l3(store))
                .paused()
                .conclude())) {
      EngineMetrics fresh = e.metrics();
      EngineMetrics.Storage s0 = fresh.storage().orElseThrow();
      assertFalse(s0.pending());
      assertEquals(0, s0.executor().backendCalls());
      assertTransfersIdle(s0.transfers(), "fresh");
      e.resume();

      rec.await(e.submit(written, SamplingParams.greedy(8)));
      awaitStorageIdle(e);
      EngineMetrics m1 = e.metrics();
      EngineMetrics.Storage s1 = m1.storage().orElseThrow();
      assertTrue(m1.idle() && !s1.pending(), m1.toString());
      assertEquals(0, m1.host().usedParents(), "no Host block held once storage is idle");
      assertExecutorMatchesStore(s1.executor(), store, "written");
      Transfers t1 = s1.transfers();
      assertTransfersIdle(t1, "written");
      assertTrue(t1.putsIssued() > 0, "the prefix was written through: " + t1);
      assertEquals(0, t1.getsIssued(), "nothing to read from an empty store");
      assertEquals(0, s1.executor().get().jobs());
      assertEquals(t1.putsIssued(), s1.executor().put().jobs(), "one job per PUT issued");
      assertEquals(t1.queriesIssued(), s1.executor().query().jobs(), "one job per query issued");
      assertEquals(store.putKeys.get(), store.newKeys.get(), "every key new to the store");
      assertTrue(
          rec.published.stream().anyMatch(EngineMetricsTest::pending),
          "a snapshot showed the write-through pending");

      e.clearCache().get(10, TimeUnit.SECONDS);
      GenerationResult reuse = rec.await(e.submit(extended, SamplingParams.greedy(8))).result();
      int restored = reuse.metrics().reusedStorageTokens();
      assertEquals(written.length / P * P, restored, "the prefix came back from the store");
      awaitStorageIdle(e);
      EngineMetrics m2 = e.metrics();
      EngineMetrics.Storage s2 = m2.storage().orElseThrow();
      assertTrue(m2.idle() && !s2.pending(), m2.toString());
      assertEquals(0, m2.host().usedParents(), "no Host block held once storage is idle");
      assertExecutorMatchesStore(s2.executor(), store, "reused");
      Transfers t2 = s2.transfers();
      assertTransfersIdle(t2, "reused");
      assertTrue(t2.getsIssued() > 0, "the prefix was read: " + t2);
      assertEquals(t2.getsIssued(), s2.executor().get().jobs(), "one job per GET issued");
      assertEquals(t2.putsIssued(), s2.executor().put().jobs(), "one job per PUT issued");
      assertEquals(t2.queriesIssued(), s2.executor().query().jobs(), "one job per query issued");
      int blocks = restored / EngineTest.small(256).blockGranularity();
      assertEquals(
          blocks,
          s2.executor().get().okKeys(),
          "one object per restored block of the single attention group");
      assertEquals(
          blocks, t2.publishedBlocks() - t1.publishedBlocks(), "each published on the Host");
      assertTrue(s2.executor().get().payloadBytes() > 0);
      assertEquals(0, t2.softTimeouts() + t2.readyExpirations() + t2.pressureBypasses());
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    rec.assertPublishedOnlyWhenDue();
  }
}

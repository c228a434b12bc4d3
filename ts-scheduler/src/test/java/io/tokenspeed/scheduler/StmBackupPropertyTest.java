package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.Tier;
import io.tokenspeed.cache.TierCache;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Seeded random rounds of backups against a store that accepts, refuses (a retired refusal) or
 * loses (an unretired failure: quarantine) PUTs at random, with ticks delivered one round late
 * after gaps of random length (idle periods included), offers, evictions, pressure, frozen rounds
 * and clears. A small reference model of the store's pace (what {@link BackupPacer} promises,
 * rebuilt from the agreed facts alone) checks, after every round, that
 *
 * <ul>
 *   <li>credits are conserved and the manager's own invariants hold;
 *   <li>after the store refused a PUT sent since its last refusal, no backup at all is dispatched
 *       before the tick its doubling, capped hold allows; then one PUT of one page (the probe)
 *       until the store answers it; after a probe it took, the pages in flight grow by at most what
 *       it took;
 *   <li>no key is dispatched more than {@link StorageConfig#DEFAULT_MAX_BACKUP_ATTEMPTS} times
 *       outside probes after the engine offered it;
 *   <li>{@link StorageTransferManager#nextBackupRetryNs} is never later than the hold's end, so an
 *       engine that sleeps until then loses nothing;
 *   <li>nothing is dispatched or queued after quarantine, and {@link
 *       StorageTransferManager#inFlightOperations} counts exactly the PUTs whose facts are due;
 * </ul>
 *
 * <p>and, at the end, after a clear and every completion, that every map and in-use counter is back
 * to zero (quarantine keeps only its own references).
 */
class StmBackupPropertyTest {

  private static final long MS = 1_000_000L;

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 24).map(i -> 0xBAC_0000L + i * 7_919);
  }

  /** What the sequences exercised, summed over the seeds. */
  private static final long[] COVERAGE = new long[6];

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldPaceRefusedBackupsAndForgetThemWhateverTheStoreDoes(long seed) {
    Run run = new Run(seed);
    run.run(1_200);
    synchronized (COVERAGE) {
      COVERAGE[0]++;
      COVERAGE[1] += run.retries;
      COVERAGE[2] += run.probes;
      COVERAGE[3] += run.f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.OVERFLOW);
      COVERAGE[4] += run.f.stm.quarantined() ? 1 : 0;
      COVERAGE[5] += run.idleGaps;
    }
  }

  @AfterAll
  static void theSequencesMetEveryCase() {
    if (COVERAGE[0] < seeds().count()) {
      return; // a filtered run
    }
    assertTrue(COVERAGE[1] >= 100, "refused keys dispatched again: " + COVERAGE[1]);
    assertTrue(COVERAGE[2] >= 100, "probes after a refusal: " + COVERAGE[2]);
    assertTrue(COVERAGE[3] >= 5, "overflow drops: " + COVERAGE[3]);
    assertTrue(COVERAGE[4] >= 3, "sequences that quarantined: " + COVERAGE[4]);
    assertTrue(COVERAGE[5] >= 100, "idle gaps: " + COVERAGE[5]);
  }

  private static final class Run {
    final Random rnd;
    final StmFixture f;
    final List<CacheKey> keys = new ArrayList<>();
    final int refusePercent;
    final boolean mayQuarantine;

    /** PUTs whose facts are due, with the generation they were issued in. */
    final Map<Long, StorageOp.Put> pending = new LinkedHashMap<>();

    final Map<Long, Long> generationOf = new HashMap<>();

    // The model of the store's pace, from the agreed facts only.
    final long maxBackoffMs;
    final int openWindow;
    long epoch;
    int level;
    boolean holdToStart;
    long holdUntil;
    boolean held;
    long window = Long.MAX_VALUE;
    boolean learnedThisRound;
    final Map<Long, Long> epochOf = new HashMap<>();
    final Map<Long, Boolean> probeOf = new HashMap<>();

    /** Keys of PUTs dispatched in the model's current epoch whose facts are due. */
    int keysInEpoch;

    // The model, per key, since the engine last offered it (or it was accepted, or a clear).
    final Map<CacheKey, Integer> dispatches = new HashMap<>();

    long clock;
    long lastClock;
    long tick;
    int retries;
    int probes;
    int idleGaps;

    Run(long seed) {
      rnd = new Random(seed);
      StorageConfig config =
          new StorageConfig(
              2 + rnd.nextInt(8),
              8 + rnd.nextInt(80),
              StorageConfig.DEFAULT_RETRACTION_RESERVE_PERCENT,
              200,
              1_000,
              1,
              131_072,
              4_096,
              16,
              2 + rnd.nextInt(30),
              1 + rnd.nextInt(8),
              192,
              64,
              4L << 30,
              1L << 30,
              2_000,
              500,
              List.of(400L, 1_000L, 10_000L).get(rnd.nextInt(3)));
      f = new StmFixture(config, 16, 128);
      maxBackoffMs = config.maxBackupBackoffMs();
      openWindow = config.backupHostCredits();
      refusePercent = List.of(20, 60, 100).get(rnd.nextInt(3));
      mayQuarantine = rnd.nextInt(3) == 0;
      for (int i = 0; i < 8; i++) {
        keys.addAll(f.cache.neededKeys(f.prompt(128, (int) seed + 31 * i), 64));
      }
      f.put(Tier.HOST, keys);
    }

    void run(int rounds) {
      for (int step = 0; step < rounds; step++) {
        round(step > rounds * 3 / 5);
      }
      quiesce();
    }

    private void round(boolean late) {
      int gap = rnd.nextInt(100);
      clock +=
          gap < 70
              ? (1 + rnd.nextInt(5)) * MS
              : gap < 90
                  ? (20 + rnd.nextInt(280)) * MS
                  : gap < 98 ? (300 + rnd.nextInt(1_200)) * MS : (2_000 + rnd.nextInt(8_000)) * MS;
      idleGaps += gap >= 98 ? 1 : 0;
      tick = lastClock; // the exchange delivers the clock of the round before
      lastClock = clock;
      long promised = f.stm.nextBackupRetryNs();
      boolean nothingQueued = f.stm.queuedCandidates() == 0;
      f.stm.onTick(tick);
      learnedThisRound = false;
      if (held && holdToStart) {
        holdToStart = false;
        holdUntil = tick + BackupPacer.backoffNs(level, maxBackoffMs);
      }
      if (held && tick - holdUntil >= 0) {
        held = false; // the probe may go
        window = BackupPacer.PROBE_KEYS;
      }
      if (nothingQueued && (promised == Long.MAX_VALUE || tick - promised < 0)) {
        assertEquals(
            0,
            f.stm.queuedCandidates(),
            "held-back keys came back at " + tick + ", before nextBackupRetryNs " + promised);
      }
      int p = rnd.nextInt(100);
      if (p < 6) {
        f.stm.onPressure(
            new PressureSnapshot(StorageConfig.DEFAULT_HIGH_QUEUED_JOBS + rnd.nextInt(5), 0, 0));
      } else if (p < 30) {
        f.stm.onPressure(PressureSnapshot.IDLE);
      }
      boolean permitted = rnd.nextInt(15) != 0;
      f.stm.beginRound(permitted);
      complete(late);
      for (int i = rnd.nextInt(4); i > 0; i--) {
        CacheKey k = keys.get(rnd.nextInt(keys.size()));
        f.stm.offerBackup(k);
        forget(k); // a fresh offer: the model starts over (a coalesced one keeps the backoff)
      }
      if (rnd.nextInt(20) == 0) {
        TierCache host = f.cache.host();
        int[] cands = host.evictionCandidates(4);
        if (cands.length > 0) {
          host.evict(cands[rnd.nextInt(cands.length)]);
        }
      } else if (rnd.nextInt(20) == 0) {
        f.put(Tier.HOST, keys); // published again
      }
      if (rnd.nextInt(100) == 0) {
        clear();
      }
      dispatch(f.stm.drainOps(permitted));
      check();
    }

    private void complete(boolean late) {
      for (Long id : new ArrayList<>(pending.keySet())) {
        if (rnd.nextInt(10) < 4) {
          continue; // still inside the store
        }
        StorageOp.Put put = pending.remove(id);
        boolean current = generationOf.remove(id) == f.stm.generation();
        long putEpoch = epochOf.remove(id);
        boolean probe = probeOf.remove(id);
        if (putEpoch == epoch) {
          keysInEpoch -= put.keys().size();
        }
        if (mayQuarantine && late && rnd.nextInt(150) == 0) {
          f.stm.onCompletion(Facts.of(put, new BitSet(), new BitSet(), false, false));
          assertTrue(f.stm.quarantined());
          continue;
        }
        BitSet ok = new BitSet();
        for (int i = 0; i < put.keys().size(); i++) {
          ok.set(i, rnd.nextInt(100) >= refusePercent);
        }
        f.stm.onCompletion(Facts.of(put, ok, new BitSet(), true, false));
        if (!current) {
          continue; // a clear came between: the manager ignores it, and so does the model
        }
        int accepted = ok.cardinality();
        if (putEpoch == epoch) { // a fresh answer: it sets the pace
          if (accepted < put.keys().size()) {
            epoch++;
            keysInEpoch = 0;
            level++;
            held = true;
            holdToStart = true;
            learnedThisRound = true;
            window = BackupPacer.PROBE_KEYS;
          } else if (level > 0 || window != Long.MAX_VALUE) {
            level = 0;
            window += accepted;
            if (window >= openWindow) {
              window = Long.MAX_VALUE;
            }
          }
        }
        for (int i = 0; i < put.keys().size(); i++) {
          CacheKey k = put.keys().get(i);
          if (ok.get(i)) {
            forget(k);
          } else if (probe) {
            dispatches.merge(k, -1, Integer::sum); // a probe's refusal is not the key's
          }
        }
      }
    }

    private void dispatch(List<StorageOp> ops) {
      for (StorageOp op : ops) {
        assertFalse(f.stm.quarantined(), "a storage op after quarantine: " + op);
        StorageOp.Put put = (StorageOp.Put) op; // nothing else is asked for here
        assertFalse(learnedThisRound, "a PUT in the round that learned of a refusal: " + put);
        assertFalse(
            held,
            "a PUT at "
                + tick / MS
                + " ms while held back until "
                + (holdToStart ? "the hold starts" : holdUntil / MS + " ms")
                + " after refusal "
                + level);
        keysInEpoch += put.keys().size();
        assertTrue(
            keysInEpoch <= window,
            keysInEpoch + " pages in flight since the last refusal, window " + window);
        boolean probe = level > 0;
        probes += probe ? 1 : 0;
        for (CacheKey k : put.keys()) {
          retries += dispatches.containsKey(k) ? 1 : 0;
          int n = dispatches.merge(k, 1, Integer::sum);
          assertTrue(
              n <= StorageConfig.DEFAULT_MAX_BACKUP_ATTEMPTS,
              "key " + k + " dispatched " + n + " times after one offer, probes aside");
        }
        pending.put(put.operationId(), put);
        generationOf.put(put.operationId(), f.stm.generation());
        epochOf.put(put.operationId(), epoch);
        probeOf.put(put.operationId(), probe);
      }
    }

    private void clear() {
      f.stm.rejectAll();
      f.cache.clear();
      dispatches.clear();
      epoch++; // the PUTs in flight are of the old generation: ignored
      keysInEpoch = 0;
      level = 0;
      held = false;
      holdToStart = false;
      window = Long.MAX_VALUE;
      f.put(Tier.HOST, keys);
    }

    private void forget(CacheKey k) {
      dispatches.remove(k);
    }

    private void check() {
      f.checkInvariants(List.of());
      assertEquals(pending.size(), f.stm.inFlightOperations(), "PUTs whose facts are due");
      assertEquals(
          f.stm.deferredCandidates() + f.stm.heldCandidates() == 0,
          f.stm.nextBackupRetryNs() == Long.MAX_VALUE,
          "a retry tick exactly while something is held back");
      if (held) {
        assertEquals(0, f.stm.queuedCandidates(), "held back while the model holds");
      } else {
        assertEquals(
            0, f.stm.deferredCandidates() + f.stm.heldCandidates(), "held back, not the model");
      }
      if (f.stm.quarantined()) {
        assertEquals(0, f.stm.queuedCandidates(), "queued after quarantine");
        assertEquals(0, f.stm.deferredCandidates(), "deferred after quarantine");
      }
    }

    /** A clear, then every fact: nothing may stay held but quarantine. */
    private void quiesce() {
      f.stm.rejectAll();
      f.stm.onPressure(PressureSnapshot.IDLE);
      for (StorageOp.Put put : pending.values()) { // accepted or refused: all of an old generation
        BitSet ok = new BitSet();
        for (int i = 0; i < put.keys().size(); i++) {
          ok.set(i, rnd.nextBoolean());
        }
        f.stm.onCompletion(Facts.of(put, ok, new BitSet(), true, false));
      }
      pending.clear();
      f.stm.onTick(lastClock + 60_000 * MS);
      f.stm.beginRound(true);
      assertTrue(f.stm.drainOps(true).isEmpty(), "nothing is offered again after a clear");
      f.checkInvariants(List.of());
      assertEquals(0, f.stm.inFlightOperations());
      assertEquals(0, f.stm.queuedCandidates());
      assertEquals(0, f.stm.deferredCandidates() + f.stm.heldCandidates());
      assertEquals(0, f.stm.trackedRefusals(), "refusals remembered after everything retired");
      assertEquals(0, f.stm.pendingPutKeys());
      assertEquals(Long.MAX_VALUE, f.stm.nextBackupRetryNs());
      assertEquals(f.stm.quarantinedRefs(), f.stm.hostCreditsInUse());
      if (!f.stm.quarantined()) {
        assertEquals(0, f.stm.operationsInUse());
        assertEquals(0, f.stm.hostCreditsInUse());
        assertEquals(
            f.cache.host().cachedCount(),
            f.cache.host().pool().heldBlocks(),
            "only the cache itself holds Host blocks");
      }
    }
  }
}

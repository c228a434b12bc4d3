package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Whole rounds of the scheduler under seeded random events — arrivals, PD acknowledgements, client
 * cancellations, storage completions in any order (with failures and detachments), deadlines,
 * pressure, frozen rounds, clears — with every invariant checked after every round and nothing held
 * once everything drains.
 *
 * <p>Besides the ledger and the cache, every round checks what a plan promises: forward items only
 * for requests running at the plan's end; no unpublished Device block in two requests' tables and
 * every copy destination in a running request's table; after a clear no Host block of an earlier
 * generation is copied from or backed up, and no fact of an earlier generation is negative
 * metadata; a request cancelled in a round holds no lease at its end. Coverage counters, summed
 * over the short sequences, make sure these situations really happened.
 */
class SchedulerPropertyTest {

  private static final long MS = 1_000_000L;

  /** A request's block tables as last seen, with the admission and change count they had. */
  private record SeenTables(Object admission, int changes, int[][] tables) {}

  /**
   * {@link Scheduler#blockTablesChanges}' promise, which lets the engine keep its translation of a
   * request's tables: for one admission, an unchanged count means equal tables.
   */
  private static void checkTableChanges(
      Scheduler s, List<Long> known, Map<Long, SeenTables> seen, Coverage cov) {
    for (long id : known) {
      int[][] tables = s.blockTables(id);
      if (tables == null) {
        assertEquals(-1, s.blockTablesChanges(id), "request " + id + " is not admitted");
        seen.remove(id);
        continue;
      }
      SeenTables now = new SeenTables(s.admission(id), s.blockTablesChanges(id), tables);
      SeenTables before = seen.put(id, now);
      if (before != null && before.admission() == now.admission()) {
        if (before.changes() == now.changes()) {
          assertTrue(
              java.util.Arrays.deepEquals(before.tables(), now.tables()),
              "request " + id + ": tables changed without a change counted");
          cov.tablesUnchanged++;
        } else {
          assertTrue(now.changes() > before.changes(), "request " + id + ": the count went back");
          cov.tablesChanged++;
        }
      }
    }
  }

  /** What the sequences exercised (summed over the seeds of the short-sequence test). */
  static final class Coverage {
    long tablesUnchanged;
    long tablesChanged;
    long retractionsInBatch;
    long clearsWithPutsInFlight;
    long oldFactsAfterClear;
    long bootstrappingCancels;
    long cancelsWithTheirQueryFact;
    long cancelsOfParkedQueries;
    long oldHostBlocksAfterClear;
    long withdrawnDeviceBlocksAtClear;
    long landed;
    long sequences;
  }

  private static final Coverage SHORT = new Coverage();

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 10).map(i -> 0x5C4ED_000L + i * 6_151);
  }

  static LongStream shortSeeds() {
    if (System.getProperty("onlySeed") != null) {
      return LongStream.of(Long.getLong("onlySeed"));
    }
    return LongStream.rangeClosed(1, 1_500).map(i -> 0x5EED_0000L + i * 7_727);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldKeepEveryInvariantAcrossRandomRounds(long seed) {
    run(seed, 600, 450, 100, 8, false, new Coverage());
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("shortSeeds")
  void shouldKeepEveryInvariantAcrossShortSequences(long seed) {
    run(seed, 40, 30, 8, 3, true, SHORT);
    synchronized (SHORT) {
      SHORT.sequences++;
    }
  }

  @AfterAll
  static void shortSequencesExercisedEverySituation() {
    if (SHORT.sequences < shortSeeds().count()) {
      return; // a filtered run: the sums would not mean anything
    }
    assertTrue(
        SHORT.tablesUnchanged >= 100 && SHORT.tablesChanged >= 100,
        "tables seen unchanged " + SHORT.tablesUnchanged + ", changed " + SHORT.tablesChanged);
    assertTrue(
        SHORT.retractionsInBatch >= 40, "retractions within a batch: " + SHORT.retractionsInBatch);
    assertTrue(
        SHORT.clearsWithPutsInFlight >= 100,
        "clears with PUTs in flight: " + SHORT.clearsWithPutsInFlight);
    assertTrue(
        SHORT.oldFactsAfterClear >= 500,
        "facts of an earlier generation: " + SHORT.oldFactsAfterClear);
    assertTrue(
        SHORT.oldHostBlocksAfterClear >= 500,
        "old Host blocks pinned past a clear: " + SHORT.oldHostBlocksAfterClear);
    assertTrue(
        SHORT.withdrawnDeviceBlocksAtClear >= 10_000,
        "Device blocks of running requests withdrawn by a clear: "
            + SHORT.withdrawnDeviceBlocksAtClear);
    assertTrue(
        SHORT.bootstrappingCancels >= 500,
        "Bootstrapping PD cancels: " + SHORT.bootstrappingCancels);
    assertTrue(
        SHORT.cancelsOfParkedQueries >= 10,
        "cancels of parked queries: " + SHORT.cancelsOfParkedQueries);
    assertTrue(
        SHORT.cancelsWithTheirQueryFact >= 200,
        "cancels in the round their query completed: " + SHORT.cancelsWithTheirQueryFact);
    assertTrue(SHORT.landed >= 500, "PD-decode requests landed: " + SHORT.landed);
  }

  /**
   * Lands some (all when {@code all}) of the PD-decode requests waiting in Landing, as the engine
   * does once their KV is on the Device; forgets those that ended. Returns how many landed. A
   * landing request is never forwarded nor retracted before it lands: the plan check and the
   * invariants see to that.
   */
  private static int land(Scheduler s, List<Long> landing, SplittableRandom land, boolean all) {
    int landed = 0;
    for (long id : new ArrayList<>(landing)) {
      RequestState st = s.state(id);
      if (st == null) {
        landing.remove(id);
        assertFalse(s.onLanded(id), "an ended request cannot land");
      } else if (st instanceof RequestState.Landing && (all || land.nextInt(3) == 0)) {
        assertNotNull(s.blockTables(id), "a Landing request holds its blocks");
        assertTrue(s.onLanded(id));
        assertInstanceOf(RequestState.PrefillDone.class, s.state(id));
        landing.remove(id);
        landed++;
      } else {
        assertTrue(
            st instanceof RequestState.Submitted || st instanceof RequestState.Landing,
            "request " + id + " is in " + st + " before it landed");
      }
    }
    return landed;
  }

  /**
   * One seeded sequence. {@code tight}: a small Device and long generations, so growth retracts
   * within the batch; every arrival is a burst of two (one often a PD request).
   */
  private static void run(
      long seed,
      int rounds,
      int drainAt,
      int clearOneIn,
      int cancelOneIn,
      boolean tight,
      Coverage cov) {
    Random rnd = new Random(seed);
    StorageConfig config =
        StmFixture.config().withCredits(2 + rnd.nextInt(10), 16 + rnd.nextInt(200));
    int deviceParents = tight ? 12 + rnd.nextInt(10) : 24 + rnd.nextInt(40);
    int hostParents = 24 + rnd.nextInt(64);
    StmFixture f =
        new StmFixture(StmFixture.fitted(config, hostParents), deviceParents, hostParents);
    Scheduler s =
        new Scheduler(
            f.cache, f.stm, new Scheduler.Config(64 + rnd.nextInt(200), 4, 16, rnd.nextInt(12)));
    Map<Long, StorageOp> pending = new LinkedHashMap<>();
    Set<Long> cancelledOps = new HashSet<>();
    List<Long> known = new ArrayList<>();
    List<Long> pd = new ArrayList<>();
    // PD-decode requests whose KV has not landed yet; their own random stream, so that every
    // other draw of the sequence is the one it was without them
    List<Long> landing = new ArrayList<>();
    SplittableRandom land = new SplittableRandom(seed ^ 0x1A4D_1A4DL);
    long now = 0;
    long nextId = 1;
    int finished = 0;
    Map<Long, Long> opGeneration = new HashMap<>();
    Map<Integer, CacheKey> oldHost = new HashMap<>();
    // per request running at the last clear: the withdrawn Device blocks its table held then
    Map<Long, Set<Integer>> oldDevice = new HashMap<>();
    Set<CacheKey> oldEvidence = new HashSet<>();
    Set<CacheKey> currentEvidence = new HashSet<>();
    Map<Long, SeenTables> seenTables = new HashMap<>();
    for (int round = 0; round < rounds; round++) {
      boolean draining = round >= drainAt;
      for (int a = 0; a < (tight ? 2 : 1) && !draining && rnd.nextInt(3) == 0; a++) {
        long id = nextId++;
        boolean isPd = rnd.nextInt(tight ? 2 : 4) == 0;
        int len = 40 + rnd.nextInt(300);
        try {
          s.submit(id, f.prompt(len, rnd.nextInt(4)), 1 + rnd.nextInt(tight ? 120 : 40), isPd);
          known.add(id);
          if (isPd) {
            pd.add(id);
          }
        } catch (IllegalArgumentException tooLarge) {
          assertTrue(tooLarge.getMessage().contains("holds at most"), tooLarge.getMessage());
        }
      }
      if (!pd.isEmpty() && rnd.nextInt(3) == 0) {
        s.onBootstrapAck(pd.remove(rnd.nextInt(pd.size())));
      }
      if (!draining && land.nextInt(5) == 0) {
        long id = nextId++;
        try {
          s.submitLanding(
              id, f.prompt(40 + land.nextInt(300), land.nextInt(4)), 1 + land.nextInt(40));
          known.add(id);
          landing.add(id);
        } catch (IllegalArgumentException tooLarge) {
          assertTrue(tooLarge.getMessage().contains("holds at most"), tooLarge.getMessage());
        }
      }
      cov.landed += land(s, landing, land, draining);
      List<Long> cancels = new ArrayList<>();
      if (!known.isEmpty() && rnd.nextInt(cancelOneIn) == 0) {
        cancels.add(known.get(rnd.nextInt(known.size())));
      }
      List<AgreedCompletion> facts = new ArrayList<>();
      Map<Long, Integer> factsByGeneration = new HashMap<>();
      Map<Long, List<CacheKey>> failedByGeneration = new HashMap<>();
      List<Long> ids = new ArrayList<>(pending.keySet());
      java.util.Collections.shuffle(ids, rnd);
      for (long id : ids.subList(0, draining ? ids.size() : rnd.nextInt(ids.size() + 1))) {
        StorageOp op = pending.remove(id);
        List<CacheKey> keys =
            switch (op) {
              case StorageOp.Query q -> q.keys();
              case StorageOp.Get g -> g.keys();
              case StorageOp.Put p -> p.keys();
              case StorageOp.Cancel c -> throw new AssertionError();
            };
        boolean detached = cancelledOps.contains(id) && rnd.nextBoolean();
        BitSet ok = new BitSet();
        BitSet failed = new BitSet();
        for (int i = 0; i < keys.size(); i++) {
          if (!detached && rnd.nextInt(10) < 8) {
            ok.set(i);
          } else if (op instanceof StorageOp.Get && !detached && rnd.nextBoolean()) {
            failed.set(i);
          }
        }
        facts.add(Facts.of(op, ok, failed, true, detached));
        // The fact's generation and GET failures: sorted once this round's clear is decided.
        long gen = opGeneration.remove(id);
        factsByGeneration.merge(gen, 1, Integer::sum);
        List<CacheKey> evidence = failedByGeneration.computeIfAbsent(gen, g -> new ArrayList<>());
        for (int i = failed.nextSetBit(0); i >= 0; i = failed.nextSetBit(i + 1)) {
          evidence.add(keys.get(i));
        }
      }
      now += rnd.nextInt(60) * MS;
      boolean frozen = !draining && rnd.nextInt(10) == 0;
      PressureSnapshot pressure =
          !draining && rnd.nextInt(12) == 0
              ? new PressureSnapshot(StorageConfig.DEFAULT_HIGH_QUEUED_JOBS, 0, 0)
              : PressureSnapshot.IDLE;
      if (!draining && rnd.nextInt(clearOneIn) == 0) {
        if (pending.values().stream().anyMatch(StorageOp.Put.class::isInstance)) {
          cov.clearsWithPutsInFlight++;
        }
        var host = f.cache.host();
        var device = f.cache.device();
        Map<Integer, CacheKey> publishedBefore = new HashMap<>();
        for (int b = 1; b < host.pool().blockIdLimit(); b++) {
          if (host.pool().isAllocated(b) && host.keyOf(b) != null) {
            publishedBefore.put(b, host.keyOf(b));
          }
        }
        s.clearAll();
        for (int g = 0; g < f.cache.layout().numGroups(); g++) {
          assertEquals(0, host.publishedCount(g), "Host index after a clear, group " + g);
          assertEquals(0, device.publishedCount(g), "Device index after a clear, group " + g);
        }
        currentEvidence.clear();
        oldHost.clear();
        for (var e : publishedBefore.entrySet()) {
          if (host.isWithdrawn(e.getKey())) {
            oldHost.put(e.getKey(), e.getValue()); // published before the clear and still held
          }
        }
        cov.oldHostBlocksAfterClear += oldHost.size();
        cov.withdrawnDeviceBlocksAtClear += device.withdrawnCount();
        oldDevice.clear();
        for (var e : s.deviceTables().entrySet()) {
          for (int[] row : e.getValue()) {
            for (int b : row) {
              if (b != 0 && device.isWithdrawn(b)) {
                oldDevice.computeIfAbsent(e.getKey(), k -> new HashSet<>()).add(b);
              }
            }
          }
        }
      }
      for (var e : failedByGeneration.entrySet()) {
        boolean old = e.getKey() != f.stm.generation();
        if (old) {
          cov.oldFactsAfterClear += factsByGeneration.get(e.getKey());
        }
        (old ? oldEvidence : currentEvidence).addAll(e.getValue());
      }
      Map<StorageLease, Long> cancelledWaits = new HashMap<>();
      for (long id : cancels) {
        RequestState st = s.state(id);
        if (st instanceof RequestState.Bootstrapping) {
          cov.bootstrappingCancels++;
        }
        if (st instanceof RequestState.Prefetching p) {
          long op = p.lease().operationId();
          cancelledWaits.put(p.lease(), op);
          if (!pending.containsKey(op) && facts.stream().noneMatch(x -> x.operationId() == op)) {
            cov.cancelsOfParkedQueries++; // its query's facts came in an earlier, frozen round
          }
        }
        if (st instanceof RequestState.Prefetching p
            && facts.stream().anyMatch(x -> x.operationId() == p.lease().operationId())) {
          cov.cancelsWithTheirQueryFact++;
        }
      }
      long generationBefore = f.stm.generation();
      ExecutionPlan plan = s.round(new RoundInput(now, pressure, cancels, facts, !frozen, !frozen));
      assertEquals(generationBefore, f.stm.generation());
      oldHost.keySet().removeIf(b -> !f.cache.host().isWithdrawn(b));
      checkPlan(s, f, plan, cancels, oldHost, oldDevice);
      for (var e : cancelledWaits.entrySet()) {
        assertEquals(
            e.getValue(),
            e.getKey().operationId(),
            "the wait of a request cancelled in plan " + plan.round() + " moved on to a GET");
      }
      for (StorageOp op : plan.storage()) {
        if (op instanceof StorageOp.Cancel c) {
          cancelledOps.add(c.operationId());
        } else {
          pending.put(op.operationId(), op);
          opGeneration.put(op.operationId(), f.stm.generation());
        }
      }
      for (CacheKey k : oldEvidence) {
        assertTrue(
            !f.stm.knownMissing(k) || currentEvidence.contains(k),
            "a fact of an earlier generation is negative metadata: " + k);
      }
      s.onForwardDone(plan);
      oldHost.keySet().removeIf(b -> !f.cache.host().isWithdrawn(b));
      for (long id : new ArrayList<>(known)) {
        if (s.state(id) == null) {
          known.remove(id);
          pd.remove(id);
          finished++;
        }
      }
      if (rnd.nextInt(5) == 0) {
        int[] cached = f.cache.host().evictionCandidates(4);
        List<CacheKey> keys = new ArrayList<>();
        for (int b : cached) {
          keys.add(f.cache.host().keyOf(b));
        }
        s.onHostPublished(keys);
      }
      s.checkInvariants();
      List<HeldBlock> holders = new ArrayList<>(s.heldBlocks());
      f.checkInvariants(holders);
      checkTableChanges(s, known, seenTables, cov);
    }
    for (long id : new ArrayList<>(pd)) {
      s.onBootstrapAck(id);
    }
    for (int i = 0; i < 5_000 && (s.size() > 0 || !pending.isEmpty()); i++) {
      cov.landed += land(s, landing, land, true);
      List<AgreedCompletion> facts = new ArrayList<>();
      for (var e : pending.entrySet()) {
        int n =
            switch (e.getValue()) {
              case StorageOp.Query q -> q.keys().size();
              case StorageOp.Get g -> g.keys().size();
              case StorageOp.Put p -> p.keys().size();
              case StorageOp.Cancel c -> 0;
            };
        BitSet ok = new BitSet();
        if (e.getValue() instanceof StorageOp.Put) {
          ok.set(0, n); // a refused PUT row is offered again: let the drain end
        }
        facts.add(Facts.of(e.getValue(), ok, new BitSet(), true, false));
      }
      pending.clear();
      now += 50 * MS;
      ExecutionPlan plan =
          s.round(new RoundInput(now, PressureSnapshot.IDLE, List.of(), facts, true, true));
      for (StorageOp op : plan.storage()) {
        if (!(op instanceof StorageOp.Cancel)) {
          pending.put(op.operationId(), op);
        }
      }
      s.onForwardDone(plan);
      s.checkInvariants();
      f.checkInvariants(s.heldBlocks());
    }
    assertEquals(
        0,
        s.size(),
        () ->
            "every request finished: "
                + known.stream().map(id -> id + "=" + s.state(id)).toList()
                + " pd="
                + pd);
    assertEquals(f.stm.quarantinedRefs(), f.stm.hostCreditsInUse(), "no Host reference leaked");
    assertEquals(
        f.cache.device().cachedCount(),
        f.cache.device().pool().heldBlocks(),
        "no Device reference leaked");
    assertTrue(finished > 0 || nextId == 1, "requests went through");
    synchronized (cov) {
      cov.retractionsInBatch += s.retractionsInBatch();
    }
  }

  /** What every plan promises, checked when the round returns it. */
  private static void checkPlan(
      Scheduler s,
      StmFixture f,
      ExecutionPlan plan,
      List<Long> cancels,
      Map<Integer, CacheKey> oldHost,
      Map<Long, Set<Integer>> oldDevice) {
    for (ExecutionPlan.ForwardItem item : plan.forward()) {
      RequestState st = s.state(item.requestId());
      assertTrue(
          st instanceof RequestState.Prefilling
              || st instanceof RequestState.PrefillDone
              || st instanceof RequestState.Decoding,
          "plan " + plan.round() + " forwards " + item + " for a request in " + st);
    }
    Map<Integer, Long> owner = new HashMap<>();
    Set<Integer> tabled = new HashSet<>();
    for (var e : s.deviceTables().entrySet()) {
      for (int[] row : e.getValue()) {
        for (int b : row) {
          if (b == 0) {
            continue;
          }
          tabled.add(b);
          if (f.cache.device().isWithdrawn(b)) {
            // unpublished by a clear: only a request that held it then may hold it now
            assertTrue(
                oldDevice.getOrDefault(e.getKey(), Set.of()).contains(b),
                "plan "
                    + plan.round()
                    + ": request "
                    + e.getKey()
                    + " holds Device block "
                    + b
                    + " withdrawn by a clear it did not hold it across");
          } else if (f.cache.device().keyOf(b) == null) {
            Long other = owner.put(b, e.getKey());
            assertTrue(
                other == null || other.equals(e.getKey()),
                "plan "
                    + plan.round()
                    + ": Device block "
                    + b
                    + " is in the tables of requests "
                    + other
                    + " and "
                    + e.getKey());
          }
        }
      }
    }
    for (var c : plan.deviceCopies()) {
      assertTrue(tabled.contains(c.dstBlock()), "copy into a block no running request owns: " + c);
      assertTrue(
          c.srcTier() != io.tokenspeed.cache.Tier.HOST || !oldHost.containsKey(c.srcBlock()),
          "plan "
              + plan.round()
              + " copies Host block "
              + c.srcBlock()
              + " of an earlier generation");
    }
    for (StorageOp op : plan.storage()) {
      if (op instanceof StorageOp.Put put) {
        for (int b : put.hostBlocks()) {
          assertTrue(!oldHost.containsKey(b), "plan " + plan.round() + " backs up old block " + b);
        }
      }
    }
    for (long id : cancels) {
      RequestState st = s.state(id);
      assertTrue(
          st == null || st instanceof RequestState.Bootstrapping,
          "request " + id + " was cancelled but is " + st);
      assertTrue(!f.stm.holdsLease(id), "cancelled request " + id + " holds a lease");
      if (st instanceof RequestState.Bootstrapping b && b.resources().readyHold() != null) {
        assertTrue(!b.resources().readyHold().live(), "cancelled request " + id + " holds Ready");
      }
    }
  }
}

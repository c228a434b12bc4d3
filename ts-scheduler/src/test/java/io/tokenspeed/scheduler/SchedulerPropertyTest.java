package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.stream.LongStream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Whole rounds of the scheduler under seeded random events — arrivals, PD acknowledgements, client
 * cancellations, storage completions in any order (with failures and detachments), deadlines,
 * pressure, frozen rounds, clears — with every invariant checked after every round and nothing held
 * once everything drains.
 */
class SchedulerPropertyTest {

  private static final long MS = 1_000_000L;

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 10).map(i -> 0x5C4ED_000L + i * 6_151);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldKeepEveryInvariantAcrossRandomRounds(long seed) {
    Random rnd = new Random(seed);
    StmFixture f =
        new StmFixture(
            StmFixture.config().withCredits(2 + rnd.nextInt(10), 16 + rnd.nextInt(200)),
            24 + rnd.nextInt(40),
            24 + rnd.nextInt(64));
    Scheduler s =
        new Scheduler(
            f.cache, f.stm, new Scheduler.Config(64 + rnd.nextInt(200), 4, 16, rnd.nextInt(12)));
    Map<Long, StorageOp> pending = new LinkedHashMap<>();
    Set<Long> cancelledOps = new HashSet<>();
    List<Long> known = new ArrayList<>();
    List<Long> pd = new ArrayList<>();
    long now = 0;
    long nextId = 1;
    int finished = 0;
    for (int round = 0; round < 600; round++) {
      boolean draining = round >= 450;
      if (!draining && rnd.nextInt(3) == 0) {
        long id = nextId++;
        boolean isPd = rnd.nextInt(4) == 0;
        int len = 40 + rnd.nextInt(300);
        try {
          s.submit(id, f.prompt(len, rnd.nextInt(4)), 1 + rnd.nextInt(40), isPd);
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
      List<Long> cancels = new ArrayList<>();
      if (!known.isEmpty() && rnd.nextInt(8) == 0) {
        cancels.add(known.get(rnd.nextInt(known.size())));
      }
      List<AgreedCompletion> facts = new ArrayList<>();
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
      }
      now += rnd.nextInt(60) * MS;
      boolean frozen = !draining && rnd.nextInt(10) == 0;
      PressureSnapshot pressure =
          !draining && rnd.nextInt(12) == 0
              ? new PressureSnapshot(StorageConfig.DEFAULT_HIGH_QUEUED_JOBS, 0, 0)
              : PressureSnapshot.IDLE;
      if (!draining && rnd.nextInt(100) == 0) {
        s.clearAll();
      }
      ExecutionPlan plan = s.round(new RoundInput(now, pressure, cancels, facts, !frozen, !frozen));
      for (StorageOp op : plan.storage()) {
        if (op instanceof StorageOp.Cancel c) {
          cancelledOps.add(c.operationId());
        } else {
          pending.put(op.operationId(), op);
        }
      }
      s.onForwardDone(plan);
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
    }
    for (long id : new ArrayList<>(pd)) {
      s.onBootstrapAck(id);
    }
    for (int i = 0; i < 2_000 && (s.size() > 0 || !pending.isEmpty()); i++) {
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
    assertEquals(0, s.size(), "every request finished");
    assertEquals(f.stm.quarantinedRefs(), f.stm.hostCreditsInUse(), "no Host reference leaked");
    assertEquals(
        f.cache.device().cachedCount(),
        f.cache.device().pool().heldBlocks(),
        "no Device reference leaked");
    assertTrue(finished > 0 || nextId == 1, "requests went through");
  }
}

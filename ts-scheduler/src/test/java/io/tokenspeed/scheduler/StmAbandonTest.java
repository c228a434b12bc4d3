package io.tokenspeed.scheduler;

import static io.tokenspeed.scheduler.StmFixture.allOk;
import static io.tokenspeed.scheduler.StmFixture.only;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.CostFigures;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A restore under way abandoned by new cost figures: when what is left of its read (its expected
 * restore time less the agreed ticks since its query) exceeds the recomputation it saves raised by
 * the margin, its request is woken ({@code slower_than_compute}), counted, and its GET cancelled
 * and detached; its Host and Device destinations go once the GET's fact arrives, and nothing of it
 * is published. A restore inside the margin band, one nearly read, a backup and a query still in
 * its QUERY phase are left alone. A seeded random walk of figures over several restores checks the
 * rule against a recomputation from the cost model's public methods.
 */
class StmAbandonTest {

  private static final long MS = 1_000_000L;

  /** Recomputing costs 1 ms per token, nothing else. */
  private static final CostFigures PREFILL_ONLY = new CostFigures(0, 0, 0, 1e6, 0);

  private static final AtomicLong ABANDONED_OVER_SEEDS = new AtomicLong();
  private static final AtomicLong KEPT_OVER_SEEDS = new AtomicLong();
  private static final AtomicLong SEEDS_RUN = new AtomicLong();

  private StmFixture f;

  @AfterEach
  void invariants() {
    if (f != null) {
      f.checkInvariants(List.of());
    }
  }

  @AfterAll
  static void bothOutcomes() {
    if (SEEDS_RUN.get() >= 20) {
      assertTrue(ABANDONED_OVER_SEEDS.get() > 0, "no seed abandoned a restore");
      assertTrue(KEPT_OVER_SEEDS.get() > 0, "no seed kept a restore through new figures");
    }
  }

  private static StmFixture fixture(StorageConfig config) {
    StmFixture fx = new StmFixture(config, 64, 256);
    fx.stm.useTokenBudget(256);
    return fx;
  }

  private static StorageConfig on(int marginPercent) {
    return StmFixture.config()
        .withSoftDeadlineMs(3_600_000) // waits end by the rule under test, never by the clock
        .withCostModel(true, marginPercent, 60_000, 0);
  }

  /** Figures whose store restores {@code p}'s whole prefix, from nothing, in {@code restoreMs}. */
  private CostFigures storeTaking(double restoreMs, PromptKeys p) {
    double bytes = f.stm.costModel().ownerBytes(0, p.reusableBound());
    return PREFILL_ONLY.withStore(0, bytes / (restoreMs / 1e3));
  }

  /** What restoring {@code p}'s whole prefix from nothing saves under the figures agreed now. */
  private double savedNs(PromptKeys p) {
    CostModel m = f.stm.costModel();
    return m.prefillNs(0, p.numTokens()) - m.prefillNs(p.reusableBound(), p.numTokens());
  }

  /** Issues {@code p}'s restore at {@code tickNs} (query, next round, GET) and returns the GET. */
  private StorageOp.Get restore(long requestId, PromptKeys p, long tickNs, List<StorageLease> out) {
    f.stm.onTick(tickNs);
    StorageTransferManager.Preparation prep = f.stm.prepare(requestId, p, true);
    assertTrue(prep.waiting(), "expected a query, got " + prep.bypass());
    StorageOp.Query q = (StorageOp.Query) only(f.drain(), StorageOp.Query.class);
    f.stm.onTick(tickNs); // the next round: its tick starts the soft deadline
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    assertEquals(p.reusableBound(), f.stm.wantedBoundary(prep.lease()), "the whole prefix");
    out.add(prep.lease());
    return g;
  }

  @Test
  void shouldAbandonARestoreTheNewFiguresMakeSlowerThanComputing() {
    f = fixture(on(10));
    PromptKeys p = f.prompt(300, 1);
    f.stm.onCostFigures(storeTaking(30, p)); // computing 299 tokens takes 299 ms
    List<StorageLease> leases = new ArrayList<>();
    StorageOp.Get g = restore(1, p, 0, leases);
    StorageLease lease = leases.get(0);
    assertFalse(g.deviceBlocks().isEmpty(), "the GET has early Device destinations");
    int hostCredits = f.stm.hostCreditsInUse();
    assertTrue(hostCredits > 0);
    assertTrue(f.cache.device().pool().referencedParents() > 0);

    f.stm.onTick(10 * MS);
    f.stm.onCostFigures(storeTaking(3000, p)); // 2990 ms left against 299 ms saved
    List<Wakeup> w = f.stm.drainWakeups();
    assertEquals(1, w.size());
    assertEquals(1, w.get(0).requestId());
    assertEquals(Wakeup.Reason.SLOWER_THAN_COMPUTE, w.get(0).reason());
    assertNull(w.get(0).ready());
    assertFalse(lease.live());
    assertEquals(0, f.stm.wantedBoundary(lease), "no longer waiting");
    assertEquals(1, f.stm.counters().restoresAbandoned());
    assertEquals(0, f.stm.counters().softTimeouts());
    assertEquals(0, f.stm.counters().clientDetaches());
    StorageOp.Cancel c = (StorageOp.Cancel) only(f.drain(), StorageOp.Cancel.class);
    assertEquals(g.operationId(), c.operationId());
    assertEquals(
        hostCredits, f.stm.hostCreditsInUse(), "the read's I/O stays charged until its fact");
    assertEquals(1, f.stm.inFlightOperations());

    f.stm.onTick(20 * MS);
    f.stm.onCompletion(allOk(g)); // every row read: a detached read still publishes nothing
    assertTrue(f.stm.drainWakeups().isEmpty());
    assertEquals(0, f.cache.probe(p, p.reusableBound()).hostHit(), "nothing published");
    for (CacheKey k : g.keys()) {
      assertFalse(f.cache.host().contains(k), "Host " + k);
      assertFalse(f.cache.device().contains(k), "Device " + k);
    }
    assertEquals(0, f.stm.counters().publishedBlocks());
    assertEquals(0, f.stm.counters().earlyH2dBlocks());
    assertEquals(0, f.stm.hostCreditsInUse());
    assertEquals(0, f.stm.operationsInUse());
    assertEquals(0, f.stm.inFlightOperations());
    assertEquals(0, f.stm.readyHolds());
    assertTrue(f.stm.heldBlocks().isEmpty());
    assertEquals(0, f.cache.host().pool().referencedParents());
    assertEquals(0, f.cache.device().pool().referencedParents());
    assertEquals(1, f.stm.counters().restoresAbandoned(), "counted once");
  }

  /**
   * A store a little slower than when the restore was chosen: what is left is over the saving but
   * inside the margin band, and the restore goes on; past the band it is abandoned.
   */
  @Test
  void shouldKeepARestoreWhoseRestIsInsideTheMarginBand() {
    f = fixture(on(10));
    PromptKeys p = f.prompt(300, 2);
    f.stm.onCostFigures(storeTaking(30, p));
    List<StorageLease> leases = new ArrayList<>();
    StorageOp.Get g = restore(1, p, 0, leases);
    f.stm.onTick(0);
    double saved = savedNs(p);
    f.stm.onCostFigures(storeTaking(saved * 1.05 / MS, p));
    assertTrue(f.stm.drainWakeups().isEmpty(), "5 % over the saving, inside a 10 % margin");
    assertTrue(f.drain().isEmpty(), "no cancel");
    assertTrue(leases.get(0).live());
    f.stm.onCostFigures(storeTaking(saved * 1.15 / MS, p));
    assertEquals(
        Wakeup.Reason.SLOWER_THAN_COMPUTE, only1(f.stm.drainWakeups()).reason(), "15 % over");
    assertEquals(
        g.operationId(),
        ((StorageOp.Cancel) only(f.drain(), StorageOp.Cancel.class)).operationId());
    f.stm.onCompletion(allOk(g));
    assertEquals(0, f.stm.hostCreditsInUse());
  }

  /**
   * The agreed ticks since a restore's query count as read: under the same slow figures, a restore
   * issued 810 ms ago is nearly done and goes on, one issued 10 ms ago is abandoned.
   */
  @Test
  void shouldCountTheTicksSinceTheQueryAsAlreadyRead() {
    f = fixture(on(10));
    PromptKeys early = f.prompt(300, 3);
    PromptKeys late = f.prompt(300, 4);
    f.stm.onCostFigures(storeTaking(30, early));
    List<StorageLease> leases = new ArrayList<>();
    StorageOp.Get first = restore(1, early, 0, leases);
    StorageOp.Get second = restore(2, late, 800 * MS, leases);
    f.stm.onTick(810 * MS);
    f.stm.onCostFigures(storeTaking(1000, early)); // 190 ms and 990 ms left, 329 ms allowed
    Wakeup w = only1(f.stm.drainWakeups());
    assertEquals(2, w.requestId());
    assertEquals(Wakeup.Reason.SLOWER_THAN_COMPUTE, w.reason());
    assertTrue(leases.get(0).live(), "the restore nearly read goes on");
    assertEquals(
        second.operationId(),
        ((StorageOp.Cancel) only(f.drain(), StorageOp.Cancel.class)).operationId());
    f.stm.onCompletion(allOk(first));
    Wakeup ready = only1(f.stm.drainWakeups());
    assertEquals(Wakeup.Reason.READ_COMPLETE, ready.reason());
    assertEquals(early.reusableBound(), f.cache.probe(early, early.reusableBound()).hostHit());
    ready.ready().close();
    f.stm.onCompletion(allOk(second));
    assertEquals(0, f.cache.probe(late, late.reusableBound()).hostHit());
    assertEquals(1, f.stm.counters().restoresAbandoned());
    assertEquals(0, f.stm.hostCreditsInUse());
  }

  /**
   * The rule ends waits on GETs only: a backup PUT and a restore whose query has not answered yet
   * go on under figures that abandon the GET beside them.
   */
  @Test
  void shouldAbandonNeitherABackupNorAQueryStillInQueryPhase() {
    f = fixture(on(10));
    PromptKeys p = f.prompt(300, 5);
    f.stm.onCostFigures(storeTaking(30, p));
    List<StorageLease> leases = new ArrayList<>();
    StorageOp.Get g = restore(1, p, 0, leases);
    List<CacheKey> backup = f.cache.neededKeys(f.prompt(128, 6), 64);
    f.put(Tier.HOST, backup);
    backup.forEach(f.stm::offerBackup);
    StorageOp.Put put = (StorageOp.Put) only(f.drain(), StorageOp.Put.class);
    f.stm.onTick(10 * MS);
    PromptKeys queried = f.prompt(300, 7);
    StorageTransferManager.Preparation prep = f.stm.prepare(2, queried, true);
    StorageOp.Query q = (StorageOp.Query) only(f.drain(), StorageOp.Query.class);

    CostFigures slow = storeTaking(3000, p);
    f.stm.onCostFigures(slow.withStore(5 * MS, slow.storeBytesPerSecond())); // its 2 calls: 10 ms
    Wakeup w = only1(f.stm.drainWakeups());
    assertEquals(1, w.requestId(), "the GET's request alone");
    List<StorageOp> ops = f.drain();
    assertEquals(List.of(new StorageOp.Cancel(g.operationId())), ops, "the GET's cancel alone");
    assertTrue(prep.lease().live(), "the query's request still waits");
    assertEquals(queried.reusableBound(), f.stm.wantedBoundary(prep.lease()));
    assertEquals(1, f.stm.counters().restoresAbandoned());

    f.stm.onCompletion(allOk(put));
    f.stm.onCompletion(allOk(g));
    f.stm.onCompletion(StmFixture.fact(q, Set.of(), true)); // a miss ends the wait
    assertEquals(Wakeup.Reason.NOTHING_RESTORED, only1(f.stm.drainWakeups()).reason());
    assertEquals(0, f.stm.operationsInUse());
    assertEquals(0, f.stm.hostCreditsInUse());
  }

  /**
   * Figures agreed while a query runs that make its restore lose: the query's answer issues no GET,
   * the request computes instead, and the abandonment is counted; a query answered under figures by
   * which the restore still wins issues its GET.
   */
  @Test
  void shouldIssueNoGetForAQueryAnsweredAfterTheStoreSlowedDown() {
    f = fixture(on(10));
    PromptKeys p = f.prompt(300, 8);
    PromptKeys kept = f.prompt(300, 9);
    f.stm.onCostFigures(storeTaking(30, p));
    f.stm.onTick(0);
    StorageTransferManager.Preparation prep = f.stm.prepare(1, p, true);
    StorageTransferManager.Preparation keptPrep = f.stm.prepare(2, kept, true);
    List<StorageOp> queries = f.drain();
    assertEquals(2, queries.size(), queries::toString);
    f.stm.onTick(5 * MS);
    f.stm.onCostFigures(storeTaking(3000, p)); // a query is not abandoned: nothing read yet
    assertTrue(f.stm.drainWakeups().isEmpty());
    f.stm.onCompletion(allOk((StorageOp.Query) queries.get(0)));
    Wakeup w = only1(f.stm.drainWakeups());
    assertEquals(1, w.requestId());
    assertEquals(Wakeup.Reason.SLOWER_THAN_COMPUTE, w.reason());
    assertFalse(prep.lease().live());
    assertTrue(f.drain().isEmpty(), "no GET for it");
    assertEquals(1, f.stm.counters().restoresAbandoned());
    assertEquals(0, f.stm.counters().getsIssued());

    f.stm.onCostFigures(storeTaking(30, p)); // the store reads fast again
    f.stm.onCompletion(allOk((StorageOp.Query) queries.get(1)));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    assertTrue(keptPrep.lease().live());
    assertEquals(1, f.stm.counters().getsIssued());
    f.stm.onCompletion(allOk(g));
    Wakeup ready = only1(f.stm.drainWakeups());
    assertEquals(Wakeup.Reason.READ_COMPLETE, ready.reason());
    ready.ready().close();
    assertEquals(1, f.stm.counters().restoresAbandoned());
    assertEquals(0, f.stm.hostCreditsInUse());
    assertEquals(0, f.stm.operationsInUse());
  }

  @Test
  void shouldAbandonNothingWhileTheModelIsOff() {
    f = fixture(on(10).withCostModel(false));
    PromptKeys p = f.prompt(300, 8);
    List<StorageLease> leases = new ArrayList<>();
    StorageOp.Get g = restore(1, p, 0, leases);
    f.stm.onTick(10 * MS);
    f.stm.onCostFigures(storeTaking(1e6, p));
    assertTrue(f.stm.drainWakeups().isEmpty());
    assertTrue(f.drain().isEmpty());
    assertTrue(leases.get(0).live());
    f.stm.onCompletion(allOk(g));
    only1(f.stm.drainWakeups()).ready().close();
    assertEquals(0, f.stm.counters().restoresAbandoned());
  }

  private static Wakeup only1(List<Wakeup> w) {
    assertEquals(1, w.size(), "wakeups: " + w);
    return w.get(0);
  }

  // ---------------------------------------------------------------- the random walk

  /** A restore waiting on its GET, with what the rule needs to know of it. */
  private record Restore(
      long requestId,
      StorageLease lease,
      StorageOp.Get get,
      int floor,
      int boundary,
      int numTokens,
      long issuedNs) {}

  static LongStream seeds() {
    return LongStream.range(0, 60);
  }

  /**
   * Rounds of random ticks in which restores are issued under figures that choose them (some above
   * a Host hit), GETs finish, attached or not, and random figures are agreed: after every agreement
   * exactly the attached restores whose rest exceeds their saving times the margin, as recomputed
   * from {@link CostModel#restoreNs}, {@link CostModel#ownerBytes} and {@link CostModel#prefillNs},
   * were woken, cancelled and counted.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldAbandonExactlyTheRestoresWhoseRestExceedsTheirSavingTimesTheMargin(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int margin = new int[] {0, 10, 25}[rnd.nextInt(3)];
    f = fixture(on(margin));
    Map<Long, Restore> inFlight = new HashMap<>(); // by GET id, attached or not
    long tick = 0;
    long nextRequest = 1;
    int checked = 0;
    long abandoned = 0;
    for (int round = 0; round < 40; round++) {
      tick += rnd.nextLong(250) * MS;
      f.stm.onTick(tick);
      if (!inFlight.isEmpty() && rnd.nextInt(3) == 0) {
        List<Long> ids = new ArrayList<>(inFlight.keySet());
        ids.sort(null);
        Restore done = inFlight.remove(ids.get(rnd.nextInt(ids.size())));
        boolean waiting = done.lease().live();
        f.stm.onCompletion(allOk(done.get()));
        List<Wakeup> w = f.stm.drainWakeups();
        assertEquals(waiting ? 1 : 0, w.size(), "a detached read wakes nobody: " + w);
        if (waiting) {
          assertEquals(done.requestId(), w.get(0).requestId());
          assertEquals(Wakeup.Reason.READ_COMPLETE, w.get(0).reason());
          w.get(0).ready().close();
        }
        assertTrue(f.drain().isEmpty());
      }
      long attached = inFlight.values().stream().filter(r -> r.lease().live()).count();
      if (attached < 4 && rnd.nextInt(2) == 0) {
        PromptKeys p = f.prompt(150 + rnd.nextInt(250), (int) (seed * 1000 + round));
        double bytes = f.stm.costModel().ownerBytes(0, p.reusableBound());
        double restoreMs = 1 + rnd.nextDouble() * 20; // far below any prompt's compute
        checked +=
            agree(
                new CostFigures(rnd.nextDouble() * 1e5, bytes / (restoreMs / 1e3), 0, 1e6, 0),
                inFlight,
                tick,
                margin);
        if (rnd.nextInt(3) == 0) {
          f.put(Tier.HOST, f.cache.neededKeys(p, 64)); // a Host hit below the restore
        }
        int floor = f.cache.probe(p, p.reusableBound()).hostHit();
        long id = nextRequest++;
        StorageTransferManager.Preparation prep = f.stm.prepare(id, p, true);
        assertTrue(prep.waiting(), "chosen: " + prep.bypass());
        StorageOp.Query q = (StorageOp.Query) only(f.drain(), StorageOp.Query.class);
        f.stm.onCompletion(allOk(q));
        List<StorageOp> ops = f.drain();
        if (ops.isEmpty()) { // no Host room for it: nothing to restore
          assertEquals(Wakeup.Reason.NOTHING_RESTORED, only1(f.stm.drainWakeups()).reason());
        } else {
          StorageOp.Get g = (StorageOp.Get) only(ops, StorageOp.Get.class);
          int boundary = f.stm.wantedBoundary(prep.lease());
          assertTrue(boundary > floor, "boundary " + boundary + " over floor " + floor);
          inFlight.put(
              g.operationId(),
              new Restore(id, prep.lease(), g, floor, boundary, p.numTokens(), tick));
          assertTrue(f.stm.drainWakeups().isEmpty());
        }
      }
      if (rnd.nextInt(5) < 2) {
        checked += agree(CostModelTest.figures(rnd), inFlight, tick, margin);
      }
      abandoned = f.stm.counters().restoresAbandoned();
    }
    for (Restore r : inFlight.values()) {
      f.stm.onCompletion(allOk(r.get()));
    }
    for (Wakeup w : f.stm.drainWakeups()) {
      w.ready().close();
    }
    assertEquals(0, f.stm.hostCreditsInUse());
    assertEquals(0, f.stm.operationsInUse());
    assertTrue(checked > 0, "no restore was waiting when figures were agreed");
    ABANDONED_OVER_SEEDS.addAndGet(abandoned);
    SEEDS_RUN.incrementAndGet();
  }

  /**
   * Agrees on {@code figures} and checks that exactly the restores the rule names were abandoned;
   * returns how many attached restores it checked.
   */
  private int agree(CostFigures figures, Map<Long, Restore> inFlight, long tickNs, int margin) {
    long before = f.stm.counters().restoresAbandoned();
    List<Restore> attached = inFlight.values().stream().filter(r -> r.lease().live()).toList();
    f.stm.onCostFigures(figures);
    CostModel m = f.stm.costModel();
    Set<Long> woken = new HashSet<>();
    for (Wakeup w : f.stm.drainWakeups()) {
      assertEquals(Wakeup.Reason.SLOWER_THAN_COMPUTE, w.reason());
      assertNull(w.ready());
      woken.add(w.requestId());
    }
    Set<Long> cancelled = new HashSet<>();
    for (StorageOp op : f.drain()) {
      cancelled.add(((StorageOp.Cancel) op).operationId());
    }
    int losing = 0;
    for (Restore r : attached) {
      double saved =
          m.prefillNs(r.floor(), r.numTokens()) - m.prefillNs(r.boundary(), r.numTokens());
      double left =
          m.restoreNs(m.ownerBytes(r.floor(), r.boundary())) - Math.max(0, tickNs - r.issuedNs());
      boolean lose = m.decides() && left > saved * (1 + margin / 100.0);
      String at =
          "request "
              + r.requestId()
              + ": left "
              + left
              + " ns, saved "
              + saved
              + " ns, margin "
              + margin
              + " %, "
              + figures;
      assertEquals(lose, woken.contains(r.requestId()), at);
      assertEquals(lose, cancelled.contains(r.get().operationId()), at);
      assertEquals(lose, !r.lease().live(), at);
      if (lose) {
        losing++;
      } else {
        KEPT_OVER_SEEDS.incrementAndGet();
      }
    }
    assertEquals(losing, woken.size(), "woken: " + woken);
    assertEquals(losing, cancelled.size(), "cancelled: " + cancelled);
    assertEquals(before + losing, f.stm.counters().restoresAbandoned());
    return attached.size();
  }
}

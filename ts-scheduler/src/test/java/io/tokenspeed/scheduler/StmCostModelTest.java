package io.tokenspeed.scheduler;

import static io.tokenspeed.scheduler.StmFixture.allOk;
import static io.tokenspeed.scheduler.StmFixture.only;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.CostFigures;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageOp;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The cost model inside the preparation of a request: a bypass counted by its reason, a partial
 * query, the fixed rules exactly while the model is off or cold, exploration on agreed ticks, and
 * the same decisions on two ranks fed the same agreed inputs.
 */
class StmCostModelTest {

  private static final long MS = 1_000_000L;

  /** Recomputing costs 1 ms per token, nothing else. */
  private static final CostFigures PREFILL_ONLY = new CostFigures(0, 0, 0, 1e6, 0);

  private StmFixture f;

  @AfterEach
  void invariants() {
    if (f != null) {
      f.checkInvariants(List.of());
    }
  }

  private static StmFixture fixture(StorageConfig config) {
    StmFixture fx = new StmFixture(config, 64, 256);
    fx.stm.useTokenBudget(256);
    return fx;
  }

  private static StorageConfig on() {
    return StmFixture.config().withCostModel(true, 10, 60_000, 0);
  }

  /** Figures whose store restores a 300-token prompt's prefix in {@code restoreMs}, about. */
  private CostFigures storeTaking(double restoreMs, PromptKeys p) {
    double bytes = f.stm.costModel().ownerBytes(0, p.reusableBound());
    return PREFILL_ONLY.withStore(0, bytes / (restoreMs / 1e3));
  }

  @Test
  void shouldBypassAndCountWhenRestoringIsSlowerThanComputing() {
    f = fixture(on());
    PromptKeys p = f.prompt(300, 1);
    f.stm.onCostFigures(storeTaking(3000, p)); // computing 300 tokens takes 300 ms
    f.stm.onTick(0);
    StorageTransferManager.Preparation prep = f.stm.prepare(1, p, true);
    assertEquals(Bypass.SLOWER_THAN_COMPUTE, prep.bypass());
    assertTrue(f.drain().isEmpty(), "no query issued");
    StorageCounters c = f.stm.counters();
    assertEquals(1, c.bypasses(Bypass.SLOWER_THAN_COMPUTE));
    assertEquals(0, c.pressureBypasses(), "the gate's own counter keeps its meaning");
    assertEquals(0, c.queriesIssued());
  }

  @Test
  void shouldQueryWhenRestoringIsFaster() {
    f = fixture(on());
    PromptKeys p = f.prompt(300, 2);
    f.stm.onCostFigures(storeTaking(30, p));
    f.stm.onTick(0);
    StorageTransferManager.Preparation prep = f.stm.prepare(1, p, true);
    assertTrue(prep.waiting(), "expected a query, got " + prep.bypass());
    StorageOp.Query q = (StorageOp.Query) only(f.drain(), StorageOp.Query.class);
    assertTrue(q.keys().containsAll(f.cache.missingKeys(p, p.reusableBound())), "whole prefix");
    assertEquals(0, f.stm.counters().partialRestores());
    f.stm.onCompletion(allOk(q));
    f.stm.onCompletion(allOk(only(f.drain(), StorageOp.Get.class)));
    f.stm.drainWakeups().forEach(w -> w.ready().close());
  }

  @Test
  void shouldFollowTheFixedRulesExactlyWhileOffOrCold() {
    for (boolean cold : new boolean[] {true, false}) {
      f = fixture(cold ? on() : StmFixture.config().withCostModel(false));
      PromptKeys p = f.prompt(300, 3);
      if (!cold) {
        f.stm.onCostFigures(storeTaking(1e6, p)); // hopeless, but the model is off
      }
      f.stm.onTick(0);
      StorageTransferManager.Preparation prep = f.stm.prepare(1, p, true);
      assertTrue(prep.waiting(), (cold ? "cold" : "off") + ": " + prep.bypass());
      StorageOp.Query q = (StorageOp.Query) only(f.drain(), StorageOp.Query.class);
      f.stm.onCompletion(StmFixture.fact(q, Set.of(), true)); // a miss
      f.stm.drainWakeups();
      f.checkInvariants(List.of());
    }
  }

  /**
   * A partial restore: recomputing is free but every forward costs a second, and the prompt is one
   * chunk of 256 and a few tokens; the query asks only for what the shortest boundary that leaves
   * one chunk needs.
   */
  @Test
  void shouldAskOnlyForThePartialRestoreTheModelChose() {
    f = fixture(on());
    PromptKeys p = f.prompt(300, 4);
    double pageBytes = f.stm.costModel().ownerBytes(0, 64);
    f.stm.onCostFigures(new CostFigures(0, pageBytes * 1000, 1e9, 0, 0));
    f.stm.onTick(0);
    assertTrue(f.stm.prepare(1, p, true).waiting());
    StorageOp.Query q = (StorageOp.Query) only(f.drain(), StorageOp.Query.class);
    Set<CacheKey> asked = new HashSet<>(q.keys());
    assertTrue(asked.containsAll(f.cache.missingKeys(p, 64)), "the first page");
    assertFalse(
        asked.contains(p.checkpointKey(2, p.reusableBound())), "nothing of the longest boundary");
    assertEquals(1, f.stm.counters().partialRestores());
    f.stm.onCompletion(allOk(q));
    StorageOp.Get g = (StorageOp.Get) only(f.drain(), StorageOp.Get.class);
    f.stm.onCompletion(allOk(g));
    f.stm.drainWakeups().forEach(w -> w.ready().close());
    assertEquals(64, f.cache.probe(p, p.reusableBound()).hostHit(), "restored up to 64");
  }

  @Test
  void shouldExploreOnceNoQueryWasIssuedForTheInterval() {
    f = fixture(StmFixture.config().withCostModel(true, 10, 1000, 0));
    f.stm.onTick(0);
    PromptKeys first = f.prompt(300, 5);
    assertTrue(f.stm.prepare(1, first, true).waiting(), "cold: the fixed rules");
    StorageOp.Query q = (StorageOp.Query) only(f.drain(), StorageOp.Query.class);
    f.stm.onCompletion(StmFixture.fact(q, Set.of(), true));
    f.stm.drainWakeups();
    f.stm.onCostFigures(storeTaking(3000, first));
    f.stm.onTick(999 * MS);
    assertEquals(Bypass.SLOWER_THAN_COMPUTE, f.stm.prepare(2, f.prompt(300, 6), true).bypass());
    f.stm.onTick(1000 * MS);
    assertTrue(f.stm.prepare(3, f.prompt(300, 7), true).waiting(), "measured again");
    assertEquals(1, f.stm.counters().costExplorations());
    f.stm.onTick(1500 * MS);
    assertEquals(Bypass.SLOWER_THAN_COMPUTE, f.stm.prepare(4, f.prompt(300, 8), true).bypass());
    q = (StorageOp.Query) only(f.drain(), StorageOp.Query.class);
    f.stm.onCompletion(StmFixture.fact(q, Set.of(), true));
    f.stm.drainWakeups();
  }

  @Test
  void shouldCountEveryFinalBypassOnceByItsReason() {
    f = fixture(on());
    PromptKeys p = f.prompt(300, 9);
    f.stm.onTick(0);
    assertEquals(Bypass.NOT_PERMITTED, f.stm.prepare(1, p, false).bypass());
    f.stm.onPressure(new PressureSnapshot(1 << 20, 0, 0));
    assertEquals(Bypass.PRESSURE, f.stm.prepare(1, p, true).bypass());
    StorageCounters c = f.stm.counters();
    assertEquals(0, c.bypasses(Bypass.NOT_PERMITTED), "tried again: not final");
    assertEquals(1, c.bypasses(Bypass.PRESSURE));
    assertEquals(1, c.pressureBypasses());
  }

  static LongStream seeds() {
    return LongStream.range(0, 40);
  }

  /**
   * Two ranks of a replica: the same agreed figures and prompts in the same rounds give the same
   * operations, bypasses and counters, whatever the figures.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldDecideAlikeOnEveryRankFedTheSameAgreedInputs(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    StmFixture a = fixture(on());
    StmFixture b = fixture(on());
    for (int round = 0; round < 20; round++) {
      long tick = round * 10 * MS;
      a.stm.onTick(tick);
      b.stm.onTick(tick);
      if (rnd.nextInt(4) == 0) {
        CostFigures fig = CostModelTest.figures(rnd);
        a.stm.onCostFigures(fig);
        b.stm.onCostFigures(fig);
      }
      PromptKeys p = a.prompt(64 + rnd.nextInt(400), rnd.nextInt(1000));
      StorageTransferManager.Preparation pa = a.stm.prepare(round, p, true);
      StorageTransferManager.Preparation pb = b.stm.prepare(round, p, true);
      assertEquals(pa.bypass(), pb.bypass(), "round " + round);
      List<StorageOp> oa = a.drain();
      assertEquals(oa, b.drain(), "round " + round);
      for (StorageOp op : oa) {
        if (op instanceof StorageOp.Query q) {
          a.stm.onCompletion(StmFixture.fact(q, Set.of(), true));
          b.stm.onCompletion(StmFixture.fact(q, Set.of(), true));
        }
      }
      a.stm.drainWakeups();
      b.stm.drainWakeups();
    }
    assertEquals(a.stm.counters().toString(), b.stm.counters().toString());
    a.checkInvariants(List.of());
    b.checkInvariants(List.of());
  }
}

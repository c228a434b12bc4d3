package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.Admission;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class SchedulerTest {

  private static final long MS = 1_000_000L;

  private StmFixture f;
  private Scheduler s;
  private long now;

  @AfterEach
  void invariants() {
    if (f != null) {
      f.checkInvariants(s.heldBlocks()); // tickets and admitted requests hold every reference
    }
  }

  private void setUp(boolean storage) {
    f = new StmFixture(StmFixture.config().withEarlyH2d(true), 256, 256);
    s = new Scheduler(f.cache, storage ? f.stm : null, new Scheduler.Config(128, 8));
  }

  private ExecutionPlan round(List<Long> cancels, List<AgreedCompletion> facts, boolean permitted) {
    now += MS;
    ExecutionPlan p =
        s.round(new RoundInput(now, PressureSnapshot.IDLE, cancels, facts, permitted, permitted));
    s.onForwardDone(p);
    return p;
  }

  private ExecutionPlan round() {
    return round(List.of(), List.of(), true);
  }

  private static AgreedCompletion ok(StorageOp op) {
    return Facts.allOk(op);
  }

  private static <T extends StorageOp> T one(ExecutionPlan p, Class<T> kind) {
    return kind.cast(StmFixture.only(p.storage(), kind));
  }

  @Test
  void shouldChunkPrefillDecodeAndReleaseWithoutStorage() {
    setUp(false);
    PromptKeys p = f.prompt(300, 1);
    s.submit(1, p, 3, false);
    ExecutionPlan first = round();
    assertEquals(List.of(new ExecutionPlan.ForwardItem(1, 0, 128, false)), first.forward());
    assertEquals(new ExecutionPlan.ForwardItem(1, 128, 128, false), round().forward().get(0));
    assertEquals(new ExecutionPlan.ForwardItem(1, 256, 44, false), round().forward().get(0));
    assertInstanceOf(RequestState.PrefillDone.class, s.state(1));
    for (int i = 0; i < 3; i++) {
      assertTrue(round().forward().get(0).decode());
    }
    assertNull(s.state(1), "finished and forgotten");
    assertEquals(
        f.cache.device().cachedCount(),
        f.cache.device().pool().heldBlocks(),
        "every reference released; computed pages stay cached");
    assertTrue(f.cache.device().contains(p.keyOf(0, 15, 256)), "full pages were published");
  }

  @Test
  void shouldRestoreFromL3WhilePrefetchingOwnsNoDevicePages() {
    f = new StmFixture(StmFixture.config().withEarlyH2d(false), 256, 256);
    s = new Scheduler(f.cache, f.stm, new Scheduler.Config(128, 8));
    PromptKeys p = f.prompt(300, 2);
    s.submit(1, p, 1, false);
    ExecutionPlan r1 = round();
    StorageOp.Query q = one(r1, StorageOp.Query.class);
    assertInstanceOf(RequestState.Prefetching.class, s.state(1));
    assertTrue(r1.forward().isEmpty(), "never a forward candidate");
    assertEquals(0, f.cache.device().pool().heldBlocks(), "no Device pages while prefetching");
    ExecutionPlan r2 = round(List.of(), List.of(ok(q)), true);
    StorageOp.Get g = one(r2, StorageOp.Get.class);
    assertTrue(g.deviceBlocks().isEmpty(), "early Device copies are off");
    assertEquals(0, f.cache.device().pool().heldBlocks());
    ExecutionPlan r3 = round(List.of(), List.of(ok(g)), true);
    assertEquals(299, ((RequestState.PrefillDone) s.state(1)).admission().hit(), "restored prefix");
    assertEquals(new ExecutionPlan.ForwardItem(1, 299, 1, false), r3.forward().get(0));
    assertTrue(r3.deviceCopies().stream().allMatch(c -> c.srcTier() == Tier.HOST));
    assertEquals(f.cache.neededKeys(p, 299).size(), r3.deviceCopies().size());
    assertEquals(0, f.stm.readyHolds(), "admission took the Host sources and closed the hold");
    round();
    assertNull(s.state(1));
  }

  @Test
  void shouldAdmitARestoreWhoseEarlyCopiesPutItOnTheDeviceWithoutLoadingIt() {
    setUp(true);
    PromptKeys p = f.prompt(300, 2);
    s.submit(1, p, 1, false);
    StorageOp.Query q = one(round(), StorageOp.Query.class);
    assertEquals(0, f.cache.device().pool().heldBlocks(), "a query takes no Device pages");
    StorageOp.Get g = one(round(List.of(), List.of(ok(q)), true), StorageOp.Get.class);
    int rows = g.keys().size();
    assertEquals(rows, g.deviceBlocks().size(), "every row has an early Device destination");
    assertEquals(rows, f.cache.device().pool().heldBlocks(), "held by the GET alone");
    for (int i = 0; i < rows; i++) {
      assertNull(f.cache.device().keyOf(g.deviceBlock(i)), "private until the GET's fact");
    }
    assertInstanceOf(RequestState.Prefetching.class, s.state(1));
    ExecutionPlan r3 = round(List.of(), List.of(ok(g)), true);
    Admission a = ((RequestState.PrefillDone) s.state(1)).admission();
    assertEquals(299, a.hit(), "restored prefix");
    assertEquals(299, a.deviceHit(), "all of it already on the Device");
    assertTrue(
        r3.deviceCopies().stream().noneMatch(c -> c.srcTier() == Tier.HOST),
        "nothing left to load from the Host: " + r3.deviceCopies());
    for (int i = 0; i < rows; i++) {
      assertEquals(g.deviceBlock(i), f.cache.device().lookup(g.keys().get(i)));
      assertTrue(f.cache.host().contains(g.keys().get(i)), "the Host entry is published too");
    }
    assertEquals(rows, f.stm.counters().earlyH2dBlocks());
    assertEquals(g.keys(), f.stm.drainEarlyPublished());
    round();
    assertNull(s.state(1));
  }

  @Test
  void shouldFreeTheEarlyDestinationsOfRowsThatFailedAndLoadNothingFromThem() {
    setUp(true);
    PromptKeys p = f.prompt(300, 3);
    s.submit(1, p, 1, false);
    StorageOp.Query q = one(round(), StorageOp.Query.class);
    StorageOp.Get g = one(round(List.of(), List.of(ok(q)), true), StorageOp.Get.class);
    int rows = g.keys().size();
    BitSet okRows = new BitSet();
    okRows.set(0, rows / 2); // the second half (the window and the checkpoint) failed somewhere
    round(List.of(), List.of(Facts.of(g, okRows, new BitSet(), true, false)), true);
    assertEquals(
        0, s.admission(1).hit(), "no legal prefix without the window and the checkpoint: computed");
    for (int i = 0; i < rows; i++) {
      boolean ok = i < rows / 2;
      assertEquals(ok, f.cache.device().contains(g.keys().get(i)), "row " + i);
      assertEquals(ok, f.cache.host().contains(g.keys().get(i)), "row " + i);
      if (!ok) {
        assertNotEquals(g.keys().get(i), f.cache.device().keyOf(g.deviceBlock(i)), "row " + i);
      }
    }
    for (int i = 0; i < 10 && s.state(1) != null; i++) {
      round();
    }
    assertNull(s.state(1));
  }

  @Test
  void shouldReserveNoEarlyDestinationsWhenTheDeviceHasNoRoom() {
    setUp(true);
    var device = f.cache.device();
    List<Integer> others = new ArrayList<>(); // what running requests hold
    int limit = device.pool().numParents() * StorageConfig.EARLY_H2D_MAX_REFERENCED_PERCENT / 100;
    while (device.pool().referencedParents() < limit) {
      others.add(device.allocate(new int[] {1, 0, 0})[0][0]);
    }
    s.submit(1, f.prompt(300, 4), 1, false);
    StorageOp.Query q = one(round(), StorageOp.Query.class);
    StorageOp.Get g = one(round(List.of(), List.of(ok(q)), true), StorageOp.Get.class);
    assertTrue(
        g.deviceBlocks().isEmpty(), "over the referenced-parents limit: " + g.deviceBlocks());
    assertEquals(1, f.stm.counters().earlyH2dSkipped());
    for (int b : others) {
      device.unref(b);
    }
    round(List.of(), List.of(ok(g)), true);
    assertEquals(299, s.admission(1).hit(), "restored through the Host as without early copies");
    for (int i = 0; i < 10 && s.state(1) != null; i++) {
      round();
    }
    assertNull(s.state(1));
  }

  /**
   * A scheduler without storage over one full-history group of 4-token pages and rows and a Device
   * of {@code deviceParents} one-row parents, whose Device caches a 14-token prompt's row 0 and its
   * partial row 1 (a tail at 6 tokens); returns the prompt.
   */
  private PromptKeys partialTailOnTheDevice(int deviceParents) {
    CacheLayout one =
        new CacheLayout(
            4,
            "bf16",
            List.of(
                new CacheGroupSpec(
                    0, new GroupKind.FullHistory(), 4, List.of(new CacheField("kv", 64)), null)));
    f = new StmFixture(one, StmFixture.config(), deviceParents, 8);
    s = new Scheduler(f.cache, null, new Scheduler.Config(128, 8));
    PromptKeys p = PromptKeys.of(one, StmFixture.tokens(14, 9), List.of());
    f.cache.recordTail(p, 6);
    f.put(Tier.DEVICE, f.cache.neededKeys(p, 6));
    return p;
  }

  /**
   * A match that ends inside a row needs a block more than recomputing that row (the partial row is
   * copied while its Device source stays pinned). With a Device of exactly the request's rows and
   * nothing running, nothing would ever free that block: the request is admitted with the page
   * boundary below its match instead of waiting for ever.
   */
  @Test
  void shouldReuseLessWhenTheLongestMatchCannotFitTheDeviceAndNothingRuns() {
    PromptKeys p = partialTailOnTheDevice(4);
    assertEquals(6, f.cache.probe(p, p.reusableBound()).hostHit(), "the longest match");
    assertNull(f.cache.admitUpTo(p, p.reusableBound(), 16), "with it, 5 of the 4 parents");
    s.submit(1, p, 2, false); // 16 tokens: every Device parent
    round();
    assertEquals(4, s.admission(1).hit(), "admitted with the page boundary below the match");
    assertEquals(1, s.admissionsReusingLess());
    for (int i = 0; i < 20 && s.state(1) != null; i++) {
      round();
    }
    assertNull(s.state(1), "served to its end");
  }

  /** With a request running, the longest match waits for the room it will free. */
  @Test
  void shouldWaitForTheLongestMatchWhileARunningRequestWillFreeTheDevice() {
    PromptKeys p = partialTailOnTheDevice(6);
    s.submit(
        2, PromptKeys.of(p.layout(), StmFixture.tokens(3, 5), List.of()), 4, false); // 2 parents
    round();
    s.submit(1, p, 2, false);
    round();
    assertInstanceOf(RequestState.Submitted.class, s.state(1), "waits while request 2 runs");
    for (int i = 0; i < 20 && s.state(1) instanceof RequestState.Submitted; i++) {
      round();
    }
    assertNull(s.state(2), "request 2 ended first");
    assertEquals(6, s.admission(1).hit(), "the longest match, once request 2 ended");
    assertEquals(0, s.admissionsReusingLess());
  }

  @Test
  void shouldReleaseEverythingWhenARunningRequestIsCancelled() {
    setUp(true);
    s.submit(1, f.prompt(300, 40), 50, false);
    s.submit(2, f.prompt(300, 41), 50, false);
    round();
    while (!(s.state(1) instanceof RequestState.Prefilling)
        && !(s.state(1) instanceof RequestState.PrefillDone)
        && !(s.state(1) instanceof RequestState.Decoding)) {
      now += StorageConfig.DEFAULT_SOFT_DEADLINE_MS * MS;
      round();
    }
    round(List.of(1L), List.of(), true);
    assertNull(s.state(1));
    f.stm.rejectAll();
  }

  @Test
  void shouldReleaseTheReadyHoldWhenASubmittedRequestIsCancelled() {
    // early Device copies off: request 1's GET would otherwise take Device room before 9 does
    f = new StmFixture(StmFixture.config().withEarlyH2d(false), 16, 256);
    s = new Scheduler(f.cache, f.stm, new Scheduler.Config(128, 8));
    s.submit(9, f.prompt(200, 50), 200, false); // will occupy the Device
    s.submit(1, f.prompt(300, 51), 1, false);
    ExecutionPlan r1 = round();
    List<StorageOp.Query> qs = r1.storage().stream().map(StorageOp.Query.class::cast).toList();
    assertEquals(2, qs.size());
    // Nothing exists for request 9 (first query); everything for request 1.
    AgreedCompletion none = Facts.of(qs.get(0), new BitSet(), new BitSet(), true, false);
    ExecutionPlan r2 = round(List.of(), List.of(none, ok(qs.get(1))), true);
    assertInstanceOf(RequestState.Prefilling.class, s.state(9));
    StorageOp.Get g = one(r2, StorageOp.Get.class);
    round(List.of(), List.of(ok(g)), true);
    RequestState.Submitted waiting = assertInstanceOf(RequestState.Submitted.class, s.state(1));
    assertTrue(waiting.resources().readyHold().live(), "Ready, but the Device is busy");
    assertEquals(1, f.stm.readyHolds());
    round(List.of(1L), List.of(), true);
    assertNull(s.state(1));
    assertEquals(0, f.stm.readyHolds(), "the hold went with the request");
    assertEquals(0, f.stm.hostCreditsInUse());
  }

  @Test
  void shouldEndAWaitWhenAnotherRequestsPublicationCoversIt() {
    setUp(true);
    PromptKeys p = f.prompt(300, 60);
    s.submit(1, p, 1, false);
    StorageOp.Query q = one(round(), StorageOp.Query.class);
    f.put(Tier.HOST, f.cache.neededKeys(p, 299)); // another request published the prefix
    ExecutionPlan r = round();
    assertEquals(q.operationId(), one(r, StorageOp.Cancel.class).operationId());
    assertEquals(
        299,
        ((RequestState.PrefillDone) s.state(1)).admission().hit(),
        "admitted on the local hit");
    assertEquals(1, f.stm.counters().satisfiedLocally());
    round(List.of(), List.of(ok(q)), true);
    round();
  }

  @Test
  void shouldLeaveStorageAloneOnAnL1OnlyClear() {
    setUp(true);
    PromptKeys p = f.prompt(300, 70);
    s.submit(1, p, 1, false);
    StorageOp.Query q = one(round(), StorageOp.Query.class);
    f.put(Tier.DEVICE, f.cache.neededKeys(f.prompt(128, 71), 64));
    s.clearDevice();
    assertEquals(0, f.cache.device().cachedCount(), "cached Device blocks went");
    assertInstanceOf(RequestState.Prefetching.class, s.state(1), "the L3 wait goes on");
    assertEquals(1, f.stm.operationsInUse());
    StorageOp.Get g = one(round(List.of(), List.of(ok(q)), true), StorageOp.Get.class);
    round(List.of(), List.of(ok(g)), true);
    round();
    assertNull(s.state(1));
  }

  @Test
  void shouldDemoteCachedDeviceBlocksToTheHostAndOfferThemForBackup() {
    f = new StmFixture(StmFixture.config(), 24, 256);
    s = new Scheduler(f.cache, f.stm, new Scheduler.Config(512, 4, 16, 1_000));
    PromptKeys p = f.prompt(300, 80);
    s.submit(1, p, 1, false);
    StorageOp.Query q = one(round(), StorageOp.Query.class);
    BitSet none = new BitSet();
    round(List.of(), List.of(Facts.of(q, none, none, true, false)), true); // L3 had nothing
    List<ExecutionPlan.Demotion> demoted = new ArrayList<>();
    List<StorageOp.Put> puts = new ArrayList<>();
    for (int i = 0; i < 5; i++) {
      ExecutionPlan plan = round();
      demoted.addAll(plan.demotions());
      plan.storage().stream()
          .filter(StorageOp.Put.class::isInstance)
          .forEach(o -> puts.add((StorageOp.Put) o));
      f.checkInvariants(s.heldBlocks());
    }
    assertTrue(demoted.size() > 0, "computed pages were demoted");
    for (ExecutionPlan.Demotion d : demoted) {
      assertTrue(f.cache.host().contains(d.key()), "published on the Host: " + d.key());
      assertTrue(!f.cache.device().contains(d.key()), "and the Device source freed at once");
    }
    assertTrue(puts.stream().mapToInt(x -> x.keys().size()).sum() > 0, "and backed up");
    puts.forEach(x -> f.stm.onCompletion(Facts.allOk(x)));
  }

  @Test
  void shouldFreeHostBackedDeviceBlocksSoThatYoungerOnesAreDemoted() {
    // the oldest cached Device blocks (more than one round's demotions) already have Host copies:
    // they are freed without a copy, and the younger blocks behind them are demoted
    f = new StmFixture(fullHistoryOnly(1).cache.layout(), StmFixture.config(), 256, 256);
    s = new Scheduler(f.cache, null, new Scheduler.Config(512, 4, 16, 256));
    List<io.tokenspeed.core.CacheKey> old = f.cache.neededKeys(f.prompt(2048, 93), 2048);
    List<io.tokenspeed.core.CacheKey> young = f.cache.neededKeys(f.prompt(512, 94), 512);
    assertTrue(old.size() > Scheduler.Config.MAX_DEMOTIONS_PER_ROUND, "old: " + old.size());
    f.put(Tier.HOST, old);
    f.put(Tier.DEVICE, old);
    f.put(Tier.DEVICE, young);
    List<ExecutionPlan.Demotion> demoted = new ArrayList<>();
    for (int i = 0; i < 10; i++) {
      demoted.addAll(round().demotions());
      f.checkInvariants(s.heldBlocks());
    }
    assertEquals(old.size(), s.redundantEvictions(), "each Host-backed block freed once");
    assertEquals(
        young, demoted.stream().map(ExecutionPlan.Demotion::key).toList(), "young demoted");
    for (io.tokenspeed.core.CacheKey k : old) {
      assertTrue(!f.cache.device().contains(k) && f.cache.host().contains(k), "old " + k);
    }
    for (io.tokenspeed.core.CacheKey k : young) {
      assertTrue(!f.cache.device().contains(k) && f.cache.host().contains(k), "young " + k);
    }
    assertEquals(0, f.cache.device().cachedCount());
  }

  // ---------------------------------------------------------------- PD decode: landing

  @Test
  void shouldReserveALandingRequestsBlocksForwardNothingUntilItLandedThenDecode() {
    setUp(true);
    PromptKeys p = f.prompt(300, 70);
    s.submitLanding(5, p, 3);
    ExecutionPlan first = round();
    assertEquals(List.of(5L), s.landingsAdmitted());
    RequestState.Landing landing = assertInstanceOf(RequestState.Landing.class, s.state(5));
    assertEquals(0, landing.admission().hit(), "a landing reuses nothing: every row lands");
    assertTrue(first.forward().isEmpty(), "never a forward candidate: " + first.forward());
    assertTrue(first.storage().isEmpty(), "never an L3 read: " + first.storage());
    int[][] tables = s.blockTables(5);
    int rows = 0;
    for (int b : tables[0]) {
      rows += b != 0 ? 1 : 0;
    }
    assertTrue(rows * 16 >= 300, "rows for the whole prompt: " + rows);
    assertTrue(round().forward().isEmpty(), "still waiting for its KV");
    assertTrue(s.landingsAdmitted().isEmpty(), "admitted once");
    assertTrue(s.onLanded(5));
    assertInstanceOf(RequestState.PrefillDone.class, s.state(5));
    assertTrue(f.cache.device().contains(p.keyOf(0, 15, 256)), "its full pages are published");
    assertEquals(List.of(new ExecutionPlan.ForwardItem(5, 300, 1, true)), round().forward());
    round();
    round();
    assertNull(s.state(5), "finished after its 3 tokens");
    assertTrue(!s.onLanded(5), "an ended request lands nothing");
  }

  @Test
  void shouldNeverRetractALandingRequestAndFreeItsBlocksWhenCancelled() {
    // a Device of 16 blocks: request 2's growth would retract the latest other admitted request,
    // but a landing one is no victim (its KV is on its way into those blocks)
    f = fullHistoryOnly(16);
    s = new Scheduler(f.cache, null, new Scheduler.Config(256, 4, 16));
    s.submitLanding(1, f.prompt(100, 90), 40); // 116 tokens -> 8 blocks
    s.submit(2, f.prompt(112, 91), 40, false); // 128 tokens -> 8 blocks, grows at 129
    long retractions = 0;
    for (int i = 0; i < 40; i++) {
      long before = s.retractions();
      round();
      retractions += s.retractions() - before;
      assertInstanceOf(RequestState.Landing.class, s.state(1), "round " + i);
      s.checkInvariants();
      f.checkInvariants(s.heldBlocks());
    }
    assertTrue(retractions > 0, "request 2 had to give its blocks back, not request 1");
    round(List.of(1L), List.of(), true);
    assertNull(s.state(1), "cancelled in Landing");
    for (int i = 0; i < 200 && s.size() > 0; i++) {
      round();
    }
    assertEquals(0, s.size(), "request 2 finished once the landing request's blocks were free");
    assertEquals(f.cache.device().cachedCount(), f.cache.device().pool().heldBlocks());
  }

  @Test
  void shouldCountALandingRequestAgainstMaxRunning() {
    f = new StmFixture(StmFixture.config(), 256, 256);
    s = new Scheduler(f.cache, null, new Scheduler.Config(128, 1));
    s.submitLanding(1, f.prompt(64, 80), 2);
    s.submit(2, f.prompt(64, 81), 2, false);
    round();
    assertInstanceOf(RequestState.Landing.class, s.state(1));
    assertInstanceOf(RequestState.Submitted.class, s.state(2), "max_running is 1");
    assertTrue(s.onLanded(1));
    for (int i = 0; i < 20 && s.size() > 0; i++) {
      round();
    }
    assertEquals(0, s.size());
  }

  // ---------------------------------------------------------------- regressions

  /** One Full-history group, bg 16: one block per parent, so the Device counts blocks. */
  private static StmFixture fullHistoryOnly(int deviceParents) {
    return new StmFixture(
        new io.tokenspeed.core.CacheLayout(
            64,
            "bf16",
            List.of(
                new io.tokenspeed.core.CacheGroupSpec(
                    0,
                    new io.tokenspeed.core.GroupKind.FullHistory(),
                    16,
                    List.of(new io.tokenspeed.core.CacheField("kv", 64)),
                    null))),
        StmFixture.config(),
        deviceParents,
        64);
  }

  @Test
  void shouldNotForwardRequestRetractedInSameRound() {
    // A (arrival 0) keeps decode headroom; B (arrival 1) runs out first on a full Device. The
    // batch walks A first (a forward item), then B's growth retracts A, the latest other admitted.
    f = fullHistoryOnly(16);
    s = new Scheduler(f.cache, null, new Scheduler.Config(256, 4, 16));
    s.submit(1, f.prompt(100, 90), 40, false); // 116 tokens -> 8 blocks, room up to 128
    s.submit(2, f.prompt(112, 91), 40, false); // 128 tokens -> 8 blocks, grows at 129
    boolean retractedInBatch = false;
    for (int i = 0; i < 40 && !retractedInBatch; i++) {
      now += MS;
      long before = s.retractions();
      ExecutionPlan plan =
          s.round(new RoundInput(now, PressureSnapshot.IDLE, List.of(), List.of(), true, true));
      retractedInBatch = s.retractions() > before;
      for (ExecutionPlan.ForwardItem item : plan.forward()) {
        RequestState st = s.state(item.requestId());
        assertTrue(
            st instanceof RequestState.Prefilling
                || st instanceof RequestState.PrefillDone
                || st instanceof RequestState.Decoding,
            "plan " + plan.round() + " forwards " + item + " while the request is " + st);
      }
      s.onForwardDone(plan);
      f.checkInvariants(s.heldBlocks());
    }
    assertTrue(retractedInBatch, "the scenario retracts inside a batch");
    assertInstanceOf(RequestState.Retracted.class, s.state(1));
    while (s.size() > 0) {
      round();
    }
  }

  @Test
  void shouldNotMatchOrBackUpHostBlocksPinnedByAnInFlightPutAfterAClear() {
    setUp(true);
    PromptKeys p = f.prompt(300, 92);
    List<io.tokenspeed.core.CacheKey> keys = f.cache.neededKeys(p, 256);
    f.put(Tier.HOST, keys);
    s.onHostPublished(keys);
    List<StorageOp.Put> puts =
        round().storage().stream()
            .filter(StorageOp.Put.class::isInstance)
            .map(StorageOp.Put.class::cast)
            .toList();
    assertTrue(!puts.isEmpty(), "the old-generation blocks are being backed up");
    s.clearAll(); // a weight update: nothing from before may be matched or written again
    s.submit(1, p, 1, false);
    List<Integer> old = puts.stream().flatMap(x -> x.hostBlocks().stream()).toList();
    for (int r = 0; r < 6; r++) {
      List<AgreedCompletion> facts = new ArrayList<>();
      if (r == 1) {
        for (StorageOp.Put put : puts) { // refused: a retired failure
          facts.add(Facts.of(put, new BitSet(), new BitSet(), true, false));
        }
      }
      ExecutionPlan plan = round(List.of(), facts, true);
      for (var c : plan.deviceCopies()) {
        assertTrue(
            c.srcTier() != Tier.HOST || !old.contains(c.srcBlock()),
            "round " + r + " copies old-generation Host block " + c.srcBlock());
      }
      for (StorageOp op : plan.storage()) {
        assertTrue(!(op instanceof StorageOp.Put), "round " + r + " backs up again: " + op);
        if (op instanceof StorageOp.Query q) {
          f.stm.onCompletion(Facts.of(q, new BitSet(), new BitSet(), true, false));
        }
      }
    }
    for (io.tokenspeed.core.CacheKey k : keys) {
      assertTrue(!f.cache.host().contains(k), "evicted once the PUT retired: " + k);
    }
    while (s.size() > 0) {
      round();
    }
  }

  @Test
  void shouldRestoreFromL3WhenTheRequestArrivesAfterAnIdleGapLongerThanTheSoftDeadline() {
    setUp(true);
    // The relay exchange delivers each round the clock read at the start of the round before.
    long[] clock = {0};
    long[] lastClock = {0};
    java.util.function.Function<List<AgreedCompletion>, ExecutionPlan> oneLate =
        facts -> {
          clock[0] += MS;
          long tick = lastClock[0];
          lastClock[0] = clock[0];
          ExecutionPlan plan =
              s.round(new RoundInput(tick, PressureSnapshot.IDLE, List.of(), facts, true, true));
          s.onForwardDone(plan);
          return plan;
        };
    oneLate.apply(List.of());
    oneLate.apply(List.of());
    clock[0] += 1_000 * MS; // idle: no rounds at all
    PromptKeys p = f.prompt(300, 95);
    s.submit(1, p, 1, false);
    StorageOp.Query q = one(oneLate.apply(List.of()), StorageOp.Query.class);
    ExecutionPlan next = oneLate.apply(List.of());
    assertInstanceOf(RequestState.Prefetching.class, s.state(1), "the wait goes on");
    assertTrue(next.storage().isEmpty(), "no cancel: " + next.storage());
    StorageOp.Get g = one(oneLate.apply(List.of(ok(q))), StorageOp.Get.class);
    oneLate.apply(List.of(ok(g)));
    assertEquals(299, ((RequestState.PrefillDone) s.state(1)).admission().hit(), "restored");
    assertEquals(0, f.stm.counters().softTimeouts());
    while (s.size() > 0) {
      oneLate.apply(List.of());
    }
  }

  @Test
  void shouldStartNoStorageWorkForPdRequestCancelledWhileBootstrapping() {
    setUp(true);
    s.submit(1, f.prompt(300, 93), 1, true);
    ExecutionPlan plan = round(List.of(1L), List.of(), true);
    assertTrue(plan.storage().isEmpty(), "a cancelled request starts no storage work: " + plan);
    assertInstanceOf(RequestState.Bootstrapping.class, s.state(1), "PD keeps its fence");
    assertEquals(0, f.stm.operationsInUse(), "and holds no operation credit");
    s.onBootstrapAck(1);
    assertNull(s.state(1));
  }

  @Test
  void shouldApplyCancellationsBeforeAParkedQueryBecomesAGet() {
    setUp(true);
    s.submit(1, f.prompt(300, 94), 1, false);
    StorageOp.Query q = one(round(), StorageOp.Query.class);
    round(List.of(), List.of(ok(q)), false); // frozen: the finished query parks
    ExecutionPlan plan = round(List.of(1L), List.of(), true);
    assertTrue(
        plan.storage().stream().noneMatch(StorageOp.Get.class::isInstance),
        "no GET for a request cancelled in the same round: " + plan.storage());
    assertNull(s.state(1));
    assertEquals(0, f.cache.host().pool().heldBlocks(), "no Host destination was reserved");
    assertEquals(0, f.stm.operationsInUse());
  }
}

package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineL3Test.SharedStore;
import io.tokenspeed.engine.EngineTensorParallelFaultsTest.RankClient;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.RequestState;
import io.tokenspeed.scheduler.StorageConfig;
import java.nio.file.Path;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Predicate;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * Frozen rounds (issue 38): while an administrative freeze stands, every round still runs the
 * planner with forward and storage permissions off, so an agreed storage completion is applied, a
 * soft deadline expires and a cancellation ends its request, while nothing is admitted or computed
 * and no storage operation starts; after the freeze lifts every request completes with the output
 * of an engine that was never frozen. At TP = 1 the loop runs by a clock the test advances, so the
 * deadline expires exactly when the test says; at TP = 2 every rank holds the same control state
 * and checks the same facts after every one of its rounds.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineFrozenRoundsTest {
  private static final int P = 4;
  private static final long SOFT_DEADLINE_MS = 200;

  private Path folder;
  private CausalLm model;
  private int[] prompt;
  private int[] other;
  private int[] third;
  private GenerationResult want;
  private GenerationResult wantOther;
  private GenerationResult wantThird;

  @BeforeAll
  void load(@TempDir Path dir) throws Exception {
    folder = Fixtures.extract("llama", dir);
    model = CausalLm.load(folder);
    SplittableRandom random = new SplittableRandom(38);
    prompt = random.ints(41, 0, model.vocabSize()).toArray();
    other = random.ints(37, 0, model.vocabSize()).toArray();
    third = random.ints(43, 0, model.vocabSize()).toArray();
    try (Engine e = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      want = serve(e, prompt);
      e.clearCache().get(10, TimeUnit.SECONDS);
      wantOther = serve(e, other);
      e.clearCache().get(10, TimeUnit.SECONDS);
      wantThird = serve(e, third);
    }
  }

  @AfterAll
  void close() {
    model.close();
  }

  private static GenerationResult serve(Engine e, int[] prompt) throws Exception {
    return finished(e.submit(prompt, SamplingParams.greedy(8)));
  }

  private static GenerationResult finished(RequestHandle h) throws Exception {
    GenerationResult r = h.result().get(60, TimeUnit.SECONDS);
    assertNull(r.error(), () -> "request " + h.id() + " failed: " + r.error());
    return r;
  }

  /**
   * The invariant checker, and what every frozen round must show: no token sampled (no forward
   * ran), no request admitted since the last round before the freeze, and no operation id taken
   * since then (no storage operation started). A test waits for a fact to hold in a frozen round
   * with {@link #whenFrozen}.
   */
  static final class FrozenWatch extends Checked {
    final AtomicInteger frozenRounds = new AtomicInteger();
    final List<String> violations = new CopyOnWriteArrayList<>();
    private long operationIdBeforeFreeze = -1;
    private int runningBeforeFreeze;
    private volatile EngineView view;
    private volatile Predicate<EngineView> awaited;
    private volatile CompletableFuture<Void> seen;

    @Override
    public boolean wantsLogits() {
      return true;
    }

    @Override
    public void onLogits(long requestId, int step, float[] row) {
      super.onLogits(requestId, step, row);
      EngineView v = view; // the loop's own view: its control state is this round's
      if (v != null && v.control().frozen()) {
        violations.add("request " + requestId + " sampled token " + step + " in a frozen round");
      }
    }

    @Override
    public void afterRound(EngineView view) {
      super.afterRound(view);
      this.view = view;
      long nextId =
          view.storageTransferManager() == null
              ? 0
              : view.storageTransferManager().nextOperationId();
      int running = view.scheduler().runningCount();
      if (!view.control().frozen()) {
        operationIdBeforeFreeze = nextId;
        runningBeforeFreeze = running;
        return;
      }
      frozenRounds.incrementAndGet();
      if (running > runningBeforeFreeze) {
        violations.add(
            "a frozen round admitted: " + running + " running, " + runningBeforeFreeze + " before");
      }
      if (nextId != operationIdBeforeFreeze) {
        violations.add(
            "a frozen round took operation ids " + operationIdBeforeFreeze + " to " + nextId);
      }
      Predicate<EngineView> p = awaited;
      if (p != null && p.test(view)) {
        awaited = null;
        seen.complete(null);
      }
    }

    /** Completes once a frozen round ends with {@code condition} true (checked on the loop). */
    CompletableFuture<Void> whenFrozen(Predicate<EngineView> condition) {
      seen = new CompletableFuture<>();
      awaited = condition;
      return seen;
    }

    void assertHeld() {
      assertTrue(frozenRounds.get() > 0, "no frozen round ran");
      assertTrue(violations.isEmpty(), violations::toString);
      assertTrue(broken.isEmpty(), broken::toString);
    }
  }

  /** A store holding {@link #prompt}'s prefix, written by an engine that served it and closed. */
  private SharedStore storeWithPrompt() throws Exception {
    SharedStore shared = new SharedStore();
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .l3(EngineL3Test.l3(shared))
                .conclude())) {
      assertArrayEquals(want.tokens(), serve(e, prompt).tokens());
    }
    assertTrue(shared.puts.get() > 0, "the prefix was written");
    return shared;
  }

  /** What a TP = 1 test does with its engine, its watch and the clock its loop runs by. */
  private interface Scenario {
    void run(Engine e, FrozenWatch watch, AtomicLong clock) throws Exception;
  }

  /**
   * Runs {@code scenario} on a TP = 1 engine over {@code store} whose loop runs by a clock only the
   * scenario advances; opens the store's gates before the engine closes, then checks what every
   * frozen round had to show.
   */
  private void frozen(RankClient store, Scenario scenario) throws Exception {
    FrozenWatch watch = new FrozenWatch();
    AtomicLong clock = new AtomicLong(1_000_000_000L);
    try (Engine e = engine(watch, store, clock)) {
      try {
        scenario.run(e, watch, clock);
      } finally {
        for (CountDownLatch gate : new CountDownLatch[] {store.queryGate, store.getGate}) {
          if (gate != null) {
            gate.countDown();
          }
        }
      }
    }
    watch.assertHeld();
  }

  /** A TP = 1 engine over {@code store} whose loop runs by {@code clock}. */
  private Engine engine(FrozenWatch watch, RankClient store, AtomicLong clock) {
    StorageConfig scheduling =
        StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(SOFT_DEADLINE_MS);
    return Engine.start(
        EngineSettings.of(model, EngineTest.small(256))
            .observer(watch)
            .l3(EngineL3Test.l3(store, scheduling))
            .nanoClock(clock::get)
            .conclude());
  }

  private static boolean prefetching(EngineView v, long id) {
    return v.scheduler().state(id) instanceof RequestState.Prefetching;
  }

  /**
   * A GET issued before the freeze retires during it: its agreed completion is applied in a frozen
   * round (the request leaves Prefetching, no operation is in flight), a request submitted while
   * frozen is not even queried, and after the freeze lifts the first restores its prefix from the
   * store and both outputs equal an engine's that was never frozen.
   */
  @Test
  void shouldApplyAStorageCompletionDuringAFreezeAndStartNothingUntilItLifts() throws Exception {
    RankClient store = new RankClient(storeWithPrompt());
    store.getGate = new CountDownLatch(1);
    frozen(
        store,
        (e, watch, clock) -> {
          RequestHandle restoring = e.submit(prompt, greedy());
          awaitTrue(() -> store.getsEntered.get() > 0, "the GET is inside the store");
          e.freeze().get(10, TimeUnit.SECONDS);
          assertTrue(e.frozen());
          int queries = store.queries.get();
          RequestHandle waiting = e.submit(other, greedy());
          CompletableFuture<Void> applied =
              watch.whenFrozen(restoredAndWaiting(restoring, waiting));
          store.getGate.countDown();
          applied.get(10, TimeUnit.SECONDS);
          assertFalse(restoring.result().isDone(), "nothing computed while frozen");
          assertFalse(waiting.result().isDone(), "nothing computed while frozen");
          assertEquals(queries, store.queries.get(), "no query while frozen");

          e.unfreeze().get(10, TimeUnit.SECONDS);
          assertFalse(e.frozen());
          GenerationResult restored = finished(restoring);
          assertArrayEquals(want.tokens(), restored.tokens(), "the restored prompt's output");
          assertEquals((prompt.length - 1) / P * P, restored.metrics().reusedStorageTokens());
          assertArrayEquals(wantOther.tokens(), finished(waiting).tokens(), "the waiting prompt's");
        });
  }

  /**
   * In a frozen round: the restoring request's GET was agreed and applied (it left Prefetching, no
   * operation is in flight) and the waiting request is in the scheduler.
   */
  private static Predicate<EngineView> restoredAndWaiting(
      RequestHandle restoring, RequestHandle waiting) {
    return v ->
        !prefetching(v, restoring.id())
            && v.storageTransferManager().inFlightOperations() == 0
            && v.scheduler().state(waiting.id()) != null;
  }

  /**
   * A query hangs in the store when the engine freezes; the clock then passes the soft deadline. A
   * frozen round expires the wait (the request leaves Prefetching, a soft timeout is counted); once
   * the freeze lifts the request is computed without L3, its output unchanged.
   */
  @Test
  void shouldExpireASoftDeadlineDuringAFreeze() throws Exception {
    RankClient store = new RankClient(storeWithPrompt());
    store.queryGate = new CountDownLatch(1);
    frozen(
        store,
        (e, watch, clock) -> {
          RequestHandle h = e.submit(prompt, greedy());
          awaitTrue(() -> store.queries.get() > 0, "the query is inside the store");
          e.freeze().get(10, TimeUnit.SECONDS);
          CompletableFuture<Void> expired =
              watch.whenFrozen(
                  v ->
                      !prefetching(v, h.id())
                          && v.storageTransferManager().counters().softTimeouts() == 1);
          // past the deadline, short of the job age that closes the pressure gate (which would
          // detach the wait first)
          clock.addAndGet(TimeUnit.MILLISECONDS.toNanos(2 * SOFT_DEADLINE_MS));
          expired.get(10, TimeUnit.SECONDS);
          assertFalse(h.result().isDone(), "nothing computed while frozen");

          e.unfreeze().get(10, TimeUnit.SECONDS);
          GenerationResult r = finished(h);
          assertArrayEquals(want.tokens(), r.tokens(), "computed after the freeze");
          assertEquals(0, r.metrics().reusedStorageTokens(), "the wait had ended: none restored");
        });
  }

  /**
   * Cancellations during a freeze end their requests at once: one admitted before the freeze (it
   * holds Device blocks) and one submitted while frozen; after the freeze lifts another prompt is
   * served with its usual output.
   */
  @Test
  void shouldEndCancelledRequestsDuringAFreeze() throws Exception {
    frozen(
        new RankClient(new SharedStore()),
        (e, watch, clock) -> {
          RequestHandle running = e.submit(prompt, SamplingParams.greedy(120));
          running.nextToken();
          e.freeze().get(10, TimeUnit.SECONDS);
          RequestHandle waiting = e.submit(other, greedy());
          // a whole frozen round with both requests in the scheduler before they are cancelled
          watch
              .whenFrozen(v -> v.scheduler().state(waiting.id()) != null)
              .get(10, TimeUnit.SECONDS);
          CompletableFuture<Void> ended =
              watch.whenFrozen(v -> v.activeCount() == 0 && v.scheduler().size() == 0);
          running.cancel();
          waiting.cancel();
          assertEquals("cancelled", running.result().get(10, TimeUnit.SECONDS).finishReason());
          assertEquals("cancelled", waiting.result().get(10, TimeUnit.SECONDS).finishReason());
          ended.get(10, TimeUnit.SECONDS);
          assertTrue(e.frozen(), "still frozen");
          assertTrue(
              running.result().get().tokens().length < 120, "the running request stopped early");

          e.unfreeze().get(10, TimeUnit.SECONDS);
          assertArrayEquals(wantThird.tokens(), serve(e, third).tokens(), "served after it");
        });
  }

  /**
   * TP = 2: the freeze reaches both ranks in one agreed round. Rank 1's GET of a restore hangs when
   * the replica freezes; it retires during the freeze and both ranks apply its agreed completion in
   * a frozen round; a request submitted and cancelled while frozen ends; nothing is admitted and no
   * operation starts on either rank while frozen. After the freeze lifts the restore and a prompt
   * that waited produce the single-rank engine's outputs.
   */
  @Test
  void shouldFreezeEveryRankOfAReplicaAlike() throws Exception {
    MemoryStore shared = new MemoryStore();
    RankClient[] clients = {new RankClient(shared), new RankClient(shared)};
    FrozenWatch[] watches = {new FrozenWatch(), new FrozenWatch()};
    StorageConfig scheduling =
        StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(30_000);
    try (TpReplica r =
        TpReplica.start(
            folder,
            2,
            rank -> EngineTest.small(256),
            rank -> EngineL3Test.l3(clients[rank], scheduling),
            rank -> watches[rank])) {
      Engine leader = r.leader();
      assertArrayEquals(want.tokens(), finished(leader.submit(prompt, greedy())).tokens());
      r.awaitStorageIdle();
      leader.clearCache().get(10, TimeUnit.SECONDS);
      CountDownLatch gate = new CountDownLatch(1);
      clients[1].getGate = gate;
      try {
        RequestHandle restoring = leader.submit(prompt, greedy());
        awaitTrue(() -> clients[1].getsEntered.get() > 0, "rank 1's GET is inside the store");
        leader.freeze().get(10, TimeUnit.SECONDS);
        awaitTrue(() -> r.engines.get(1).frozen(), "rank 1 applied the freeze");
        int[] queries = {clients[0].queries.get(), clients[1].queries.get()};
        RequestHandle waiting = leader.submit(other, greedy());
        RequestHandle cancelled = leader.submit(third, greedy());
        List<CompletableFuture<Void>> applied = new java.util.ArrayList<>();
        for (FrozenWatch w : watches) {
          applied.add(w.whenFrozen(restoredAndWaiting(restoring, waiting)));
        }
        gate.countDown();
        for (CompletableFuture<Void> f : applied) {
          f.get(10, TimeUnit.SECONDS);
        }
        cancelled.cancel();
        assertEquals("cancelled", cancelled.result().get(10, TimeUnit.SECONDS).finishReason());
        assertTrue(leader.frozen() && r.engines.get(1).frozen(), "both ranks still frozen");
        assertFalse(restoring.result().isDone() || waiting.result().isDone(), "nothing computed");
        assertArrayEquals(
            queries,
            new int[] {clients[0].queries.get(), clients[1].queries.get()},
            "no query on either rank while frozen");

        leader.unfreeze().get(10, TimeUnit.SECONDS);
        GenerationResult restored = finished(restoring);
        assertArrayEquals(want.tokens(), restored.tokens(), "the restore's output");
        assertEquals((prompt.length - 1) / P * P, restored.metrics().reusedStorageTokens());
        assertArrayEquals(wantOther.tokens(), finished(waiting).tokens(), "the waiting prompt's");
        awaitTrue(() -> !r.engines.get(1).frozen(), "rank 1 applied the unfreeze");
      } finally {
        gate.countDown();
      }
      r.awaitStorageIdle();
    }
    for (FrozenWatch w : watches) {
      w.assertHeld();
    }
  }

  private static SamplingParams greedy() {
    return SamplingParams.greedy(8);
  }

  private static void awaitTrue(java.util.function.BooleanSupplier condition, String what)
      throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!condition.getAsBoolean()) {
      assertTrue(System.nanoTime() < deadline, "never happened: " + what);
      Thread.sleep(2);
    }
  }
}

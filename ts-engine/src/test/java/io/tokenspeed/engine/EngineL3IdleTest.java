package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineL3Test.SharedStore;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * An engine with L3 between requests (issue 21, defects 3–5): the soft deadline of a request that
 * comes after an idle gap counts from its own query, not from the last round before the gap; a
 * store that refuses every PUT, or one whose result quarantined the executor, leaves an idle engine
 * quiet — at most one round per 5 ms tick, no store call beyond a health probe — serving on, and
 * its L3 work done within the close's drain. Outputs are compared on the untied model of {@link
 * ContextModels}.
 *
 * <p>The engines under test are stepped ({@link SteppedEngine}): the loop's turns, its store calls
 * and its clock are the test's, so an idle gap or a counting window is simulated time, exact.
 */
class EngineL3IdleTest extends WithContextLlama {
  private static final int P = 4;

  /** The loop's tick while only L3 work is pending. */
  private static final long TICK_MS = 5;

  /** The idle window over which rounds and store calls are counted (simulated time). */
  private static final long WINDOW_MS = 1_000;

  /** At most one round per tick over the window. */
  private static final long MAX_IDLE_ROUNDS = WINDOW_MS / TICK_MS;

  /**
   * A quiet loop: with L3 quarantined nothing is pending, so an idle engine runs no round (a few
   * are allowed for completions still being agreed).
   */
  private static final long MAX_QUIET_ROUNDS = 20;

  /** How long the L3 work left after the window may take to end (simulated time). */
  private static final long MAX_CLOSE_MS = 2_000;

  /** One-page extensions and the given soft deadline. */
  private static L3Settings settings(Store store, long softDeadlineMs) {
    return EngineL3Test.l3(
        store,
        StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(softDeadlineMs));
  }

  private static Run serve(Engine e, Checked rec, int[] prompt) throws Exception {
    return rec.await(e.submit(prompt, SamplingParams.greedy(8)));
  }

  private static Engine started(CausalLm model, Checked rec, L3Settings l3) {
    return Engine.start(
        EngineSettings.of(model, EngineTest.small(256)).observer(rec).l3(l3).conclude());
  }

  private Run recompute(int[] prompt) throws Exception {
    Checked rec = new Checked();
    try (Engine e = started(model, rec, null)) {
      return serve(e, rec, prompt);
    }
  }

  /** A stepped engine over {@code l3}, checked by {@code rec}. */
  private SteppedEngine stepped(Checked rec, L3Settings l3) {
    return new SteppedEngine(EngineSettings.of(model, EngineTest.small(256)).observer(rec).l3(l3));
  }

  /** Turns {@code e}'s loop until {@code prompt} is served. */
  private static Run serve(SteppedEngine e, Checked rec, int[] prompt) throws Exception {
    return rec.await(e.serve(prompt, SamplingParams.greedy(8)));
  }

  /**
   * Turns {@code e}'s loop until its L3 work is done, which is what a close drains; returns the
   * simulated milliseconds it took.
   */
  private static long drainMs(SteppedEngine e) throws Exception {
    long t0 = e.clock.get();
    e.settle();
    return TimeUnit.NANOSECONDS.toMillis(e.clock.get() - t0);
  }

  /** Counts every store call; tests override the call they break. */
  static class CountingStore extends ForwardingStore {
    final AtomicInteger exists = new AtomicInteger();
    final AtomicInteger gets = new AtomicInteger();
    final AtomicInteger puts = new AtomicInteger();

    CountingStore(Store inner) {
      super(inner);
    }

    int calls() {
      return exists.get() + gets.get() + puts.get();
    }

    @Override
    public StoreResult exists(List<String> keys) throws Exception {
      exists.incrementAndGet();
      return super.exists(keys);
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      gets.incrementAndGet();
      return super.get(keys, destinations);
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      puts.incrementAndGet();
      return super.put(keys, sources);
    }
  }

  // ---------------------------------------------------------------- the soft deadline (defect 3)

  /**
   * A writer stores a prefix; a fresh reader serves one unrelated request, sits idle, then serves a
   * prompt that extends the stored prefix under a 200 ms soft deadline: it must restore the prefix
   * whatever the gap (0 ms is the control). On 66f0a4f the first round after the gap carries the
   * tick of the last round before it, so after 300 or 1000 ms the request's deadline has passed
   * before its query is issued and the whole prompt is recomputed.
   */
  @ParameterizedTest(name = "idle {0} ms")
  @ValueSource(longs = {0, 300, 1000})
  void shouldRestoreFromL3WhenTheRequestComesAfterAnIdleGapLongerThanTheSoftDeadline(long idleMs)
      throws Exception {
    SplittableRandom rnd = new SplittableRandom(61);
    int[] written = rnd.ints(41, 0, model.vocabSize()).toArray();
    int[] extended = EngineL3Test.extend(written, 53, model.vocabSize(), rnd);
    int[] unrelated = rnd.ints(23, 0, model.vocabSize()).toArray();
    SharedStore store = new SharedStore();
    Checked w = new Checked();
    try (Engine writer = started(model, w, settings(store, 200))) {
      serve(writer, w, written);
    } // close drains the write-through's PUTs
    assertTrue(store.puts.get() > 0, "the writer put its prefix");
    Run want = recompute(extended);

    Checked r = new Checked();
    Run got;
    try (SteppedEngine reader = stepped(r, settings(store, 200))) {
      serve(reader, r, unrelated);
      reader.settle(); // its own write-through done: the loop runs no more rounds
      long rounds = reader.rounds();
      reader.advanceMs(idleMs);
      got = serve(reader, r, extended);
      assertTrue(reader.rounds() > rounds, "the gap ended with the request's rounds");
      reader.settle();
    }
    assertTrue(r.broken.isEmpty() && w.broken.isEmpty(), () -> r.broken + " " + w.broken);
    EngineTest.assertSame(want, got, "idle " + idleMs + " ms: the output equals recomputation");
    assertEquals(
        written.length / P * P,
        got.result().metrics().reusedStorageTokens(),
        "after "
            + idleMs
            + " ms idle the stored prefix is restored, not recomputed: "
            + got.result().metrics());
  }

  // ---------------------------------------------------------------- refused PUTs (defect 4)

  /**
   * A store that refuses every PUT with a retired per-key refusal (no space; an ACL or a full disk
   * answer the same way, and will not change): after one request, the idle engine runs at most one
   * round per tick over a second, the store sees a handful of PUTs at most (a refused page may be
   * offered again, paced, or dropped with its reason counted — never in a loop), and what a close
   * drains ends within 3 s. On 66f0a4f the refused pages are re-offered at once, round after round.
   */
  @Test
  void shouldStayQuietAndCloseQuicklyWhenTheStoreRefusesEveryPut() throws Exception {
    CountingStore refusing =
        new CountingStore(new MemoryStore()) {
          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) {
            puts.incrementAndGet();
            List<RowResult> rows = new ArrayList<>();
            for (int i = 0; i < keys.size(); i++) {
              rows.add(new RowResult.Rejected(RowResult.Rejected.NO_SPACE));
            }
            return StoreResult.of(rows);
          }
        };
    int[] prompt = new SplittableRandom(67).ints(41, 0, model.vocabSize()).toArray();
    Run want = recompute(prompt);
    Checked rec = new Checked();
    long idleRounds;
    long idlePuts;
    long closedMs;
    try (SteppedEngine e = stepped(rec, settings(refusing, 200))) {
      EngineTest.assertSame(want, serve(e, rec, prompt), "served over a refusing store");
      e.stepUntil(() -> refusing.puts.get() > 0, "the finished prefix's write-through PUT");
      long rounds0 = e.rounds();
      long puts0 = refusing.puts.get();
      idleRounds = e.runForMs(WINDOW_MS);
      idlePuts = refusing.puts.get() - puts0;
      assertEquals(idleRounds, rec.rounds.get() - rounds0, "the observer saw every round");
      closedMs = drainMs(e);
    }
    assertAll(
        () ->
            assertTrue(
                idleRounds <= MAX_IDLE_ROUNDS,
                "rounds in " + WINDOW_MS + " ms idle: " + idleRounds + " > " + MAX_IDLE_ROUNDS),
        () ->
            assertTrue(
                idlePuts <= 20,
                "PUT calls in " + WINDOW_MS + " ms idle: " + idlePuts + " (a handful at most)"),
        () ->
            assertTrue(
                closedMs < MAX_REFUSING_CLOSE_MS,
                "the drain took " + closedMs + " ms (the pages' last paced attempts run first)"),
        () -> assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString()));
  }

  /**
   * close() lets refused pages' paced attempts run within its drain deadline: once the last of them
   * (1.5 s after the first refusal, which came a second before the drain) is refused, the pages are
   * dropped and the drain ends, long before the 10 s drain deadline.
   */
  private static final long MAX_REFUSING_CLOSE_MS = 3_000;

  /**
   * A store that refuses the first PUTs (a transient outage: a cooldown, a full disk being cleaned)
   * and then takes them: an engine closed right after its request finished still writes its prefix,
   * because close() waits for the refused pages' paced retries within its drain deadline, and a
   * fresh engine restores the prefix. (A short-lived writer process, such as {@code tokenspeed
   * generate} or the demo's writer, closes at once.)
   */
  @Test
  void shouldWriteThroughOnCloseWhenTheStoreRefusesTheFirstPutsThenTakesThem() throws Exception {
    EngineL3Test.SharedStore memory = new EngineL3Test.SharedStore(); // outlives the writer
    AtomicInteger refusals = new AtomicInteger(3);
    CountingStore flaky =
        new CountingStore(memory) {
          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
            puts.incrementAndGet();
            if (refusals.getAndDecrement() > 0) {
              List<RowResult> rows = new ArrayList<>();
              for (int i = 0; i < keys.size(); i++) {
                rows.add(new RowResult.Rejected(RowResult.Rejected.NO_SPACE));
              }
              return StoreResult.of(rows);
            }
            return super.put(keys, sources);
          }
        };
    int[] prefix = new SplittableRandom(71).ints(40, 0, model.vocabSize()).toArray();
    Checked rec = new Checked();
    Engine writer = started(model, rec, settings(flaky, 60_000));
    try {
      serve(writer, rec, prefix);
    } finally {
      writer.close(); // at once, as a short-lived process does
    }
    assertTrue(flaky.puts.get() > 3, "the refused pages were tried again: " + flaky.puts.get());
    int[] extended = java.util.Arrays.copyOf(prefix, 44);
    Checked rec2 = new Checked();
    Run got;
    try (Engine reader = started(model, rec2, settings(new CountingStore(memory), 60_000))) {
      got = serve(reader, rec2, extended);
    }
    assertTrue(
        got.result().metrics().reusedStorageTokens() >= 40 / P * P - P,
        () -> "the prefix reached the store before close returned: " + got.result().metrics());
    EngineTest.assertSame(recompute(extended), got, "restored after a transient refusal");
  }

  // ---------------------------------------------------------------- quarantine (defect 5)

  /** How a store call leaves its retirement unproven. */
  enum Unretired {
    /** A PUT throws, and the store does not guarantee that failed calls retire. */
    PUT_THROWS,
    /** A PUT returns a result that is not retired. */
    PUT_NOT_RETIRED,
    /** A GET returns a result that is not retired. */
    GET_NOT_RETIRED
  }

  /**
   * One store call whose retirement is unproven quarantines the executor: the engine keeps serving
   * without L3 (outputs equal recomputation); afterwards the idle loop goes quiet — quarantine
   * stops new L3 work, so nothing is pending and it runs (almost) no round, far below one per tick
   * — and calls the store nothing but (at most) a health probe over a second; what a close drains
   * ends within 2 s. On 66f0a4f the backup candidates of the request served after quarantine stay
   * queued without ever dispatching: about 190 rounds a second for ever, and close() waits out its
   * 10 s drain.
   */
  @ParameterizedTest(name = "{0}")
  @EnumSource(Unretired.class)
  void shouldGoQuietKeepServingAndCloseQuicklyWhenAStoreResultQuarantinesL3(Unretired how)
      throws Exception {
    SplittableRandom rnd = new SplittableRandom(71);
    int[] written = rnd.ints(41, 0, model.vocabSize()).toArray();
    int[] extended = EngineL3Test.extend(written, 53, model.vocabSize(), rnd);
    int[] later = rnd.ints(37, 0, model.vocabSize()).toArray();
    SharedStore shared = new SharedStore();
    if (how == Unretired.GET_NOT_RETIRED) {
      Checked w = new Checked();
      try (Engine writer = started(model, w, settings(shared, 200))) {
        serve(writer, w, written);
      }
      assertTrue(shared.puts.get() > 0, "the writer put its prefix");
    }
    CountDownLatch failed = new CountDownLatch(1);
    CountingStore broken =
        new CountingStore(shared) {
          @Override
          public boolean failuresRetire() {
            return false;
          }

          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
            puts.incrementAndGet();
            return switch (how) {
              case PUT_THROWS -> {
                failed.countDown();
                throw new IOException("the connection dropped while the PUT was in flight");
              }
              case PUT_NOT_RETIRED -> {
                failed.countDown();
                yield new StoreResult(unknownRows(keys.size()), false);
              }
              case GET_NOT_RETIRED -> super.inner().put(keys, sources);
            };
          }

          @Override
          public StoreResult get(List<String> keys, List<MemorySegment> destinations)
              throws Exception {
            gets.incrementAndGet();
            if (how == Unretired.GET_NOT_RETIRED) {
              failed.countDown();
              return new StoreResult(unknownRows(keys.size()), false);
            }
            return super.inner().get(keys, destinations);
          }
        };
    Checked rec = new Checked();
    long idleRounds;
    long idleCalls;
    long closedMs;
    Run first;
    Run second;
    try (SteppedEngine e = stepped(rec, settings(broken, 200))) {
      first = serve(e, rec, how == Unretired.GET_NOT_RETIRED ? extended : written);
      e.stepUntil(() -> failed.getCount() == 0, "the unretired call");
      e.stepUntil(
          () -> e.engine.storageTransferManager().quarantined(),
          "its completion is agreed: the manager is quarantined");
      second = serve(e, rec, later); // served without L3: its prefix is not backed up
      e.settle();
      long rounds0 = e.rounds();
      long calls0 = broken.calls();
      idleRounds = e.runForMs(WINDOW_MS);
      idleCalls = broken.calls() - calls0;
      assertEquals(idleRounds, rec.rounds.get() - rounds0, "the observer saw every round");
      closedMs = drainMs(e);
    }
    Run wantFirst = recompute(how == Unretired.GET_NOT_RETIRED ? extended : written);
    Run wantSecond = recompute(later);
    assertAll(
        () -> EngineTest.assertSame(wantFirst, first, how + ": the request that quarantined L3"),
        () -> EngineTest.assertSame(wantSecond, second, how + ": a request after quarantine"),
        () ->
            assertTrue(
                idleRounds <= MAX_QUIET_ROUNDS,
                how
                    + ": rounds in "
                    + WINDOW_MS
                    + " ms idle after quarantine: "
                    + idleRounds
                    + " > "
                    + MAX_QUIET_ROUNDS
                    + " (the loop goes quiet)"),
        () ->
            assertTrue(
                idleCalls <= 1,
                how + ": store calls in " + WINDOW_MS + " ms idle after quarantine: " + idleCalls),
        () -> assertTrue(closedMs < MAX_CLOSE_MS, how + ": the drain took " + closedMs + " ms"),
        () -> assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString()));
  }

  private static List<RowResult> unknownRows(int n) {
    List<RowResult> rows = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      rows.add(new RowResult.Unknown(-1));
    }
    return rows;
  }
}

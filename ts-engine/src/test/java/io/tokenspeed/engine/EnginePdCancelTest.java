package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.pd.PdSettings;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;

/**
 * One half of a disaggregated request cancelled by its own client, the other half learning it from
 * its peer over the KV transfer (docs/pd.md, "Cancellation"): the other half ends as cancelled, as
 * a request its own client cancelled does (finish reason {@code cancelled}, never {@code error}),
 * in both directions and at each stage the cancellation can meet: before the BOOTSTRAP, before the
 * ACK, after it, before the decode half arrived. A peer that went away (its engine closed) still
 * fails the other half with an error naming the peer. Two engines in one process over loopback TCP,
 * freezes holding either side at the stage the case needs; afterwards neither engine holds a
 * request, a block, a room or a registration.
 */
class EnginePdCancelTest extends WithPdEngines {

  /** The bootstrap deadline of {@link #settings}: a registration no BOOTSTRAP claims fails then. */
  private static final long BOOTSTRAP_DEADLINE_MS = 3_000;

  private static PdSettings settings() {
    return PdSettings.defaults().withTimingsMs(2_000, BOOTSTRAP_DEADLINE_MS, 200, 3_000);
  }

  @Override
  protected PdSettings pdSettings() {
    return settings();
  }

  private int[] prompt(int seed, int n) {
    return new java.util.SplittableRandom(seed).ints(n, 0, model.vocabSize()).toArray();
  }

  private static final SamplingParams PARAMS = SamplingParams.greedy(16).withIgnoreEos(true);

  // ------------------------------------------------------------ the decode half's client cancels

  /**
   * The decode half is cancelled before its prefill half opened the room: the decode engine refuses
   * the BOOTSTRAP that comes afterwards, and the prefill half ends cancelled.
   */
  @Test
  void shouldCancelThePrefillHalfWhenTheDecodeHalfWasCancelledBeforeItsBootstrap()
      throws Exception {
    onAPair(
        (p, d, kv) -> {
          int[] prompt = prompt(1, 24);
          RequestHandle dec = d.submit(prompt, PARAMS, -1, new PdTicket.Decode(101));
          dec.cancel();
          assertCancelledByItsClient(dec, "the decode half");
          RequestHandle pre = p.submit(prompt, PARAMS, -1, new PdTicket.Prefill(101, kv));
          assertCancelledByThePeer(pre, "the prefill half");
        });
  }

  /**
   * The decode half is cancelled after its BOOTSTRAP came and before its ACK went (the decode
   * engine frozen, so the request waits for its admission into Landing): the CANCEL fails the
   * prefill half's ACK, and the prefill half ends cancelled.
   */
  @Test
  void shouldCancelThePrefillHalfWhenTheDecodeHalfIsCancelledBeforeTheAck() throws Exception {
    onAPair(
        (p, d, kv) -> {
          d.freeze().get(10, TimeUnit.SECONDS);
          int[] prompt = prompt(2, 40);
          RequestHandle dec = d.submit(prompt, PARAMS, -1, new PdTicket.Decode(102));
          RequestHandle pre = p.submit(prompt, PARAMS, -1, new PdTicket.Prefill(102, kv));
          waitFor(
              () -> d.pdMetrics().orElseThrow().roomsOpen() == 1,
              () -> "the BOOTSTRAP did not reach the decode engine: " + d.pdMetrics());
          dec.cancel();
          assertCancelledByItsClient(dec, "the decode half");
          assertCancelledByThePeer(pre, "the prefill half");
          d.unfreeze().get(10, TimeUnit.SECONDS);
        });
  }

  /**
   * The decode half is cancelled after its ACK went, while its prefill half waits to be computed
   * (the prefill engine frozen): the prefill half ends cancelled, once it ran (its first token is
   * computed, nothing lands).
   */
  @Test
  void shouldCancelThePrefillHalfWhenTheDecodeHalfIsCancelledAfterTheAck() throws Exception {
    onAPair(
        (p, d, kv) -> {
          p.freeze().get(10, TimeUnit.SECONDS);
          int[] prompt = prompt(3, 40);
          RequestHandle dec = d.submit(prompt, PARAMS, -1, new PdTicket.Decode(103));
          RequestHandle pre = p.submit(prompt, PARAMS, -1, new PdTicket.Prefill(103, kv));
          waitFor(
              () -> d.pdHeldBlocks() == 1,
              () -> "the decode engine did not take the landing's blocks: " + d.stats());
          Thread.sleep(300); // the ACK, written with the reservation, reaches the prefill engine
          dec.cancel();
          assertCancelledByItsClient(dec, "the decode half");
          waitFor(
              () -> d.pdMetrics().orElseThrow().roomsOpen() == 0,
              () -> "the decode engine's room stays open: " + d.pdMetrics());
          p.unfreeze().get(10, TimeUnit.SECONDS);
          assertCancelledByThePeer(pre, "the prefill half");
        });
  }

  // ------------------------------------------------------------ the prefill half's client cancels

  /**
   * The prefill half is cancelled before its first token, its decode half landing (ACK sent, the
   * prefill engine frozen): the CANCEL fails the landing, and the decode half ends cancelled.
   */
  @Test
  void shouldCancelTheDecodeHalfWhenThePrefillHalfIsCancelledBeforeItsFirstToken()
      throws Exception {
    onAPair(
        (p, d, kv) -> {
          p.freeze().get(10, TimeUnit.SECONDS);
          int[] prompt = prompt(4, 40);
          RequestHandle dec = d.submit(prompt, PARAMS, -1, new PdTicket.Decode(104));
          RequestHandle pre = p.submit(prompt, PARAMS, -1, new PdTicket.Prefill(104, kv));
          waitFor(
              () -> d.pdHeldBlocks() == 1,
              () -> "the decode engine did not take the landing's blocks: " + d.stats());
          pre.cancel();
          assertCancelledByItsClient(pre, "the prefill half");
          assertCancelledByThePeer(dec, "the decode half");
          p.unfreeze().get(10, TimeUnit.SECONDS);
        });
  }

  /**
   * The prefill half is cancelled after its BOOTSTRAP reached the decode engine and before its
   * decode half did: the decode half, arriving later, ends cancelled at once, not after the
   * bootstrap deadline as one whose prefill half never came.
   */
  @Test
  void shouldCancelTheDecodeHalfWhenThePrefillHalfWasCancelledBeforeItArrived() throws Exception {
    onAPair(
        (p, d, kv) -> {
          int[] prompt = prompt(5, 40);
          p.freeze().get(10, TimeUnit.SECONDS);
          RequestHandle pre = p.submit(prompt, PARAMS, -1, new PdTicket.Prefill(105, kv));
          waitFor(
              () -> d.pdMetrics().orElseThrow().roomsOpened() == 1,
              () -> "the BOOTSTRAP did not reach the decode engine: " + d.pdMetrics());
          pre.cancel();
          assertCancelledByItsClient(pre, "the prefill half");
          waitFor(
              () -> d.pdMetrics().orElseThrow().roomsOpen() == 0,
              () -> "the CANCEL did not end the unclaimed room: " + d.pdMetrics());
          long submitted = System.nanoTime();
          RequestHandle dec = d.submit(prompt, PARAMS, -1, new PdTicket.Decode(105));
          assertCancelledByThePeer(dec, "the decode half");
          long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - submitted);
          assertTrue(ms < BOOTSTRAP_DEADLINE_MS, "the decode half ended after " + ms + " ms");
          p.unfreeze().get(10, TimeUnit.SECONDS);
        });
  }

  // ------------------------------------------------------------ a peer that goes away still fails

  /**
   * The decode engine closes while its halves wait (before and after their ACK): the prefill halves
   * end with an error naming the decode engine, not as cancelled, although the decode engine
   * cancelled its own requests as it closed.
   */
  @Test
  void shouldFailThePrefillHalvesWhenTheDecodeEngineGoesAway() throws Exception {
    Checked pc = new Checked();
    List<RequestHandle> halves = new ArrayList<>();
    InetSocketAddress kv;
    try (Engine p = prefill(pc)) {
      p.freeze().get(10, TimeUnit.SECONDS);
      try (Engine d = decode(new Checked())) {
        kv = d.pdEndpoint().orElseThrow();
        // acknowledged: the decode engine took the landing's blocks and sent the ACK
        int[] first = prompt(6, 40);
        d.submit(first, PARAMS, -1, new PdTicket.Decode(106));
        halves.add(p.submit(first, PARAMS, -1, new PdTicket.Prefill(106, kv)));
        waitFor(() -> d.pdHeldBlocks() == 1, () -> "no landing: " + d.stats());
        // not acknowledged: the decode engine frozen, the request waits for Landing
        d.freeze().get(10, TimeUnit.SECONDS);
        int[] second = prompt(7, 40);
        d.submit(second, PARAMS, -1, new PdTicket.Decode(107));
        halves.add(p.submit(second, PARAMS, -1, new PdTicket.Prefill(107, kv)));
        waitFor(
            () -> d.pdMetrics().orElseThrow().roomsOpened() == 2,
            () -> "the second BOOTSTRAP did not come: " + d.pdMetrics());
        Thread.sleep(300);
      } // the decode engine closes: it cancels its requests, its rooms end
      p.unfreeze().get(10, TimeUnit.SECONDS);
      for (RequestHandle h : halves) {
        GenerationResult r = h.result().get(30, TimeUnit.SECONDS);
        assertEquals("error", r.finishReason(), "the prefill half: " + r.error());
        assertNotNull(r.error());
        assertTrue(r.error().contains(kv.toString()), r.error());
      }
      assertQuiet(p, pc);
    }
  }

  /**
   * The prefill engine closes while its halves wait to be computed, their decode halves landing:
   * the decode halves end with an error naming the prefill engine, not as cancelled.
   */
  @Test
  void shouldFailTheDecodeHalvesWhenThePrefillEngineGoesAway() throws Exception {
    Checked dc = new Checked();
    List<RequestHandle> halves = new ArrayList<>();
    try (Engine d = decode(dc)) {
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      try (Engine p = prefill(new Checked())) {
        p.freeze().get(10, TimeUnit.SECONDS);
        for (int i = 0; i < 2; i++) {
          int[] prompt = prompt(8 + i, 40);
          halves.add(d.submit(prompt, PARAMS, -1, new PdTicket.Decode(108 + i)));
          p.submit(prompt, PARAMS, -1, new PdTicket.Prefill(108 + i, kv));
        }
        waitFor(() -> d.pdHeldBlocks() == 2, () -> "no landings: " + d.stats());
      } // the prefill engine closes: it cancels its requests, its rooms end
      for (RequestHandle h : halves) {
        GenerationResult r = h.result().get(30, TimeUnit.SECONDS);
        assertEquals("error", r.finishReason(), "the decode half: " + r.error());
        assertNotNull(r.error());
        assertTrue(r.error().contains("prefill engine"), r.error());
      }
      assertQuiet(d, dc);
    }
  }

  // ------------------------------------------------------------ checks

  /** What a test does with a prefill engine, a decode engine and the decode engine's endpoint. */
  private interface PairBody {
    void run(Engine p, Engine d, InetSocketAddress kv) throws Exception;
  }

  /** Runs {@code body} on a fresh pair of engines, then checks that both are quiet. */
  private void onAPair(PairBody body) throws Exception {
    Checked pc = new Checked();
    Checked dc = new Checked();
    try (Engine p = prefill(pc);
        Engine d = decode(dc)) {
      body.run(p, d, d.pdEndpoint().orElseThrow());
      assertQuiet(p, pc);
      assertQuiet(d, dc);
    }
  }

  private static void assertCancelledByItsClient(RequestHandle h, String what) throws Exception {
    GenerationResult r = h.result().get(30, TimeUnit.SECONDS);
    assertEquals("cancelled", r.finishReason(), what + ": " + r.error());
  }

  /** The half whose peer's client cancelled ends as cancelled, saying why. */
  private static void assertCancelledByThePeer(RequestHandle h, String what) throws Exception {
    GenerationResult r = h.result().get(30, TimeUnit.SECONDS);
    assertEquals("cancelled", r.finishReason(), what + ": " + r.error());
    assertNotNull(r.error(), what + " says nothing of why it was cancelled");
    assertTrue(r.error().contains("cancelled by its client"), what + ": " + r.error());
  }

  /**
   * Within a bound: no request in the loop, no Device or Host reference held, no room open, no
   * registration waiting; and no invariant broke in any round.
   */
  private static void assertQuiet(Engine e, Checked checks) throws Exception {
    waitFor(
        () -> {
          EngineMetrics m = e.metrics();
          return e.stats().activeRequests() == 0
              && m.device().usedParents() == 0
              && m.host().usedParents() == 0
              && e.pdHeldBlocks() == 0
              && e.pdMetrics().orElseThrow().roomsOpen() == 0
              && e.pdMetrics().orElseThrow().registrationsWaiting() == 0;
        },
        () ->
            e.role() + " engine not quiet: " + e.stats() + " " + e.metrics() + " " + e.pdMetrics());
    if (!checks.broken.isEmpty()) {
      AssertionError a = new AssertionError(e.role() + ": an invariant broke");
      checks.broken.forEach(a::addSuppressed);
      throw a;
    }
  }

  private static void waitFor(BooleanSupplier done, Supplier<String> what)
      throws InterruptedException {
    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    while (!done.getAsBoolean()) {
      if (System.nanoTime() > until) {
        fail(what.get());
      }
      Thread.sleep(10);
    }
  }
}

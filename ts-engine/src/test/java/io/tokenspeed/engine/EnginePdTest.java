package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.pd.PdSettings;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A prefill engine and a decode engine in one process, joined by the real KV transfer over loopback
 * TCP (docs/pd.md), on the untied model whose output depends on the KV it reads: every request's
 * tokens and logits rows equal a fused engine's bit for bit, the decode side reports the prefill
 * side's reuse, cancellations at any point and a decode engine's death end every handle in bounded
 * time, and neither side keeps a reference, a room or a request afterwards. The owners' invariants
 * (the Host references the transfers hold among them) are checked after every round on both.
 */
class EnginePdTest extends WithPdEngines {

  /** The prefix granularity of {@link EngineTest#small}: shorter prompts reuse nothing. */
  private static final int PAGE = EngineTest.small(2).prefixGranularity();

  private static PdSettings settings() {
    return PdSettings.defaults().withTimingsMs(2_000, 3_000, 200, 3_000);
  }

  @Override
  protected PdSettings pdSettings() {
    return settings();
  }

  /** One request's prompt and token limit. */
  private record Job(int[] prompt, int maxTokens) {}

  private List<Job> jobs(SplittableRandom rnd, int n) {
    List<Job> jobs = new ArrayList<>();
    int[] shared = rnd.ints(12 + rnd.nextInt(20), 0, model.vocabSize()).toArray();
    for (int i = 0; i < n; i++) {
      int[] own = rnd.ints(1 + rnd.nextInt(30), 0, model.vocabSize()).toArray();
      int[] prompt = own;
      if (rnd.nextBoolean()) { // a shared prefix: the prefill engine's Device reuses it
        prompt = Arrays.copyOf(shared, shared.length + own.length);
        System.arraycopy(own, 0, prompt, shared.length, own.length);
      }
      jobs.add(new Job(prompt, 1 + rnd.nextInt(20)));
    }
    return jobs;
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3})
  void shouldGiveTheFusedOutputBitForBitThroughPrefillAndDecode(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    List<Job> jobs = jobs(rnd, 10);
    Checked fusedChecks = new Checked();
    List<EngineTest.Run> fused = new ArrayList<>();
    try (Engine e = start(PdOptions.FUSED, fusedChecks)) {
      for (Job j : jobs) {
        fused.add(fusedChecks.await(e.submit(j.prompt(), SamplingParams.greedy(j.maxTokens()))));
      }
    }
    Checked pc = new Checked();
    Checked dc = new Checked();
    try (Engine p = prefill(pc);
        Engine d = decode(dc)) {
      assertEquals(EngineRole.PREFILL, p.role());
      assertEquals(EngineRole.DECODE, d.role());
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      for (int pass = 0; pass < 2; pass++) { // the second pass finds the prompts cached
        List<RequestHandle[]> pairs = new ArrayList<>();
        for (Job j : jobs) { // all in flight together, each pair's halves in a random order
          long room = rnd.nextLong() | 1;
          SamplingParams params = SamplingParams.greedy(j.maxTokens());
          RequestHandle[] pair = new RequestHandle[2];
          if (rnd.nextBoolean()) {
            pair[1] = d.submit(j.prompt(), params, -1, new PdTicket.Decode(room));
            pair[0] = p.submit(j.prompt(), params, -1, new PdTicket.Prefill(room, kv));
          } else {
            pair[0] = p.submit(j.prompt(), params, -1, new PdTicket.Prefill(room, kv));
            pair[1] = d.submit(j.prompt(), params, -1, new PdTicket.Decode(room));
          }
          pairs.add(pair);
        }
        for (int i = 0; i < jobs.size(); i++) {
          EngineTest.Run want = fused.get(i);
          EngineTest.Run pre = pc.await(pairs.get(i)[0]);
          EngineTest.Run dec = dc.await(pairs.get(i)[1]);
          String what = "seed " + seed + " pass " + pass + " request " + i;
          assertArrayEquals(
              Arrays.copyOf(want.tokens(), 1), pre.tokens(), what + ": the prefill's token");
          assertArrayEquals(want.tokens(), dec.tokens(), what + ": the decode engine's tokens");
          // the prefill engine's logits row of the first token, the decode engine's of the rest
          assertRowsEqual(want.logits().subList(0, 1), pre.logits(), what + " prefill");
          assertRowsEqual(
              want.logits().subList(1, want.logits().size()), dec.logits(), what + " decode");
          RequestMetrics pm = pre.result().metrics();
          RequestMetrics dm = dec.result().metrics();
          assertEquals(pm.reusedDeviceTokens(), dm.reusedDeviceTokens(), what + ": device reuse");
          assertEquals(pm.reusedHostTokens(), dm.reusedHostTokens(), what + ": host reuse");
          assertEquals(0, dm.computedTokens() - (dec.tokens().length - 1), what + ": computed");
          if (pass == 1 && jobs.get(i).prompt().length > PAGE) { // a full page to reuse
            assertTrue(pm.reusedDeviceTokens() + pm.reusedHostTokens() > 0, what + ": no reuse");
          }
        }
      }
      assertQuiet(p, pc);
      assertQuiet(d, dc);
      assertEquals(2L * jobs.size(), d.pdMetrics().orElseThrow().roomsLanded());
    }
  }

  /**
   * Log probabilities through the two halves: the prefill engine sends the first token's in DONE,
   * the decode engine computes the rest; every step equals a fused engine's.
   */
  @Test
  void shouldReportEveryTokensLogprobsAsAFusedEngineDoes() throws Exception {
    SplittableRandom rnd = new SplittableRandom(41);
    List<Job> jobs = jobs(rnd, 4);
    int top = 3;
    List<List<io.tokenspeed.model.sampling.TokenLogprobs>> fused = new ArrayList<>();
    try (Engine e = start(PdOptions.FUSED, new Checked())) {
      for (Job j : jobs) {
        RequestHandle h = e.submit(j.prompt(), SamplingParams.greedy(j.maxTokens()), top);
        assertNull(h.result().get(60, TimeUnit.SECONDS).error());
        fused.add(h.logprobs());
      }
    }
    Checked pc = new Checked();
    Checked dc = new Checked();
    try (Engine p = prefill(pc);
        Engine d = decode(dc)) {
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      for (int i = 0; i < jobs.size(); i++) {
        Job j = jobs.get(i);
        long room = rnd.nextLong() | 1;
        SamplingParams params = SamplingParams.greedy(j.maxTokens());
        RequestHandle dec = d.submit(j.prompt(), params, top, new PdTicket.Decode(room));
        RequestHandle pre = p.submit(j.prompt(), params, top, new PdTicket.Prefill(room, kv));
        assertNull(pre.result().get(60, TimeUnit.SECONDS).error());
        assertNull(dec.result().get(60, TimeUnit.SECONDS).error());
        List<io.tokenspeed.model.sampling.TokenLogprobs> got = dec.logprobs();
        assertEquals(fused.get(i).size(), got.size(), "request " + i + ": steps with logprobs");
        for (int s = 0; s < got.size(); s++) {
          var want = fused.get(i).get(s);
          var have = got.get(s);
          String what = "request " + i + " step " + s;
          assertEquals(want.token(), have.token(), what);
          assertEquals(want.logprob(), have.logprob(), what);
          assertArrayEquals(want.topTokens(), have.topTokens(), what);
          assertArrayEquals(want.topLogprobs(), have.topLogprobs(), what);
        }
      }
      assertQuiet(p, pc);
      assertQuiet(d, dc);
    }
  }

  /**
   * A decode engine whose Device holds only a few requests: landings wait for admission (their
   * prefill halves wait for the ACK meanwhile), and landed requests are retracted as they decode
   * and recover through the ordinary matcher. Every output still equals a fused engine's bit for
   * bit, and nothing is left held on either side.
   */
  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {51, 52})
  void shouldGiveTheFusedOutputWhenTheDecodeDeviceIsTight(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    List<Job> jobs = new ArrayList<>();
    // each request grows 32 tokens past the headroom its admission reserved: two decoding together
    // outgrow the room below, whenever their landings arrive
    for (int i = 0; i < 10; i++) {
      jobs.add(new Job(rnd.ints(8 + rnd.nextInt(24), 0, model.vocabSize()).toArray(), 48));
    }
    List<EngineTest.Run> fused = new ArrayList<>();
    Checked fc = new Checked();
    try (Engine e = start(PdOptions.FUSED, fc)) {
      for (Job j : jobs) {
        fused.add(fc.await(e.submit(j.prompt(), SamplingParams.greedy(j.maxTokens()))));
      }
    }
    // room for about two requests at their full length on the decode side
    EngineConfig base = EngineTest.small(2);
    int parents = 2 * EngineTest.parentsFor(model, base, 64);
    EngineConfig tight =
        new EngineConfig(
            base.prefixGranularity(),
            base.blockGranularity(),
            parents,
            base.hostRatio(),
            base.tokenBudget(),
            base.maxRunning(),
            base.demoteBelowFreeParents(),
            base.computeThreads(),
            base.maxQueued());
    // whether landed requests meet retraction depends on how the landings interleave: up to three
    // attempts, each compared in full, until one has retracted
    long retractions = 0;
    for (int attempt = 0; attempt < 3 && retractions == 0; attempt++) {
      retractions = tightAttempt(seed, rnd, jobs, fused, tight);
    }
    assertTrue(
        retractions > 0,
        "the decode Device was not tight: no retraction in 3 attempts (" + parents + " parents)");
  }

  /** One run of the tight case on fresh engines; returns the decode engine's retractions. */
  private long tightAttempt(
      long seed,
      SplittableRandom rnd,
      List<Job> jobs,
      List<EngineTest.Run> fused,
      EngineConfig tight)
      throws Exception {
    Checked pc = new Checked();
    Checked dc = new Checked();
    try (Engine p = prefill(pc);
        Engine d =
            Engine.start(
                EngineSettings.of(model, tight)
                    .observer(dc)
                    .pd(
                        PdOptions.decode(
                            SECRET,
                            settings(),
                            new InetSocketAddress(InetAddress.getLoopbackAddress(), 0)))
                    .conclude())) {
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      List<RequestHandle[]> pairs = new ArrayList<>();
      for (Job j : jobs) {
        long room = rnd.nextLong() | 1;
        SamplingParams params = SamplingParams.greedy(j.maxTokens());
        pairs.add(
            new RequestHandle[] {
              p.submit(j.prompt(), params, -1, new PdTicket.Prefill(room, kv)),
              d.submit(j.prompt(), params, -1, new PdTicket.Decode(room))
            });
      }
      for (int i = 0; i < jobs.size(); i++) {
        pc.await(pairs.get(i)[0]);
        EngineTest.Run dec = dc.await(pairs.get(i)[1]);
        assertArrayEquals(fused.get(i).tokens(), dec.tokens(), "seed " + seed + " request " + i);
        assertRowsEqual(
            fused.get(i).logits().subList(1, fused.get(i).logits().size()),
            dec.logits(),
            "seed " + seed + " request " + i);
      }
      assertQuiet(p, pc);
      assertQuiet(d, dc);
      return d.stats().retractions();
    }
  }

  private static void assertRowsEqual(List<float[]> want, List<float[]> got, String what) {
    assertEquals(want.size(), got.size(), what + ": logits rows");
    for (int i = 0; i < want.size(); i++) {
      assertArrayEquals(want.get(i), got.get(i), what + ": logits row " + i);
    }
  }

  /**
   * Cancellations at random points of random pairs, either half or both, in flight together: every
   * handle ends within the bound; no half ends with an error (a half whose other half's client
   * cancelled ends cancelled, or finished if its part was done); an uncancelled pair whose halves
   * both ended without error generated the fused output's length; afterwards neither engine holds a
   * request, a reference or an open room, and the invariants held after every round.
   */
  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {11, 12, 13, 14})
  void shouldEndEveryHalfAndLeakNothingWhenRequestsAreCancelledAnywhere(long seed)
      throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    List<Job> jobs = jobs(rnd, 12);
    Checked pc = new Checked();
    Checked dc = new Checked();
    ExecutorService cancels = Executors.newFixedThreadPool(4);
    try (Engine p = prefill(pc);
        Engine d = decode(dc)) {
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      List<RequestHandle[]> pairs = new ArrayList<>();
      List<Integer> actions = new ArrayList<>();
      for (Job j : jobs) {
        long room = rnd.nextLong() | 1;
        SamplingParams params = SamplingParams.greedy(j.maxTokens());
        RequestHandle[] pair = {
          p.submit(j.prompt(), params, -1, new PdTicket.Prefill(room, kv)),
          d.submit(j.prompt(), params, -1, new PdTicket.Decode(room))
        };
        pairs.add(pair);
        int action = rnd.nextInt(4); // 0 none, 1 the prefill half, 2 the decode half, 3 both
        actions.add(action);
        long delayUs = rnd.nextLong(30_000);
        if (action != 0) {
          cancels.execute(
              () -> {
                try {
                  TimeUnit.MICROSECONDS.sleep(delayUs);
                } catch (InterruptedException e) {
                  return;
                }
                if ((action & 1) != 0) {
                  pair[0].cancel();
                }
                if ((action & 2) != 0) {
                  pair[1].cancel();
                }
              });
        }
      }
      for (int i = 0; i < pairs.size(); i++) {
        GenerationResult pre = pairs.get(i)[0].result().get(30, TimeUnit.SECONDS);
        GenerationResult dec = pairs.get(i)[1].result().get(30, TimeUnit.SECONDS);
        assertNotNull(pre.finishReason());
        String what = "seed " + seed + " pair " + i + " (action " + actions.get(i) + ")";
        assertNotEquals("error", pre.finishReason(), what + ", the prefill half: " + pre.error());
        assertNotEquals("error", dec.finishReason(), what + ", the decode half: " + dec.error());
        if (actions.get(i) == 0) {
          assertNull(pre.error(), "uncancelled pair " + i + ": " + pre.error());
          assertNull(dec.error(), "uncancelled pair " + i + ": " + dec.error());
          assertTrue(dec.tokens().length >= 1, "pair " + i + " generated nothing");
        }
      }
      assertQuiet(p, pc);
      assertQuiet(d, dc);
    } finally {
      cancels.shutdownNow();
    }
  }

  /**
   * The decode engine dies with rooms in flight: every prefill request ends with an error within
   * the transfer's silence and handshake bounds, and the prefill engine lets everything go.
   */
  @Test
  void shouldFailThePrefillHalvesAndLeakNothingWhenTheDecodeEngineDies() throws Exception {
    SplittableRandom rnd = new SplittableRandom(21);
    List<Job> jobs = jobs(rnd, 8);
    Checked pc = new Checked();
    try (Engine p = prefill(pc)) {
      List<RequestHandle> halves = new ArrayList<>();
      try (Engine d = decode(new Checked())) {
        InetSocketAddress kv = d.pdEndpoint().orElseThrow();
        for (int i = 0; i < jobs.size(); i++) {
          Job j = jobs.get(i);
          long room = rnd.nextLong() | 1;
          SamplingParams params = SamplingParams.greedy(j.maxTokens());
          if (i % 2 == 0) { // half of them registered on the decode side before it dies
            d.submit(j.prompt(), params, -1, new PdTicket.Decode(room));
          }
          halves.add(p.submit(j.prompt(), params, -1, new PdTicket.Prefill(room, kv)));
        }
      }
      int failed = 0;
      for (RequestHandle h : halves) {
        GenerationResult r = h.result().get(30, TimeUnit.SECONDS);
        if ("error".equals(r.finishReason())) {
          failed++;
        }
        // the decode engine cancelled its requests as it closed: no prefill half ends cancelled
        assertNotEquals("cancelled", r.finishReason(), r.error());
      }
      assertTrue(failed > 0, "no prefill half failed when its decode engine died");
      assertQuiet(p, pc);
    }
  }

  /**
   * The prefill engine closes with rooms in flight (some acknowledged, some sending): every prefill
   * half ends (an error or a cancellation, never a hang), every decode half ends within the
   * transfer's bounds, and the decode engine lets everything go.
   */
  @Test
  void shouldEndBothHalvesAndLeakNothingWhenThePrefillEngineCloses() throws Exception {
    SplittableRandom rnd = new SplittableRandom(61);
    List<Job> jobs = jobs(rnd, 8);
    Checked dc = new Checked();
    try (Engine d = decode(dc)) {
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      List<RequestHandle> prefills = new ArrayList<>();
      List<RequestHandle> decodes = new ArrayList<>();
      try (Engine p = prefill(new Checked())) {
        for (Job j : jobs) {
          long room = rnd.nextLong() | 1;
          SamplingParams params = SamplingParams.greedy(j.maxTokens());
          decodes.add(d.submit(j.prompt(), params, -1, new PdTicket.Decode(room)));
          prefills.add(p.submit(j.prompt(), params, -1, new PdTicket.Prefill(room, kv)));
        }
        Thread.sleep(rnd.nextInt(20));
      } // closes with whatever is in flight
      for (RequestHandle h : prefills) {
        assertNotNull(h.result().get(30, TimeUnit.SECONDS).finishReason());
      }
      for (RequestHandle h : decodes) {
        assertNotNull(h.result().get(30, TimeUnit.SECONDS).finishReason());
      }
      assertQuiet(d, dc);
    }
  }

  /**
   * Administrative operations with transfers in flight: both engines' caches are cleared (Device
   * and Host, every outstanding copy's publication voided) while pairs bootstrap, prefill, send and
   * land; every output still equals a fused engine's, and nothing is left held.
   */
  @Test
  void shouldGiveTheFusedOutputWhenCachesAreClearedWithTransfersInFlight() throws Exception {
    SplittableRandom rnd = new SplittableRandom(71);
    List<Job> jobs = jobs(rnd, 10);
    List<EngineTest.Run> fused = new ArrayList<>();
    Checked fc = new Checked();
    try (Engine e = start(PdOptions.FUSED, fc)) {
      for (Job j : jobs) {
        fused.add(fc.await(e.submit(j.prompt(), SamplingParams.greedy(j.maxTokens()))));
      }
    }
    Checked pc = new Checked();
    Checked dc = new Checked();
    try (Engine p = prefill(pc);
        Engine d = decode(dc)) {
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      List<RequestHandle[]> pairs = new ArrayList<>();
      List<java.util.concurrent.CompletableFuture<Void>> clears = new ArrayList<>();
      for (int i = 0; i < jobs.size(); i++) {
        Job j = jobs.get(i);
        long room = rnd.nextLong() | 1;
        SamplingParams params = SamplingParams.greedy(j.maxTokens());
        pairs.add(
            new RequestHandle[] {
              p.submit(j.prompt(), params, -1, new PdTicket.Prefill(room, kv)),
              d.submit(j.prompt(), params, -1, new PdTicket.Decode(room))
            });
        if (i % 3 == 1) {
          clears.add(p.clearCache());
          clears.add(d.clearCache());
        }
      }
      for (int i = 0; i < jobs.size(); i++) {
        pc.await(pairs.get(i)[0]);
        assertArrayEquals(
            fused.get(i).tokens(), dc.await(pairs.get(i)[1]).tokens(), "request " + i);
      }
      for (var c : clears) {
        c.get(30, TimeUnit.SECONDS);
      }
      assertQuiet(p, pc);
      assertQuiet(d, dc);
    }
  }

  @Test
  void shouldRefuseATicketThatTheEngineRoleDoesNotServe() throws Exception {
    int[] prompt = {1, 2, 3};
    SamplingParams params = SamplingParams.greedy(4);
    InetSocketAddress nowhere = new InetSocketAddress(InetAddress.getLoopbackAddress(), 9);
    try (Engine fused = start(PdOptions.FUSED, new Checked());
        Engine d = decode(new Checked());
        Engine p = prefill(new Checked())) {
      assertTrue(fused.pdEndpoint().isEmpty());
      assertTrue(fused.pdMetrics().isEmpty());
      assertError(fused.submit(prompt, params, -1, new PdTicket.Decode(5)), "is fused");
      assertError(d.submit(prompt, params, -1, new PdTicket.Prefill(5, nowhere)), "role is decode");
      assertError(p.submit(prompt, params, -1, new PdTicket.Decode(5)), "role is prefill");
      // a second request for a room that is expected already
      RequestHandle first = d.submit(prompt, params, -1, new PdTicket.Decode(7));
      assertError(d.submit(prompt, params, -1, new PdTicket.Decode(7)), "already expected");
      first.cancel();
      assertNotNull(first.result().get(10, TimeUnit.SECONDS).finishReason());
      // a decode half whose prefill half never comes fails after the bootstrap deadline (3 s)
      GenerationResult orphan =
          d.submit(prompt, params, -1, new PdTicket.Decode(10)).result().get(30, TimeUnit.SECONDS);
      assertNotNull(orphan.error());
      assertTrue(orphan.error().startsWith(PdTicket.PREFILL_NEVER_CAME), orphan.error());
      // a prefill half whose decode engine is not there fails, naming the address
      GenerationResult r =
          p.submit(prompt, params, -1, new PdTicket.Prefill(8, nowhere))
              .result()
              .get(30, TimeUnit.SECONDS);
      assertNotNull(r.error());
      assertTrue(r.error().contains(nowhere.toString()), r.error());
    }
  }

  /**
   * A decode half whose prompt differs from the prefill half's (say, another tokenizer) is refused
   * at the BOOTSTRAP: both halves fail, naming the difference.
   */
  @Test
  void shouldRefuseAPrefillWhosePromptDiffersFromTheDecodeRequest() throws Exception {
    SamplingParams params = SamplingParams.greedy(4);
    try (Engine p = prefill(new Checked());
        Engine d = decode(new Checked())) {
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      RequestHandle dec = d.submit(new int[] {1, 2, 3}, params, -1, new PdTicket.Decode(9));
      RequestHandle pre = p.submit(new int[] {1, 2, 4}, params, -1, new PdTicket.Prefill(9, kv));
      GenerationResult pr = pre.result().get(30, TimeUnit.SECONDS);
      GenerationResult dr = dec.result().get(30, TimeUnit.SECONDS);
      assertNotNull(pr.error());
      assertTrue(pr.error().contains("differs"), pr.error());
      assertNotNull(dr.error());
    }
  }

  /**
   * Both halves must compute KV the same way: after the decode engine's weights were updated (a new
   * weight version), a BOOTSTRAP of the prefill engine, still on the old ones, is refused; once the
   * prefill engine has the same version, the pair serves again.
   */
  @Test
  void shouldRefuseKvOfAnotherWeightVersion() throws Exception {
    SamplingParams params = SamplingParams.greedy(3);
    int[] prompt = {5, 6, 7, 8, 9};
    try (Engine p = prefill(new Checked());
        Engine d = decode(new Checked())) {
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      d.updateWeightVersion("2");
      RequestHandle dec = d.submit(prompt, params, -1, new PdTicket.Decode(21));
      RequestHandle pre = p.submit(prompt, params, -1, new PdTicket.Prefill(21, kv));
      GenerationResult pr = pre.result().get(30, TimeUnit.SECONDS);
      assertNotNull(pr.error());
      assertTrue(pr.error().contains("identity digests differ"), pr.error());
      assertNotNull(dec.result().get(30, TimeUnit.SECONDS).error());
      p.updateWeightVersion("2");
      RequestHandle dec2 = d.submit(prompt, params, -1, new PdTicket.Decode(22));
      RequestHandle pre2 = p.submit(prompt, params, -1, new PdTicket.Prefill(22, kv));
      assertNull(pre2.result().get(30, TimeUnit.SECONDS).error());
      assertNull(dec2.result().get(30, TimeUnit.SECONDS).error());
    }
  }

  private static void assertError(RequestHandle h, String fragment) throws Exception {
    GenerationResult r = h.result().get(10, TimeUnit.SECONDS);
    assertNotNull(r.error(), "no error for " + fragment);
    assertTrue(r.error().contains(fragment), r.error());
  }

  /**
   * Within a bound: no request in the loop, no Device or Host reference held (published blocks are
   * cached, unreferenced), no room open on the transport; and no invariant broke in any round.
   */
  private static void assertQuiet(Engine e, Checked checks) throws Exception {
    waitFor(
        () -> {
          EngineMetrics m = e.metrics();
          return e.stats().activeRequests() == 0
              && m.device().usedParents() == 0
              && m.host().usedParents() == 0
              && e.pdMetrics().orElseThrow().roomsOpen() == 0
              && e.pdMetrics().orElseThrow().registrationsWaiting() == 0;
        },
        () ->
            e.role()
                + " engine not quiet: "
                + e.stats()
                + " "
                + e.metrics()
                + " "
                + e.pdMetrics().orElseThrow());
    if (!checks.broken.isEmpty()) {
      AssertionError a = new AssertionError(e.role() + ": an invariant broke");
      checks.broken.forEach(a::addSuppressed);
      throw a;
    }
  }

  private static void waitFor(BooleanSupplier done, java.util.function.Supplier<String> what)
      throws InterruptedException {
    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    while (!done.getAsBoolean()) {
      if (System.nanoTime() > until) {
        fail(what.get());
      }
      Thread.sleep(20);
    }
  }
}

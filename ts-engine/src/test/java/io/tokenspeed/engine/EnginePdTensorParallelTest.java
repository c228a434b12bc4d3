package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.pd.PdSecret;
import io.tokenspeed.pd.PdSettings;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Disaggregated serving between replicas of different tensor-parallel sizes (docs/pd.md, "Tensor
 * parallelism"): a prefill replica of {@code p} ranks feeds a decode replica of {@code d} ranks,
 * each rank of either side a real engine joined to its replica by the control-plane mesh on
 * loopback, and every pair of ranks whose KV heads meet moves its share over its own room. The
 * greedy output of every request equals a single-rank fused engine's, for full-history attention
 * (Llama, Qwen2: KV heads split over the ranks), sliding windows with one KV head held by every
 * rank (Gemma 3) and a State group replicated on every rank beside attention (Jamba); afterwards
 * nothing is held on any rank of either side.
 */
class EnginePdTensorParallelTest {
  private static final PdSecret SECRET = PdSecret.generate();

  @TempDir Path dir;

  private static PdSettings settings() {
    return PdSettings.defaults().withTimingsMs(5_000, 10_000, 200, 10_000);
  }

  private static PdOptions decodeOptions() {
    return PdOptions.decode(
        SECRET, settings(), new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
  }

  @ParameterizedTest(name = "{0}: prefill TP={1} -> decode TP={2}")
  @CsvSource({
    "llama, 2, 1",
    "llama, 1, 2",
    "llama, 2, 2",
    "qwen2, 2, 1",
    "gemma3, 2, 1",
    "gemma3, 1, 2",
    "jamba, 2, 1",
    "jamba, 1, 2"
  })
  void shouldGiveTheSingleRankOutputAcrossSplits(String fixture, int prefillTp, int decodeTp)
      throws Exception {
    Path folder = Fixtures.extract(fixture, dir);
    SplittableRandom rnd =
        new SplittableRandom(fixture.hashCode() * 31L + prefillTp * 7L + decodeTp);
    List<int[]> prompts = new ArrayList<>();
    List<int[]> want = new ArrayList<>();
    try (CausalLm model = CausalLm.load(folder);
        Engine fused = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      for (int i = 0; i < 5; i++) {
        prompts.add(rnd.ints(6 + rnd.nextInt(40), 0, model.vocabSize()).toArray());
      }
      for (int[] p : prompts) {
        want.add(result(fused.submit(p, SamplingParams.greedy(8).withIgnoreEos(true))));
      }
    }
    List<Checked> prefillChecks = new ArrayList<>();
    List<Checked> decodeChecks = new ArrayList<>();
    try (Side prefill = side(folder, prefillTp, true, prefillChecks);
        Side decode = side(folder, decodeTp, false, decodeChecks)) {
      List<InetSocketAddress> kv = decode.endpoints();
      assertEquals(decodeTp, kv.size(), "every decode rank's KV endpoint is known");
      List<RequestHandle[]> pairs = new ArrayList<>();
      for (int[] p : prompts) {
        long room = rnd.nextLong() | 1;
        SamplingParams params = SamplingParams.greedy(8).withIgnoreEos(true);
        pairs.add(
            new RequestHandle[] {
              decode.leader().submit(p, params, -1, new PdTicket.Decode(room, prefillTp)),
              prefill.leader().submit(p, params, -1, new PdTicket.Prefill(room, kv))
            });
      }
      for (int i = 0; i < prompts.size(); i++) {
        int[] got = result(pairs.get(i)[0]);
        GenerationResult pre = pairs.get(i)[1].result().get(60, TimeUnit.SECONDS);
        assertNull(pre.error(), () -> "prefill half: " + pre.error());
        assertArrayEquals(
            want.get(i), got, fixture + " " + prefillTp + " -> " + decodeTp + " request " + i);
      }
      prefill.assertQuiet(prefillChecks);
      decode.assertQuiet(decodeChecks);
      // idle replicas (rounds with no event for a while), then the same prompts again one by one:
      // the prefill side now reuses its cached prefixes, the output is the same
      Thread.sleep(1_500);
      for (int i = 0; i < 2; i++) {
        long room = rnd.nextLong() | 1;
        SamplingParams params = SamplingParams.greedy(8).withIgnoreEos(true);
        RequestHandle dec =
            decode
                .leader()
                .submit(prompts.get(i), params, -1, new PdTicket.Decode(room, prefillTp));
        RequestHandle pre =
            prefill.leader().submit(prompts.get(i), params, -1, new PdTicket.Prefill(room, kv));
        assertArrayEquals(want.get(i), result(dec), "after idling, request " + i);
        assertNull(pre.result().get(60, TimeUnit.SECONDS).error());
      }
      prefill.assertQuiet(prefillChecks);
      decode.assertQuiet(decodeChecks);
    }
  }

  /**
   * Halves cancelled at random moments (before the ACK, during the transfer, while decoding) on
   * replicas of different splits: every handle ends, none with an error (the other half of a
   * cancelled one ends cancelled, whichever rank's pair heard of it), every uncancelled pair still
   * gets the single-rank output, and afterwards no rank of either side holds a request, a room or a
   * block.
   */
  @ParameterizedTest(name = "seed={0}: prefill TP={1} -> decode TP={2}")
  @CsvSource({"31, 2, 1", "32, 1, 2", "33, 2, 2"})
  void shouldLeakNothingWhenHalvesAreCancelledAcrossSplits(long seed, int prefillTp, int decodeTp)
      throws Exception {
    Path folder = Fixtures.extract("llama", dir);
    SplittableRandom rnd = new SplittableRandom(seed);
    List<int[]> prompts = new ArrayList<>();
    List<int[]> want = new ArrayList<>();
    try (CausalLm model = CausalLm.load(folder);
        Engine fused = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      for (int i = 0; i < 12; i++) {
        prompts.add(rnd.ints(6 + rnd.nextInt(60), 0, model.vocabSize()).toArray());
        want.add(
            result(fused.submit(prompts.get(i), SamplingParams.greedy(24).withIgnoreEos(true))));
      }
    }
    List<Checked> prefillChecks = new ArrayList<>();
    List<Checked> decodeChecks = new ArrayList<>();
    ExecutorService cancels = Executors.newFixedThreadPool(4);
    try (Side prefill = side(folder, prefillTp, true, prefillChecks);
        Side decode = side(folder, decodeTp, false, decodeChecks)) {
      List<InetSocketAddress> kv = decode.endpoints();
      List<RequestHandle[]> pairs = new ArrayList<>();
      List<Integer> actions = new ArrayList<>();
      for (int[] p : prompts) {
        long room = rnd.nextLong() | 1;
        SamplingParams params = SamplingParams.greedy(24).withIgnoreEos(true);
        RequestHandle[] pair = {
          prefill.leader().submit(p, params, -1, new PdTicket.Prefill(room, kv)),
          decode.leader().submit(p, params, -1, new PdTicket.Decode(room, prefillTp))
        };
        pairs.add(pair);
        int action = rnd.nextInt(4); // 0 none, 1 prefill half, 2 decode half, 3 both
        actions.add(action);
        long delayMs = rnd.nextInt(40);
        if (action != 0) {
          cancels.execute(
              () -> {
                try {
                  Thread.sleep(delayMs);
                } catch (InterruptedException e) {
                  return;
                }
                if (action != 2) {
                  pair[0].cancel();
                }
                if (action != 1) {
                  pair[1].cancel();
                }
              });
        }
      }
      for (int i = 0; i < pairs.size(); i++) {
        GenerationResult pre = pairs.get(i)[0].result().get(60, TimeUnit.SECONDS);
        GenerationResult dec = pairs.get(i)[1].result().get(60, TimeUnit.SECONDS);
        // a half whose other half's client cancelled ends cancelled (or finished), never failed
        String what = "seed " + seed + " pair " + i + " (action " + actions.get(i) + ")";
        assertNotEquals("error", pre.finishReason(), what + ", the prefill half: " + pre.error());
        assertNotEquals("error", dec.finishReason(), what + ", the decode half: " + dec.error());
        if (actions.get(i) == 0) {
          assertNull(pre.error(), "uncancelled pair " + i + ": " + pre.error());
          assertNull(dec.error(), "uncancelled pair " + i + ": " + dec.error());
          assertArrayEquals(want.get(i), dec.tokens(), "seed " + seed + " pair " + i);
        }
      }
      prefill.assertQuiet(prefillChecks);
      decode.assertQuiet(decodeChecks);
    } finally {
      cancels.shutdownNow();
    }
  }

  private static int[] result(RequestHandle h) throws Exception {
    GenerationResult r = h.result().get(60, TimeUnit.SECONDS);
    assertNull(r.error(), () -> "request " + h.id() + " failed: " + r.error());
    return r.tokens();
  }

  /** One side: a single engine, or a replica of several ranks. */
  private record Side(TpReplica replica, CausalLm model, Engine single) implements AutoCloseable {
    Engine leader() {
      return single != null ? single : replica.leader();
    }

    List<Engine> engines() {
      return single != null ? List.of(single) : replica.engines;
    }

    /** Every rank's KV endpoint, once the ranks agreed on them. */
    List<InetSocketAddress> endpoints() throws InterruptedException {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
      while (leader().pdEndpoints().isEmpty() && System.nanoTime() < deadline) {
        Thread.sleep(10);
      }
      return leader().pdEndpoints();
    }

    /** Nothing held on any rank: no request, no room, no registration, no PD block. */
    void assertQuiet(List<Checked> checks) throws Exception {
      for (Engine e : engines()) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!(e.stats().activeRequests() == 0
                && e.pdMetrics().orElseThrow().roomsOpen() == 0
                && e.pdMetrics().orElseThrow().registrationsWaiting() == 0
                && e.pdHeldBlocks() == 0)
            && System.nanoTime() < deadline) {
          Thread.sleep(10);
        }
        assertEquals(0, e.stats().activeRequests(), e.role() + " rank " + e.tpRank() + " active");
        assertEquals(
            0,
            e.pdMetrics().orElseThrow().roomsOpen(),
            e.role() + " rank " + e.tpRank() + " rooms");
        assertEquals(0, e.pdHeldBlocks(), e.role() + " rank " + e.tpRank() + " PD blocks held");
      }
      for (Checked c : checks) {
        assertTrue(c.broken.isEmpty(), () -> "invariants broken: " + c.broken);
      }
    }

    @Override
    public void close() {
      if (replica != null) {
        replica.close();
      }
      if (single != null) {
        single.close();
        model.close();
      }
    }
  }

  private static Side side(Path folder, int tp, boolean prefill, List<Checked> checks)
      throws Exception {
    if (tp == 1) {
      Checked c = new Checked();
      checks.add(c);
      // the model id TpReplica gives its ranks: the identity digest names it
      CausalLm model = CausalLm.load(folder, "tp-test", ModelIdentity.DEFAULT_WEIGHT_VERSION);
      Engine e =
          Engine.start(
              EngineSettings.of(model, EngineTest.small(256))
                  .observer(c)
                  .pd(prefill ? PdOptions.prefill(SECRET, settings()) : decodeOptions())
                  .conclude());
      return new Side(null, model, e);
    }
    for (int r = 0; r < tp; r++) {
      checks.add(new Checked());
    }
    TpReplica replica =
        TpReplica.start(
            folder,
            tp,
            r -> EngineTest.small(256),
            r -> null,
            checks::get,
            Shard.KvSplit.HEADS,
            r -> prefill ? PdOptions.prefill(SECRET, settings()) : decodeOptions());
    return new Side(replica, null, null);
  }
}

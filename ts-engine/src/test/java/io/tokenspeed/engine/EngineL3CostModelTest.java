package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.CostFigures;
import io.tokenspeed.engine.EngineTest.Recorder;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.ThrottledStore;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.Bypass;
import io.tokenspeed.scheduler.CostModel;
import io.tokenspeed.scheduler.StorageConfig;
import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * The cost model under a real engine on the CPU: a store that reads at a fixed rate far below what
 * recomputing the restored tokens would take. The engine's first restore is issued (nothing is
 * measured yet) and teaches it the store's rate and its own prefill rate; from then on prompts
 * whose prefixes the store holds are bypassed with reason {@code slower_than_compute} and computed,
 * their outputs equal to a recomputation. With the model off the same store is read, as before. A
 * tensor-parallel replica decides alike on every rank (its exchange compares the ranks' plans every
 * round, so a rank that decided otherwise would stop the replica).
 *
 * <p>The assertions are decisions and outputs, not timings: the store is slow enough that any
 * machine computes the prompts' few dozen tokens faster than it reads them.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineL3CostModelTest {
  private static final int LEARN_TOKENS = 40;
  private static final int PREFIX_TOKENS = 80;
  private static final int SUFFIX_TOKENS = 8;

  /** How long the learning prompt's restore takes at the throttled rate. */
  private static final double LEARN_RESTORE_SECONDS = 0.4;

  private Path folder;
  private CausalLm model;

  @BeforeAll
  void load(@TempDir Path dir) throws Exception {
    folder = Fixtures.extract("llama", dir);
    model = CausalLm.load(folder);
  }

  @AfterAll
  void close() {
    model.close();
  }

  /** A cost model that bypasses a slow store at once: no exploration while the test runs. */
  private static L3Settings settings(Store store, boolean costModel) {
    StorageConfig scheduling =
        StorageConfig.defaults()
            .withMinExtensionTokens(4)
            .withSoftDeadlineMs(60_000)
            .withCostModel(costModel, 10, 0, 0);
    return new L3Settings(
        store,
        new StorageRuntimeConfig(scheduling, L3ExecutorConfig.defaults()),
        L3Settings.CPU_ATTENTION_BACKEND);
  }

  /** Prompts: [0] the learning prompt's prefix, [1..3] the cohort's prefixes. */
  private int[][] prefixes(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int[][] out = new int[4][];
    out[0] = rnd.ints(LEARN_TOKENS, 0, model.vocabSize()).toArray();
    for (int i = 1; i < 4; i++) {
      out[i] = rnd.ints(PREFIX_TOKENS, 0, model.vocabSize()).toArray();
    }
    return out;
  }

  private int[] extend(int[] prefix, long seed) {
    return EngineL3Test.extend(
        prefix, prefix.length + SUFFIX_TOKENS, model.vocabSize(), new SplittableRandom(seed));
  }

  private static Run serve(Engine e, Recorder rec, int[] prompt) throws Exception {
    return EngineTest.await(e.submit(prompt, SamplingParams.greedy(4)), rec);
  }

  /** Writes every prefix through one engine over {@code store} (its close puts them). */
  private void write(Store store, int[][] prefixes) throws Exception {
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(rec)
                .l3(EngineL3Test.l3(store))
                .conclude())) {
      for (int[] p : prefixes) {
        serve(e, rec, p);
      }
    }
  }

  /** The rate at which the learning prompt's prefix takes {@link #LEARN_RESTORE_SECONDS}. */
  private static double rate(Engine e) {
    CostModel bytes = new CostModel(StorageConfig.defaults(), e.layout());
    return bytes.ownerBytes(0, LEARN_TOKENS) / LEARN_RESTORE_SECONDS;
  }

  /** The engine's cost figures once it knows both the store and its prefill (or fails). */
  static EngineMetrics.Costs awaitMeasured(Engine e) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    while (true) {
      EngineMetrics.Costs c = e.metrics().storage().orElseThrow().transfers().costs();
      CostFigures f = c.figures();
      if (f.storeKnown() && f.prefillKnown()) {
        return c;
      }
      if (System.nanoTime() > deadline) {
        throw new AssertionError("the engine never measured its costs: " + f);
      }
      Thread.sleep(20);
    }
  }

  /** The engine's cost model figures once its metrics count {@code minBypasses} (or 10 s). */
  private static EngineMetrics.Costs costsAfter(Engine e, long minBypasses) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (true) {
      EngineMetrics.Costs c = e.metrics().storage().orElseThrow().transfers().costs();
      if (c.bypasses().get(Bypass.SLOWER_THAN_COMPUTE) >= minBypasses
          || System.nanoTime() > deadline) {
        return c;
      }
      Thread.sleep(20);
    }
  }

  @Test
  void shouldBypassAStoreSlowerThanComputeOnceMeasuredAndMatchRecomputation() throws Exception {
    int[][] prefixes = prefixes(11);
    EngineL3Test.SharedStore shared = new EngineL3Test.SharedStore();
    write(shared, prefixes);
    int[][] cohort = new int[3][];
    Run[] want = new Run[3];
    try (Engine off = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      Recorder rec = new Recorder();
      for (int i = 0; i < 3; i++) {
        cohort[i] = extend(prefixes[i + 1], 100 + i);
        want[i] = serve(off, rec, cohort[i]);
      }
    }
    Recorder rec = new Recorder();
    ThrottledStore slow;
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(rec)
                .l3(settings(slow = throttled(shared, model), true))
                .conclude())) {
      Run learn = serve(e, rec, extend(prefixes[0], 7));
      assertTrue(
          learn.result().metrics().reusedStorageTokens() > 0,
          "cold, the model decides nothing: the first restore is issued and measured, "
              + learn.result().metrics());
      EngineMetrics.Costs measured = awaitMeasured(e);
      assertTrue(
          measured.breakEvenBytesPerSecond() > slow.bytesPerSecond(),
          "the store reads below break-even: " + measured);
      long getsBefore = shared.gets.get();
      for (int i = 0; i < 3; i++) {
        Run got = serve(e, rec, cohort[i]);
        assertArrayEquals(want[i].tokens(), got.tokens(), "prompt " + i + " vs recomputation");
        assertEquals(
            0, got.result().metrics().reusedStorageTokens(), "bypassed: " + got.result().metrics());
      }
      assertEquals(getsBefore, shared.gets.get(), "no GET after learning");
      EngineMetrics.Costs c = costsAfter(e, 3);
      assertEquals(3, c.bypasses().get(Bypass.SLOWER_THAN_COMPUTE), c.toString());
      assertEquals(0, c.bypasses().get(Bypass.PRESSURE));
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  @Test
  void shouldReadTheSlowStoreAsBeforeWithTheModelOff() throws Exception {
    int[][] prefixes = prefixes(12);
    EngineL3Test.SharedStore shared = new EngineL3Test.SharedStore();
    write(shared, prefixes);
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(rec)
                .l3(settings(throttled(shared, model), false))
                .conclude())) {
      serve(e, rec, extend(prefixes[0], 7));
      Run got = serve(e, rec, extend(prefixes[1], 8));
      assertEquals(
          PREFIX_TOKENS,
          got.result().metrics().reusedStorageTokens(),
          "off: the fixed rules restore whatever the store costs");
      EngineMetrics.Costs c = e.metrics().storage().orElseThrow().transfers().costs();
      assertEquals(0, c.bypasses().get(Bypass.SLOWER_THAN_COMPUTE));
      assertEquals(CostFigures.UNKNOWN, c.figures(), "off: no figures are sent or agreed");
    }
  }

  @Test
  void shouldDecideAlikeOnEveryRankOfAReplica() throws Exception {
    int[][] prefixes = prefixes(13);
    MemoryStore shared = new MemoryStore();
    var writers = new ConcurrentHashMap<Integer, EngineTensorParallelFaultsTest.RankClient>();
    try (TpReplica a =
        TpReplica.start(
            folder,
            2,
            EngineTest.small(256),
            r ->
                settings(
                    writers.computeIfAbsent(
                        r, k -> new EngineTensorParallelFaultsTest.RankClient(shared)),
                    true))) {
      for (int[] p : prefixes) {
        a.leader().submit(p, SamplingParams.greedy(4)).result().get(60, TimeUnit.SECONDS);
      }
      a.awaitStorageIdle();
    }
    int[] want;
    int[] prompt = extend(prefixes[1], 9);
    double rate;
    try (Engine single = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      want =
          single
              .submit(prompt, SamplingParams.greedy(4))
              .result()
              .get(60, TimeUnit.SECONDS)
              .tokens();
      rate = rate(single); // a rank reads about half of a single engine's bytes
    }
    try (TpReplica b =
        TpReplica.start(
            folder,
            2,
            EngineTest.small(256),
            r ->
                settings(
                    new ThrottledStore(
                        new EngineTensorParallelFaultsTest.RankClient(shared), rate / 2),
                    true))) {
      GenerationResult learn =
          b.leader()
              .submit(extend(prefixes[0], 7), SamplingParams.greedy(4))
              .result()
              .get(60, TimeUnit.SECONDS);
      assertTrue(learn.metrics().reusedStorageTokens() > 0, "the first restore is issued");
      awaitMeasured(b.leader());
      GenerationResult r =
          b.leader().submit(prompt, SamplingParams.greedy(4)).result().get(60, TimeUnit.SECONDS);
      assertArrayEquals(want, r.tokens(), "bypassed replica vs TP=1");
      assertEquals(0, r.metrics().reusedStorageTokens(), "bypassed: " + r.metrics());
      for (Engine rank : b.engines) {
        assertEquals(
            1,
            costsAfter(rank, 1).bypasses().get(Bypass.SLOWER_THAN_COMPUTE),
            "rank " + rank.tpRank() + " decided as the leader did");
      }
    }
  }

  private static ThrottledStore throttled(Store inner, CausalLm model) throws Exception {
    try (Engine e = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      return new ThrottledStore(inner, rate(e));
    }
  }
}

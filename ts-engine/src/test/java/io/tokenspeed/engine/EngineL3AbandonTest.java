package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.CostFigures;
import io.tokenspeed.engine.EngineL3Test.SharedStore;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.CostModel;
import io.tokenspeed.scheduler.StorageConfig;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * A restore abandoned under a real engine on the CPU: the store reads fast while the engine learns
 * its costs, then turns slow with two restores chosen under fast figures in flight. The short one's
 * read is let through after a while; its time teaches the engine that the store is now far slower
 * (figures sent at once: the bandwidth fell by more than half), and under the new figures the rest
 * of the long one's read (held in the store) outlasts recomputing its prefix: its request stops
 * waiting ({@code slower_than_compute}) and computes while its GET is still held. Both outputs
 * equal a recomputation, bit for bit, on the untied model of {@link ContextModels}; once the
 * detached GET is let go and the engine is idle, no credit, Ready hold or Host or Device reference
 * is left, and the detached read published nothing.
 *
 * <p>The figures the two restores are chosen under are the store's as measured, with a prefill of a
 * millisecond a token set by the test: the engine's own fit of a tiny model's first forwards swings
 * between a per-token and a per-forward cost, and under the latter it rightly computes a short
 * prompt. Any figures the engine sends meanwhile still choose both restores (they fit one forward's
 * tokens), and the abandonment itself follows the engine's own figures.
 *
 * <p>No assertion is a timing: the long request is served while its read is still held in the
 * store, which only the abandonment (the soft deadline is an hour) lets happen. How long the short
 * read is held follows from the figures: long enough that the long read's rest is several times its
 * recomputation.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineL3AbandonTest {
  /** The first restore's prefix: small, so the slow read outweighs it in the moving average. */
  private static final int LEARN_TOKENS = 8;

  private static final int SHORT_TOKENS = 40;
  private static final int LONG_TOKENS = 400; // ten times the short prefix's bytes
  private static final int SUFFIX_TOKENS = 8;

  private CausalLm model;

  @BeforeAll
  void load(@TempDir Path dir) {
    model = ContextModels.llama(dir);
  }

  @AfterAll
  void close() {
    model.close();
  }

  /**
   * A store whose GETs, once {@link #slow} is set, are held inside it until the test lets each go;
   * until then they pass straight through, as queries and writes always do.
   */
  static final class TurningStore extends ForwardingStore {
    record Held(int keys, CountDownLatch release) {}

    final List<Held> held = new CopyOnWriteArrayList<>();
    volatile boolean slow;

    TurningStore(Store inner) {
      super(inner);
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      if (slow) {
        Held h = new Held(keys.size(), new CountDownLatch(1));
        held.add(h);
        h.release().await();
      }
      return super.get(keys, destinations);
    }

    void releaseAll() {
      slow = false;
      held.forEach(h -> h.release().countDown());
    }
  }

  private static L3Settings settings(Store store) {
    StorageConfig scheduling =
        StorageConfig.defaults()
            .withMinExtensionTokens(4)
            .withSoftDeadlineMs(3_600_000) // only the cost model ends a wait here
            .withCostModel(true, 10, 0, 0);
    return new L3Settings(
        store,
        new StorageRuntimeConfig(scheduling, L3ExecutorConfig.defaults()),
        L3Settings.CPU_ATTENTION_BACKEND);
  }

  private int[] extend(int[] prefix, long seed) {
    return EngineL3Test.extend(
        prefix, prefix.length + SUFFIX_TOKENS, model.vocabSize(), new SplittableRandom(seed));
  }

  private static void awaitTrue(String what, BooleanSupplier condition) throws Exception {
    awaitTrue(() -> what, condition);
  }

  private static void awaitTrue(Supplier<String> what, BooleanSupplier condition) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("never: " + what.get());
      }
      Thread.sleep(5);
    }
  }

  @Test
  void shouldAbandonARestoreTheSlowedStoreLosesAndServeItByRecomputation() throws Exception {
    SplittableRandom rnd = new SplittableRandom(21);
    int[] learn = rnd.ints(LEARN_TOKENS, 0, model.vocabSize()).toArray();
    int[] shortPrefix = rnd.ints(SHORT_TOKENS, 0, model.vocabSize()).toArray();
    int[] longPrefix = rnd.ints(LONG_TOKENS, 0, model.vocabSize()).toArray();
    SharedStore shared = new SharedStore();
    try (Engine writer =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .l3(EngineL3Test.l3(shared))
                .conclude())) {
      for (int[] p : List.of(learn, shortPrefix, longPrefix)) {
        writer.submit(p, SamplingParams.greedy(4)).result().get(60, TimeUnit.SECONDS);
      }
      awaitTrue("the prefixes written through", () -> !busy(writer));
    }
    int[] shortPrompt = extend(shortPrefix, 1);
    int[] longPrompt = extend(longPrefix, 2);
    Run wantShort;
    Run wantLong;
    Checked alone = new Checked();
    try (Engine off =
        Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(alone).conclude())) {
      wantShort = alone.await(off.submit(shortPrompt, SamplingParams.greedy(4)));
      wantLong = alone.await(off.submit(longPrompt, SamplingParams.greedy(4)));
    }
    assertTrue(alone.broken.isEmpty(), () -> alone.broken.toString());

    TurningStore store = new TurningStore(shared);
    EngineL3WorkloadTest.Observer obs = new EngineL3WorkloadTest.Observer();
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(obs)
                .l3(settings(store))
                .conclude())) {
      try {
        Run learned = obs.await(e.submit(extend(learn, 3), SamplingParams.greedy(4)));
        assertTrue(
            learned.result().metrics().reusedStorageTokens() > 0,
            "cold, the first restore is issued and measured: " + learned.result().metrics());
        EngineMetrics.Costs fast = awaitStoreMeasured(e);
        CostFigures choosing =
            new CostFigures(
                fast.figures().storeLatencyNs(), fast.figures().storeBytesPerSecond(), 0, 1e6, 0);
        e.command(Replica.Command.costFigures(choosing)).get(10, TimeUnit.SECONDS);

        store.slow = true;
        RequestHandle shortHandle = e.submit(shortPrompt, SamplingParams.greedy(4));
        RequestHandle longHandle = e.submit(longPrompt, SamplingParams.greedy(4));
        awaitTrue(
            () ->
                "both restores read from the store: "
                    + store.held
                    + " "
                    + e.storageTransferManager().counters()
                    + " "
                    + fast,
            () -> store.held.size() == 2);
        TurningStore.Held shortRead =
            store.held.stream().min((a, b) -> Integer.compare(a.keys(), b.keys())).orElseThrow();
        TurningStore.Held longRead =
            store.held.stream().max((a, b) -> Integer.compare(a.keys(), b.keys())).orElseThrow();
        assertTrue(longRead.keys() > 5 * shortRead.keys(), shortRead + " " + longRead);

        // Held for D, the short read (a fifth of the moving average, the 8-token read the rest)
        // teaches a bandwidth at which the long read takes about 5.6 D: its rest, about 4.6 D, is
        // several times what computing the long prompt takes under the figures agreed now.
        CostModel m = e.storageTransferManager().costModel();
        double computeLongNs = m.prefillNs(0, longPrompt.length);
        long holdMs = Math.max(1_000, (long) (2 * computeLongNs / 1e6));
        Thread.sleep(holdMs);
        shortRead.release().countDown();

        awaitTrue(
            "the long restore abandoned",
            () -> e.metrics().storage().orElseThrow().transfers().costs().abandoned() >= 1);
        Run gotLong = obs.await(longHandle);
        assertEquals(1, longRead.release().getCount(), "served while its read is still held");
        Run gotShort = obs.await(shortHandle);
        EngineTest.assertSame(wantShort, gotShort, "the restored request");
        EngineTest.assertSame(wantLong, gotLong, "the abandoned request");
        assertEquals(
            SHORT_TOKENS,
            gotShort.result().metrics().reusedStorageTokens(),
            "restored: " + gotShort.result().metrics());
        assertEquals(
            0,
            gotLong.result().metrics().reusedStorageTokens(),
            "computed: " + gotLong.result().metrics());
        EngineMetrics.Costs slowed = e.metrics().storage().orElseThrow().transfers().costs();
        assertEquals(1, slowed.abandoned(), slowed.toString());
        CostFigures f = slowed.figures();
        assertTrue(
            f.storeBytesPerSecond() < fast.figures().storeBytesPerSecond() / 2,
            "the store's new figures: " + f + " after " + fast.figures());

        long published = e.storageTransferManager().counters().publishedBlocks(); // both served
        store.releaseAll(); // the detached GET returns, every row read
        awaitTrue("L3 work drained", () -> !busy(e));
        CompletableFuture<List<String>> baseline = new CompletableFuture<>();
        obs.baseline = baseline;
        e.cancel(Long.MAX_VALUE); // no such request: the idle loop runs one round, which checks
        List<String> off = baseline.get(10, TimeUnit.SECONDS);
        assertTrue(off.isEmpty(), off.toString());
        assertEquals(
            published,
            e.storageTransferManager().counters().publishedBlocks(),
            "the detached read published nothing");
      } finally {
        store.releaseAll(); // before the engine closes: no call is left inside the store
      }
    }
    assertTrue(obs.broken.isEmpty(), () -> obs.broken.toString());
  }

  /** The engine's agreed figures once they know the store (its first restore measured). */
  private static EngineMetrics.Costs awaitStoreMeasured(Engine e) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    while (true) {
      EngineMetrics.Costs c = e.metrics().storage().orElseThrow().transfers().costs();
      if (c.figures().storeKnown()) {
        return c;
      }
      if (System.nanoTime() > deadline) {
        throw new AssertionError("the engine never measured its store: " + c.figures());
      }
      Thread.sleep(5);
    }
  }

  private static boolean busy(Engine e) {
    try {
      return e.storageBusyNow();
    } catch (Exception x) {
      throw new IllegalStateException(x);
    }
  }
}

package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * Owner agreement at TP = 2 under faults on one rank (ranks as threads, the real mesh): a GET that
 * fails on one owner publishes nothing even where the other owner read its rows; a store that
 * stalls past the soft deadline on one owner makes both fall back together; pressure on one owner
 * closes the gate on both. Outputs always equal recomputation.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineTensorParallelFaultsTest {
  @TempDir static Path dir;
  private Path folder;
  private int[] prompt;
  private int[] want;
  private final MemoryStore written = new MemoryStore();

  /**
   * One rank's client of a shared memory store: counts its calls, records the keys it read and
   * wrote, carries the faults a test switches on, and never closes the store.
   */
  static class RankClient extends ForwardingStore {
    final AtomicInteger queries = new AtomicInteger();
    final AtomicInteger okGets = new AtomicInteger();
    final AtomicInteger puts = new AtomicInteger();
    final List<String> keys = new java.util.concurrent.CopyOnWriteArrayList<>();

    /** Keys of the PUTs that reached the store, in order. */
    final List<String> putKeys = new java.util.concurrent.CopyOnWriteArrayList<>();

    /** GET and PUT calls that entered this client (before any gate). */
    final AtomicInteger getsEntered = new AtomicInteger();

    final AtomicInteger putsEntered = new AtomicInteger();
    volatile boolean failGets;
    volatile boolean failDeletes;
    volatile long getDelayMs;
    volatile CountDownLatch getGate;
    volatile CountDownLatch putGate;

    /** Holds existence queries (counted before they wait) while set. */
    volatile CountDownLatch queryGate;

    RankClient(Store shared) {
      super(shared);
    }

    @Override
    public StoreResult exists(List<String> keys) throws Exception {
      queries.incrementAndGet();
      pass(queryGate);
      return super.exists(keys);
    }

    /** Waits at {@code gate} while one is set. */
    private static void pass(CountDownLatch gate) throws InterruptedException {
      if (gate != null) {
        gate.await();
      }
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      getsEntered.incrementAndGet();
      pass(getGate);
      if (failGets) {
        throw new IOException("GET refused on this rank by the test");
      }
      if (getDelayMs > 0) {
        Thread.sleep(getDelayMs);
      }
      StoreResult r = super.get(keys, destinations);
      for (RowResult row : r.rows()) {
        if (row instanceof RowResult.Ok) {
          okGets.incrementAndGet();
        }
      }
      this.keys.addAll(keys);
      return r;
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      putsEntered.incrementAndGet();
      pass(putGate);
      puts.incrementAndGet();
      this.keys.addAll(keys);
      putKeys.addAll(keys);
      return super.put(keys, sources);
    }

    @Override
    public io.tokenspeed.l3.spi.NamespaceDeletion purgeNamespace(String namespace)
        throws Exception {
      // the engine deletes through purgeNamespace: route it through this deleteNamespace
      return io.tokenspeed.l3.spi.NamespaceDeletion.complete(deleteNamespace(namespace));
    }

    @Override
    public long deleteNamespace(String namespace) throws Exception {
      if (failDeletes) {
        throw new IOException("namespace deletion refused by the test");
      }
      return super.deleteNamespace(namespace);
    }

    @Override
    public void close() {} // shared: the test owns the store
  }

  @BeforeAll
  void writePrefix() throws Exception {
    folder = Fixtures.extract("llama", dir);
    try (CausalLm model = CausalLm.load(folder);
        Engine single = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      prompt = new SplittableRandom(53).ints(81, 0, model.vocabSize()).toArray();
      want =
          single
              .submit(prompt, SamplingParams.greedy(8))
              .result()
              .get(60, TimeUnit.SECONDS)
              .tokens();
    }
    RankClient[] writers = {new RankClient(written), new RankClient(written)};
    try (TpReplica a =
        TpReplica.start(
            folder, 2, EngineTest.small(256), r -> EngineL3FaultsTest.settings(writers[r]))) {
      assertArrayEquals(want, serve(a), "writer vs TP=1");
      a.awaitStorageIdle();
    }
  }

  private int[] serve(TpReplica replica) throws Exception {
    GenerationResult r =
        replica
            .leader()
            .submit(prompt, SamplingParams.greedy(8))
            .result()
            .get(60, TimeUnit.SECONDS);
    assertEquals(null, r.error(), r::error);
    last = r;
    return r.tokens();
  }

  private GenerationResult last;

  @Test
  void shouldPublishNothingWhenOneOwnersGetFails() throws Exception {
    RankClient[] readers = {new RankClient(written), new RankClient(written)};
    readers[1].failGets = true;
    try (TpReplica b =
        TpReplica.start(
            folder, 2, EngineTest.small(256), r -> EngineL3FaultsTest.settings(readers[r]))) {
      assertArrayEquals(want, serve(b), "recomputed after the failed GET");
      assertEquals(0, last.metrics().reusedStorageTokens(), "nothing published: " + last.metrics());
      assertTrue(readers[0].okGets.get() > 0, "rank 0 read its own rows");
      b.awaitStorageIdle();
      assertMirrored(b);
    }
  }

  @Test
  void shouldFallBackTogetherWhenOneOwnersStoreStalls() throws Exception {
    RankClient[] readers = {new RankClient(written), new RankClient(written)};
    readers[1].getDelayMs = 1_500; // past the 300 ms soft deadline
    try (TpReplica b =
        TpReplica.start(
            folder, 2, EngineTest.small(256), r -> EngineL3FaultsTest.settings(readers[r]))) {
      assertArrayEquals(want, serve(b), "recomputed after the soft deadline");
      assertEquals(0, last.metrics().reusedStorageTokens(), last.metrics().toString());
      b.awaitStorageIdle();
      EngineMetrics.Transfers t0 = transfers(b.engines.get(0));
      assertTrue(t0.softTimeouts() >= 1, "the wait ended by its soft deadline: " + t0);
      assertMirrored(b);
    }
  }

  @Test
  void shouldCloseTheGateOnBothWhenOneOwnerIsUnderPressure() throws Exception {
    RankClient[] readers = {new RankClient(new MemoryStore()), new RankClient(new MemoryStore())};
    CountDownLatch gate = new CountDownLatch(1);
    readers[1].putGate = gate; // rank 1's PUTs hang: its queue backs up
    try (TpReplica b =
        TpReplica.start(folder, 2, EngineTest.small(256), r -> pressured(readers[r]))) {
      SplittableRandom random = new SplittableRandom(59);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (!transfers(b.engines.get(0)).gateClosed()) {
        assertTrue(System.nanoTime() < deadline, "the gate never closed");
        int[] p = random.ints(40, 0, 256).toArray();
        b.leader().submit(p, SamplingParams.greedy(2)).result().get(60, TimeUnit.SECONDS);
      }
      int queriesBefore = readers[0].queries.get();
      long bypassesBefore = transfers(b.engines.get(0)).pressureBypasses();
      assertArrayEquals(want, serve(b), "served without L3 while the gate is closed");
      assertEquals(queriesBefore, readers[0].queries.get(), "rank 0 queried nothing");
      assertTrue(
          transfers(b.engines.get(0)).pressureBypasses() > bypassesBefore,
          "the request bypassed L3");
      assertMirrored(b);
      gate.countDown();
    }
  }

  /** Tiny watermarks: two queued jobs or 100 ms of age close the gate; one PUT worker. */
  private static L3Settings pressured(Store store) {
    L3ExecutorConfig d = L3ExecutorConfig.defaults();
    L3ExecutorConfig executor =
        new L3ExecutorConfig(
            d.queryWorkers(),
            d.getWorkers(),
            1,
            d.queryQueueCapacity(),
            d.getQueueCapacity(),
            d.putQueueCapacity(),
            d.maxOutstandingOperations(),
            300,
            d.closeJoinDeadlineMs());
    StorageConfig s = StorageConfig.defaults().withMinExtensionTokens(4).withSoftDeadlineMs(300);
    StorageConfig scheduling =
        new StorageConfig(
            s.maxOperations(),
            s.maxHostBlocks(),
            s.retractionReservePercent(),
            s.softDeadlineMs(),
            s.readyHoldMs(),
            s.minExtensionTokens(),
            s.lookaheadTokens(),
            s.maxQueryKeys(),
            s.negativeMetadataCapacity(),
            s.backupCandidateCapacity(),
            s.maxPutKeys(),
            2,
            0,
            s.highQueuedBytes(),
            s.lowQueuedBytes(),
            100,
            0,
            s.maxBackupBackoffMs());
    return new L3Settings(
        store, new StorageRuntimeConfig(scheduling, executor), L3Settings.CPU_ATTENTION_BACKEND);
  }

  private static EngineMetrics.Transfers transfers(Engine e) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
    long after = System.nanoTime();
    while (true) {
      EngineMetrics m = e.metrics();
      if (m.timeNs() > after || System.nanoTime() > deadline) {
        return m.storage().orElseThrow().transfers();
      }
      Thread.sleep(20);
    }
  }

  /** The scheduler's storage figures are the same on both ranks: the same agreed decisions. */
  private static void assertMirrored(TpReplica replica) throws Exception {
    EngineMetrics.Transfers a = transfers(replica.engines.get(0));
    EngineMetrics.Transfers b = transfers(replica.engines.get(1));
    assertEquals(a.softTimeouts(), b.softTimeouts(), "soft timeouts");
    assertEquals(a.readyExpirations(), b.readyExpirations(), "Ready expirations");
    assertEquals(a.pressureBypasses(), b.pressureBypasses(), "pressure bypasses");
    assertEquals(a.queriesIssued(), b.queriesIssued(), "queries");
    assertEquals(a.getsIssued(), b.getsIssued(), "GETs");
    assertEquals(a.putsIssued(), b.putsIssued(), "PUTs");
    assertEquals(a.publishedBlocks(), b.publishedBlocks(), "published blocks");
    assertEquals(a.gateClosed(), b.gateClosed(), "gate");
  }
}

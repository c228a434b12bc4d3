package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineTest.Recorder;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.redis.RedisStore;
import io.tokenspeed.l3.redis.RedisStoreSettings;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.io.RandomAccessFile;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * L3 faults end to end: a writer engine fills a store, then a fresh reader engine serves a prompt
 * that extends the written one while the store misbehaves — it stops answering, it returns short
 * reads, an object is corrupted on disk, the Redis server is killed and restarted. Every output
 * must equal the recomputation, nothing the fault touched may be published, the engine must keep
 * serving, and the invariants of the scheduler, the storage transfer manager and the cache hold
 * after every round.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineL3FaultsTest {
  private static final int P = 4;

  private CausalLm model;
  private int[] written;
  private int[] extended;
  private Run want;

  @BeforeAll
  void load(@TempDir Path dir) throws Exception {
    model = CausalLm.load(Fixtures.extract("llama", dir));
    SplittableRandom rnd = new SplittableRandom(29);
    written = rnd.ints(101, 0, model.vocabSize()).toArray();
    extended = EngineL3Test.extend(written, 121, model.vocabSize(), rnd);
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(rec).conclude())) {
      want = serve(e, rec, extended);
    }
  }

  @AfterAll
  void close() {
    model.close();
  }

  /** A store that passes every call to another and counts the GETs; tests override a call. */
  static class Forwarding extends ForwardingStore {
    final AtomicInteger gets = new AtomicInteger();

    Forwarding(Store inner) {
      super(inner);
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      gets.incrementAndGet();
      return super.get(keys, destinations);
    }
  }

  /** Soft deadline 300 ms, one-page extensions, health cooldown 300 ms. */
  static L3Settings settings(Store store) {
    L3ExecutorConfig d = L3ExecutorConfig.defaults();
    L3ExecutorConfig executor =
        new L3ExecutorConfig(
            d.queryWorkers(),
            d.getWorkers(),
            d.putWorkers(),
            d.queryQueueCapacity(),
            d.getQueueCapacity(),
            d.putQueueCapacity(),
            d.maxOutstandingOperations(),
            300,
            d.closeJoinDeadlineMs());
    StorageConfig scheduling =
        StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(300);
    return new L3Settings(
        store, new StorageRuntimeConfig(scheduling, executor), L3Settings.CPU_ATTENTION_BACKEND);
  }

  private static Run serve(Engine e, Recorder rec, int[] prompt) throws Exception {
    return EngineTest.await(e.submit(prompt, SamplingParams.greedy(8)), rec);
  }

  /** A writer engine serves {@link #written} over {@code store} and closes (its prefix is put). */
  private void write(Store store) throws Exception {
    Recorder w = new Recorder();
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(w)
                .l3(settings(store))
                .paused()
                .conclude())) {
      e.resume();
      serve(e, w, written);
    }
    assertTrue(w.broken.isEmpty(), () -> w.broken.toString());
  }

  /** A fresh reader over {@code store}: the extended prompt, then an unrelated one. */
  private Run read(Store store) throws Exception {
    Recorder r = new Recorder();
    Run got;
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(r)
                .l3(settings(store))
                .paused()
                .conclude())) {
      e.resume();
      got = serve(e, r, extended);
      int[] other = new SplittableRandom(31).ints(40, 0, model.vocabSize()).toArray();
      assertEquals(8, serve(e, r, other).tokens().length, "the engine keeps serving");
    }
    assertTrue(r.broken.isEmpty(), () -> r.broken.toString());
    EngineTest.assertSame(want, got, "the output equals the recomputation");
    return got;
  }

  private static FileStore fileStore(Path dir) throws Exception {
    return new FileStore(FileStoreSettings.of(dir));
  }

  @Test
  void shouldFallBackToRecomputationWhenTheStoreStopsAnswering(@TempDir Path dir) throws Exception {
    write(fileStore(dir));
    CountDownLatch answer = new CountDownLatch(1);
    Forwarding hung =
        new Forwarding(fileStore(dir)) {
          @Override
          public StoreResult exists(List<String> keys) throws Exception {
            answer.await(); // the store stops answering
            return super.exists(keys);
          }

          @Override
          public StoreResult get(List<String> keys, List<MemorySegment> destinations)
              throws Exception {
            answer.await();
            return super.get(keys, destinations);
          }
        };
    Recorder r = new Recorder();
    Run got;
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(r)
                .l3(settings(hung))
                .paused()
                .conclude())) {
      e.resume();
      long t0 = System.nanoTime();
      got = serve(e, r, extended);
      long waitedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
      assertTrue(waitedMs >= 300, "the request waited for its soft deadline: " + waitedMs + " ms");
      int[] other = new SplittableRandom(31).ints(40, 0, model.vocabSize()).toArray();
      assertEquals(8, serve(e, r, other).tokens().length, "the engine keeps serving");
      answer.countDown(); // the calls return late: their facts come back detached
    }
    assertTrue(r.broken.isEmpty(), () -> r.broken.toString());
    EngineTest.assertSame(want, got, "soft deadline: recomputed");
    assertEquals(0, got.result().metrics().reusedStorageTokens());
  }

  @Test
  void shouldPublishNothingFromShortReads(@TempDir Path dir) throws Exception {
    write(fileStore(dir));
    Forwarding shortReads =
        new Forwarding(fileStore(dir)) {
          @Override
          public StoreResult get(List<String> keys, List<MemorySegment> destinations)
              throws Exception {
            StoreResult full = super.get(keys, destinations);
            List<RowResult> rows = new ArrayList<>();
            for (RowResult row : full.rows()) {
              rows.add(
                  row instanceof RowResult.Ok ok ? new RowResult.Ok(ok.bytes() / 2, false) : row);
            }
            return new StoreResult(rows, full.retired());
          }
        };
    Run got = read(shortReads);
    assertTrue(shortReads.gets.get() > 0, "the reader read");
    assertEquals(0, got.result().metrics().reusedStorageTokens(), "no short read was published");
    assertEquals(0, got.result().metrics().reusedHostTokens());
  }

  @Test
  void shouldUseNoObjectCorruptedOnDisk(@TempDir Path dir) throws Exception {
    write(fileStore(dir));
    List<Path> objects;
    try (var walk = Files.walk(dir)) {
      objects = walk.filter(Files::isRegularFile).sorted().toList();
    }
    assertTrue(!objects.isEmpty(), "the writer's objects are files");
    for (Path object : objects) {
      try (RandomAccessFile f = new RandomAccessFile(object.toFile(), "rw")) {
        long at = f.length() - 1; // the payload's last byte
        f.seek(at);
        int b = f.read();
        f.seek(at);
        f.write(b ^ 0x5A);
      }
    }
    Forwarding counted = new Forwarding(fileStore(dir));
    Run got = read(counted);
    assertTrue(counted.gets.get() > 0, "the reader read the corrupted objects");
    assertEquals(0, got.result().metrics().reusedStorageTokens(), "no corrupted object is used");
  }

  @Test
  void shouldRecoverAfterTheRedisServerIsKilledAndRestarted(@TempDir Path dir) throws Exception {
    try (RedisServer server = RedisServers.startStandalone(dir.resolve("redis"))) {
      RedisStoreSettings redis = RedisStoreSettings.standalone(server.uri());
      write(RedisStore.open(redis));
      assertEquals(
          written.length / P * P,
          read(RedisStore.open(redis)).result().metrics().reusedStorageTokens(),
          "restored while the server runs");

      // one engine lives through the outage: it falls back while the server is gone, then, after
      // the cooldown and a recovery probe, writes to the restarted (empty) server again
      SplittableRandom rnd = new SplittableRandom(37);
      int[] second = rnd.ints(101, 0, model.vocabSize()).toArray();
      Recorder r = new Recorder();
      try (Engine e =
          Engine.start(
              EngineSettings.of(model, EngineTest.small(256))
                  .observer(r)
                  .l3(settings(RedisStore.open(redis)))
                  .paused()
                  .conclude())) {
        e.resume();
        server.kill();
        Run down = serve(e, r, extended);
        EngineTest.assertSame(want, down, "server down: recomputed");
        assertEquals(0, down.result().metrics().reusedStorageTokens(), "nothing while it is down");
        server.restart();
        Thread.sleep(600); // past the 300 ms cooldown: the next job is the recovery probe
        serve(e, r, second);
        serve(e, r, new SplittableRandom(41).ints(40, 0, model.vocabSize()).toArray());
      } // close drains: the second prefix is put once the probe succeeded
      assertTrue(r.broken.isEmpty(), () -> r.broken.toString());

      int[] secondExtended = EngineL3Test.extend(second, 121, model.vocabSize(), rnd);
      Run recomputed;
      Recorder c = new Recorder();
      try (Engine e =
          Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(c).conclude())) {
        recomputed = serve(e, c, secondExtended);
      }
      Recorder r3 = new Recorder();
      Run restored;
      try (Engine e =
          Engine.start(
              EngineSettings.of(model, EngineTest.small(256))
                  .observer(r3)
                  .l3(settings(RedisStore.open(redis)))
                  .paused()
                  .conclude())) {
        e.resume();
        restored = serve(e, r3, secondExtended);
      }
      assertTrue(r3.broken.isEmpty(), () -> r3.broken.toString());
      EngineTest.assertSame(recomputed, restored, "after recovery: restored equals recomputed");
      assertEquals(
          second.length / P * P,
          restored.result().metrics().reusedStorageTokens(),
          "the engine that lived through the outage wrote again after it");
    }
  }
}

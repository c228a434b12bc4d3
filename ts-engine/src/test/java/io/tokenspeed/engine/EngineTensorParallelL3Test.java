package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.List;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * L3 under tensor-parallel replicas (ranks as threads, the real mesh): every rank writes and reads
 * only its own objects ({@code r{rank}} in the key) through its own store client, and a replica
 * started empty restores a prefix another replica wrote, every owning rank's GETs succeeding, its
 * output equal to recomputation.
 */
class EngineTensorParallelL3Test {
  @TempDir Path dir;

  /** One rank's client of the shared memory store: counts its calls, never closes the store. */
  static final class RankClient extends ForwardingStore {
    final AtomicInteger okGets = new AtomicInteger();
    final AtomicInteger puts = new AtomicInteger();
    final List<String> keys = new java.util.concurrent.CopyOnWriteArrayList<>();

    RankClient(MemoryStore shared) {
      super(shared);
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      StoreResult r = super.get(keys, destinations);
      for (var row : r.rows()) {
        if (row instanceof io.tokenspeed.l3.spi.RowResult.Ok) {
          okGets.incrementAndGet();
        }
      }
      this.keys.addAll(keys);
      return r;
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      puts.incrementAndGet();
      this.keys.addAll(keys);
      return super.put(keys, sources);
    }

    @Override
    public void close() {} // the store is shared: the test owns it
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama", "jamba"})
  void shouldRestoreOnAFreshReplicaWhatAnotherReplicaWrote(String fixture) throws Exception {
    Path folder = Fixtures.extract(fixture, dir);
    int[] prompt;
    int[] want;
    try (CausalLm model = CausalLm.load(folder);
        Engine single = Engine.start(model, EngineTest.small(256), OptionalInt.empty())) {
      prompt = new SplittableRandom(47).ints(81, 0, model.vocabSize()).toArray();
      want =
          single
              .submit(prompt, SamplingParams.greedy(8))
              .result()
              .get(60, TimeUnit.SECONDS)
              .tokens();
    }
    MemoryStore shared = new MemoryStore();
    var writers = new ConcurrentHashMap<Integer, RankClient>();
    try (TpReplica a =
        TpReplica.start(
            folder,
            2,
            EngineTest.small(256),
            r ->
                EngineL3FaultsTest.settings(
                    writers.computeIfAbsent(r, k -> new RankClient(shared))))) {
      GenerationResult r =
          a.leader().submit(prompt, SamplingParams.greedy(8)).result().get(60, TimeUnit.SECONDS);
      assertArrayEquals(want, r.tokens(), "writer replica vs TP=1");
      a.awaitStorageIdle();
    }
    for (int rank = 0; rank < 2; rank++) {
      RankClient w = writers.get(rank);
      assertTrue(w.puts.get() > 0, "rank " + rank + " wrote");
      String own = "|r" + rank;
      assertTrue(
          w.keys.stream().allMatch(k -> k.endsWith(own)),
          "rank " + rank + " wrote only its own objects: " + w.keys);
    }

    var readers = new ConcurrentHashMap<Integer, RankClient>();
    try (TpReplica b =
        TpReplica.start(
            folder,
            2,
            EngineTest.small(256),
            r ->
                EngineL3FaultsTest.settings(
                    readers.computeIfAbsent(r, k -> new RankClient(shared))))) {
      GenerationResult r =
          b.leader().submit(prompt, SamplingParams.greedy(8)).result().get(60, TimeUnit.SECONDS);
      assertArrayEquals(want, r.tokens(), "restoring replica vs TP=1");
      assertTrue(r.metrics().reusedStorageTokens() > 0, "restored from the store: " + r.metrics());
      for (int rank = 0; rank < 2; rank++) {
        RankClient c = readers.get(rank);
        assertTrue(c.okGets.get() > 0, "rank " + rank + " read its objects");
        String own = "|r" + rank;
        assertTrue(
            c.keys.stream().allMatch(k -> k.endsWith(own)),
            "rank " + rank + " read only its own objects: " + c.keys);
      }
      assertEquals(
          readers.get(0).okGets.get(), readers.get(1).okGets.get(), "both owners read every row");
    }
  }
}

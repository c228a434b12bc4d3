package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.LocalCollective;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
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

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama", "jamba"})
  void shouldRestoreOnAFreshReplicaWhatAnotherReplicaWrote(String fixture) throws Exception {
    Path folder = Fixtures.extract(fixture, dir);
    int[] prompt;
    int[] want;
    try (CausalLm model = CausalLm.load(folder);
        Engine single = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      prompt = new SplittableRandom(47).ints(81, 0, model.vocabSize()).toArray();
      want =
          single
              .submit(prompt, SamplingParams.greedy(8))
              .result()
              .get(60, TimeUnit.SECONDS)
              .tokens();
    }
    MemoryStore shared = new MemoryStore();
    var writers = new ConcurrentHashMap<Integer, EngineTensorParallelFaultsTest.RankClient>();
    try (TpReplica a =
        TpReplica.start(
            folder,
            2,
            EngineTest.small(256),
            r ->
                EngineL3FaultsTest.settings(
                    writers.computeIfAbsent(
                        r, k -> new EngineTensorParallelFaultsTest.RankClient(shared))))) {
      GenerationResult r =
          a.leader().submit(prompt, SamplingParams.greedy(8)).result().get(60, TimeUnit.SECONDS);
      assertArrayEquals(want, r.tokens(), "writer replica vs TP=1");
      a.awaitStorageIdle();
    }
    for (int rank = 0; rank < 2; rank++) {
      EngineTensorParallelFaultsTest.RankClient w = writers.get(rank);
      assertTrue(w.puts.get() > 0, "rank " + rank + " wrote");
      String own = "|r" + rank;
      assertTrue(
          w.keys.stream().allMatch(k -> k.endsWith(own)),
          "rank " + rank + " wrote only its own objects: " + w.keys);
    }

    var readers = new ConcurrentHashMap<Integer, EngineTensorParallelFaultsTest.RankClient>();
    try (TpReplica b =
        TpReplica.start(
            folder,
            2,
            EngineTest.small(256),
            r ->
                EngineL3FaultsTest.settings(
                    readers.computeIfAbsent(
                        r, k -> new EngineTensorParallelFaultsTest.RankClient(shared))))) {
      GenerationResult r =
          b.leader().submit(prompt, SamplingParams.greedy(8)).result().get(60, TimeUnit.SECONDS);
      assertArrayEquals(want, r.tokens(), "restoring replica vs TP=1");
      assertTrue(r.metrics().reusedStorageTokens() > 0, "restored from the store: " + r.metrics());
      for (int rank = 0; rank < 2; rank++) {
        EngineTensorParallelFaultsTest.RankClient c = readers.get(rank);
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

  /** L3 over {@code store} with 100,000 operation credits, above the 65,536 of the old window. */
  private static L3Settings wideCredits(MemoryStore store) {
    L3Settings base = EngineL3FaultsTest.settings(store);
    StorageConfig scheduling = base.runtime().scheduling();
    return new L3Settings(
        store,
        new StorageRuntimeConfig(
            scheduling.withCredits(100_000, scheduling.maxHostBlocks()), base.runtime().executor()),
        base.attentionBackend());
  }

  /**
   * The agreement window follows async.max_operations: a rank whose control plane sets a window
   * below its credits explicitly is refused before it joins the mesh, naming both numbers, and a
   * replica left at the default window sizes it from the credits and serves with L3.
   */
  @Test
  void shouldRefuseAControlWindowBelowTheCreditsAndServeWithOneSizedFromThem() throws Exception {
    Path folder = Fixtures.extract("llama", dir);
    ControlConfig narrow =
        EngineTensorParallelTest.controls(2).getFirst().withWindow(65_536, 4L << 20);
    Collective[] collectives = LocalCollective.group(2);
    try (CausalLm model =
        CausalLm.load(folder, "tp-test", ModelIdentity.DEFAULT_WEIGHT_VERSION, collectives[0])) {
      IllegalArgumentException e =
          assertThrows(
              IllegalArgumentException.class,
              () ->
                  Engine.start(
                      EngineSettings.of(model, EngineTest.small(256))
                          .l3(wideCredits(new MemoryStore()))
                          .control(narrow)
                          .conclude()));
      assertEquals(
          "async.max_operations=100000 needs an agreement window of at least 100000 operations,"
              + " control max_pending_operations=65536",
          e.getMessage());
    }
    MemoryStore shared = new MemoryStore();
    try (TpReplica replica =
        TpReplica.start(folder, 2, EngineTest.small(256), r -> wideCredits(shared))) {
      int[] prompt =
          new SplittableRandom(53).ints(81, 0, replica.models.getFirst().vocabSize()).toArray();
      int[] out =
          EngineTensorParallelTest.tokens(
              replica.leader().submit(prompt, SamplingParams.greedy(8)));
      assertEquals(8, out.length);
      replica.awaitStorageIdle();
    }
  }
}

package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineTest.Recorder;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * A round's Host→Device loads copied in stages of layers while the forward computes ({@link
 * EngineSettings.Builder#loadStages}): a prefix another engine wrote, restored from L3 into the
 * Host (early Device copies off, so the restore is loaded at admission) into a fresh engine whose
 * Device holds nothing of it, gives the tokens and logits of recomputation bit for bit, on models
 * whose output depends on the context, one group (Llama), window and full groups (Gemma 3), and
 * State and full groups (Jamba), with the loads staged and whole.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineLoadStagesTest {
  private static final int P = 4;

  private final Map<String, CausalLm> models = new HashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) {
    models.put("llama", ContextModels.llama(dir.resolve("llama")));
    models.put("gemma3", ContextModels.gemma3(dir.resolve("gemma3")));
    models.put("jamba", CausalLm.load(Fixtures.extract("jamba", dir.resolve("jamba"))));
  }

  @AfterAll
  void close() {
    models.values().forEach(CausalLm::close);
  }

  /** What one engine served and the loads it made. */
  private record Served(Run run, EngineStats stats) {}

  private static Served serve(CausalLm model, L3Settings l3, int stages, int[] prompt)
      throws Exception {
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(rec)
                .l3(l3)
                .loadStages(stages)
                .conclude())) {
      Run run = EngineTest.await(e.submit(prompt, SamplingParams.greedy(8)), rec);
      assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
      return new Served(run, e.stats());
    }
  }

  @ParameterizedTest(name = "{0}, {1} stages")
  @CsvSource({"llama, 1", "llama, 2", "gemma3, 1", "gemma3, 3", "jamba, 2", "jamba, 8"})
  void shouldRestoreWithRecomputationsBitsWhetherLoadsAreStagedOrWhole(String name, int stages)
      throws Exception {
    CausalLm model = models.get(name);
    SplittableRandom rnd = new SplittableRandom(name.hashCode() * 31L + stages);
    int[] written = rnd.ints(101, 0, model.vocabSize()).toArray();
    int[] extended = EngineL3Test.extend(written, 121, model.vocabSize(), rnd);
    Run want = serve(model, null, 1, extended).run();

    EngineL3Test.SharedStore store = new EngineL3Test.SharedStore();
    StorageConfig hostOnly = StorageConfig.defaults().withMinExtensionTokens(P).withEarlyH2d(false);
    serve(model, EngineL3Test.l3(store, hostOnly), stages, written);
    Served got = serve(model, EngineL3Test.l3(store, hostOnly), stages, extended);

    assertTrue(store.gets.get() > 0, "the reader read the store");
    assertEquals(
        written.length / P * P,
        got.run().result().metrics().reusedStorageTokens(),
        "the written prefix came from L3");
    EngineTest.assertSame(want, got.run(), name + ", " + stages + " load stages");
    EngineStats s = got.stats();
    assertTrue(s.loadedBytes() > 0, "the restore was loaded to the Device at admission");
    if (stages == 1) {
      assertEquals(0, s.stagedLoadedBytes(), "one stage: loaded whole before the forward");
    } else {
      assertEquals(s.loadedBytes(), s.stagedLoadedBytes(), "every load staged by layer");
    }
  }

  @Test
  void shouldRefuseNoStages() {
    CausalLm model = models.get("llama");
    var refused =
        assertThrows(
            IllegalArgumentException.class,
            () -> EngineSettings.of(model, EngineTest.small(256)).loadStages(0));
    assertEquals("load_stages=0 must be at least 1", refused.getMessage());
  }
}

package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ContextConfigs;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeSet;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The untied models of {@link ContextConfigs} answer their context, not only their last token:
 * prompts that end in the same token but differ before it give different greedy next tokens.
 * Without this, a test comparing a restored or resumed output with recomputation proves nothing
 * (the same Llama with tied embeddings gives token 17 back after all eight prompts).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ContextModelsTest {
  private final Map<String, CausalLm> models = new HashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) {
    models.put("llama", ContextModels.llama(dir));
    models.put("gemma3", ContextModels.gemma3(dir));
    models.put("mamba", ContextModels.load(dir, "untied-mamba", ContextConfigs.MAMBA, 13));
    // the fixture the GPU suite's hybrid engine tests serve (untied)
    models.put("jamba", CausalLm.load(Fixtures.extract("jamba", dir.resolve("fixture"))));
  }

  @AfterAll
  void close() {
    models.values().forEach(CausalLm::close);
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama", "gemma3", "mamba", "jamba"})
  void shouldGiveDifferentNextTokensWhenOnlyTheContextBeforeTheLastTokenDiffers(String name)
      throws Exception {
    CausalLm model = models.get(name);
    SplittableRandom rnd = new SplittableRandom(5);
    int last = 17;
    TreeSet<Integer> next = new TreeSet<>();
    Checked rec = new Checked();
    try (Engine e =
        Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(rec).conclude())) {
      for (int i = 0; i < 8; i++) {
        int[] prompt = rnd.ints(24, 0, model.vocabSize()).toArray();
        prompt[prompt.length - 1] = last;
        Run r = rec.await(e.submit(prompt, SamplingParams.greedy(1)));
        next.add(r.tokens()[0]);
      }
    }
    assertTrue(
        next.size() >= 4,
        name + ": 8 contexts ending in token " + last + " gave the next tokens " + next);
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }
}

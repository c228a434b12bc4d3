package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A request that would run past the model's positions is refused at submission, naming the limit,
 * however much the Device could hold; the engine goes on serving. (It used to reach the forward
 * pass, whose refusal of the position failed the engine's loop and every request with it.)
 */
class EnginePositionLimitTest {

  @Test
  void shouldRefuseARequestPastTheModelsPositionsAndGoOnServing(@TempDir Path dir)
      throws Exception {
    String config =
        ContextModels.LLAMA.replace(
            "\"max_position_embeddings\": 1024", "\"max_position_embeddings\": 48");
    assertTrue(config.contains("\"max_position_embeddings\": 48"), config);
    try (CausalLm model = ContextModels.load(dir, "short-llama", config, 5);
        Engine e = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
      assertEquals(48, e.maxRequestTokens(), "the positions, not the Device, bound a request");
      SplittableRandom rnd = new SplittableRandom(3);
      var refused =
          e.submit(rnd.ints(40, 0, model.vocabSize()).toArray(), SamplingParams.greedy(16))
              .result()
              .get(60, TimeUnit.SECONDS);
      assertEquals(
          "prompt of 40 tokens + max_tokens 16 = 56 exceeds the model's max_position_embeddings"
              + " of 48 tokens",
          refused.error());
      var served =
          e.submit(rnd.ints(40, 0, model.vocabSize()).toArray(), SamplingParams.greedy(8))
              .result()
              .get(60, TimeUnit.SECONDS);
      assertNull(served.error(), "the engine serves on: " + served.error());
      assertEquals(8, served.tokens().length);
    }
  }
}

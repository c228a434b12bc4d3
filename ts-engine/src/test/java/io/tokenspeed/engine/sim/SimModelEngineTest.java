package io.tokenspeed.engine.sim;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.model.sampling.SamplingParams;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The sim model inside the real engine (storage off): the engine drives it as a device backend (its
 * Device tier is the model's own memory) and generates its reference tokens, cold and from cached
 * pages.
 */
class SimModelEngineTest {

  @Test
  void shouldGenerateTheReferenceTokensColdAndFromCachedPagesWhenTheEngineRunsIt()
      throws Exception {
    SimModel model = new SimModel(1021, 2, 24, 5);
    EngineConfig config = EngineConfig.defaults(64).withComputeThreads(1);
    SplittableRandom rnd = new SplittableRandom(5);
    try (Engine e = Engine.start(EngineSettings.of(model, config).conclude())) {
      for (int i = 0; i < 6; i++) {
        int[] prompt = new int[1 + rnd.nextInt(200)];
        for (int t = 0; t < prompt.length; t++) {
          prompt[t] = rnd.nextInt(model.vocabSize());
        }
        for (int again = 0; again < 2; again++) { // the second run reuses the first's pages
          GenerationResult r =
              e.submit(prompt, SamplingParams.greedy(20)).result().get(60, TimeUnit.SECONDS);
          assertArrayEquals(model.reference(prompt, 20), r.tokens(), "prompt " + i);
        }
      }
    } finally {
      model.close();
    }
  }
}

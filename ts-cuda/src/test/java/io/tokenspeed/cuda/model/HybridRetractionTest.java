package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.CpuDeviceModel;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import java.util.Locale;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link HybridEngineGpuTest}'s retraction scenario on the CPU backend, in the build: the same
 * Gemma 3, the same Device, requests retracted from it come back to their exact images (and the GPU
 * suite's run of the scenario keeps a Device that does retract).
 */
class HybridRetractionTest {

  @ParameterizedTest
  @ValueSource(longs = {17, 18, 19})
  void shouldGiveEveryRetractedRequestItsAloneOutput(long seed, @TempDir Path dir)
      throws Exception {
    Path folder =
        SyntheticCheckpoints.materialize(
            "untied-gemma3", HybridEngineGpuTest.GEMMA3, 13, DType.F32, dir);
    try (CpuDeviceModel m = new CpuDeviceModel(CausalLm.load(folder), 1)) {
      HybridEngineGpuTest.Retractions r = HybridEngineGpuTest.Retractions.run(m, seed);
      System.out.printf(
          Locale.ROOT,
          "gemma3 on the CPU, seed %d: %d retractions, %d of %d outputs equal alone%n",
          seed,
          r.retractions(),
          r.requests() - r.differ().size(),
          r.requests());
      assertTrue(r.differ().isEmpty(), () -> String.join("\n", r.differ()));
      assertTrue(r.retractions() >= 1, "the Device retracted " + r.retractions() + " times");
    }
  }
}

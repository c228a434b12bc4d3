package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.CpuDeviceModel;
import io.tokenspeed.model.CausalLm;
import java.nio.file.Path;
import java.util.Locale;
import java.util.stream.Stream;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@link HybridEngineGpuTest}'s retraction scenario on the CPU backend, in the build: the same
 * hybrid models (Gemma 3, Jamba), the same Devices, requests retracted from it come back to their
 * exact images (and the GPU suite's run of the scenario keeps a Device that does retract).
 */
class HybridRetractionTest {

  static Stream<Arguments> modelsAndSeeds() {
    return Stream.of("gemma3", "jamba")
        .flatMap(m -> Stream.of(17L, 18L).map(seed -> Arguments.of(m, seed)));
  }

  @ParameterizedTest(name = "{0}, seed {1}")
  @MethodSource("modelsAndSeeds")
  void shouldGiveEveryRetractedRequestItsAloneOutput(String name, long seed, @TempDir Path dir)
      throws Exception {
    Path folder = HybridEngineGpuTest.folder(name, dir);
    try (CpuDeviceModel m = new CpuDeviceModel(CausalLm.load(folder), 1)) {
      HybridEngineGpuTest.Retractions r =
          HybridEngineGpuTest.Retractions.run(
              m, seed, HybridEngineGpuTest.Retractions.tightParents(name));
      System.out.printf(
          Locale.ROOT,
          "%s on the CPU, seed %d: %d retractions, %d of %d outputs equal alone%n",
          name,
          seed,
          r.retractions(),
          r.requests() - r.differ().size(),
          r.requests());
      assertTrue(r.differ().isEmpty(), () -> String.join("\n", r.differ()));
      assertTrue(r.retractions() >= 1, "the Device retracted " + r.retractions() + " times");
    }
  }
}

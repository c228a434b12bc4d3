package io.tokenspeed.cuda.model;

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
 * {@link HybridEngineGpuTest}'s restore scenario on the CPU backend, in the build: the same hybrid
 * models (Gemma 3, Mamba, Jamba) restore a shorter and a longer shared prefix from the memory, file
 * and Redis stores with recomputation's bits, so the GPU suite's run of it asks for what the engine
 * gives.
 */
class HybridRestoreTest {

  static Stream<Arguments> modelsAndStores() {
    return Stream.of("gemma3", "mamba", "jamba")
        .flatMap(m -> Stream.of("memory", "file", "redis").map(s -> Arguments.of(m, s)));
  }

  @ParameterizedTest(name = "{0}, {1} store")
  @MethodSource("modelsAndStores")
  void shouldRestoreShorterAndLongerSharedPrefixesWithRecomputationsBits(
      String name, String kind, @TempDir Path dir) throws Exception {
    Path folder = HybridEngineGpuTest.folder(name, dir.resolve("model"));
    try (CpuDeviceModel m = new CpuDeviceModel(CausalLm.load(folder), 1)) {
      HybridEngineGpuTest.Restores r = HybridEngineGpuTest.Restores.run(m, kind, dir);
      System.out.printf(
          Locale.ROOT,
          "%s on the CPU, %s store: %d and %d tokens restored%n",
          name,
          kind,
          r.shorter(),
          r.longer());
    }
  }
}

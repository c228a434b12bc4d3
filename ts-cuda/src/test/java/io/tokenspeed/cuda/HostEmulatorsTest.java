package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The CUDA kernels' host emulators (src/test/cpp), in the build: each cuts its kernels out of
 * kernels.cu, builds them with g++ around an emulation of the GPU's threads, warps, barriers and
 * (for the Hopper flash kernel) wgmma, cp.async, TMA and mbarriers, and checks them against float64
 * references within derived bounds and bit for bit where the kernels promise it (batch invariance,
 * the tiled attention against the per-token one, the TMA kernel against the cp.async one, the Mamba
 * kernels against a port of the CPU path). So a change to kernels.cu is checked on every machine
 * that runs the tests, not only on a GPU; bin/test requires g++ and python3 for them.
 */
class HostEmulatorsTest {

  /** The longest an emulator may take (the Hopper flash kernel's takes about a minute here). */
  private static final long TIMEOUT_S = 600;

  @ParameterizedTest(name = "{0}")
  @CsvSource({
    "kernels-emulator.sh, ALL PASSED",
    "mamba-emulator.sh, ' 0 mismatches;'",
    "wgmma-flash-emulator.sh, EMULATION: ALL PASSED"
  })
  void shouldPassEveryCheckOfTheEmulator(String script, String passed)
      throws IOException, InterruptedException {
    Path dir = Path.of("src", "test", "cpp").toAbsolutePath();
    Path log = Files.createTempFile("tokenspeed-emulator", ".log");
    try {
      Process p =
          new ProcessBuilder("bash", dir.resolve(script).toString())
              .directory(dir.toFile())
              .redirectErrorStream(true)
              .redirectOutput(log.toFile())
              .start();
      boolean ended = p.waitFor(TIMEOUT_S, TimeUnit.SECONDS);
      if (!ended) {
        p.destroyForcibly();
      }
      String out = Files.readString(log, StandardCharsets.UTF_8);
      String tail = out.length() > 4000 ? out.substring(out.length() - 4000) : out;
      assertTrue(ended, script + " ran past " + TIMEOUT_S + " s:\n" + tail);
      assertEquals(0, p.exitValue(), script + " failed:\n" + tail);
      assertTrue(out.contains(passed), script + " did not report '" + passed + "':\n" + tail);
      // the summary line, for the build log
      System.out.println(
          out.lines().filter(l -> l.contains(passed.strip())).findFirst().orElse(""));
    } finally {
      Files.deleteIfExists(log);
    }
  }
}

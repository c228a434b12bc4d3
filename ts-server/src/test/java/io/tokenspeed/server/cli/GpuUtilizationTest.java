package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** nvidia-smi's samples read into figures, the GPU picked, and the tool found on the PATH. */
class GpuUtilizationTest {
  @TempDir Path dir;

  @Test
  void shouldAverageTheNumericLinesAndSkipTheRest() {
    Optional<GpuUtilization.Figures> f =
        GpuUtilization.Figures.of(List.of("40", " 100", "[N/A]", "", "60 "));
    assertEquals(new GpuUtilization.Figures(3, 200.0 / 3, 100), f.orElseThrow());
    assertTrue(GpuUtilization.Figures.of(List.of("NVIDIA-SMI has failed")).isEmpty());
  }

  @Test
  void shouldPickTheVisibleDeviceAtTheOrdinal() {
    assertEquals("1", GpuUtilization.gpuId("cuda:1", null));
    assertEquals("1", GpuUtilization.gpuId("cuda:1", ""));
    assertEquals("5", GpuUtilization.gpuId("cuda:1", "3, 5"));
    assertEquals("GPU-ab12", GpuUtilization.gpuId("cuda:0", "GPU-ab12"));
    assertEquals("2", GpuUtilization.gpuId("cuda:2", "3"), "beyond the list: the ordinal");
  }

  @Test
  void shouldFindOnlyAnExecutableToolOnThePath() throws Exception {
    Path plain = Files.createDirectories(dir.resolve("plain"));
    Files.writeString(plain.resolve(GpuUtilization.COMMAND), "not executable");
    Path bin = Files.createDirectories(dir.resolve("bin"));
    Path tool = bin.resolve(GpuUtilization.COMMAND);
    Files.writeString(tool, "#!/bin/sh\n");
    Files.setPosixFilePermissions(tool, PosixFilePermissions.fromString("rwxr-xr-x"));
    assertEquals(Optional.of(tool), GpuUtilization.onPath(plain + ":" + bin));
    assertEquals(Optional.empty(), GpuUtilization.onPath(plain + "::"));
    assertEquals(Optional.empty(), GpuUtilization.onPath(null));
  }

  @Test
  void shouldSampleNothingOnTheCpu() throws Exception {
    try (GpuUtilization sampler = GpuUtilization.start("cpu")) {
      assertTrue(sampler.stop().isEmpty());
    }
  }
}

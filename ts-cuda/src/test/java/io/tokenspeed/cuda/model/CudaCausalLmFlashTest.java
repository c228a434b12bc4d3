package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/**
 * The {@code tokenspeed.cuda.flash} switch and the launch of the flash kernels it picks, decided on
 * the host and so checked without a GPU: the values the property takes, and the kernels' names,
 * threads and shared memory against the constants of kernels.cu.
 */
class CudaCausalLmFlashTest {

  @Test
  void shouldReadTheSwitchAndRefuseAnythingElse() {
    assertFalse(CudaCausalLm.flashSwitch(null));
    assertFalse(CudaCausalLm.flashSwitch("v1"));
    assertTrue(CudaCausalLm.flashSwitch("v2"));
    assertTrue(CudaCausalLm.flashSwitch(" V2 "));
    for (String bad : new String[] {"", "2", "v3", "on", "flash2"}) {
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> CudaCausalLm.flashSwitch(bad));
      assertTrue(e.getMessage().contains("tokenspeed.cuda.flash"), e::getMessage);
      assertTrue(e.getMessage().contains("v1 or v2"), e::getMessage);
    }
    assertEquals(
        CudaCausalLm.flashSwitch(System.getProperty(CudaCausalLm.FLASH_PROPERTY)),
        CudaCausalLm.FLASH_V2);
  }

  @Test
  void shouldLaunchEachKernelWithItsThreadsAndSharedMemory() throws IOException {
    assertEquals("flash_attention_d64", CudaCausalLm.flashKernel(64, false));
    assertEquals("flash_attention_d128", CudaCausalLm.flashKernel(128, false));
    assertEquals("flash_attention_v2_d64", CudaCausalLm.flashKernel(64, true));
    assertEquals("flash_attention_v2_d128", CudaCausalLm.flashKernel(128, true));
    // v1: FA_ROWS / (16 · MT) warps, static shared memory
    assertEquals(128, CudaCausalLm.flashThreads(64, false));
    assertEquals(256, CudaCausalLm.flashThreads(128, false));
    assertEquals(0, CudaCausalLm.flashSharedBytes(64, false));
    assertEquals(0, CudaCausalLm.flashSharedBytes(128, false));
    // v2: 4 warps of 32 rows; two stages of K and V of 64 rows of d + 8 bf16, the queries too at
    // 128
    assertEquals(128, CudaCausalLm.flashThreads(64, true));
    assertEquals(128, CudaCausalLm.flashThreads(128, true));
    assertEquals(2 * 2 * 64 * 72 * 2, CudaCausalLm.flashSharedBytes(64, true));
    assertEquals(2 * 2 * 64 * 136 * 2 + 128 * 136 * 2, CudaCausalLm.flashSharedBytes(128, true));
    // within a block's limit (227 KiB on sm_90), and two blocks per multiprocessor (228 KiB, 1 KiB
    // reserved per block) as the kernels' launch bounds ask
    for (int hd : new int[] {64, 128}) {
      int bytes = CudaCausalLm.flashSharedBytes(hd, true);
      assertTrue(bytes <= 227 * 1024, hd + ": " + bytes);
      assertTrue(2 * (bytes + 1024) <= 228 * 1024, hd + ": " + bytes);
    }
    String source;
    try (InputStream in =
        CudaCausalLm.class.getResourceAsStream("/io/tokenspeed/cuda/kernels.cu")) {
      assertNotNull(in, "kernels.cu");
      source = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
    assertTrue(source.contains("#define FA_ROWS 128\n"), "FA_ROWS");
    assertTrue(source.contains("#define FA2_WARPS 4\n"), "FA2_WARPS");
    assertTrue(source.contains("#define FA2_KEYS 64\n"), "FA2_KEYS");
    assertTrue(source.contains("FLASH_ATTENTION(64, 2, flash_attention_d64, 2)"), "v1 d64");
    assertTrue(source.contains("FLASH_ATTENTION(128, 1, flash_attention_d128, 1)"), "v1 d128");
    // the queries in shared memory at 128 (QSHARED true), in registers at 64
    assertTrue(
        source.contains("FLASH_ATTENTION_V2(64, 64, false, flash_attention_v2_d64, 2)"), "v2 d64");
    assertTrue(
        source.contains("FLASH_ATTENTION_V2(128, 64, true, flash_attention_v2_d128, 2)"),
        "v2 d128");
  }

  /** A graphed decode step's table stride: a power of two, at least 64 rows, never less. */
  @org.junit.jupiter.params.ParameterizedTest
  @org.junit.jupiter.params.provider.CsvSource({
    "1, 64",
    "33, 64",
    "64, 64",
    "65, 128",
    "128, 128",
    "129, 256",
    "2049, 4096",
    "8192, 8192"
  })
  void shouldRoundAGraphedStepsStrideToAPowerOfTwo(int stride, int graphed) {
    assertEquals(graphed, CudaCausalLm.graphStride(stride));
  }
}

package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/**
 * The launch of the flash kernel, decided on the host and so checked without a GPU: its names,
 * threads and shared memory against the constants of kernels.cu; and the graphed step's stride.
 */
class CudaCausalLmFlashTest {

  @Test
  void shouldLaunchEachKernelWithItsThreadsAndSharedMemory() throws IOException {
    assertEquals("flash_attention_d64", CudaCausalLm.flashKernel(64));
    assertEquals("flash_attention_d128", CudaCausalLm.flashKernel(128));
    // 4 warps of 32 rows; two stages of K and V of 64 rows of d + 8 bf16, the queries too at 128
    assertEquals(128, CudaCausalLm.FLASH_THREADS);
    assertEquals(2 * 2 * 64 * 72 * 2, CudaCausalLm.flashSharedBytes(64));
    assertEquals(2 * 2 * 64 * 136 * 2 + 128 * 136 * 2, CudaCausalLm.flashSharedBytes(128));
    // within a block's limit (227 KiB on sm_90), and two blocks per multiprocessor (228 KiB, 1 KiB
    // reserved per block) as the kernels' launch bounds ask
    for (int hd : new int[] {64, 128}) {
      int bytes = CudaCausalLm.flashSharedBytes(hd);
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
    assertTrue(source.contains("#define FA_WARPS 4\n"), "FA_WARPS");
    assertTrue(source.contains("#define FA_KEYS 64\n"), "FA_KEYS");
    // silu_mul's grid: the width one block covers
    assertTrue(source.contains("#define SILU_SPAN " + CudaCausalLm.SILU_SPAN + "\n"), "SILU_SPAN");
    // the queries in shared memory at 128 (QSHARED true), in registers at 64
    assertTrue(source.contains("FLASH_ATTENTION(64, false, flash_attention_d64, 2)"), "d64");
    assertTrue(source.contains("FLASH_ATTENTION(128, true, flash_attention_d128, 2)"), "d128");
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

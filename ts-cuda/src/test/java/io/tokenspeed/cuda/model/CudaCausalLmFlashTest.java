package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The launch of the flash kernels, decided on the host and so checked without a GPU: their names,
 * threads and shared memory against the constants of kernels.cu; the switch between them ({@code
 * tokenspeed.cuda.flash}); and the graphed step's stride.
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
    String source = kernelsSource();
    assertTrue(source.contains("#define FA_ROWS 128\n"), "FA_ROWS");
    assertTrue(source.contains("#define FA_WARPS 4\n"), "FA_WARPS");
    assertTrue(source.contains("#define FA_KEYS 64\n"), "FA_KEYS");
    // silu_mul's grid: the width one block covers
    assertTrue(source.contains("#define SILU_SPAN " + CudaCausalLm.SILU_SPAN + "\n"), "SILU_SPAN");
    // the queries in shared memory at 128 (QSHARED true), in registers at 64
    assertTrue(source.contains("FLASH_ATTENTION(64, false, flash_attention_d64, 2)"), "d64");
    assertTrue(source.contains("FLASH_ATTENTION(128, true, flash_attention_d128, 2)"), "d128");
  }

  @Test
  void shouldLaunchTheHopperKernelWithItsThreadsAndSharedMemory() throws IOException {
    CudaCausalLm.FlashKernel wgmma = CudaCausalLm.FlashKernel.WGMMA;
    CudaCausalLm.FlashKernel mma = CudaCausalLm.FlashKernel.MMA;
    assertEquals("flash_attention_wgmma_d64", wgmma.function(64));
    assertEquals("flash_attention_wgmma_d128", wgmma.function(128));
    assertEquals("flash_attention_d128", mma.function(128));
    assertEquals(CudaCausalLm.FLASH_THREADS, mma.threads());
    assertEquals(CudaCausalLm.flashSharedBytes(64), mma.sharedBytes(64));
    // a producer warpgroup and two consumers of 64 rows
    assertEquals(384, wgmma.threads());
    // 1024 to align, the queries (128 rows of d bf16), the stages of K and V of 128 keys, four
    // 8-byte barriers a stage: three stages at 128, four at 64
    assertEquals(1024 + 128 * 128 * 2 + 3 * 2 * 128 * 128 * 2 + 3 * 32, wgmma.sharedBytes(128));
    assertEquals(1024 + 128 * 64 * 2 + 4 * 2 * 128 * 64 * 2 + 4 * 32, wgmma.sharedBytes(64));
    for (int hd : new int[] {64, 128}) {
      int bytes = wgmma.sharedBytes(hd);
      assertTrue(bytes <= 227 * 1024, hd + ": " + bytes);
    }
    String source = kernelsSource();
    assertTrue(
        source.contains("#define FW_KEYS " + CudaCausalLm.WGMMA_FLASH_KEYS + "\n"), "FW_KEYS");
    assertTrue(
        source.contains("#define FW_THREADS " + CudaCausalLm.WGMMA_FLASH_THREADS + "\n"),
        "FW_THREADS");
    assertDeclaredWithTheWgmmaStages(source, "FLASH_ATTENTION_WGMMA", "flash_attention_wgmma_d");
    // the wgmma code only where the compiler targets sm_90a, a stub elsewhere
    assertTrue(source.contains("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)"), "the sm_90a guard");
  }

  @ParameterizedTest
  @ValueSource(strings = {"wgmma", "WGMMA", " Wgmma "})
  void shouldReadWgmmaInAnyCase(String value) {
    assertEquals(CudaCausalLm.FlashKernel.WGMMA, CudaCausalLm.flashKernelOf(value));
  }

  @ParameterizedTest
  @ValueSource(strings = {"tma", "TMA", " Tma "})
  void shouldReadTmaInAnyCase(String value) {
    assertEquals(CudaCausalLm.FlashKernel.TMA, CudaCausalLm.flashKernelOf(value));
  }

  /**
   * The TMA kernel: its own functions, the wgmma kernel's threads and shared memory, declared in
   * kernels.cu with the wgmma kernel's stages; blocks of positions it takes (multiples of 8 that
   * divide the 128 keys of a tile or are multiples of them) and those it leaves to the wgmma
   * kernel.
   */
  @Test
  void shouldLaunchTheTmaKernelAsTheWgmmaOneOnTheBlocksItTakes() throws IOException {
    CudaCausalLm.FlashKernel tma = CudaCausalLm.FlashKernel.TMA;
    CudaCausalLm.FlashKernel wgmma = CudaCausalLm.FlashKernel.WGMMA;
    assertEquals("flash_attention_tma_d64", tma.function(64));
    assertEquals("flash_attention_tma_d128", tma.function(128));
    assertEquals(wgmma.threads(), tma.threads());
    for (int hd : new int[] {64, 128}) {
      assertEquals(wgmma.sharedBytes(hd), tma.sharedBytes(hd));
    }
    String source = kernelsSource();
    assertDeclaredWithTheWgmmaStages(source, "FLASH_ATTENTION_TMA", "flash_attention_tma_d");
    for (int bt : new int[] {8, 16, 32, 64, 128, 256, 512}) {
      assertTrue(CudaCausalLm.tmaTakes(bt), "blocks of " + bt);
    }
    for (int bt : new int[] {0, 1, 4, 12, 24, 48, 96, 192, 320}) {
      assertFalse(CudaCausalLm.tmaTakes(bt), "blocks of " + bt);
    }
  }

  /**
   * The TMA descriptors' shape reads the pool as the other kernels index it: for random pools (head
   * sizes, KV heads, blocks, layers), every element's offset from the layer's K or V address equals
   * the layout's, the strides are multiples of 16 and each dimension's stride covers the one before
   * (as cuTensorMapEncodeTiled requires), and a box is 128-byte rows of one (head, block).
   */
  @ParameterizedTest
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8})
  void shouldDescribeTheLayersKeysAndValuesAsThePoolLaysThemOut(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int hd = rnd.nextBoolean() ? 64 : 128;
    int kvHeads = 1 + rnd.nextInt(8);
    int bt = new int[] {8, 16, 32, 64, 128, 256}[rnd.nextInt(6)];
    int layers = 1 + rnd.nextInt(4);
    int layer = rnd.nextInt(layers);
    long field = (long) kvHeads * bt * hd * 2;
    long bytesPerBlock = layers * 2 * field;
    long pool = 1L << 40;
    var in =
        new CudaCausalLm.AttentionInputs(
            0, pool, bytesPerBlock, layer * 2 * field, layer * 2 * field + field, bt, 0, 0, 0, 1);
    int blocks = 1 + rnd.nextInt(1000);
    var t = CudaCausalLm.PoolTensor.of(in, hd, kvHeads, blocks);
    assertEquals(pool + layer * 2 * field, t.kAddress());
    assertEquals(t.kAddress() + field, t.vAddress());
    assertArrayEquals(new long[] {hd, bt, kvHeads, blocks}, t.dims());
    assertArrayEquals(new int[] {64, Math.min(bt, 128), 1, 1}, t.box());
    for (int i = 0; i < 3; i++) {
      assertEquals(0, t.strides()[i] % 16, "stride " + i);
      long before = i == 0 ? t.dims()[0] * 2 : t.strides()[i - 1] * t.dims()[i];
      assertTrue(t.strides()[i] >= before, "stride " + i + " covers dimension " + i);
    }
    for (int k = 0; k < 200; k++) {
      int e = rnd.nextInt(hd);
      int p = rnd.nextInt(bt);
      int h = rnd.nextInt(kvHeads);
      int b = rnd.nextInt(blocks);
      long layout = b * bytesPerBlock + ((long) h * bt + p) * hd * 2 + e * 2L;
      assertEquals(layout, t.offset(e, p, h, b));
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"mma", "MMA", " mma\n"})
  void shouldReadMmaInAnyCase(String value) {
    assertEquals(CudaCausalLm.FlashKernel.MMA, CudaCausalLm.flashKernelOf(value));
  }

  @ParameterizedTest
  @ValueSource(strings = {"auto", "AUTO", " Auto\t"})
  void shouldReadAutoAsTheDevicesChoice(String value) {
    assertEquals(null, CudaCausalLm.flashKernelOf(value));
  }

  @Test
  void shouldLeaveTheKernelToTheDeviceWithoutAValue() {
    assertEquals(null, CudaCausalLm.flashKernelOf(null));
    assertEquals(
        CudaCausalLm.flashKernelOf(System.getProperty(CudaCausalLm.FLASH_PROPERTY)),
        CudaCausalLm.FLASH_DEFAULT);
  }

  @ParameterizedTest
  @ValueSource(strings = {"", "wmma", "on", "hopper", "mma.sync"})
  void shouldRefuseAnyOtherFlashValueNamingTheProperty(String value) {
    var e = assertThrows(IllegalArgumentException.class, () -> CudaCausalLm.flashKernelOf(value));
    assertEquals(
        "tokenspeed.cuda.flash must be auto, mma, wgmma or tma, not \"" + value + "\"",
        e.getMessage());
  }

  @ParameterizedTest
  @ValueSource(strings = {"sm_80", "sm_89", "sm_100"})
  void shouldRefuseTheTmaKernelOffHopperSayingWhy(String arch) {
    var e =
        assertThrows(
            IllegalArgumentException.class,
            () -> CudaCausalLm.flashKernelFor(CudaCausalLm.FlashKernel.TMA, arch));
    assertTrue(
        e.getMessage().startsWith("tokenspeed.cuda.flash=tma needs a Hopper GPU"), e.getMessage());
    assertTrue(e.getMessage().contains("this device is " + arch), e.getMessage());
    assertEquals(
        CudaCausalLm.FlashKernel.TMA,
        CudaCausalLm.flashKernelFor(CudaCausalLm.FlashKernel.TMA, "sm_90"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"sm_80", "sm_86", "sm_89", "sm_100", "sm_120"})
  void shouldRefuseTheWgmmaKernelOffHopperSayingWhy(String arch) {
    var e =
        assertThrows(
            IllegalArgumentException.class,
            () -> CudaCausalLm.flashKernelFor(CudaCausalLm.FlashKernel.WGMMA, arch));
    assertTrue(e.getMessage().contains("compute capability 9.0"), e.getMessage());
    assertTrue(e.getMessage().contains("this device is " + arch), e.getMessage());
    assertTrue(e.getMessage().contains("tokenspeed.cuda.flash=mma"), e.getMessage());
    assertEquals(
        CudaCausalLm.FlashKernel.MMA,
        CudaCausalLm.flashKernelFor(CudaCausalLm.FlashKernel.MMA, arch));
    // auto: the mma kernel off Hopper
    assertEquals(CudaCausalLm.FlashKernel.MMA, CudaCausalLm.flashKernelFor(null, arch));
  }

  @Test
  void shouldTakeTheWgmmaKernelOnHopperAskedOrByDefault() {
    assertEquals(
        CudaCausalLm.FlashKernel.WGMMA,
        CudaCausalLm.flashKernelFor(CudaCausalLm.FlashKernel.WGMMA, "sm_90"));
    assertEquals(CudaCausalLm.FlashKernel.WGMMA, CudaCausalLm.flashKernelFor(null, "sm_90"));
    assertEquals(
        CudaCausalLm.FlashKernel.MMA,
        CudaCausalLm.flashKernelFor(CudaCausalLm.FlashKernel.MMA, "sm_90"));
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

  /**
   * The deployment identity's attention backend names every family whose bits differ: the attention
   * kernel, deterministic mode, and in deterministic mode the products' family (v1 and v2 give the
   * same bits, Hopper's wgmma its own).
   */
  @Test
  void shouldNameTheProductsFamilyInDeterministicModesIdentity() {
    assertEquals(
        "cuda-flash-bf16", CudaDeviceModel.attentionBackend("cuda-flash-bf16", false, "wgmma"));
    assertEquals(
        "cuda-flash-bf16-fixed-order",
        CudaDeviceModel.attentionBackend("cuda-flash-bf16", true, "mma"));
    assertEquals(
        "cuda-flash-wgmma-bf16-fixed-order-wgmma",
        CudaDeviceModel.attentionBackend("cuda-flash-wgmma-bf16", true, "wgmma"));
    assertEquals(
        "cuda-flash-wgmma-bf16-fixed-order",
        CudaDeviceModel.attentionBackend("cuda-flash-wgmma-bf16", true, "mma"));
    assertEquals(
        "cuda-flash-wgmma-bf16-fixed-order-wgmma-split",
        CudaDeviceModel.attentionBackend("cuda-flash-wgmma-bf16", true, "wgmma-split"));
    assertEquals(
        "cuda-paged-f32", CudaDeviceModel.attentionBackend("cuda-paged-f32", false, "mma"));
  }

  private static String kernelsSource() throws IOException {
    try (InputStream in =
        CudaCausalLm.class.getResourceAsStream("/io/tokenspeed/cuda/kernels.cu")) {
      assertNotNull(in, "kernels.cu");
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
  }

  /** kernels.cu declares {@code MACRO(d, stages, NAMEd)} at head sizes 64 and 128. */
  private static void assertDeclaredWithTheWgmmaStages(String source, String macro, String name) {
    for (int hd : new int[] {64, 128}) {
      String line =
          macro + "(" + hd + ", " + CudaCausalLm.wgmmaFlashStages(hd) + ", " + name + hd + ")";
      assertTrue(source.contains(line), line);
    }
  }
}

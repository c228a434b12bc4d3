package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.Gemm.FixedGemm;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.SplittableRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Which products {@link Gemm#apply} sends to the few-row kernel {@code gemv_bf16} and, in
 * deterministic mode, to which fixed-order kernel (the tile {@link FixedOrderTile#forShape} picks),
 * and how the {@code tokenspeed.cuda.gemv} and {@code tokenspeed.cuda.fixedgemm} switches read:
 * decided on the host, so checked without a GPU.
 */
class GemmRoutingTest {
  /** An H100's multiprocessors and opt-in shared memory per block (227 KiB). */
  private static final int SMS = 132;

  private static final int H100_SHARED = 227 * 1024;

  private static final long X = 0x7f00_0000_1000L;
  private static final long W = 0x7f00_4000_0000L;

  @Test
  void shouldTakeDecodeBatchesOfBf16WhenTheSwitchIsOn() {
    for (int rows = 1; rows <= 8; rows++) {
      assertTrue(Gemm.usesGemv(true, false, Gemm.R_16BF, rows, 4096, 6144, X, W), "rows " + rows);
      assertTrue(Gemm.usesGemv(true, false, Gemm.R_16BF, rows, 14336, 4096, X, W));
      assertTrue(Gemm.usesGemv(true, false, Gemm.R_16BF, rows, 64, 1001, X, W));
    }
    // a row's slice of a larger batch: 16-byte aligned as long as in is a multiple of 8
    assertTrue(Gemm.usesGemv(true, false, Gemm.R_16BF, 3, 4096, 128256, X + 5 * 4096 * 2, W));
  }

  @Test
  void shouldNeverTakeFixedOrderProducts() {
    for (int rows = 1; rows <= 8; rows++) {
      assertFalse(Gemm.usesGemv(true, true, Gemm.R_16BF, rows, 4096, 6144, X, W), "rows " + rows);
    }
  }

  @Test
  void shouldLeaveEverythingElseToCublas() {
    assertFalse(Gemm.usesGemv(false, false, Gemm.R_16BF, 1, 4096, 6144, X, W), "switch off");
    assertFalse(Gemm.usesGemv(true, false, Gemm.R_32F, 1, 4096, 6144, X, W), "float32");
    assertFalse(Gemm.usesGemv(true, false, Gemm.R_16BF, 9, 4096, 6144, X, W), "9 rows");
    assertFalse(Gemm.usesGemv(true, false, Gemm.R_16BF, 512, 4096, 6144, X, W), "prefill");
    assertFalse(Gemm.usesGemv(true, false, Gemm.R_16BF, 0, 4096, 6144, X, W), "no rows");
    assertFalse(Gemm.usesGemv(true, false, Gemm.R_16BF, 1, 4100, 6144, X, W), "in % 8 != 0");
    assertFalse(Gemm.usesGemv(true, false, Gemm.R_16BF, 1, 0, 6144, X, W), "in 0");
    assertFalse(Gemm.usesGemv(true, false, Gemm.R_16BF, 1, 4096, 0, X, W), "out 0");
    assertFalse(Gemm.usesGemv(true, false, Gemm.R_16BF, 1, 4096, 6144, X + 2, W), "x unaligned");
    assertFalse(Gemm.usesGemv(true, false, Gemm.R_16BF, 1, 4096, 6144, X, W + 8), "w unaligned");
  }

  @Test
  void shouldReadTheSwitchAsOnOrOffAndOffWhenUnset() {
    assertTrue(Gemm.gemvSwitch(null), "on by default");
    assertFalse(Gemm.gemvSwitch("off"));
    assertTrue(Gemm.gemvSwitch("on"));
    assertTrue(Gemm.gemvSwitch(" ON "));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> Gemm.gemvSwitch("yes"));
    assertTrue(e.getMessage().contains("tokenspeed.cuda.gemv"), e::getMessage);
    // what this JVM was started with (unset in the build: off)
    assertEquals(Gemm.gemvSwitch(System.getProperty(Gemm.GEMV_PROPERTY)), Gemm.GEMV);
  }

  @Test
  void shouldReadTheFixedGemmSwitchAsV1V2OrWgmmaAndWgmmaWhenUnset() {
    assertEquals(FixedGemm.WGMMA, Gemm.fixedGemmSwitch(null));
    assertEquals(FixedGemm.V1, Gemm.fixedGemmSwitch("v1"));
    assertEquals(FixedGemm.V1, Gemm.fixedGemmSwitch(" V1"));
    assertEquals(FixedGemm.V2, Gemm.fixedGemmSwitch("v2"));
    assertEquals(FixedGemm.V2, Gemm.fixedGemmSwitch("V2 "));
    assertEquals(FixedGemm.WGMMA, Gemm.fixedGemmSwitch("wgmma"));
    assertEquals(FixedGemm.WGMMA, Gemm.fixedGemmSwitch(" WGMMA\n"));
    for (String bad : new String[] {"", "2", "v3", "on", "v2x", "wgmma2", "w gmma"}) {
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> Gemm.fixedGemmSwitch(bad), bad);
      assertTrue(e.getMessage().contains("tokenspeed.cuda.fixedgemm"), e::getMessage);
      assertTrue(e.getMessage().contains("v1, v2 or wgmma"), e::getMessage);
    }
    // what this JVM was started with (unset in the build: wgmma, v2 off Hopper)
    assertEquals(
        Gemm.fixedGemmSwitch(System.getProperty(Gemm.FIXED_GEMM_PROPERTY)), Gemm.FIXED_GEMM);
  }

  /**
   * wgmma runs only where the kernels are compiled for sm_90a: compute capability 9.0. Elsewhere
   * the switch's {@code wgmma} reads as {@code v2}; v1 and v2 stay what they are everywhere.
   */
  @Test
  void shouldRunTheWgmmaFamilyOnlyOnComputeCapability90() {
    assertTrue(CudaDevice.runsWgmma(9, 0));
    assertEquals("sm_90a", CudaDevice.compileTarget(9, 0));
    for (int[] cc : new int[][] {{8, 0}, {8, 6}, {8, 9}, {10, 0}, {12, 0}}) {
      assertFalse(CudaDevice.runsWgmma(cc[0], cc[1]), cc[0] + "." + cc[1]);
    }
    assertEquals(FixedGemm.WGMMA, FixedGemm.WGMMA.on(true));
    assertEquals(FixedGemm.V2, FixedGemm.WGMMA.on(false));
    for (boolean hopper : new boolean[] {false, true}) {
      assertEquals(FixedGemm.V1, FixedGemm.V1.on(hopper));
      assertEquals(FixedGemm.V2, FixedGemm.V2.on(hopper));
    }
    // off Hopper, the wgmma switch routes as v2 does
    FixedGemm offHopper = FixedGemm.WGMMA.on(false);
    assertEquals(
        "gemm_fixed_bf16_mma_v2_128x128",
        Gemm.fixedOrderKernel(offHopper, Gemm.R_16BF, 2048, 4096, 6144, 108, 163 * 1024));
  }

  /**
   * The rule of {@link FixedOrderTile#forShape} on an H100 (132 multiprocessors, 227 KiB a block):
   * the largest tile with blocks for at least 9 tenths of the multiprocessors, else the smallest;
   * never a 128-row tile for 64 rows or fewer. The Llama 8B shapes of the timing test (out, in: qkv
   * 6144 × 4096, o 4096 × 4096, gate|up 28672 × 4096, down 4096 × 14336), the logits, and ragged
   * shapes (those of the GPU test's bit-for-bit comparison among them).
   */
  @ParameterizedTest(name = "rows {0}, out {1}, in {2}: {3} ({4} blocks)")
  @CsvSource({
    // qkv: 48, 96, 192 blocks of the three tiles at 128 rows
    "1, 6144, 4096, gemm_fixed_bf16_mma_v2_64x64, 96",
    "8, 6144, 4096, gemm_fixed_bf16_mma_v2_64x64, 96",
    "128, 6144, 4096, gemm_fixed_bf16_mma_v2_64x64, 192",
    "256, 6144, 4096, gemm_fixed_bf16_mma_v2_64x128, 192",
    "512, 6144, 4096, gemm_fixed_bf16_mma_v2_128x128, 192",
    "1024, 6144, 4096, gemm_fixed_bf16_mma_v2_128x128, 384",
    "2048, 6144, 4096, gemm_fixed_bf16_mma_v2_128x128, 768",
    "8192, 6144, 4096, gemm_fixed_bf16_mma_v2_128x128, 3072",
    // o: 128 blocks (9.7 tenths of 132) of each tile in turn as the rows double, then the largest
    "128, 4096, 4096, gemm_fixed_bf16_mma_v2_64x64, 128",
    "256, 4096, 4096, gemm_fixed_bf16_mma_v2_64x128, 128",
    "512, 4096, 4096, gemm_fixed_bf16_mma_v2_128x128, 128",
    "1024, 4096, 4096, gemm_fixed_bf16_mma_v2_128x128, 256",
    "2048, 4096, 4096, gemm_fixed_bf16_mma_v2_128x128, 512",
    // gate|up: the largest from 128 rows
    "128, 28672, 4096, gemm_fixed_bf16_mma_v2_128x128, 224",
    "256, 28672, 4096, gemm_fixed_bf16_mma_v2_128x128, 448",
    "512, 28672, 4096, gemm_fixed_bf16_mma_v2_128x128, 896",
    "1024, 28672, 4096, gemm_fixed_bf16_mma_v2_128x128, 1792",
    // down: as o
    "128, 4096, 14336, gemm_fixed_bf16_mma_v2_64x64, 128",
    "256, 4096, 14336, gemm_fixed_bf16_mma_v2_64x128, 128",
    "512, 4096, 14336, gemm_fixed_bf16_mma_v2_128x128, 128",
    "1024, 4096, 14336, gemm_fixed_bf16_mma_v2_128x128, 256",
    "2048, 4096, 14336, gemm_fixed_bf16_mma_v2_128x128, 512",
    // the logits (128,256 outputs): a decode batch keeps to the 64-row tiles
    "1, 128256, 4096, gemm_fixed_bf16_mma_v2_64x128, 1002",
    "64, 128256, 4096, gemm_fixed_bf16_mma_v2_64x128, 1002",
    "65, 128256, 4096, gemm_fixed_bf16_mma_v2_128x128, 1002",
    // 64 rows: too few for a 128-row tile; 65: one 128-row tile, two 64-row ones
    "64, 28672, 4096, gemm_fixed_bf16_mma_v2_64x128, 224",
    "65, 28672, 4096, gemm_fixed_bf16_mma_v2_128x128, 224",
    // ragged: no tile fills the GPU, so the smallest
    "7, 4096, 4096, gemm_fixed_bf16_mma_v2_64x64, 64",
    "300, 200, 136, gemm_fixed_bf16_mma_v2_64x64, 20",
    "129, 1001, 4104, gemm_fixed_bf16_mma_v2_64x64, 48",
    "4096, 37, 64, gemm_fixed_bf16_mma_v2_64x64, 64",
    "257, 513, 96, gemm_fixed_bf16_mma_v2_64x64, 45",
    "385, 256, 4144, gemm_fixed_bf16_mma_v2_64x64, 28",
    // ragged about the threshold: 8 · 16 = 128 blocks of 128 × 128 are 9.7 tenths of 132,
    // 7 · 16 = 112 are 8.5; 7 · 17 = 119 are 9.02, 2 · 59 = 118 are 8.94
    "1000, 2000, 14336, gemm_fixed_bf16_mma_v2_128x128, 128",
    "890, 2000, 14336, gemm_fixed_bf16_mma_v2_64x128, 224",
    "800, 2100, 4096, gemm_fixed_bf16_mma_v2_128x128, 119",
    "200, 7500, 4096, gemm_fixed_bf16_mma_v2_64x128, 236"
  })
  void shouldPickTheLargestTileThatFillsTheGpu(
      int rows, int out, int in, String kernel, long blocks) {
    assertEquals(
        kernel, Gemm.fixedOrderKernel(FixedGemm.V2, Gemm.R_16BF, rows, in, out, SMS, H100_SHARED));
    assertEquals(blocks, FixedOrderTile.ofKernel(kernel).blocks(rows, out));
    // the baseline: v1 for every one of them
    assertEquals(
        Gemm.V1_KERNEL,
        Gemm.fixedOrderKernel(FixedGemm.V1, Gemm.R_16BF, rows, in, out, SMS, H100_SHARED));
  }

  @Test
  void shouldPassOverTilesWhoseSharedMemoryTheDeviceLacks() {
    // an A100 (108 multiprocessors, 163 KiB a block): every tile fits; 2048 rows of qkv in
    // 128 × 128 tiles
    assertEquals(
        "gemm_fixed_bf16_mma_v2_128x128",
        Gemm.fixedOrderKernel(FixedGemm.V2, Gemm.R_16BF, 2048, 4096, 6144, 108, 163 * 1024));
    // 99 KiB (sm_86, sm_89): the 96 KiB tiles still fit
    assertEquals(
        "gemm_fixed_bf16_mma_v2_128x128",
        Gemm.fixedOrderKernel(FixedGemm.V2, Gemm.R_16BF, 2048, 4096, 6144, 84, 99 * 1024));
    // a KiB short of 96: both 96 KiB tiles are passed over, and 64 × 64 takes it
    assertEquals(
        "gemm_fixed_bf16_mma_v2_64x64",
        Gemm.fixedOrderKernel(FixedGemm.V2, Gemm.R_16BF, 2048, 4096, 6144, 84, 95 * 1024));
    // 64 KiB: only the smallest; under it, none, and v1 (15 KiB of static shared memory) takes it
    assertEquals(
        "gemm_fixed_bf16_mma_v2_64x64",
        Gemm.fixedOrderKernel(FixedGemm.V2, Gemm.R_16BF, 2048, 4096, 6144, 84, 64 * 1024));
    assertEquals(
        Gemm.V1_KERNEL,
        Gemm.fixedOrderKernel(FixedGemm.V2, Gemm.R_16BF, 2048, 4096, 6144, 80, 48 * 1024));
  }

  @Test
  void shouldKeepTheOneThreadPerOutputKernelsWhateverTheSwitch() {
    for (FixedGemm family : FixedGemm.values()) {
      // in not a multiple of 8 (the tensor-core kernels' 16-byte loads), float32
      assertEquals(
          "gemm_fixed_bf16",
          Gemm.fixedOrderKernel(family, Gemm.R_16BF, 4096, 4100, 4096, SMS, H100_SHARED));
      assertEquals(
          "gemm_fixed_f32",
          Gemm.fixedOrderKernel(family, Gemm.R_32F, 4096, 4096, 4096, SMS, H100_SHARED));
    }
  }

  /**
   * The tiles' constants against their kernels in kernels.cu ({@code GEMM_FIXED_V2(name, rows,
   * outs, warps along rows, warps along outputs, stages, blocks per multiprocessor)}): the launch's
   * threads and shared memory must be the kernel's, and the blocks per multiprocessor its launch
   * bounds promise must fit an H100's 228 KiB of shared memory (1 KiB reserved per block).
   */
  @Test
  void shouldLaunchEachTileWithItsKernelsThreadsAndSharedMemory() throws IOException {
    String source;
    try (InputStream in = Gemm.class.getResourceAsStream("/io/tokenspeed/cuda/kernels.cu")) {
      assertNotNull(in, "kernels.cu");
      source = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
    assertTrue(source.contains("#define F2_K " + FixedOrderTile.SLICE_K + "\n"), "F2_K");
    // the few-row kernels' warps, which their launches' threads repeat (8 and 4)
    assertTrue(source.contains("GEMV_BF16(8, " + Gemm.GEMV_KERNEL + ")"), "gemv_bf16");
    assertTrue(source.contains("GEMV_BF16(4, " + Gemm.GEMV_W4_KERNEL + ")"), "gemv_bf16_w4");
    Pattern line =
        Pattern.compile(
            "^GEMM_FIXED_V2\\((\\w+), (\\d+), (\\d+), (\\d+), (\\d+), (\\d+), (\\d+)\\)$",
            Pattern.MULTILINE);
    Matcher m = line.matcher(source);
    int kernels = 0;
    while (m.find()) {
      kernels++;
      FixedOrderTile tile = FixedOrderTile.ofKernel(m.group(1));
      assertEquals(tile.rows, Integer.parseInt(m.group(2)), tile + " rows");
      assertEquals(tile.outs, Integer.parseInt(m.group(3)), tile + " outs");
      int warps = Integer.parseInt(m.group(4)) * Integer.parseInt(m.group(5));
      assertEquals(tile.threads, 32 * warps, tile + " threads");
      assertEquals(tile.stages, Integer.parseInt(m.group(6)), tile + " stages");
      int perMultiprocessor = Integer.parseInt(m.group(7));
      assertTrue(tile.sharedBytes() <= H100_SHARED, tile + ": " + tile.sharedBytes());
      assertTrue(
          perMultiprocessor * (tile.sharedBytes() + 1024) <= 228 * 1024,
          tile + ": " + perMultiprocessor + " blocks of " + tile.sharedBytes());
    }
    assertEquals(FixedOrderTile.values().length, kernels, "GEMM_FIXED_V2 kernels");
    assertEquals(3, kernels, "GEMM_FIXED_V2 kernels: 128 × 128, 64 × 128, 64 × 64");
    // the table of FixedOrderTile's comment
    assertEquals(96 * 1024, FixedOrderTile.T128X128.sharedBytes());
    assertEquals(96 * 1024, FixedOrderTile.T64X128.sharedBytes());
    assertEquals(64 * 1024, FixedOrderTile.T64X64.sharedBytes());
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> FixedOrderTile.ofKernel("gemm_fixed"));
    assertTrue(e.getMessage().contains("kernel=gemm_fixed"), e::getMessage);
    // the 128 × 256 tile, dropped: its kernel is gone from kernels.cu
    assertFalse(source.contains("GEMM_FIXED_V2(gemm_fixed_bf16_mma_v2,"), "128 × 256");
    assertThrows(
        IllegalArgumentException.class, () -> FixedOrderTile.ofKernel("gemm_fixed_bf16_mma_v2"));
  }

  /**
   * The rule of {@link FixedOrderWgmmaTile#forShape} on an H100 (132 multiprocessors, 227 KiB a
   * block): the wgmma tile of the fewest estimated nanoseconds (its waves times its slice time),
   * never a 128-row tile for 64 rows or fewer. The Llama 8B shapes of the timing test at decode and
   * prefill sizes (at 1, 16, 64, 512, 2,048 and 8,192 rows each pick was the fastest tile measured
   * on an H100, or within 4 % of it), the logits, and ragged shapes of the GPU test.
   */
  @ParameterizedTest(name = "rows {0}, out {1}, in {2}: {3} ({4} blocks)")
  @CsvSource({
    // qkv: decode batches take the narrowest tile, 192 blocks (one wave of two a multiprocessor)
    "1, 6144, 4096, gemm_fixed_wgmma_64x32, 192",
    "16, 6144, 4096, gemm_fixed_wgmma_64x32, 192",
    "64, 6144, 4096, gemm_fixed_wgmma_64x32, 192",
    "128, 6144, 4096, gemm_fixed_wgmma_64x64, 192",
    "256, 6144, 4096, gemm_fixed_wgmma_64x128, 192",
    // 512 and 1,024 rows: 128 x 192 fills the waves 128 x 256 leaves part-empty
    "512, 6144, 4096, gemm_fixed_wgmma_128x192, 128",
    "1024, 6144, 4096, gemm_fixed_wgmma_128x192, 256",
    "2048, 6144, 4096, gemm_fixed_wgmma_128x256, 384",
    "8192, 6144, 4096, gemm_fixed_wgmma_128x256, 1536",
    // o: one wave of the narrowest tile whose blocks fit in one
    "1, 4096, 4096, gemm_fixed_wgmma_64x32, 128",
    "64, 4096, 4096, gemm_fixed_wgmma_64x32, 128",
    "128, 4096, 4096, gemm_fixed_wgmma_64x32, 256",
    "256, 4096, 4096, gemm_fixed_wgmma_64x64, 256",
    "512, 4096, 4096, gemm_fixed_wgmma_64x128, 256",
    "1024, 4096, 4096, gemm_fixed_wgmma_128x256, 128",
    "2048, 4096, 4096, gemm_fixed_wgmma_128x256, 256",
    "8192, 4096, 4096, gemm_fixed_wgmma_128x256, 1024",
    // gate|up
    "1, 28672, 4096, gemm_fixed_wgmma_64x128, 224",
    "64, 28672, 4096, gemm_fixed_wgmma_64x128, 224",
    "65, 28672, 4096, gemm_fixed_wgmma_128x256, 112",
    "128, 28672, 4096, gemm_fixed_wgmma_128x256, 112",
    "256, 28672, 4096, gemm_fixed_wgmma_128x256, 224",
    "2048, 28672, 4096, gemm_fixed_wgmma_128x256, 1792",
    // down: as o
    "16, 4096, 14336, gemm_fixed_wgmma_64x32, 128",
    "512, 4096, 14336, gemm_fixed_wgmma_64x128, 256",
    "2048, 4096, 14336, gemm_fixed_wgmma_128x256, 256",
    // the logits (128,256 outputs): a decode batch keeps to the 64-row tiles
    "1, 128256, 4096, gemm_fixed_wgmma_64x128, 1002",
    "64, 128256, 4096, gemm_fixed_wgmma_64x128, 1002",
    "65, 128256, 4096, gemm_fixed_wgmma_128x256, 501",
    // ragged: one wave of the narrowest tile
    "3, 1000, 4104, gemm_fixed_wgmma_64x32, 32",
    "200, 1000, 4104, gemm_fixed_wgmma_64x32, 128",
    "300, 200, 136, gemm_fixed_wgmma_64x32, 35",
    "4096, 37, 64, gemm_fixed_wgmma_64x32, 128",
    "2048, 6144, 4104, gemm_fixed_wgmma_128x256, 384"
  })
  void shouldPickTheWgmmaTileOfTheFewestEstimatedNanoseconds(
      int rows, int out, int in, String kernel, long blocks) {
    assertEquals(
        kernel,
        Gemm.fixedOrderKernel(FixedGemm.WGMMA, Gemm.R_16BF, rows, in, out, SMS, H100_SHARED));
    assertEquals(blocks, FixedOrderWgmmaTile.ofKernel(kernel).blocks(rows, out));
  }

  /**
   * The rule's picks for Llama 8B's projections (qkv 6144 × 4096, o 4096 × 4096, gate|up 28672 ×
   * 4096, down 4096 × 14336, k in the parts {@link Gemm#splitParts} gives: down in two) on an H100,
   * from a decode step to prefill. 128 × 192 takes qkv at 512 and 1,024 rows and gate|up at 512,
   * where 128 × 256's last wave runs part-empty; every other pick is what it was before that tile.
   */
  @ParameterizedTest(name = "{0} at {1} rows: {4} ({5} blocks)")
  @CsvSource({
    "qkv, 1, 6144, 4096, gemm_fixed_wgmma_64x32, 192",
    "qkv, 64, 6144, 4096, gemm_fixed_wgmma_64x32, 192",
    "qkv, 512, 6144, 4096, gemm_fixed_wgmma_128x192, 128",
    "qkv, 1024, 6144, 4096, gemm_fixed_wgmma_128x192, 256",
    "qkv, 2048, 6144, 4096, gemm_fixed_wgmma_128x256, 384",
    "qkv, 8192, 6144, 4096, gemm_fixed_wgmma_128x256, 1536",
    "o, 1, 4096, 4096, gemm_fixed_wgmma_64x32, 128",
    "o, 64, 4096, 4096, gemm_fixed_wgmma_64x32, 128",
    "o, 512, 4096, 4096, gemm_fixed_wgmma_64x128, 256",
    "o, 1024, 4096, 4096, gemm_fixed_wgmma_128x256, 128",
    "o, 2048, 4096, 4096, gemm_fixed_wgmma_128x256, 256",
    "o, 8192, 4096, 4096, gemm_fixed_wgmma_128x256, 1024",
    "gate|up, 1, 28672, 4096, gemm_fixed_wgmma_64x128, 224",
    "gate|up, 64, 28672, 4096, gemm_fixed_wgmma_64x128, 224",
    "gate|up, 512, 28672, 4096, gemm_fixed_wgmma_128x192, 600",
    "gate|up, 1024, 28672, 4096, gemm_fixed_wgmma_128x256, 896",
    "gate|up, 2048, 28672, 4096, gemm_fixed_wgmma_128x256, 1792",
    "gate|up, 8192, 28672, 4096, gemm_fixed_wgmma_128x256, 7168",
    // k in two parts: the rule counts twice the blocks below (a block for each part)
    "down, 1, 4096, 14336, gemm_fixed_wgmma_64x32, 128",
    "down, 64, 4096, 14336, gemm_fixed_wgmma_64x32, 128",
    "down, 512, 4096, 14336, gemm_fixed_wgmma_128x256, 64",
    "down, 1024, 4096, 14336, gemm_fixed_wgmma_128x256, 128",
    "down, 2048, 4096, 14336, gemm_fixed_wgmma_128x256, 256",
    "down, 8192, 4096, 14336, gemm_fixed_wgmma_128x256, 1024"
  })
  void shouldPickTheseWgmmaTilesForLlama8b(
      String product, int rows, int out, int in, String kernel, long blocks) {
    int parts = Gemm.splitParts(in, out);
    assertEquals(product.equals("down") ? 2 : 1, parts, product + "'s parts of k");
    FixedOrderWgmmaTile pick = FixedOrderWgmmaTile.forShape(rows, out, parts, SMS, H100_SHARED);
    assertEquals(kernel, pick.kernel);
    assertEquals(blocks, pick.blocks(rows, out));
    assertTrue(pick.measured, pick.kernel);
  }

  /**
   * 128 × 192's slice time is its slowest product's (gate|up's 893 ns on an H100, scaled to the
   * others' calibration: 849), not its fastest: with qkv's it would take 8,192 rows of gate|up in
   * 73 waves against 128 × 256's 55, which its measured time makes 7 % slower. Every tile is
   * measured, so the rule considers them all.
   */
  @Test
  void shouldTakeTheNarrowerWideTileOnlyWhereItsWavesPay() {
    FixedOrderWgmmaTile t192 = FixedOrderWgmmaTile.T128X192;
    for (FixedOrderWgmmaTile tile : FixedOrderWgmmaTile.values()) {
      assertTrue(tile.measured, tile.kernel);
    }
    assertEquals(893 * 1068 / 1123, t192.sliceNanos);
    assertEquals(t192, FixedOrderWgmmaTile.ofKernel("gemm_fixed_wgmma_128x192"));
    assertEquals(9600, t192.blocks(8192, 28672));
    assertEquals(
        FixedOrderWgmmaTile.T128X256, FixedOrderWgmmaTile.forShape(8192, 28672, SMS, H100_SHARED));
    assertEquals(t192, FixedOrderWgmmaTile.forShape(512, 6144, SMS, H100_SHARED));
    // with qkv's own slice time (838 ns scaled: 797) gate|up at 8,192 rows would go to 128 x 192
    long gateUpAt192 = Math.ceilDiv(t192.blocks(8192, 28672), SMS) * (838L * 1068 / 1123);
    assertTrue(
        gateUpAt192 < FixedOrderWgmmaTile.T128X256.sliceEstimate(8192, 28672, 1, SMS),
        "the fastest product's time would move gate|up's pick");
  }

  /**
   * The parts of k under {@code tokenspeed.cuda.fixedsplit}: a function of the weight's shape only
   * (Llama 8B's down projection in two, the other products whole), never of the rows; the switch
   * reads off and on and refuses anything else; with parts, the rule counts every part's blocks
   * (512 rows of down: 64 blocks of 128 × 256 become one wave of 128).
   */
  @Test
  void shouldSplitKByTheWeightsShapeAlone() {
    assertEquals(2, Gemm.splitParts(14336, 4096));
    assertEquals(1, Gemm.splitParts(4096, 4096));
    assertEquals(1, Gemm.splitParts(4096, 6144));
    assertEquals(1, Gemm.splitParts(4096, 28672));
    assertEquals(1, Gemm.splitParts(4096, 128256));
    assertEquals(2, Gemm.splitParts(8192, 2048)); // Llama 3.2 1B's down
    assertEquals(2, Gemm.splitParts(4104, 1000));
    assertEquals(1, Gemm.splitParts(192, 37)); // 3 slices of 64: too short to halve
    assertEquals(2, Gemm.splitParts(256, 37));
    assertTrue(Gemm.FIXED_SPLIT, "on unless -Dtokenspeed.cuda.fixedsplit=off");
    assertTrue(KernelSwitch.read(Gemm.FIXED_SPLIT_PROPERTY, " ON", "off", "on"));
    assertThrows(
        IllegalArgumentException.class,
        () -> KernelSwitch.read(Gemm.FIXED_SPLIT_PROPERTY, "2", "off", "on"));
    assertEquals(
        FixedOrderWgmmaTile.T64X128, FixedOrderWgmmaTile.forShape(512, 4096, 1, SMS, H100_SHARED));
    assertEquals(
        FixedOrderWgmmaTile.T128X256, FixedOrderWgmmaTile.forShape(512, 4096, 2, SMS, H100_SHARED));
    assertEquals(
        FixedOrderWgmmaTile.forShape(300, 1000, SMS, H100_SHARED),
        FixedOrderWgmmaTile.forShape(300, 1000, 1, SMS, H100_SHARED));
  }

  /**
   * The wgmma rule over random shapes and devices (1 to 16,384 rows, 1 to 200,000 outputs, 60 to
   * 160 multiprocessors, the shared memory of Hopper and of smaller devices): the pick is a
   * measured tile that takes the rows (its shared memory fits, not a 128-row tile for 64 rows or
   * fewer), no measured tile that takes them has a smaller estimate, and none earlier in the list
   * (larger) has the same one; null only when no tile fits the shared memory.
   */
  @ParameterizedTest
  @ValueSource(longs = {1, 2, 3})
  void shouldPickAnEligibleWgmmaTileOfTheLeastEstimateLargestOnTies(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    FixedOrderWgmmaTile[] tiles = FixedOrderWgmmaTile.values();
    for (int i = 0; i < 20_000; i++) {
      int rows = rnd.nextInt(8) == 0 ? 1 + rnd.nextInt(128) : 1 + rnd.nextInt(16_384);
      int out = 1 + rnd.nextInt(200_000);
      int sms = 60 + rnd.nextInt(101);
      int shared = new int[] {H100_SHARED, 163 * 1024, 99 * 1024, 48 * 1024}[rnd.nextInt(4)];
      FixedOrderWgmmaTile pick = FixedOrderWgmmaTile.forShape(rows, out, sms, shared);
      String what = rows + " x " + out + " on " + sms + " SMs, " + shared + " bytes: " + pick;
      boolean anyFits = false;
      for (FixedOrderWgmmaTile t : tiles) {
        anyFits |= t.measured && t.sharedBytes() <= shared;
      }
      if (!anyFits) {
        assertNull(pick, what);
        continue;
      }
      assertNotNull(pick, what);
      assertTrue(pick.measured, what + ": a candidate whose slice time is an estimate");
      assertTrue(pick.sharedBytes() <= shared, what);
      assertTrue(rows > 64 || pick.rows == 64, what);
      long mine = pick.sliceEstimate(rows, out, 1, sms);
      for (FixedOrderWgmmaTile t : tiles) {
        if (!t.measured || !ProductTile.takes(t, ProductTile.shortestRows(tiles), rows, shared)) {
          continue;
        }
        long theirs = t.sliceEstimate(rows, out, 1, sms);
        assertTrue(mine <= theirs, what + " vs " + t + ": " + mine + " > " + theirs);
        if (t.ordinal() < pick.ordinal()) {
          assertTrue(theirs > mine, what + ": " + t + " ties and is larger");
        }
      }
    }
  }

  /**
   * With the wgmma family, every bf16 product with {@code in} a multiple of 8 goes to a wgmma tile,
   * whatever its rows (decode's 1 to prefill's 8,192) and outputs: none falls back to the mma.sync
   * kernels, whose bits differ, on a Hopper GPU (132 multiprocessors on an H100 SXM, 114 on a PCIe
   * card, both with 227 KiB a block).
   */
  @Test
  void shouldSendEveryBf16ProductToAWgmmaTileOnHopper() {
    for (int sms : new int[] {132, 114}) {
      for (int rows = 1; rows <= 8192; rows += rows < 300 ? 1 : 97) {
        for (int out : new int[] {1, 8, 37, 1000, 4096, 6144, 28672, 128256}) {
          String kernel =
              Gemm.fixedOrderKernel(
                  FixedGemm.WGMMA, Gemm.R_16BF, rows, 4104, out, sms, H100_SHARED);
          assertTrue(kernel.startsWith("gemm_fixed_wgmma_"), rows + " x " + out + ": " + kernel);
          assertEquals(
              FixedOrderWgmmaTile.forShape(rows, out, sms, H100_SHARED),
              FixedOrderWgmmaTile.ofKernel(kernel));
        }
      }
    }
    // a block of less than 193 KiB (no Hopper GPU): 128 x 256 is passed over
    assertEquals(
        "gemm_fixed_wgmma_128x192",
        Gemm.fixedOrderKernel(FixedGemm.WGMMA, Gemm.R_16BF, 2048, 4096, 6144, SMS, 163 * 1024));
  }

  /**
   * The wgmma tiles' constants against their kernels in kernels.cu ({@code GEMM_FIXED_WGMMA(name,
   * warpgroups, outs, stages, blocks per multiprocessor)}): the launch's threads and shared memory
   * must be the kernel's, and the blocks per multiprocessor its launch bounds promise must fit an
   * H100's 228 KiB of shared memory (1 KiB reserved per block).
   */
  @Test
  void shouldLaunchEachWgmmaTileWithItsKernelsThreadsAndSharedMemory() throws IOException {
    String source;
    try (InputStream in = Gemm.class.getResourceAsStream("/io/tokenspeed/cuda/kernels.cu")) {
      assertNotNull(in, "kernels.cu");
      source = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
    assertTrue(source.contains("#define FW_K " + FixedOrderWgmmaTile.SLICE_K + "\n"), "FW_K");
    Pattern line =
        Pattern.compile(
            "^GEMM_FIXED_WGMMA\\((\\w+), (\\d+), (\\d+), (\\d+), (\\d+)\\)$", Pattern.MULTILINE);
    Matcher m = line.matcher(source);
    int kernels = 0;
    while (m.find()) {
      kernels++;
      FixedOrderWgmmaTile tile = FixedOrderWgmmaTile.ofKernel(m.group(1));
      int warpgroups = Integer.parseInt(m.group(2));
      assertEquals(tile.warpgroups, warpgroups, tile + " warpgroups");
      assertEquals(tile.rows, 64 * warpgroups, tile + " rows");
      assertEquals(tile.threads(), 128 * warpgroups, tile + " threads");
      assertEquals(tile.outs, Integer.parseInt(m.group(3)), tile + " outs");
      assertEquals(tile.stages, Integer.parseInt(m.group(4)), tile + " stages");
      int perMultiprocessor = Integer.parseInt(m.group(5));
      assertEquals(tile.blocksPerSm, perMultiprocessor, tile + " blocks a multiprocessor");
      assertTrue(tile.sharedBytes() <= H100_SHARED, tile + ": " + tile.sharedBytes());
      assertTrue(
          perMultiprocessor * (tile.sharedBytes() + 1024) <= 228 * 1024,
          tile + ": " + perMultiprocessor + " blocks of " + tile.sharedBytes());
      assertTrue(tile.kernel.endsWith("_" + tile.rows + "x" + tile.outs), tile.kernel);
    }
    assertEquals(FixedOrderWgmmaTile.values().length, kernels, "GEMM_FIXED_WGMMA kernels");
    assertEquals(6, kernels, "GEMM_FIXED_WGMMA kernels: 128 x 256 down to 64 x 32");
    // the table of FixedOrderWgmmaTile's comment: stages of (rows + outs) · 128 bytes, 1 KiB more
    assertEquals(193 * 1024, FixedOrderWgmmaTile.T128X256.sharedBytes());
    assertEquals(161 * 1024, FixedOrderWgmmaTile.T128X192.sharedBytes());
    assertEquals(164_864, FixedOrderWgmmaTile.T128X192.sharedBytes());
    for (FixedOrderWgmmaTile tile : FixedOrderWgmmaTile.values()) {
      if (tile.blocksPerSm == 2) {
        assertEquals(97 * 1024, tile.sharedBytes(), tile.kernel);
      }
    }
    // largest first: by outputs a block (rows times outputs), then by rows
    FixedOrderWgmmaTile[] tiles = FixedOrderWgmmaTile.values();
    for (int i = 1; i < tiles.length; i++) {
      long before = (long) tiles[i - 1].rows * tiles[i - 1].outs;
      long after = (long) tiles[i].rows * tiles[i].outs;
      assertTrue(
          before > after || before == after && tiles[i - 1].rows > tiles[i].rows,
          tiles[i - 1] + " before " + tiles[i]);
    }
    // every kernel's wgmma N has its fw_mma
    for (FixedOrderWgmmaTile tile : tiles) {
      assertTrue(
          source.contains("fw_mma<" + tile.outs + ">(float (&d)[" + tile.outs / 2 + "]"),
          "fw_mma<" + tile.outs + ">");
      assertTrue(
          source.contains("wgmma.mma_async.sync.aligned.m64n" + tile.outs + "k16.f32.bf16.bf16"),
          "m64n" + tile.outs + "k16");
    }
    // the kernels sit in their own section, wgmma only where the sm_90a feature macro is defined
    assertTrue(source.contains("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)"), "sm_90a guard");
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> FixedOrderWgmmaTile.ofKernel("gemm_fixed_wgmma"));
    assertTrue(e.getMessage().contains("kernel=gemm_fixed_wgmma"), e::getMessage);
  }
}

package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * Which products {@link Gemm#apply} sends to the few-row kernel {@code gemv_bf16} and, in
 * deterministic mode, to which fixed-order kernel, and how the {@code tokenspeed.cuda.gemv} and
 * {@code tokenspeed.cuda.fixedgemm} switches read: decided on the host, so checked without a GPU.
 */
class GemmRoutingTest {
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
  void shouldReadTheFixedGemmSwitchAsV1OrV2AndV1WhenUnset() {
    assertFalse(Gemm.fixedGemmSwitch(null));
    assertFalse(Gemm.fixedGemmSwitch("v1"));
    assertFalse(Gemm.fixedGemmSwitch(" V1"));
    assertTrue(Gemm.fixedGemmSwitch("v2"));
    assertTrue(Gemm.fixedGemmSwitch("V2 "));
    for (String bad : new String[] {"", "2", "v3", "on", "v2x"}) {
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> Gemm.fixedGemmSwitch(bad), bad);
      assertTrue(e.getMessage().contains("tokenspeed.cuda.fixedgemm"), e::getMessage);
      assertTrue(e.getMessage().contains("v1 or v2"), e::getMessage);
    }
    // what this JVM was started with (unset in the build: v1)
    assertEquals(
        Gemm.fixedGemmSwitch(System.getProperty(Gemm.FIXED_GEMM_PROPERTY)), Gemm.FIXED_GEMM_V2);
  }

  @Test
  void shouldSendPrefillToTheSecondFixedOrderKernelOnlyWhenTheSwitchSaysV2() {
    int sms = 132;
    String v1 = "gemm_fixed_bf16_mma";
    String v2 = "gemm_fixed_bf16_mma_v2";
    for (int rows : new int[] {2048, 8192}) {
      for (int[] nk : new int[][] {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}}) {
        assertEquals(v2, Gemm.fixedOrderKernel(true, Gemm.R_16BF, rows, nk[1], nk[0], sms));
        assertEquals(v1, Gemm.fixedOrderKernel(false, Gemm.R_16BF, rows, nk[1], nk[0], sms));
      }
    }
    // few rows, or too few 128 × 256 tiles to occupy half the multiprocessors: the first kernel
    assertEquals(v1, Gemm.fixedOrderKernel(true, Gemm.R_16BF, 1, 4096, 6144, sms));
    assertEquals(v1, Gemm.fixedOrderKernel(true, Gemm.R_16BF, 64, 4096, 28672, sms));
    assertEquals(v1, Gemm.fixedOrderKernel(true, Gemm.R_16BF, 512, 4096, 4096, sms));
    assertEquals(v2, Gemm.fixedOrderKernel(true, Gemm.R_16BF, 65, 4096, 28672, sms));
    assertEquals(v2, Gemm.fixedOrderKernel(true, Gemm.R_16BF, 1024, 4096, 4096, sms));
    // in not a multiple of 8, float32: the one-thread-per-output kernels whatever the switch
    assertEquals(
        "gemm_fixed_bf16", Gemm.fixedOrderKernel(true, Gemm.R_16BF, 4096, 4100, 4096, sms));
    assertEquals("gemm_fixed_f32", Gemm.fixedOrderKernel(true, Gemm.R_32F, 4096, 4096, 4096, sms));
  }
}

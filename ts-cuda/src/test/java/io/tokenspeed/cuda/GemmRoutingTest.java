package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * Which products {@link Gemm#apply} sends to the few-row kernel {@code gemv_bf16}, and how the
 * {@code tokenspeed.cuda.gemv} switch reads: decided on the host, so checked without a GPU.
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
    assertFalse(Gemm.gemvSwitch(null));
    assertFalse(Gemm.gemvSwitch("off"));
    assertTrue(Gemm.gemvSwitch("on"));
    assertTrue(Gemm.gemvSwitch(" ON "));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> Gemm.gemvSwitch("yes"));
    assertTrue(e.getMessage().contains("tokenspeed.cuda.gemv"), e::getMessage);
    // what this JVM was started with (unset in the build: off)
    assertEquals(Gemm.gemvSwitch(System.getProperty(Gemm.GEMV_PROPERTY)), Gemm.GEMV);
  }
}

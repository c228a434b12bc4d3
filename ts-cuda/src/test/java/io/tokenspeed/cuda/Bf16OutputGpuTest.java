package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.model.CudaCausalLm;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Locale;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Normal mode's bf16 gate | up path: cuBLAS products that write bf16 ({@link Gemm#applyBf16Output})
 * against the same products written as float32 and rounded, and {@code silu_mul_bf16} against a
 * float64 reference on the same bf16 inputs; and the route's limits (only cuBLAS products write
 * bf16).
 */
class Bf16OutputGpuTest extends OnTheGpu {

  /**
   * One rounding to bf16 is at most half an ulp, 2^-9 to 2^-8 of the value; a float32 value a hair
   * from a rounding midpoint may round the other way on another path: one ulp, 2^-7 at most.
   */
  private static final double ROUNDING = Math.scalb(1.0, -7);

  @ParameterizedTest
  @CsvSource({"9, 512, 1536", "300, 1024, 768", "2048, 4096, 2816"})
  void shouldRoundTheFloat32ProductOnce(int rows, int in, int out) {
    SplittableRandom rnd = new SplittableRandom(rows * 131L + in);
    short[] x = bf16s(rnd, rows * in, 1f);
    short[] w = bf16s(rnd, out * in, 0.05f);
    Gemm gemm = new Gemm(device, false);
    try (Arena arena = Arena.ofConfined();
        DeviceBuffer dx = device.allocate((long) x.length * 2);
        DeviceBuffer dw = device.allocate((long) w.length * 2);
        DeviceBuffer f32 = device.allocate((long) rows * out * 4);
        DeviceBuffer b16 = device.allocate((long) rows * out * 2)) {
      dx.copyFrom(arena.allocateFrom(ValueLayout.JAVA_SHORT, x), 0);
      dw.copyFrom(arena.allocateFrom(ValueLayout.JAVA_SHORT, w), 0);
      assertTrue(gemm.writesBf16(dx.pointer(), dw.pointer(), Gemm.R_16BF, rows, in, out));
      gemm.applyCublas(
          dx.pointer(), dw.pointer(), Gemm.R_16BF, f32.pointer(), rows, in, out, false);
      gemm.applyBf16Output(dx.pointer(), dw.pointer(), b16.pointer(), rows, in, out);
      device.synchronize();
      float[] want = f32.readFloats(0, rows * out);
      short[] got = readShorts(arena, b16, rows * out);
      // the two products may sum in other orders (cuBLAS picks an algorithm per output type): a
      // sum near zero is compared against the outputs' scale, not its own
      double rms = 0;
      for (float v : want) {
        rms += (double) v * v;
      }
      double floor = 1e-4 * Math.sqrt(rms / want.length);
      double worst = 0;
      for (int i = 0; i < want.length; i++) {
        double g = Bf16Bits.value(got[i]);
        worst = Math.max(worst, Math.abs(g - want[i]) / (Math.abs(want[i]) + floor));
      }
      System.out.printf(
          Locale.ROOT,
          "bf16 outputs, %d x %d x %d: worst relative distance to the float32 product %.2e%n",
          rows,
          in,
          out,
          worst);
      assertTrue(worst <= ROUNDING, "relative distance " + worst);
    }
  }

  @ParameterizedTest
  @CsvSource({"3, 4096", "5, 1001", "2, 14336"})
  void shouldComputeSiluTimesUpFromTheRoundedInputs(int rows, int inter) {
    SplittableRandom rnd = new SplittableRandom(inter * 7L + rows);
    short[] gu = bf16s(rnd, rows * 2 * inter, 6f);
    try (Arena arena = Arena.ofConfined();
        DeviceBuffer dgu = device.allocate((long) gu.length * 2);
        DeviceBuffer dout = device.allocate((long) rows * inter * 2)) {
      dgu.copyFrom(arena.allocateFrom(ValueLayout.JAVA_SHORT, gu), 0);
      int span = CudaCausalLm.SILU_SPAN;
      device.launch(
          "silu_mul_bf16",
          rows,
          Math.ceilDiv(inter, span),
          span / 4,
          0,
          dgu.pointer(),
          inter,
          dout.pointer());
      device.synchronize();
      short[] got = readShorts(arena, dout, rows * inter);
      double worst = 0;
      for (int t = 0; t < rows; t++) {
        for (int i = 0; i < inter; i++) {
          double g = Bf16Bits.value(gu[t * 2 * inter + i]);
          double u = Bf16Bits.value(gu[t * 2 * inter + inter + i]);
          double want = g / (1 + Math.exp(-g)) * u;
          double have = Bf16Bits.value(got[t * inter + i]);
          worst = Math.max(worst, Math.abs(have - want) / (Math.abs(want) + 1e-30));
        }
      }
      System.out.printf(
          Locale.ROOT,
          "silu_mul_bf16, %d rows of %d: worst relative error %.2e against float64%n",
          rows,
          inter,
          worst);
      assertTrue(worst <= ROUNDING, "relative error " + worst);
    }
  }

  @ParameterizedTest
  @CsvSource({"300, 1024, 768", "200, 2048, 512", "5, 4096, 1536"})
  void shouldRoundTheFixedOrderSumsExactlyWhateverTheRowsBesideThem(int rows, int in, int out) {
    Assumptions.assumeTrue(device.wgmma(), "deterministic bf16 outputs need the wgmma tiles");
    SplittableRandom rnd = new SplittableRandom(rows * 17L + out);
    short[] x = bf16s(rnd, rows * in, 1f);
    short[] w = bf16s(rnd, out * in, 0.05f);
    Gemm gemm = new Gemm(device, true);
    try (Arena arena = Arena.ofConfined();
        DeviceBuffer dx = device.allocate((long) x.length * 2);
        DeviceBuffer dw = device.allocate((long) w.length * 2);
        DeviceBuffer f32 = device.allocate((long) rows * out * 4);
        DeviceBuffer all = device.allocate((long) rows * out * 2);
        DeviceBuffer apart = device.allocate((long) rows * out * 2)) {
      dx.copyFrom(arena.allocateFrom(ValueLayout.JAVA_SHORT, x), 0);
      dw.copyFrom(arena.allocateFrom(ValueLayout.JAVA_SHORT, w), 0);
      assertTrue(gemm.writesBf16(dx.pointer(), dw.pointer(), Gemm.R_16BF, rows, in, out));
      gemm.apply(dx.pointer(), dw.pointer(), Gemm.R_16BF, f32.pointer(), rows, in, out, false);
      gemm.applyBf16Output(dx.pointer(), dw.pointer(), all.pointer(), rows, in, out);
      // the same rows in launches of 1, 2, 3, ... rows
      for (int r0 = 0, n = 1; r0 < rows; r0 += n, n++) {
        int take = Math.min(n, rows - r0);
        gemm.applyBf16Output(
            dx.pointer() + (long) r0 * in * 2,
            dw.pointer(),
            apart.pointer() + (long) r0 * out * 2,
            take,
            in,
            out);
      }
      device.synchronize();
      float[] sums = f32.readFloats(0, rows * out);
      short[] together = readShorts(arena, all, rows * out);
      short[] separate = readShorts(arena, apart, rows * out);
      int notRounded = 0;
      int differ = 0;
      for (int i = 0; i < sums.length; i++) {
        notRounded += together[i] != roundToBf16(sums[i]) ? 1 : 0;
        differ += together[i] != separate[i] ? 1 : 0;
      }
      System.out.printf(
          Locale.ROOT,
          "deterministic bf16 outputs, %d x %d x %d (%s): %d not the float32 sum rounded, %d"
              + " differ between one launch and launches of 1, 2, 3, ... rows%n",
          rows,
          in,
          out,
          gemm.fixedOrderBits(),
          notRounded,
          differ);
      assertEquals(0, notRounded, "outputs that are not their float32 sum rounded to bf16");
      assertEquals(0, differ, "outputs that depend on the rows of the launch");
    }
  }

  @Test
  void shouldWriteBf16OnlyWhereTheKernelCan() {
    try (DeviceBuffer x = device.allocate(64 * 64 * 2);
        DeviceBuffer w = device.allocate(64 * 64 * 2);
        DeviceBuffer y = device.allocate(64 * 64 * 2)) {
      Gemm normal = new Gemm(device, false);
      Gemm fixed = new Gemm(device, true);
      long px = x.pointer();
      long pw = w.pointer();
      assertFalse(normal.writesBf16(px, pw, Gemm.R_32F, 64, 64, 64), "float32 weights");
      assertFalse(fixed.writesBf16(px, pw, Gemm.R_32F, 64, 64, 64), "float32 weights");
      assertTrue(normal.writesBf16(px, pw, Gemm.R_16BF, Gemm.GEMV_MAX_ROWS + 1, 64, 64));
      assertEquals(
          !Gemm.GEMV,
          normal.writesBf16(px, pw, Gemm.R_16BF, Gemm.GEMV_MAX_ROWS, 64, 64),
          "the few-row kernel's rows");
      // deterministic mode: the wgmma tiles only, and for every row count alike
      for (int rows : new int[] {1, 8, 64, 4096}) {
        assertEquals(device.wgmma(), fixed.writesBf16(px, pw, Gemm.R_16BF, rows, 64, 64));
      }
      assertFalse(fixed.writesBf16(px, pw, Gemm.R_16BF, 64, 60, 64), "in not a multiple of 8");
      IllegalStateException e =
          assertThrows(
              IllegalStateException.class,
              () -> fixed.applyBf16Output(px, pw, y.pointer(), 64, 60, 64));
      assertTrue(e.getMessage().contains("bf16 outputs"), e.getMessage());
    }
  }

  /** Float32 to bf16, to nearest even (float_to_bf16 of kernels.cu; no NaN among these sums). */
  private static short roundToBf16(float v) {
    int u = Float.floatToRawIntBits(v);
    u += 0x7fff + ((u >>> 16) & 1);
    return (short) (u >>> 16);
  }

  private static short[] bf16s(SplittableRandom rnd, int n, float scale) {
    short[] v = new short[n];
    for (int i = 0; i < n; i++) {
      v[i] = Bf16Bits.bf16(Bf16Bits.uniform(rnd, scale));
    }
    return v;
  }

  private static short[] readShorts(Arena arena, DeviceBuffer b, int n) {
    MemorySegment s = arena.allocate(ValueLayout.JAVA_SHORT, n);
    b.copyTo(0, s);
    return s.toArray(ValueLayout.JAVA_SHORT);
  }
}

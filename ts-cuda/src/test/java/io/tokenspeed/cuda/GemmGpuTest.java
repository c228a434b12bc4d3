package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Locale;
import java.util.Random;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The fixed-order products of deterministic mode: against a float64 reference, and batch-invariant
 * (a row's outputs bit-identical whether it is computed among all rows or in a launch of a few, at
 * another place in its block), for the tensor-core kernel (in a multiple of 8, a tail of k and of
 * outputs) and the one-thread-per-output kernels (bf16 with in not a multiple of 8, float32).
 */
class GemmGpuTest extends OnTheGpu {
  @ParameterizedTest
  @CsvSource({"true, 136, 200", "true, 4096, 384", "true, 36, 70", "false, 136, 200"})
  void shouldComputeEveryRowTheSameWhateverTheRowsBesideIt(boolean bf16, int in, int out) {
    int rows = 300;
    int type = bf16 ? Gemm.R_16BF : Gemm.R_32F;
    int width = bf16 ? 2 : 4;
    Random rnd = new Random(in * 31L + out);
    float[] x = new float[rows * in];
    float[] w = new float[out * in];
    float[] y0 = new float[rows * out];
    for (int i = 0; i < x.length; i++) {
      x[i] = round(bf16, (float) rnd.nextGaussian());
    }
    for (int i = 0; i < w.length; i++) {
      w[i] = round(bf16, (float) rnd.nextGaussian() * 0.05f);
    }
    for (int i = 0; i < y0.length; i++) {
      y0[i] = (float) rnd.nextGaussian();
    }
    Gemm gemm = new Gemm(device, true);
    try (Arena arena = Arena.ofConfined();
        DeviceBuffer dx = device.allocate((long) x.length * width);
        DeviceBuffer dw = device.allocate((long) w.length * width);
        DeviceBuffer all = device.allocate((long) y0.length * 4);
        DeviceBuffer few = device.allocate((long) y0.length * 4)) {
      dx.copyFrom(encode(arena, bf16, x), 0);
      dw.copyFrom(encode(arena, bf16, w), 0);
      all.write(0, y0);
      few.write(0, y0);
      // all rows in one launch; then rows 37 .. 41 alone, 50 .. 149 and 200 .. 299 (other splits)
      gemm.apply(dx.pointer(), dw.pointer(), type, all.pointer(), rows, in, out, true);
      int[][] parts = {{37, 5}, {50, 100}, {200, 100}};
      for (int[] part : parts) {
        gemm.apply(
            dx.pointer() + (long) part[0] * in * width,
            dw.pointer(),
            type,
            few.pointer() + (long) part[0] * out * 4,
            part[1],
            in,
            out,
            true);
      }
      device.synchronize();
      float[] got = all.readFloats(0, y0.length);
      float[] parted = few.readFloats(0, y0.length);
      double err = 0;
      int differ = 0;
      int compared = 0;
      for (int r = 0; r < rows; r++) {
        boolean inPart = false;
        for (int[] part : parts) {
          inPart |= r >= part[0] && r < part[0] + part[1];
        }
        for (int o = 0; o < out; o++) {
          double want = y0[r * out + o];
          for (int k = 0; k < in; k++) {
            want += (double) x[r * in + k] * w[o * in + k];
          }
          err = Math.max(err, Math.abs(got[r * out + o] - want) / (1 + Math.abs(want)));
          if (inPart) {
            compared++;
            differ +=
                Float.floatToRawIntBits(got[r * out + o])
                        != Float.floatToRawIntBits(parted[r * out + o])
                    ? 1
                    : 0;
          }
        }
      }
      System.out.printf(
          Locale.ROOT,
          "fixed-order %s product, in %d, out %d: max error %.2e vs float64; rows apart vs all"
              + " together: %d of %d outputs differ in any bit%n",
          bf16 ? "bf16" : "float32",
          in,
          out,
          err,
          differ,
          compared);
      assertTrue(err <= 1e-5 * Math.sqrt(in), "error " + err);
      assertEquals(0, differ, "outputs that differ in any bit");
    }
  }

  private static float round(boolean bf16, float v) {
    return bf16 ? Float.intBitsToFloat(Float.floatToRawIntBits(v) & 0xffff0000) : v;
  }

  private static MemorySegment encode(Arena arena, boolean bf16, float[] v) {
    if (!bf16) {
      return arena.allocateFrom(ValueLayout.JAVA_FLOAT, v);
    }
    MemorySegment s = arena.allocate(ValueLayout.JAVA_SHORT, v.length);
    for (int i = 0; i < v.length; i++) {
      s.setAtIndex(ValueLayout.JAVA_SHORT, i, (short) (Float.floatToRawIntBits(v[i]) >>> 16));
    }
    return s;
  }
}

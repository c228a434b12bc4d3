package io.tokenspeed.cuda;

import static io.tokenspeed.cuda.Bf16Bits.bf16;
import static io.tokenspeed.cuda.Bf16Bits.uniform;
import static io.tokenspeed.cuda.Bf16Bits.value;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The prefill kernel of deterministic mode, {@code gemm_fixed_bf16_mma_v2}, against the reference
 * {@code gemm_fixed_bf16_mma} (both called directly, whatever the {@code tokenspeed.cuda.fixedgemm}
 * switch of this JVM). The two must agree bit for bit, since {@link Gemm} may pick either by shape
 * without breaking batch invariance: on decode and prefill shapes of Llama 8B and on ragged ones
 * (rows and outputs not multiples of either kernel's block, {@code in} with a tail of k that ends
 * v1's last slice of 32 early or v2's slice of 64 after its first half), with and without
 * accumulate, and with a row of negative zeros (where a step that adds only zero products could
 * change the sign of a zero sum). The second kernel's rows are also computed split across launches
 * at other offsets, which must not change a bit; rows past {@code rows} stay untouched; and a
 * sample of outputs is checked against a float64 reference, so that two equally wrong results do
 * not pass. A second test prints both kernels' times beside cuBLAS's on the prefill shapes.
 */
class FixedGemmV2GpuTest extends OnTheGpu {
  @ParameterizedTest
  @CsvSource({
    "1, 4096, 6144",
    "7, 4096, 4096",
    "64, 4096, 28672",
    "300, 136, 200",
    "1000, 14336, 4096",
    "2048, 4096, 6144",
    "129, 4104, 1001",
    "4096, 64, 37",
    "200, 40, 300",
    "130, 8, 520",
    "257, 96, 513",
    "385, 4144, 256"
  })
  void shouldGiveTheFirstKernelsBitsWhateverTheRowsBesideIt(int rows, int in, int out) {
    SplittableRandom rnd = new SplittableRandom(rows * 1_000_003L + in * 1009L + out);
    long xCount = (long) rows * in;
    long wCount = (long) out * in;
    // the guard row `rows` catches writes past the last row
    float[] y0 = new float[(rows + 1) * out];
    for (int i = 0; i < y0.length; i++) {
      y0[i] = uniform(rnd, 4f);
    }
    Gemm gemm = new Gemm(device, true);
    try (Arena arena = Arena.ofConfined();
        DeviceBuffer dx = device.allocate(xCount * 2);
        DeviceBuffer dw = device.allocate(wCount * 2);
        DeviceBuffer first = device.allocate((long) y0.length * 4);
        DeviceBuffer second = device.allocate((long) y0.length * 4);
        DeviceBuffer split = device.allocate((long) y0.length * 4)) {
      MemorySegment x = arena.allocate(ValueLayout.JAVA_SHORT, xCount);
      MemorySegment w = arena.allocate(ValueLayout.JAVA_SHORT, wCount);
      for (long i = 0; i < xCount; i++) {
        // row 0: negative zeros, its sums made of zero products of either sign
        short v = i < in ? (short) 0x8000 : bf16(uniform(rnd, 2f));
        x.setAtIndex(ValueLayout.JAVA_SHORT, i, v);
      }
      for (long i = 0; i < wCount; i++) {
        w.setAtIndex(ValueLayout.JAVA_SHORT, i, bf16(uniform(rnd, 0.05f)));
      }
      dx.copyFrom(x, 0);
      dw.copyFrom(w, 0);
      // other launches for the same rows: a few parts starting off the blocks' and mma's rows
      List<int[]> parts = new ArrayList<>();
      int a = rows * 5 / 13;
      int b = rows * 9 / 11;
      for (int[] part : new int[][] {{0, a}, {a, b - a}, {b, rows - b}}) {
        if (part[1] > 0) {
          parts.add(part);
        }
      }
      for (boolean accumulate : new boolean[] {false, true}) {
        first.write(0, y0);
        second.write(0, y0);
        split.write(0, y0);
        gemm.applyFixedOrderV1(
            dx.pointer(), dw.pointer(), first.pointer(), rows, in, out, accumulate);
        gemm.applyFixedOrderV2(
            dx.pointer(), dw.pointer(), second.pointer(), rows, in, out, accumulate);
        for (int[] part : parts) {
          gemm.applyFixedOrderV2(
              dx.pointer() + (long) part[0] * in * 2,
              dw.pointer(),
              split.pointer() + (long) part[0] * out * 4,
              part[1],
              in,
              out,
              accumulate);
        }
        device.synchronize();
        float[] v1 = first.readFloats(0, y0.length);
        float[] v2 = second.readFloats(0, y0.length);
        float[] parted = split.readFloats(0, y0.length);
        int differ = 0;
        int differApart = 0;
        int firstDiffer = -1;
        for (int i = 0; i < y0.length; i++) {
          int bits = Float.floatToRawIntBits(v2[i]);
          if (bits != Float.floatToRawIntBits(v1[i])) {
            differ++;
            firstDiffer = firstDiffer < 0 ? i : firstDiffer;
          }
          differApart += bits != Float.floatToRawIntBits(parted[i]) ? 1 : 0;
        }
        int guardWritten = 0;
        for (int i = rows * out; i < y0.length; i++) {
          guardWritten += Float.floatToRawIntBits(v2[i]) != Float.floatToRawIntBits(y0[i]) ? 1 : 0;
        }
        // a sample of outputs against float64, row 0 (negative zeros) among them
        double worst = 0;
        for (int s = 0; s < 64; s++) {
          int r = s == 0 ? 0 : rnd.nextInt(rows);
          int o = rnd.nextInt(out);
          double want = accumulate ? y0[r * out + o] : 0;
          double mag = accumulate ? Math.abs(y0[r * out + o]) : 0;
          for (int k = 0; k < in; k++) {
            double p =
                value(x.getAtIndex(ValueLayout.JAVA_SHORT, (long) r * in + k))
                    * value(w.getAtIndex(ValueLayout.JAVA_SHORT, (long) o * in + k));
            want += p;
            mag += Math.abs(p);
          }
          double bound = 1e-5 * mag + 1e-6;
          worst = Math.max(worst, Math.abs(v2[r * out + o] - want) / bound);
        }
        System.out.printf(
            Locale.ROOT,
            "fixed-order v2 vs v1, rows %d, in %d, out %d, accumulate %b: %d of %d outputs differ"
                + " in bits from v1, %d from v2 in %d launches, guard row written %d; sampled"
                + " error / bound vs float64 %.3f%n",
            rows,
            in,
            out,
            accumulate,
            differ,
            rows * out,
            differApart,
            parts.size(),
            guardWritten,
            worst);
        String where =
            firstDiffer < 0
                ? ""
                : String.format(
                    Locale.ROOT,
                    "; the first: row %d, output %d: v1 %s (0x%08x), v2 %s (0x%08x)",
                    firstDiffer / out,
                    firstDiffer % out,
                    v1[firstDiffer],
                    Float.floatToRawIntBits(v1[firstDiffer]),
                    v2[firstDiffer],
                    Float.floatToRawIntBits(v2[firstDiffer]));
        assertEquals(0, differ, "outputs of v2 that differ in bits from v1" + where);
        assertEquals(0, differApart, "outputs of v2 that change when the rows are split");
        assertEquals(0, guardWritten, "outputs written past the rows");
        assertTrue(worst <= 1, "sampled error / bound vs float64: " + worst);
      }
    }
  }

  /**
   * Times the two fixed-order kernels and cuBLAS ({@code cublasGemmEx}, the non-deterministic path)
   * on the projections of Llama 8B at prefill sizes, and prints them with the TFLOP/s they reach
   * and the kernel {@link Gemm} would pick with the switch at {@code v2}; asserts nothing. The rows
   * below 2048 are for the threshold between the two kernels. Each product is run once to warm up
   * and then {@code calls} times, each between a pair of events; the median is printed.
   */
  @Test
  void shouldReportTimesAgainstCublas() {
    int[] rowCounts = {128, 256, 512, 1024, 2048, 8192};
    int[][] shapes = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
    int calls = 5;
    long xBytes = 0;
    long wBytes = 0;
    long yBytes = 0;
    for (int[] shape : shapes) {
      xBytes = Math.max(xBytes, 8192L * shape[1] * 2);
      wBytes = Math.max(wBytes, (long) shape[0] * shape[1] * 2);
      yBytes = Math.max(yBytes, 8192L * shape[0] * 4);
    }
    CudaApi api = device.api();
    Gemm fixed = new Gemm(device, true);
    Gemm cublas = new Gemm(device, false);
    long[] starts = new long[calls];
    long[] ends = new long[calls];
    for (int i = 0; i < calls; i++) {
      starts[i] = api.eventCreate(0);
      ends[i] = api.eventCreate(0);
    }
    SplittableRandom rnd = new SplittableRandom(11);
    try (Arena arena = Arena.ofConfined();
        DeviceBuffer dx = device.allocate(xBytes);
        DeviceBuffer dw = device.allocate(wBytes);
        DeviceBuffer dy = device.allocate(yBytes)) {
      // 16 MiB of random bf16, repeated over x and w
      long chunk = 16L << 20;
      MemorySegment host = arena.allocate(ValueLayout.JAVA_SHORT, chunk / 2);
      for (long i = 0; i < chunk / 2; i++) {
        host.setAtIndex(ValueLayout.JAVA_SHORT, i, bf16(uniform(rnd, 0.5f)));
      }
      for (DeviceBuffer buffer : new DeviceBuffer[] {dx, dw}) {
        for (long at = 0; at < buffer.bytes(); at += chunk) {
          buffer.copyFrom(host.asSlice(0, Math.min(chunk, buffer.bytes() - at)), at);
        }
      }
      String[] names = {"v1", "v2", "cuBLAS"};
      for (int[] shape : shapes) {
        int out = shape[0];
        int in = shape[1];
        for (int rows : rowCounts) {
          double[] micros = new double[names.length];
          for (int path = 0; path < names.length; path++) {
            for (int i = -1; i < calls; i++) {
              if (i >= 0) {
                api.eventRecord(starts[i], device.stream());
              }
              switch (path) {
                case 0 ->
                    fixed.applyFixedOrderV1(
                        dx.pointer(), dw.pointer(), dy.pointer(), rows, in, out, false);
                case 1 ->
                    fixed.applyFixedOrderV2(
                        dx.pointer(), dw.pointer(), dy.pointer(), rows, in, out, false);
                default ->
                    cublas.applyCublas(
                        dx.pointer(),
                        dw.pointer(),
                        Gemm.R_16BF,
                        dy.pointer(),
                        rows,
                        in,
                        out,
                        false);
              }
              if (i >= 0) {
                api.eventRecord(ends[i], device.stream());
              }
            }
            device.synchronize();
            double[] t = new double[calls];
            for (int i = 0; i < calls; i++) {
              t[i] = api.eventElapsedMs(starts[i], ends[i]) * 1e3;
            }
            Arrays.sort(t);
            micros[path] = t[calls / 2];
          }
          double flop = 2.0 * rows * out * in;
          String pick =
              Gemm.fixedOrderKernel(true, Gemm.R_16BF, rows, in, out, device.multiprocessors());
          System.out.printf(
              Locale.ROOT,
              "fixed-order timing M %d, N %d, K %d: v1 %.1f us (%.0f TFLOP/s), v2 %.1f us (%.0f"
                  + " TFLOP/s), cuBLAS %.1f us (%.0f TFLOP/s); v1 / cuBLAS %.2f, v2 / cuBLAS"
                  + " %.2f; with v2 the switch picks %s%n",
              rows,
              out,
              in,
              micros[0],
              flop / micros[0] / 1e6,
              micros[1],
              flop / micros[1] / 1e6,
              micros[2],
              flop / micros[2] / 1e6,
              micros[0] / micros[2],
              micros[1] / micros[2],
              pick);
        }
      }
    } finally {
      for (int i = 0; i < calls; i++) {
        api.eventDestroy(starts[i]);
        api.eventDestroy(ends[i]);
      }
    }
  }
}

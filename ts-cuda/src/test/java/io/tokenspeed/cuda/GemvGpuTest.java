package io.tokenspeed.cuda;

import static io.tokenspeed.cuda.Bf16Bits.bf16;
import static io.tokenspeed.cuda.Bf16Bits.uniform;
import static io.tokenspeed.cuda.Bf16Bits.value;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The few-row bf16 kernel {@code gemv_bf16} (called directly, whatever the {@code
 * tokenspeed.cuda.gemv} switch of this JVM): for every row count 1 to 8, with and without
 * accumulate, on the Llama 1B and 8B shapes and on ragged ones (out not a multiple of the block's 8
 * outputs, in not a multiple of a warp's 32-element step, in smaller than one warp's slice). Each
 * output lies within a float32-accumulation bound of a float64 reference and of cuBLAS's result;
 * rows past {@code rows} are left untouched; and a row's result has the same bits whatever the
 * number of rows in the launch (the kernel's sum order depends on {@code in} only). A second test
 * prints the kernel's and cuBLAS's times on the model shapes, for the decision to turn the switch
 * on.
 */
class GemvGpuTest extends OnTheGpu {
  private static final int MAX_ROWS = 8;

  @ParameterizedTest
  @CsvSource({
    "4096, 6144",
    "4096, 28672",
    "14336, 4096",
    "2048, 3072",
    "4096, 128256",
    "4104, 1001",
    "200, 13",
    "64, 37"
  })
  void shouldMatchFloat64AndCublasForOneToEightRows(int in, int out) {
    SplittableRandom rnd = new SplittableRandom(in * 1_000_003L + out);
    short[] x = new short[MAX_ROWS * in];
    short[] w = new short[Math.multiplyExact(out, in)];
    for (int i = 0; i < x.length; i++) {
      x[i] = bf16(uniform(rnd, 2f));
    }
    for (int i = 0; i < w.length; i++) {
      w[i] = bf16(uniform(rnd, 0.05f));
    }
    // the guard row MAX_ROWS catches writes past the last row
    float[] y0 = new float[(MAX_ROWS + 1) * out];
    for (int i = 0; i < y0.length; i++) {
      y0[i] = uniform(rnd, 4f);
    }
    double[][] xd = new double[MAX_ROWS][in];
    for (int r = 0; r < MAX_ROWS; r++) {
      for (int k = 0; k < in; k++) {
        xd[r][k] = value(x[r * in + k]);
      }
    }
    // float64 sums x·w and Σ|x_k·w_k| (the scale of float32's rounding) of every row and output
    double[] dot = new double[MAX_ROWS * out];
    double[] mag = new double[MAX_ROWS * out];
    IntStream.range(0, out)
        .parallel()
        .forEach(
            o -> {
              double[] d = new double[MAX_ROWS];
              double[] m = new double[MAX_ROWS];
              int base = o * in;
              for (int k = 0; k < in; k++) {
                double wk = value(w[base + k]);
                for (int r = 0; r < MAX_ROWS; r++) {
                  double p = xd[r][k] * wk;
                  d[r] += p;
                  m[r] += Math.abs(p);
                }
              }
              for (int r = 0; r < MAX_ROWS; r++) {
                dot[r * out + o] = d[r];
                mag[r * out + o] = m[r];
              }
            });
    Gemm gemm = new Gemm(device, false);
    // the kernel the routing takes, and its 4-warp twin
    for (String kernel : new String[] {Gemm.GEMV_KERNEL, Gemm.GEMV_W4_KERNEL}) {
      int failures = 0;
      String firstFailure = null;
      double worstOurs = 0;
      double worstCublas = 0;
      double worstApart = 0;
      int differentBits = 0;
      try (Arena arena = Arena.ofConfined();
          DeviceBuffer dx = device.allocate((long) x.length * 2);
          DeviceBuffer dw = device.allocate((long) w.length * 2);
          DeviceBuffer ours = device.allocate((long) y0.length * 4);
          DeviceBuffer theirs = device.allocate((long) y0.length * 4)) {
        dx.copyFrom(shorts(arena, x), 0);
        dw.copyFrom(shorts(arena, w), 0);
        for (boolean accumulate : new boolean[] {false, true}) {
          float[] eightRows = null;
          for (int rows = MAX_ROWS; rows >= 1; rows--) {
            ours.write(0, y0);
            theirs.write(0, y0);
            gemm.applyGemv(
                kernel, dx.pointer(), dw.pointer(), ours.pointer(), rows, in, out, accumulate);
            gemm.applyCublas(
                dx.pointer(),
                dw.pointer(),
                Gemm.R_16BF,
                theirs.pointer(),
                rows,
                in,
                out,
                accumulate);
            device.synchronize();
            float[] got = ours.readFloats(0, y0.length);
            float[] ref = theirs.readFloats(0, rows * out);
            if (rows == MAX_ROWS) {
              eightRows = got;
            }
            for (int i = 0; i < rows * out; i++) {
              double want = dot[i] + (accumulate ? y0[i] : 0);
              double bound = 1e-5 * (mag[i] + (accumulate ? Math.abs(y0[i]) : 0)) + 1e-6;
              double errOurs = Math.abs(got[i] - want);
              double errCublas = Math.abs(ref[i] - want);
              double apart = Math.abs(got[i] - ref[i]);
              worstOurs = Math.max(worstOurs, errOurs / bound);
              worstCublas = Math.max(worstCublas, errCublas / bound);
              worstApart = Math.max(worstApart, apart / bound);
              boolean sameBits =
                  Float.floatToRawIntBits(got[i]) == Float.floatToRawIntBits(eightRows[i]);
              differentBits += sameBits ? 0 : 1;
              if (!(errOurs <= bound) || !(apart <= 2 * bound)) {
                failures++;
                if (firstFailure == null) {
                  firstFailure =
                      String.format(
                          Locale.ROOT,
                          "rows %d, accumulate %b, row %d, output %d: gemv %.9g, cuBLAS %.9g,"
                              + " float64 %.9g, bound %.3g",
                          rows,
                          accumulate,
                          i / out,
                          i % out,
                          got[i],
                          ref[i],
                          want,
                          bound);
                }
              }
            }
            for (int i = rows * out; i < y0.length; i++) {
              if (Float.floatToRawIntBits(got[i]) != Float.floatToRawIntBits(y0[i])) {
                failures++;
                if (firstFailure == null) {
                  firstFailure =
                      "rows " + rows + ": wrote row " + i / out + ", output " + i % out + " (past)";
                }
              }
            }
          }
        }
      }
      System.out.printf(
          Locale.ROOT,
          "%s in %d, out %d, rows 1-8, with and without accumulate: worst error / bound"
              + " %.3f (cuBLAS %.3f), gemv vs cuBLAS %.3f of one bound; %d outputs differ in bits"
              + " from the same row among 8 rows%n",
          kernel,
          in,
          out,
          worstOurs,
          worstCublas,
          worstApart,
          differentBits);
      String first = firstFailure;
      assertEquals(
          0,
          failures,
          () -> kernel + ": outputs off or written past the rows; the first: " + first);
      assertEquals(0, differentBits, kernel + ": outputs whose bits depend on the number of rows");
    }
  }

  /**
   * Times {@code gemv_bf16}, its 4-warp twin {@code gemv_bf16_w4} and cuBLAS on the projections of
   * Llama 8B and 1B at 1, 2, 4 and 8 rows and prints them with the bandwidth they reach; asserts
   * nothing. Each call reads a different copy of W (together far more than L2 holds), as the layers
   * of a model do, and is timed by a pair of events around it, queued while the GPU is busy with a
   * large memset so that the host's launch time does not show; the median of the calls is printed.
   */
  @Test
  void shouldReportTimesAgainstCublas() {
    int[][] shapes = {
      {4096, 6144}, {4096, 4096}, {4096, 28672}, {14336, 4096}, {4096, 128256},
      {2048, 3072}, {2048, 2048}, {2048, 16384}, {8192, 2048}, {2048, 128256}
    };
    int calls = 16;
    long scratchBytes = 1L << 30;
    CudaApi api = device.api();
    Gemm gemm = new Gemm(device, false);
    SplittableRandom rnd = new SplittableRandom(7);
    try (CallTimes times = new CallTimes(device, calls);
        DeviceBuffer scratch = device.allocate(scratchBytes)) {
      for (int[] shape : shapes) {
        int in = shape[0];
        int out = shape[1];
        long wBytes = (long) in * out * 2;
        int copies = (int) Math.max(1, Math.ceilDiv(256L << 20, wBytes));
        try (Arena arena = Arena.ofConfined();
            DeviceBuffer dw = device.allocate(wBytes * copies);
            DeviceBuffer dx = device.allocate((long) MAX_ROWS * in * 2);
            DeviceBuffer dy = device.allocate((long) MAX_ROWS * out * 4)) {
          MemorySegment host = arena.allocate(ValueLayout.JAVA_SHORT, wBytes / 2);
          for (long i = 0; i < wBytes / 2; i++) {
            host.setAtIndex(ValueLayout.JAVA_SHORT, i, bf16(uniform(rnd, 0.05f)));
          }
          for (int c = 0; c < copies; c++) {
            dw.copyFrom(host, c * wBytes);
          }
          dx.copyFrom(host.asSlice(0, (long) MAX_ROWS * in * 2), 0);
          for (int rows : new int[] {1, 2, 4, 8}) {
            double[] micros = new double[3];
            for (int path = 0; path < 3; path++) {
              for (int round = 0; round < 2; round++) { // the first round warms up
                api.memsetAsync(scratch.pointer(), round, scratchBytes, device.stream());
                for (int i = 0; i < calls; i++) {
                  long wi = dw.pointer() + (i % copies) * wBytes;
                  times.start(i);
                  if (path < 2) {
                    String kernel = path == 0 ? Gemm.GEMV_KERNEL : Gemm.GEMV_W4_KERNEL;
                    gemm.applyGemv(kernel, dx.pointer(), wi, dy.pointer(), rows, in, out, false);
                  } else {
                    gemm.applyCublas(
                        dx.pointer(), wi, Gemm.R_16BF, dy.pointer(), rows, in, out, false);
                  }
                  times.end(i);
                }
                device.synchronize();
              }
              micros[path] = times.medianMicros();
            }
            double bytes = wBytes + (double) rows * in * 2 + (double) rows * out * 4;
            System.out.printf(
                Locale.ROOT,
                "gemv timing in %d, out %d, rows %d: gemv_bf16 %.1f us (%.0f GB/s), gemv_bf16_w4"
                    + " %.1f us (%.0f GB/s), cuBLAS %.1f us (%.0f GB/s)%n",
                in,
                out,
                rows,
                micros[0],
                bytes / micros[0] / 1e3,
                micros[1],
                bytes / micros[1] / 1e3,
                micros[2],
                bytes / micros[2] / 1e3);
          }
        }
      }
    }
  }

  private static MemorySegment shorts(Arena arena, short[] v) {
    MemorySegment s = arena.allocate(ValueLayout.JAVA_SHORT, v.length);
    MemorySegment.copy(v, 0, s, ValueLayout.JAVA_SHORT, 0, v.length);
    return s;
  }
}

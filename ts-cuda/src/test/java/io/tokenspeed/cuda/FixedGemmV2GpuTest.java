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
 * The tiled kernels of deterministic mode ({@link FixedOrderTile}: 128 × 128 outputs a block and
 * its smaller tiles) against the reference {@code gemm_fixed_bf16_mma} (all called directly,
 * whatever the {@code tokenspeed.cuda.fixedgemm} switch of this JVM). Every tile must agree with v1
 * bit for bit, since {@link Gemm} picks one by shape without breaking batch invariance: on decode
 * and prefill shapes of Llama 8B and on ragged ones (rows and outputs not multiples of any tile,
 * {@code in} with a tail of k that ends v1's last slice of 32 early or the tiles' slice of 64 after
 * its first half), with and without accumulate, and with a row of negative zeros (where a step that
 * adds only zero products could change the sign of a zero sum). Each tile's rows are also computed
 * split across launches at other offsets, which must not change a bit; rows past {@code rows} stay
 * untouched; and a sample of outputs is checked against a float64 reference, so that two equally
 * wrong results do not pass. The comparison itself is shown to catch a planted difference of one
 * bit. A second test prints every kernel's time beside cuBLAS's on the prefill shapes, and the tile
 * the routing picks.
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
  void shouldGiveTheFirstKernelsBitsWhateverTheTileAndTheRowsBesideIt(int rows, int in, int out) {
    SplittableRandom rnd = new SplittableRandom(rows * 1_000_003L + in * 1009L + out);
    long xCount = (long) rows * in;
    long wCount = (long) out * in;
    float[] y0 = guardedOutputs(rnd, rows, out);
    Gemm gemm = new Gemm(device, true);
    List<String> failures = new ArrayList<>();
    try (Arena arena = Arena.ofConfined();
        DeviceBuffer dx = device.allocate(xCount * 2);
        DeviceBuffer dw = device.allocate(wCount * 2);
        DeviceBuffer first = device.allocate((long) y0.length * 4);
        DeviceBuffer second = device.allocate((long) y0.length * 4);
        DeviceBuffer split = device.allocate((long) y0.length * 4)) {
      MemorySegment x = arena.allocate(ValueLayout.JAVA_SHORT, xCount);
      MemorySegment w = arena.allocate(ValueLayout.JAVA_SHORT, wCount);
      randomOperands(rnd, x, w, in);
      dx.copyFrom(x, 0);
      dw.copyFrom(w, 0);
      List<int[]> parts = rowParts(rows);
      for (boolean accumulate : new boolean[] {false, true}) {
        first.write(0, y0);
        gemm.applyFixedOrderV1(
            dx.pointer(), dw.pointer(), first.pointer(), rows, in, out, accumulate);
        device.synchronize();
        float[] v1 = first.readFloats(0, y0.length);
        for (FixedOrderTile tile : FixedOrderTile.values()) {
          second.write(0, y0);
          split.write(0, y0);
          gemm.applyFixedOrderTile(
              tile, dx.pointer(), dw.pointer(), second.pointer(), rows, in, out, accumulate);
          applyInParts(gemm, tile, parts, dx, dw, split, in, out, accumulate);
          device.synchronize();
          float[] v2 = second.readFloats(0, y0.length);
          float[] parted = split.readFloats(0, y0.length);
          double worst = worstAgainstFloat64(x, w, y0, v2, rows, in, out, accumulate, rnd);
          String what = String.format(Locale.ROOT, "%s, accumulate %b", tile.kernel, accumulate);
          TileCheck check = TileCheck.of(what, v1, v2, parted, y0, rows, out, worst);
          System.out.printf(
              Locale.ROOT,
              "fixed-order v2 %s vs v1, rows %d, in %d, out %d, accumulate %b: %d of %d outputs"
                  + " differ in bits from v1, %d from the tile in %d launches, guard row written"
                  + " %d; sampled error / bound vs float64 %.3f%n",
              tile.kernel,
              rows,
              in,
              out,
              accumulate,
              check.fromReference().count(),
              rows * out,
              check.apart().count(),
              parts.size(),
              check.guardWritten(),
              worst);
          failures.addAll(check.problems());
        }
      }
    }
    assertTrue(failures.isEmpty(), () -> String.join("\n", failures));
  }

  /**
   * The checks fail on a planted difference of one bit wherever it is (a zero's sign included), on
   * a write past the rows and on an error past the float64 bound: they can fail.
   */
  @Test
  void shouldFailOnAPlantedDifferenceOfOneBit() {
    int rows = 2;
    int out = 3;
    float[] y0 = {1f, 2f, 3f, 4f, 5f, 6f, 7f, 8f, 9f}; // the last row: the guard
    float[] good = {0.5f, 0f, -1.25f, 3f, 2f, 1f, 7f, 8f, 9f};
    assertEquals(List.of(), TileCheck.of("good", good, good, good, y0, rows, out, 0.5).problems());
    float[] lastBit = good.clone();
    lastBit[2] = Float.intBitsToFloat(Float.floatToRawIntBits(lastBit[2]) ^ 1);
    float[] negativeZero = good.clone();
    negativeZero[1] = -0f;
    float[] guard = good.clone();
    guard[7] = Float.intBitsToFloat(Float.floatToRawIntBits(guard[7]) ^ 1);
    assertProblem("differ in bits from v1", TileCheck.of("t", good, lastBit, lastBit, y0, 2, 3, 0));
    assertProblem(
        "differ in bits from v1", TileCheck.of("t", good, negativeZero, negativeZero, y0, 2, 3, 0));
    assertProblem("when the rows are split", TileCheck.of("t", good, good, lastBit, y0, 2, 3, 0));
    assertProblem("written past the rows", TileCheck.of("t", guard, guard, guard, y0, 2, 3, 0));
    assertProblem("vs float64", TileCheck.of("t", good, good, good, y0, 2, 3, 1.01));
    assertProblem("vs float64", TileCheck.of("t", good, good, good, y0, 2, 3, Double.NaN));
  }

  private static void assertProblem(String expected, TileCheck check) {
    List<String> problems = check.problems();
    assertEquals(1, problems.size(), problems::toString);
    assertTrue(problems.get(0).contains(expected), problems::toString);
  }

  /**
   * A tile's result ({@code rows + 1} rows of {@code out}, the last the guard row) against a
   * reference's ({@code reference} names it: v1 here, another tile of the family in
   * FixedGemmWgmmaGpuTest), against its own computed in several launches, past the rows (where
   * {@code y0}, what the buffer held before, must stay), and against float64 ({@code worst}:
   * sampled error / bound).
   */
  record TileCheck(
      String what,
      String reference,
      BitDiff fromReference,
      BitDiff apart,
      int guardWritten,
      double worst,
      int out) {
    /** The check against v1's result {@code v1}. */
    static TileCheck of(
        String what,
        float[] v1,
        float[] tile,
        float[] parted,
        float[] y0,
        int rows,
        int out,
        double worst) {
      return of(what, "v1", v1, tile, parted, y0, rows, out, worst);
    }

    /** The check against {@code expected}, the result of the kernel named {@code reference}. */
    static TileCheck of(
        String what,
        String reference,
        float[] expected,
        float[] tile,
        float[] parted,
        float[] y0,
        int rows,
        int out,
        double worst) {
      int guardWritten =
          BitDiff.of(
                  Arrays.copyOfRange(y0, rows * out, y0.length),
                  Arrays.copyOfRange(tile, rows * out, y0.length))
              .count();
      return new TileCheck(
          what,
          reference,
          BitDiff.of(expected, tile),
          BitDiff.of(tile, parted),
          guardWritten,
          worst,
          out);
    }

    /** What is wrong, one line each; empty when nothing is. */
    List<String> problems() {
      List<String> problems = new ArrayList<>();
      if (fromReference.count() != 0) {
        problems.add(
            what
                + ": outputs differ in bits from "
                + reference
                + fromReference.first(out, reference, "tile"));
      }
      if (apart.count() != 0) {
        problems.add(
            what + ": outputs change when the rows are split" + apart.first(out, "whole", "split"));
      }
      if (guardWritten != 0) {
        problems.add(what + ": " + guardWritten + " outputs written past the rows");
      }
      if (!(worst <= 1)) { // NaN too
        problems.add(what + ": sampled error / bound vs float64 " + worst);
      }
      return problems;
    }
  }

  /** Where two results part bit for bit: how many outputs differ, and the first. */
  record BitDiff(int count, int firstAt, float[] a, float[] b) {
    static BitDiff of(float[] a, float[] b) {
      int count = 0;
      int firstAt = -1;
      for (int i = 0; i < a.length; i++) {
        if (Float.floatToRawIntBits(a[i]) != Float.floatToRawIntBits(b[i])) {
          count++;
          firstAt = firstAt < 0 ? i : firstAt;
        }
      }
      return new BitDiff(count, firstAt, a, b);
    }

    /** ": N; the first: row r, output o: A value (bits), B value (bits)", or "" if none. */
    String first(int out, String aName, String bName) {
      if (firstAt < 0) {
        return "";
      }
      return String.format(
          Locale.ROOT,
          ": %d; the first: row %d, output %d: %s %s (0x%08x), %s %s (0x%08x)",
          count,
          firstAt / out,
          firstAt % out,
          aName,
          a[firstAt],
          Float.floatToRawIntBits(a[firstAt]),
          bName,
          b[firstAt],
          Float.floatToRawIntBits(b[firstAt]));
    }
  }

  /**
   * The worst error of 64 sampled outputs of {@code y} (row 0, the negative zeros, among them)
   * against float64, as a share of the bound {@code 1e-5 · Σ|terms| + 1e-6}.
   */
  static double worstAgainstFloat64(
      MemorySegment x,
      MemorySegment w,
      float[] y0,
      float[] y,
      int rows,
      int in,
      int out,
      boolean accumulate,
      SplittableRandom rnd) {
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
      worst = Math.max(worst, Math.abs(y[r * out + o] - want) / bound);
    }
    return worst;
  }

  /**
   * Times v1, every tile and cuBLAS ({@code cublasGemmEx}, the non-deterministic path) on the
   * projections of Llama 8B at prefill sizes, and prints them with the TFLOP/s they reach, the
   * fastest of the fixed-order kernels, and the tile {@link Gemm} picks with the switch at {@code
   * v2}; asserts nothing. Each product is run once to warm up and then {@code calls} times, each
   * between a pair of events; the median is printed.
   */
  @Test
  void shouldReportTimesAgainstCublas() {
    // decode batches (the 64-row tiles), then prefill's
    int[] rowCounts = {1, 8, 32, 64, 128, 256, 512, 1024, 2048, 8192};
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
    Gemm fixed = new Gemm(device, true);
    Gemm cublas = new Gemm(device, false);
    SplittableRandom rnd = new SplittableRandom(11);
    FixedOrderTile[] tiles = FixedOrderTile.values();
    try (CallTimes times = new CallTimes(device, calls);
        Arena arena = Arena.ofConfined();
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
      // paths: v1, the tiles, cuBLAS
      String[] names = new String[tiles.length + 2];
      names[0] = Gemm.V1_KERNEL;
      for (int t = 0; t < tiles.length; t++) {
        names[t + 1] = tiles[t].kernel;
      }
      names[names.length - 1] = "cuBLAS";
      for (int[] shape : shapes) {
        int out = shape[0];
        int in = shape[1];
        for (int rows : rowCounts) {
          double[] micros = new double[names.length];
          for (int path = 0; path < names.length; path++) {
            for (int i = -1; i < calls; i++) {
              if (i >= 0) {
                times.start(i);
              }
              if (path == 0) {
                fixed.applyFixedOrderV1(
                    dx.pointer(), dw.pointer(), dy.pointer(), rows, in, out, false);
              } else if (path <= tiles.length) {
                fixed.applyFixedOrderTile(
                    tiles[path - 1],
                    dx.pointer(),
                    dw.pointer(),
                    dy.pointer(),
                    rows,
                    in,
                    out,
                    false);
              } else {
                cublas.applyCublas(
                    dx.pointer(), dw.pointer(), Gemm.R_16BF, dy.pointer(), rows, in, out, false);
              }
              if (i >= 0) {
                times.end(i);
              }
            }
            micros[path] = times.medianMicros();
          }
          printTimes(rows, out, in, names, micros);
        }
      }
    }
  }

  /**
   * One line of the timing table: each fixed-order kernel's time and its ratio to cuBLAS, cuBLAS's,
   * the fastest fixed-order kernel, and the pick of the routing with its ratio to v1 and cuBLAS.
   * {@code names} and {@code micros}: v1 first, cuBLAS last.
   */
  private static void printTimes(int rows, int out, int in, String[] names, double[] micros) {
    double flop = 2.0 * rows * out * in;
    double cublasUs = micros[micros.length - 1];
    String pick =
        Gemm.fixedOrderKernel(
            Gemm.FixedGemm.V2,
            Gemm.R_16BF,
            rows,
            in,
            out,
            device.multiprocessors(),
            device.sharedBytesPerBlock());
    StringBuilder line =
        new StringBuilder(
            String.format(Locale.ROOT, "fixed-order timing M %d, N %d, K %d:", rows, out, in));
    int fastest = 0;
    double pickUs = Double.NaN;
    for (int path = 0; path < names.length - 1; path++) {
      line.append(
          String.format(
              Locale.ROOT,
              " %s %.1f us (%.2f of cuBLAS);",
              names[path],
              micros[path],
              micros[path] / cublasUs));
      fastest = micros[path] < micros[fastest] ? path : fastest;
      pickUs = names[path].equals(pick) ? micros[path] : pickUs;
    }
    line.append(
        String.format(
            Locale.ROOT,
            " cuBLAS %.1f us (%.0f TFLOP/s); fastest fixed-order %s; the routing picks %s:"
                + " %.1f us (%.0f TFLOP/s), %.2f of v1, %.2f of cuBLAS",
            cublasUs,
            flop / cublasUs / 1e6,
            names[fastest],
            pick,
            pickUs,
            flop / pickUs / 1e6,
            pickUs / micros[0],
            pickUs / cublasUs));
    System.out.println(line);
  }

  /**
   * Starting outputs of a product test: {@code rows + 1} rows of {@code out}, the last a guard row
   * that catches writes past the last row.
   */
  static float[] guardedOutputs(SplittableRandom rnd, int rows, int out) {
    float[] y0 = new float[(rows + 1) * out];
    for (int i = 0; i < y0.length; i++) {
      y0[i] = uniform(rnd, 4f);
    }
    return y0;
  }

  /**
   * Random bf16 operands of a product test: x (its first row negative zeros, so that its sums are
   * made of zero products of either sign) and w, {@code in} values a row.
   */
  static void randomOperands(SplittableRandom rnd, MemorySegment x, MemorySegment w, int in) {
    long xCount = x.byteSize() / 2;
    long wCount = w.byteSize() / 2;
    for (long i = 0; i < xCount; i++) {
      short v = i < in ? (short) 0x8000 : bf16(uniform(rnd, 2f));
      x.setAtIndex(ValueLayout.JAVA_SHORT, i, v);
    }
    for (long i = 0; i < wCount; i++) {
      w.setAtIndex(ValueLayout.JAVA_SHORT, i, bf16(uniform(rnd, 0.05f)));
    }
  }

  /**
   * Parts of {@code rows} rows (first row, count) for other launches over the same rows, starting
   * off the tiles' and warps' rows; empty parts left out.
   */
  static List<int[]> rowParts(int rows) {
    List<int[]> parts = new ArrayList<>();
    int a = rows * 5 / 13;
    int b = rows * 9 / 11;
    for (int[] part : new int[][] {{0, a}, {a, b - a}, {b, rows - b}}) {
      if (part[1] > 0) {
        parts.add(part);
      }
    }
    return parts;
  }

  /** The product of each part's rows of x, launched on its own, into the same rows of y. */
  static void applyInParts(
      Gemm gemm,
      ProductTile tile,
      List<int[]> parts,
      DeviceBuffer x,
      DeviceBuffer w,
      DeviceBuffer y,
      int in,
      int out,
      boolean accumulate) {
    for (int[] part : parts) {
      gemm.applyFixedOrderTile(
          tile,
          x.pointer() + (long) part[0] * in * 2,
          w.pointer(),
          y.pointer() + (long) part[0] * out * 4,
          part[1],
          in,
          out,
          accumulate);
    }
  }
}

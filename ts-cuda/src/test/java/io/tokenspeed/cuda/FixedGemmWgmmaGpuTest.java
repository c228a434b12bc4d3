package io.tokenspeed.cuda;

import static io.tokenspeed.cuda.Bf16Bits.bf16;
import static io.tokenspeed.cuda.Bf16Bits.uniform;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.tokenspeed.cuda.FixedGemmV2GpuTest.BitDiff;
import io.tokenspeed.cuda.FixedGemmV2GpuTest.TileCheck;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.function.IntBinaryOperator;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The wgmma family of deterministic mode's bf16 product ({@link FixedOrderWgmmaTile}: {@code
 * gemm_fixed_wgmma_*}, 128 × 256 outputs a block down to 64 × 32, the candidate 128 × 192 among
 * them), Hopper only (skipped elsewhere: off sm_90a the kernels are stubs that trap). Each kernel
 * is called directly, whatever the {@code tokenspeed.cuda.fixedgemm} switch of this JVM. In order:
 *
 * <ol>
 *   <li>small products with known exact results (integers), each tile apart, printing the first
 *       wrong output and what it tells of the layout, so that a wrong descriptor, swizzle or
 *       accumulator layout shows before the large cases;
 *   <li>every tile must give the first tile's bits, and its own bits when the rows are split across
 *       launches at other offsets (batch invariance), must leave the rows past {@code rows}
 *       untouched and stay within FixedGemmV2GpuTest's float64 bound, on decode and prefill shapes
 *       and on tails ({@code in} 4104: a last slice of one step of 16 k, half of it zeros), with
 *       and without accumulate, with a row of negative zeros;
 *   <li>times of every wgmma tile, the v2 tile its rule picks and cuBLAS on Llama 8B's projections,
 *       printed, nothing asserted.
 * </ol>
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class FixedGemmWgmmaGpuTest extends OnTheGpu {

  /** The tile whose result the others must equal bit for bit: the largest. */
  private static final FixedOrderWgmmaTile REFERENCE = FixedOrderWgmmaTile.values()[0];

  @BeforeEach
  void onlyOnHopper() {
    assumeTrue(
        device.wgmma(),
        "the wgmma kernels run on compute capability 9.0 (sm_90a) only, not on " + device);
  }

  /**
   * Products whose exact results are integers, on each tile apart: 64 × 64 × 64 with x the identity
   * (then y[r][o] is w[o][r]: w's values name the k or the output read), with w the identity (x's
   * values name the row read), small integer matrices on ragged shapes (tails of k, rows and
   * outputs past a tile, several slices), with accumulate. Prints one line per tile and case, the
   * first wrong output with the values around it on failure.
   */
  @Test
  @Order(1)
  void shouldMultiplyKnownIntegerProductsExactlyOnEveryTile() {
    List<String> failures = new ArrayList<>();
    // x[r][k], w[o][k] as functions of the indices; y exact in float32
    record Case(
        String name,
        String meaning,
        int rows,
        int in,
        int out,
        boolean accumulate,
        IntBinaryOperator x,
        IntBinaryOperator w) {}
    IntBinaryOperator identity = (i, k) -> i == k ? 1 : 0;
    List<Case> cases =
        List.of(
            new Case(
                "x = I, w[o][k] = k + 1",
                "y[r][o] - 1 is the k that met row r's 1",
                64,
                64,
                64,
                false,
                identity,
                (o, k) -> k + 1),
            new Case(
                "x = I, w[o][k] = o + 1",
                "y[r][o] - 1 is the row of w that landed in output o",
                64,
                64,
                64,
                false,
                identity,
                (o, k) -> o + 1),
            new Case(
                "x[r][k] = r + 1, w = I",
                "y[r][o] - 1 is the row of x that landed in row r",
                64,
                64,
                64,
                false,
                (r, k) -> r + 1,
                identity),
            new Case(
                "small integers, 64 x 64 x 64",
                "",
                64,
                64,
                64,
                false,
                FixedGemmWgmmaGpuTest::smallX,
                FixedGemmWgmmaGpuTest::smallW),
            new Case(
                "small integers, tail of 8 k",
                "",
                3,
                72,
                40,
                false,
                FixedGemmWgmmaGpuTest::smallX,
                FixedGemmWgmmaGpuTest::smallW),
            new Case(
                "small integers, ragged, accumulate",
                "",
                130,
                136,
                264,
                true,
                FixedGemmWgmmaGpuTest::smallX,
                FixedGemmWgmmaGpuTest::smallW),
            new Case(
                "small integers, odd outputs, in 8",
                "",
                65,
                8,
                37,
                true,
                FixedGemmWgmmaGpuTest::smallX,
                FixedGemmWgmmaGpuTest::smallW),
            // k in two parts with the split (Gemm.splitParts): the parts meet mid-slice-run
            new Case(
                "small integers, k in parts, accumulate",
                "",
                70,
                1000,
                40,
                true,
                FixedGemmWgmmaGpuTest::smallX,
                FixedGemmWgmmaGpuTest::smallW),
            new Case(
                "x = I, w[o][k] = k + 1, k in parts",
                "y[r][o] - 1 is the k that met row r's 1",
                64,
                256,
                64,
                false,
                identity,
                (o, k) -> k + 1));
    for (Case c : cases) {
      short[] x = new short[c.rows * c.in];
      short[] w = new short[c.out * c.in];
      for (int r = 0; r < c.rows; r++) {
        for (int k = 0; k < c.in; k++) {
          x[r * c.in + k] = bf16(c.x.applyAsInt(r, k));
        }
      }
      for (int o = 0; o < c.out; o++) {
        for (int k = 0; k < c.in; k++) {
          w[o * c.in + k] = bf16(c.w.applyAsInt(o, k));
        }
      }
      // y0: small integers too (and the guard row past the last)
      float[] y0 = new float[(c.rows + 1) * c.out];
      for (int i = 0; i < y0.length; i++) {
        y0[i] = (i % 11) - 5;
      }
      float[] want = y0.clone();
      for (int r = 0; r < c.rows; r++) {
        for (int o = 0; o < c.out; o++) {
          long sum = 0;
          for (int k = 0; k < c.in; k++) {
            sum += (long) c.x.applyAsInt(r, k) * c.w.applyAsInt(o, k);
          }
          int i = r * c.out + o;
          want[i] = c.accumulate ? y0[i] + sum : sum;
        }
      }
      boolean[] splits =
          Gemm.splitParts(c.in, c.out) > 1 ? new boolean[] {false, true} : new boolean[] {false};
      for (boolean split : splits) {
        for (FixedOrderWgmmaTile tile : FixedOrderWgmmaTile.values()) {
          float[] got = multiply(tile, split, x, w, y0, c.rows, c.in, c.out, c.accumulate);
          int wrong = 0;
          int first = -1;
          for (int i = 0; i < want.length; i++) {
            if (Float.floatToRawIntBits(want[i]) != Float.floatToRawIntBits(got[i])) {
              wrong++;
              first = first < 0 ? i : first;
            }
          }
          String line =
              String.format(
                  Locale.ROOT,
                  "wgmma known product %s%s, %s (rows %d, in %d, out %d, accumulate %b): %s",
                  tile.kernel,
                  split ? " (k in parts)" : "",
                  c.name,
                  c.rows,
                  c.in,
                  c.out,
                  c.accumulate,
                  wrong == 0 ? "exact" : wrong + " of " + want.length + " outputs wrong");
          System.out.println(line);
          if (wrong != 0) {
            int r = first / c.out;
            int o = first % c.out;
            String detail =
                String.format(
                    Locale.ROOT,
                    "%s%n  first wrong: row %d, output %d: want %s, got %s%s%n"
                        + "  row %d, outputs %d..: want %s%n  got %s",
                    line,
                    r,
                    o,
                    want[first],
                    got[first],
                    c.meaning.isEmpty() ? "" : " (" + c.meaning + ")",
                    r,
                    o,
                    around(want, first, c.out),
                    around(got, first, c.out));
            System.out.println(detail);
            failures.add(detail);
          }
        }
      }
    }
    assertTrue(failures.isEmpty(), () -> String.join("\n", failures));
  }

  /** x's small integers: -2 .. 2. */
  private static int smallX(int r, int k) {
    return (r + 2 * k) % 5 - 2;
  }

  /** w's small integers: -3 .. 3. */
  private static int smallW(int o, int k) {
    return (3 * o + k) % 7 - 3;
  }

  /** Up to 8 values from {@code at} within its row of {@code out}. */
  private static String around(float[] y, int at, int out) {
    int end = Math.min(at + 8, (at / out + 1) * out);
    StringBuilder s = new StringBuilder("[");
    for (int i = at; i < end; i++) {
      s.append(i > at ? ", " : "").append(y[i]);
    }
    return s.append(']').toString();
  }

  /** {@code y0} (rows + 1 rows) after one product on {@code tile}, k in parts if {@code split}. */
  private static float[] multiply(
      FixedOrderWgmmaTile tile,
      boolean split,
      short[] x,
      short[] w,
      float[] y0,
      int rows,
      int in,
      int out,
      boolean accumulate) {
    Gemm gemm = new Gemm(device, true, split);
    try (Arena arena = Arena.ofConfined();
        DeviceBuffer dx = device.allocate((long) x.length * 2);
        DeviceBuffer dw = device.allocate((long) w.length * 2);
        DeviceBuffer dy = device.allocate((long) y0.length * 4)) {
      dx.copyFrom(arena.allocateFrom(ValueLayout.JAVA_SHORT, x), 0);
      dw.copyFrom(arena.allocateFrom(ValueLayout.JAVA_SHORT, w), 0);
      dy.write(0, y0);
      if (split) {
        gemm.applyFixedOrderSplit(
            tile, dx.pointer(), dw.pointer(), dy.pointer(), rows, in, out, accumulate);
      } else {
        gemm.applyFixedOrderTile(
            tile, dx.pointer(), dw.pointer(), dy.pointer(), rows, in, out, accumulate);
      }
      device.synchronize();
      return dy.readFloats(0, y0.length);
    } finally {
      gemm.close();
    }
  }

  /**
   * Every tile gives {@link #REFERENCE}'s bits, and its own when the rows are split into launches
   * at other offsets; nothing past the rows is written; a sample is within the float64 bound. The
   * checks are FixedGemmV2GpuTest's ({@link TileCheck}), whose planted-bit test shows they can
   * fail.
   */
  @ParameterizedTest
  @Order(2)
  @CsvSource({
    "1, 4096, 6144",
    "1, 14336, 4096",
    "3, 4104, 1000",
    "3, 4096, 28672",
    "64, 4096, 28672",
    "64, 14336, 4096",
    "65, 4104, 6144",
    "65, 4096, 1000",
    "200, 14336, 1000",
    "200, 4104, 28672",
    "2048, 4096, 6144",
    "2048, 4104, 4096",
    "2048, 14336, 1000",
    "37, 72, 37",
    "130, 8, 520",
    "257, 96, 513"
  })
  void shouldGiveTheSameBitsOnEveryTileWhateverTheRowsBesideIt(int rows, int in, int out) {
    sameBitsOnEveryTile(rows, in, out, false);
  }

  /**
   * {@link #shouldGiveTheSameBitsOnEveryTileWhateverTheRowsBesideIt} with k in parts ({@code
   * tokenspeed.cuda.fixedsplit}, {@link Gemm#splitParts}): every tile gives {@link #REFERENCE}'s
   * bits, and its own when the rows are split into launches at other offsets (runs of more than
   * {@link Gemm#SPLIT_ROWS} rows included); nothing past the rows is written; a sample is within
   * the float64 bound; and the routing ({@link Gemm#apply}) gives the same bits as the tiles.
   */
  @ParameterizedTest
  @Order(2)
  @CsvSource({
    "1, 14336, 4096",
    "3, 4104, 1000",
    "64, 14336, 4096",
    "200, 14336, 1000",
    "513, 8192, 2048",
    "4500, 8200, 1000",
    "37, 256, 37"
  })
  void shouldGiveOneSetOfBitsWithKInPartsWhateverTheTileAndTheRows(int rows, int in, int out) {
    assertTrue(Gemm.splitParts(in, out) > 1, "a shape whose k is split");
    sameBitsOnEveryTile(rows, in, out, true);
  }

  /**
   * The checks of both tests above: every tile against {@link #REFERENCE}, whole and in row cuts,
   * the guard row, the float64 bound; with {@code split}, k in parts, and the routing ({@link
   * Gemm#apply}) against the tiles as well.
   */
  private static void sameBitsOnEveryTile(int rows, int in, int out, boolean split) {
    SplittableRandom rnd =
        new SplittableRandom(rows * 1_000_003L + in * 1009L + out + (split ? 11 : 7));
    long xCount = (long) rows * in;
    long wCount = (long) out * in;
    float[] y0 = FixedGemmV2GpuTest.guardedOutputs(rnd, rows, out);
    Gemm gemm = new Gemm(device, true, split);
    String how = split ? "k in " + Gemm.splitParts(in, out) + " parts, " : "";
    List<String> failures = new ArrayList<>();
    try (Arena arena = Arena.ofConfined();
        DeviceBuffer dx = device.allocate(xCount * 2);
        DeviceBuffer dw = device.allocate(wCount * 2);
        DeviceBuffer whole = device.allocate((long) y0.length * 4);
        DeviceBuffer cut = device.allocate((long) y0.length * 4)) {
      MemorySegment x = arena.allocate(ValueLayout.JAVA_SHORT, xCount);
      MemorySegment w = arena.allocate(ValueLayout.JAVA_SHORT, wCount);
      FixedGemmV2GpuTest.randomOperands(rnd, x, w, in);
      dx.copyFrom(x, 0);
      dw.copyFrom(w, 0);
      List<int[]> parts = FixedGemmV2GpuTest.rowParts(rows);
      for (boolean accumulate : new boolean[] {false, true}) {
        float[] reference = null;
        for (FixedOrderWgmmaTile tile : FixedOrderWgmmaTile.values()) {
          whole.write(0, y0);
          cut.write(0, y0);
          List<int[]> launches = new ArrayList<>();
          launches.add(new int[] {0, rows});
          for (int[] part : parts) {
            launches.add(part);
          }
          for (int l = 0; l < launches.size(); l++) {
            int[] part = launches.get(l);
            long xAt = dx.pointer() + (long) part[0] * in * 2;
            long yAt = (l == 0 ? whole : cut).pointer() + (long) part[0] * out * 4;
            if (split) {
              gemm.applyFixedOrderSplit(tile, xAt, dw.pointer(), yAt, part[1], in, out, accumulate);
            } else {
              gemm.applyFixedOrderTile(tile, xAt, dw.pointer(), yAt, part[1], in, out, accumulate);
            }
          }
          device.synchronize();
          float[] y = whole.readFloats(0, y0.length);
          float[] parted = cut.readFloats(0, y0.length);
          reference = reference == null ? y : reference;
          double worst =
              FixedGemmV2GpuTest.worstAgainstFloat64(x, w, y0, y, rows, in, out, accumulate, rnd);
          String what =
              String.format(Locale.ROOT, "%s, %saccumulate %b", tile.kernel, how, accumulate);
          TileCheck check =
              TileCheck.of(what, REFERENCE.kernel, reference, y, parted, y0, rows, out, worst);
          System.out.printf(
              Locale.ROOT,
              "fixed-order wgmma %s vs %s, %srows %d, in %d, out %d, accumulate %b: %d of %d"
                  + " outputs differ in bits from it, %d from the tile in %d launches, guard row"
                  + " written %d; sampled error / bound vs float64 %.3f%n",
              tile.kernel,
              REFERENCE.kernel,
              how,
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
        if (split) {
          // the routing: Gemm.apply picks its own tile per run of rows, the same bits
          whole.write(0, y0);
          gemm.apply(
              dx.pointer(), dw.pointer(), Gemm.R_16BF, whole.pointer(), rows, in, out, accumulate);
          device.synchronize();
          int differ = BitDiff.of(whole.readFloats(0, y0.length), reference).count();
          if (differ != 0) {
            failures.add(
                "Gemm.apply, "
                    + how
                    + "accumulate "
                    + accumulate
                    + ": "
                    + differ
                    + " outputs differ in bits from the tiles'");
          }
        }
      }
    } finally {
      gemm.close();
    }
    assertTrue(failures.isEmpty(), () -> String.join("\n", failures));
  }

  /**
   * Times every wgmma tile, the v2 tile {@link FixedOrderTile#forShape} picks and cuBLAS ({@code
   * cublasGemmEx}, the non-deterministic path) on the projections of Llama 8B (qkv 6144 × 4096, o
   * 4096 × 4096, gate|up 28672 × 4096, down 4096 × 14336) at 1 to 8,192 rows, and prints one line
   * per shape: each path's median time in µs and its TFLOP/s, the wgmma tile {@link
   * FixedOrderWgmmaTile#forShape} picks, and that pick's time against v2's pick, cuBLAS and the
   * fastest wgmma tile (the figures the rule's slice times come from, and are checked against), and
   * at 8,192 rows the slice time each tile's time implies (how a candidate's is measured). Asserts
   * nothing about speed. Each product runs once to warm up, then {@code calls} times between pairs
   * of events.
   */
  @Test
  @Order(3)
  void shouldReportTimesAgainstV2AndCublas() {
    // 1,024 rows: where 128 × 256's last wave is part-empty and the candidate 128 × 192 is meant
    // to win
    int[] rowCounts = {1, 16, 64, 128, 256, 512, 1024, 2048, 8192};
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
    SplittableRandom rnd = new SplittableRandom(13);
    FixedOrderWgmmaTile[] tiles = FixedOrderWgmmaTile.values();
    int sms = device.multiprocessors();
    int shared = device.sharedBytesPerBlock();
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
      for (int[] shape : shapes) {
        int out = shape[0];
        int in = shape[1];
        for (int rows : rowCounts) {
          FixedOrderTile v2 = FixedOrderTile.forShape(rows, out, sms, shared);
          // paths: the wgmma tiles, v2's pick, cuBLAS
          List<String> names = new ArrayList<>();
          List<Runnable> paths = new ArrayList<>();
          for (FixedOrderWgmmaTile tile : tiles) {
            names.add(tile.kernel);
            paths.add(
                () ->
                    fixed.applyFixedOrderTile(
                        tile, dx.pointer(), dw.pointer(), dy.pointer(), rows, in, out, false));
          }
          names.add("v2 " + v2.kernel);
          paths.add(
              () ->
                  fixed.applyFixedOrderTile(
                      v2, dx.pointer(), dw.pointer(), dy.pointer(), rows, in, out, false));
          names.add("cuBLAS");
          paths.add(
              () ->
                  cublas.applyCublas(
                      dx.pointer(), dw.pointer(), Gemm.R_16BF, dy.pointer(), rows, in, out, false));
          double[] micros = new double[paths.size()];
          for (int p = 0; p < paths.size(); p++) {
            for (int i = -1; i < calls; i++) {
              if (i >= 0) {
                times.start(i);
              }
              paths.get(p).run();
              if (i >= 0) {
                times.end(i);
              }
            }
            micros[p] = times.medianMicros();
          }
          String pick = FixedOrderWgmmaTile.forShape(rows, out, sms, shared).kernel;
          printTimes(rows, out, in, names, micros, pick);
          if (rows == rowCounts[rowCounts.length - 1]) {
            printSliceTimes(rows, out, in, tiles, micros, sms);
          }
        }
      }
    }
  }

  /**
   * At the most rows, where every tile runs many waves: the slice time each tile's measured time
   * implies (its time over its waves and its slices of 64 k, the figure {@link
   * FixedOrderWgmmaTile#sliceNanos} holds), beside the one the rule has, which for a tile not
   * {@link FixedOrderWgmmaTile#measured} (a candidate) is an estimate for this line to replace.
   * {@code micros} starts with the tiles' times, in their order.
   */
  private static void printSliceTimes(
      int rows, int out, int in, FixedOrderWgmmaTile[] tiles, double[] micros, int sms) {
    long slices = Math.ceilDiv(in, FixedOrderWgmmaTile.SLICE_K);
    StringBuilder line =
        new StringBuilder(
            String.format(Locale.ROOT, "wgmma slice times M %d, N %d, K %d:", rows, out, in));
    for (int p = 0; p < tiles.length; p++) {
      FixedOrderWgmmaTile tile = tiles[p];
      long waves = Math.ceilDiv(tile.blocks(rows, out), (long) tile.blocksPerSm * sms);
      line.append(
          String.format(
              Locale.ROOT,
              " %s %.0f ns a wave and slice (%s %d);",
              tile.kernel,
              micros[p] * 1000 / (waves * slices),
              tile.measured ? "the rule's" : "estimated, not in the rule:",
              tile.sliceNanos));
    }
    System.out.println(line);
  }

  /**
   * One line of the timing table: each path's time and TFLOP/s ({@code names} and {@code micros}:
   * the wgmma tiles, v2's pick, cuBLAS last), then the wgmma rule's pick against v2's, cuBLAS and
   * the fastest wgmma tile.
   */
  private static void printTimes(
      int rows, int out, int in, List<String> names, double[] micros, String pick) {
    double flop = 2.0 * rows * out * in;
    int n = names.size();
    double cublasUs = micros[n - 1];
    double v2Us = micros[n - 2];
    double pickUs = micros[names.indexOf(pick)];
    StringBuilder line =
        new StringBuilder(
            String.format(Locale.ROOT, "wgmma timing M %d, N %d, K %d:", rows, out, in));
    for (int p = 0; p < n; p++) {
      line.append(
          String.format(
              Locale.ROOT,
              " %s %.1f us (%.0f TFLOP/s);",
              names.get(p),
              micros[p],
              flop / micros[p] / 1e6));
    }
    int fastest = 0;
    for (int p = 1; p < n - 2; p++) {
      fastest = micros[p] < micros[fastest] ? p : fastest;
    }
    line.append(
        String.format(
            Locale.ROOT,
            " the wgmma rule picks %s: %.2f of v2's pick, %.2f of cuBLAS, %.2f of the fastest tile"
                + " (%s)",
            pick,
            pickUs / v2Us,
            pickUs / cublasUs,
            pickUs / micros[fastest],
            names.get(fastest)));
    System.out.println(line);
  }
}

package io.tokenspeed.model.kernel;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.model.checkpoint.SafetensorsFile;
import io.tokenspeed.model.checkpoint.SafetensorsWriter;
import io.tokenspeed.model.checkpoint.SafetensorsWriter.Entry;
import io.tokenspeed.model.checkpoint.Tensor;
import java.lang.foreign.Arena;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@link MatMul} against its contract written as a scalar loop — {@code s = fma(x[k], w[k], s)} for
 * k ascending from {@code +0.0}, then {@code + b} — bit for bit: seeded random shapes (inputs below
 * one vector and odd widths, outputs below one panel, exact panels and partial last panels, token
 * counts that leave partial 6-token tiles and, on 3 threads, fewer panels than threads so tokens
 * are sliced too), F32, BF16 and F16 weights, with and without bias, on one thread and on three.
 * Values include exact zeros, negative zeros and wide magnitudes so that rounding differences in
 * any reordering would show.
 */
class MatMulExactnessTest {
  private static final int LANES = VectorMath.SPECIES.length();

  private static ComputePool one;
  private static ComputePool all;

  @TempDir static Path dir;

  @BeforeAll
  static void pools() {
    one = ComputePool.ofThreads(1);
    all = ComputePool.ofThreads(Math.max(3, Runtime.getRuntime().availableProcessors()));
  }

  @AfterAll
  static void close() {
    one.close();
    all.close();
  }

  static Stream<Arguments> seeds() {
    return LongStream.range(1, 61).mapToObj(Arguments::of);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldMatchOneDotKernelBitForBitWhenShapesAreRandom(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int rows = 1 + rnd.nextInt(seed % 4 == 0 ? 3 : 40);
    int out = pickOut(rnd);
    int in = pickIn(rnd);
    String dtype = List.of("F32", "BF16", "F16").get((int) (seed % 3));
    boolean withBias = rnd.nextBoolean();

    float[] x = values(rnd, rows * in);
    float[] bias = withBias ? values(rnd, out) : null;
    byte[] f32 = toBytes(values(rnd, out * in));
    byte[] bytes =
        switch (dtype) {
          case "BF16" -> SafetensorsWriter.toBf16(f32);
          case "F16" -> SafetensorsWriter.toF16(f32);
          default -> f32;
        };
    Path file = dir.resolve("w" + seed + ".safetensors");
    SafetensorsWriter.write(file, List.of(new Entry("w", dtype, new long[] {out, in}, bytes)));

    try (Arena arena = Arena.ofShared()) {
      Tensor w = SafetensorsFile.open(file, arena).tensor("w");
      float[] expected = scalarReference(x, rows, w, bias);
      for (ComputePool pool : new ComputePool[] {one, all}) {
        float[] actual = new float[rows * out];
        MatMul.apply(pool, x, rows, PackedMatrix.of(w), bias, actual);
        for (int i = 0; i < expected.length; i++) {
          assertEquals(
              Float.floatToRawIntBits(expected[i]),
              Float.floatToRawIntBits(actual[i]),
              "seed="
                  + seed
                  + " dtype="
                  + dtype
                  + " rows="
                  + rows
                  + " out="
                  + out
                  + " in="
                  + in
                  + " threads="
                  + pool.threads()
                  + " t="
                  + i / out
                  + " o="
                  + i % out
                  + " expected="
                  + expected[i]
                  + " actual="
                  + actual[i]);
        }
      }
    }
  }

  /** The contract, literally: one scalar fused multiply-add chain per output, then the bias. */
  private static float[] scalarReference(float[] x, int rows, Tensor w, float[] bias) {
    int out = w.dim(0);
    int in = w.dim(1);
    float[] y = new float[rows * out];
    for (int t = 0; t < rows; t++) {
      for (int o = 0; o < out; o++) {
        float s = 0f;
        for (int k = 0; k < in; k++) {
          s = Math.fma(x[t * in + k], w.getFloat((long) o * in + k), s);
        }
        y[t * out + o] = bias == null ? s : s + bias[o];
      }
    }
    return y;
  }

  /** Below one panel, whole panels, or whole panels plus a partial one. */
  private static int pickOut(SplittableRandom rnd) {
    int panel = PackedMatrix.PANEL;
    return switch (rnd.nextInt(3)) {
      case 0 -> 1 + rnd.nextInt(panel);
      case 1 -> panel * (1 + rnd.nextInt(3));
      default -> panel * (1 + rnd.nextInt(3)) + 1 + rnd.nextInt(panel - 1);
    };
  }

  /** Below one vector, an exact multiple of it, or some vectors plus a tail. */
  private static int pickIn(SplittableRandom rnd) {
    return switch (rnd.nextInt(3)) {
      case 0 -> 1 + rnd.nextInt(LANES);
      case 1 -> LANES * (1 + rnd.nextInt(8));
      default -> LANES * (1 + rnd.nextInt(8)) + 1 + rnd.nextInt(LANES - 1 > 0 ? LANES - 1 : 1);
    };
  }

  private static float[] values(SplittableRandom rnd, int n) {
    float[] v = new float[n];
    for (int i = 0; i < n; i++) {
      int kind = rnd.nextInt(20);
      v[i] =
          switch (kind) {
            case 0 -> 0f;
            case 1 -> -0f;
            case 2 -> (float) (rnd.nextDouble(-1, 1) * 1e4);
            case 3 -> (float) (rnd.nextDouble(-1, 1) * 1e-4);
            default -> (float) rnd.nextDouble(-1, 1);
          };
    }
    return v;
  }

  private static byte[] toBytes(float[] v) {
    ByteBuffer b = ByteBuffer.allocate(v.length * 4).order(ByteOrder.LITTLE_ENDIAN);
    for (float f : v) {
      b.putFloat(f);
    }
    return b.array();
  }
}

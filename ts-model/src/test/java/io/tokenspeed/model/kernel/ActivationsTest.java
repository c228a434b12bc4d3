package io.tokenspeed.model.kernel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.SplittableRandom;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The vector SwiGLU against the scalar {@code silu(g)·u}, bit for bit, over seeded lengths that
 * leave vector tails and cross the scratch pass, on 1 and 3 threads; and SiLU against its
 * definition in double precision.
 */
class ActivationsTest {

  static Stream<Arguments> seeds() {
    return LongStream.range(1, 21).mapToObj(Arguments::of);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldGiveScalarSiluBitsWhenSwiGluRunsVectorized(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int n = 1 + rnd.nextInt(seed % 5 == 0 ? 10_000 : 300);
    float[] gate = new float[n];
    float[] up = new float[n];
    for (int i = 0; i < n; i++) {
      gate[i] =
          switch (rnd.nextInt(10)) {
            case 0 -> 0f;
            case 1 -> -0f;
            case 2 -> (float) rnd.nextDouble(-200, 200);
            default -> (float) rnd.nextDouble(-8, 8);
          };
      up[i] = (float) rnd.nextDouble(-4, 4);
    }
    for (int threads : new int[] {1, 3}) {
      try (ComputePool pool = ComputePool.ofThreads(threads)) {
        float[] out = new float[n];
        Activations.swiGlu(pool, gate, up, out, n);
        for (int i = 0; i < n; i++) {
          float expected = Activations.silu(gate[i]) * up[i];
          assertEquals(
              Float.floatToRawIntBits(expected),
              Float.floatToRawIntBits(out[i]),
              "seed=" + seed + " threads=" + threads + " i=" + i + " gate=" + gate[i]);
        }
      }
    }
  }

  @Test
  void shouldMatchSiluDefinitionWithinFewUlps() {
    for (float x = -85f; x <= 85f; x += 0.0137f) {
      double exact = x / (1.0 + Math.exp(-x));
      float got = Activations.silu(x);
      double ulp = Math.ulp((float) exact);
      assertTrue(Math.abs(got - exact) <= 3 * ulp, "x=" + x + " silu=" + got + " exact=" + exact);
    }
  }
}

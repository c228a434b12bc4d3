package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class StepRandomTest {

  static LongStream seeds() {
    return LongStream.of(0, 1, 2, 42, -1, Long.MIN_VALUE, Long.MAX_VALUE, 0x9e3779b97f4a7c15L);
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldEqualSplittableRandomStreamWhenSeeded(long seed) {
    SplittableRandom reference = new SplittableRandom(StepRandom.mix64(seed));
    for (int step = 0; step < 200; step++) {
      double u = StepRandom.uniform(seed, step);
      assertEquals(reference.nextDouble(), u, "step " + step);
      assertTrue(u >= 0 && u < 1);
    }
  }

  @Test
  void shouldNotShiftStreamsWhenSeedsDifferByTheIncrement() {
    long seed = 5;
    assertNotEquals(
        StepRandom.uniform(seed, 1), StepRandom.uniform(seed + StepRandom.GOLDEN_GAMMA, 0));
  }

  @Test
  void shouldRejectNegativeStep() {
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> StepRandom.uniform(1, -1));
    assertTrue(e.getMessage().startsWith("step=-1"));
  }
}

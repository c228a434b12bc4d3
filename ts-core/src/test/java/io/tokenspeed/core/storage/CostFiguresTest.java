package io.tokenspeed.core.storage;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** The figures' wire form is exact, and their values are checked. */
class CostFiguresTest {

  static LongStream seeds() {
    return LongStream.range(0, 50);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldRoundTripTheWireFormBitForBit(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    CostFigures f =
        new CostFigures(
            rnd.nextDouble() * 1e9,
            rnd.nextDouble() * 1e12,
            rnd.nextDouble() * 1e8,
            rnd.nextDouble(),
            rnd.nextDouble() * 1e-3);
    byte[] wire = f.encode();
    assertEquals(CostFigures.BYTES, wire.length);
    assertEquals(f, CostFigures.decode(wire));
  }

  @Test
  void shouldRefuseNegativeOrNonFiniteValuesAndShortWireForms() {
    assertThrows(IllegalArgumentException.class, () -> new CostFigures(-1, 0, 0, 0, 0));
    assertThrows(IllegalArgumentException.class, () -> new CostFigures(0, Double.NaN, 0, 0, 0));
    assertThrows(
        IllegalArgumentException.class,
        () -> new CostFigures(0, 0, Double.POSITIVE_INFINITY, 0, 0));
    assertThrows(IllegalArgumentException.class, () -> CostFigures.decode(new byte[39]));
  }

  @Test
  void shouldSayWhatIsKnownAndWhenFiguresMoved() {
    assertFalse(CostFigures.UNKNOWN.storeKnown());
    assertFalse(CostFigures.UNKNOWN.prefillKnown());
    CostFigures f = new CostFigures(1000, 1e9, 0, 10, 0);
    assertTrue(f.storeKnown());
    assertTrue(f.prefillKnown());
    assertFalse(f.differsFrom(new CostFigures(1040, 1.04e9, 0, 10.4, 0), 0.05));
    assertTrue(f.differsFrom(new CostFigures(1100, 1e9, 0, 10, 0), 0.05));
    assertTrue(f.differsFrom(f.withStore(1000, 0), 0.05), "the store became unknown");
  }
}

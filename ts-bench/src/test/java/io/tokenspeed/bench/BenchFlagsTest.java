package io.tokenspeed.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class BenchFlagsTest {

  @Test
  void shouldKeepEveryPairInOrderWithRepeatedFlags() {
    assertEquals(
        List.of(
            Map.entry("--model", "a=1"), Map.entry("--model", "b=2"), Map.entry("--chunk", "64")),
        BenchFlags.of(new String[] {"--model", "a=1", "--model", "b=2", "--chunk", "64"}));
    assertEquals(List.of(), BenchFlags.of(new String[0]));
  }

  @Test
  void shouldRefuseAFlagWithoutAValue() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> BenchFlags.of(new String[] {"--chunk", "64", "--threads"}));
    assertEquals("--threads needs a value", e.getMessage());
  }
}

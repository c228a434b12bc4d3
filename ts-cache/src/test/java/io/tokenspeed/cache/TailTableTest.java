package io.tokenspeed.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.PromptKeys;
import java.util.List;
import org.junit.jupiter.api.Test;

class TailTableTest {

  private static final CacheLayout LAYOUT = Layouts.mixed();

  @Test
  void shouldFindOnlyTailsOfThisPromptWithinRange() {
    TailTable t = new TailTable(8);
    PromptKeys a = PromptKeys.of(LAYOUT, Layouts.tokens(300, 1), List.of());
    int[] otherTokens = Layouts.tokens(300, 1);
    otherTokens[140] ^= 1; // same first two pages, different third
    PromptKeys b = PromptKeys.of(LAYOUT, otherTokens, List.of());
    t.record(a, 150);
    t.record(a, 10);
    t.record(a, 290);
    assertArrayEquals(new int[] {10, 150, 290}, t.hintsFor(a, 0, 299));
    assertArrayEquals(new int[] {150}, t.hintsFor(a, 10, 200));
    assertArrayEquals(new int[] {10}, t.hintsFor(b, 0, 299), "diverged before 150");
    t.record(a, 150);
    assertEquals(3, t.size(), "recording twice keeps one entry");
  }

  @Test
  void shouldForgetTheOldestTailBeyondCapacity() {
    TailTable t = new TailTable(2);
    PromptKeys a = PromptKeys.of(LAYOUT, Layouts.tokens(300, 1), List.of());
    t.record(a, 100);
    t.record(a, 200);
    t.record(a, 250);
    assertEquals(2, t.size());
    assertArrayEquals(new int[] {200, 250}, t.hintsFor(a, 0, 299));
    TailTable off = new TailTable(0);
    off.record(a, 100);
    assertEquals(0, off.size());
    assertThrows(IllegalArgumentException.class, () -> new TailTable(-1));
    assertThrows(IllegalArgumentException.class, () -> t.record(a, 128), "aligned is no tail");
  }
}

package io.tokenspeed.cache;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.PromptKeys;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The checker must fail on the breakages it exists for; otherwise it proves nothing. */
class CacheInvariantsTest {

  @Test
  void shouldReportALeakedPrivateBlock() {
    CacheCoordinator cache = new CacheCoordinator(Layouts.mixed(), 4, 4, 8);
    int[][] b = cache.device().allocate(new int[] {1, 0, 0});
    AssertionError e =
        assertThrows(AssertionError.class, () -> CacheInvariants.check(cache, List.of()));
    assertTrue(e.getMessage().contains("ref_count=1 but 0 holder refs"), e.getMessage());
    CacheInvariants.check(cache, List.of(new HeldBlock(Tier.DEVICE, b[0][0])));
  }

  @Test
  void shouldReportAHolderOfAFreedBlock() {
    CacheCoordinator cache = new CacheCoordinator(Layouts.mixed(), 4, 4, 8);
    int[][] b = cache.device().allocate(new int[] {1, 0, 0});
    cache.device().unref(b[0][0]);
    AssertionError e =
        assertThrows(
            AssertionError.class,
            () -> CacheInvariants.check(cache, List.of(new HeldBlock(Tier.DEVICE, b[0][0]))));
    assertTrue(e.getMessage().contains("free block"), e.getMessage());
  }

  @Test
  void shouldRefuseWritesToPublishedBlocks() {
    CacheCoordinator cache = new CacheCoordinator(Layouts.mixed(), 4, 4, 8);
    PromptKeys keys = PromptKeys.of(Layouts.mixed(), Layouts.tokens(64, 1), List.of());
    int[][] b = cache.host().allocate(new int[] {1, 0, 0});
    cache.host().noteWrite(b[0][0]);
    cache.host().publish(keys.keyOf(0, 0, 64), b[0][0]);
    assertThrows(IllegalStateException.class, () -> cache.host().noteWrite(b[0][0]));
    cache.host().unref(b[0][0]);
    CacheInvariants.check(cache, List.of());
  }

  @Test
  void shouldRefuseWritesToSharedBlocks() {
    CacheCoordinator cache = new CacheCoordinator(Layouts.mixed(), 4, 4, 8);
    int[][] b = cache.device().allocate(new int[] {1, 0, 0});
    cache.device().ref(b[0][0]);
    assertThrows(IllegalStateException.class, () -> cache.device().noteWrite(b[0][0]));
    cache.device().unref(b[0][0]);
    cache.device().unref(b[0][0]);
    CacheInvariants.check(cache, List.of());
  }
}

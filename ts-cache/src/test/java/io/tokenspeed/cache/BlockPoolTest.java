package io.tokenspeed.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheLayout;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class BlockPoolTest {

  private static final CacheLayout LAYOUT = Layouts.mixed(); // 64, 128, 256 bytes per block

  @Test
  void shouldPackEachGroupIntoLcmParents() {
    BlockPool pool = CacheFixture.track(new BlockPool(Tier.DEVICE, LAYOUT, 4));
    assertEquals(256, pool.parentBytes());
    assertEquals(4, pool.childrenPerParent(0));
    assertEquals(2, pool.childrenPerParent(1));
    assertEquals(1, pool.childrenPerParent(2));
    assertEquals(16, pool.available(0));
  }

  @Test
  void shouldNeverHandOutTheNullBlockAndKeepByteRangesDisjoint() {
    BlockPool pool = CacheFixture.track(new BlockPool(Tier.HOST, LAYOUT, 3));
    int[][] out = {new int[4], new int[2], new int[1]};
    assertTrue(pool.tryAcquire(new int[] {4, 2, 1}, out));
    Set<Long> starts = new HashSet<>();
    for (int g = 0; g < 3; g++) {
      for (int b : out[g]) {
        assertNotEquals(0, b);
        assertEquals(g, pool.groupOf(b));
        assertTrue(starts.add(pool.byteOffset(b)));
        long bytes = LAYOUT.group(g).bytesPerBlock();
        assertTrue(pool.byteOffset(b) + bytes <= pool.numParents() * pool.parentBytes());
      }
    }
    assertEquals(0, pool.freeParents());
    assertFalse(pool.isAllocated(0));
  }

  @Test
  void shouldChangeNothingWhenAcquireFails() {
    BlockPool pool = CacheFixture.track(new BlockPool(Tier.DEVICE, LAYOUT, 2));
    int[][] first = {new int[3], new int[0], new int[0]};
    assertTrue(pool.tryAcquire(new int[] {3, 0, 0}, first));
    long held = pool.heldBlocks();
    int freeParents = pool.freeParents();
    long avail0 = pool.available(0);
    int[][] out = {new int[1], new int[0], new int[2]};
    assertFalse(pool.tryAcquire(new int[] {1, 0, 2}, out), "needs 2 parents for state, has 1");
    assertArrayEquals(new int[2], out[2]);
    assertEquals(held, pool.heldBlocks());
    assertEquals(freeParents, pool.freeParents());
    assertEquals(avail0, pool.available(0));
  }

  @Test
  void shouldReturnParentOnlyWhenItsLastChildIsFreed() {
    BlockPool pool = CacheFixture.track(new BlockPool(Tier.DEVICE, LAYOUT, 1));
    int[][] out = {new int[2], new int[0], new int[0]};
    assertTrue(pool.tryAcquire(new int[] {2, 0, 0}, out));
    assertEquals(0, pool.freeParents());
    assertEquals(0, pool.available(2), "one live child pins the whole parent");
    pool.unref(out[0][0]);
    pool.free(out[0][0]);
    assertEquals(0, pool.freeParents());
    pool.unref(out[0][1]);
    pool.free(out[0][1]);
    assertEquals(1, pool.freeParents());
    assertEquals(1, pool.available(2));
  }

  @Test
  void shouldRefuseToFreeReferencedBlocksAndDoubleUnref() {
    BlockPool pool = CacheFixture.track(new BlockPool(Tier.DEVICE, LAYOUT, 1));
    int[][] out = {new int[1], new int[0], new int[0]};
    pool.tryAcquire(new int[] {1, 0, 0}, out);
    int b = out[0][0];
    assertThrows(IllegalStateException.class, () -> pool.free(b));
    assertEquals(0, pool.unref(b));
    assertThrows(IllegalStateException.class, () -> pool.unref(b));
    pool.free(b);
    assertThrows(IllegalStateException.class, () -> pool.free(b));
    assertThrows(IllegalStateException.class, () -> pool.ref(0));
  }

  @Test
  void shouldRejectLayoutsWhoseLcmIsTooLarge() {
    CacheLayout coprime =
        new CacheLayout(
            64,
            "bf16",
            List.of(
                Layouts.full(0, 16, 1_000_003),
                Layouts.full(1, 16, 999_983),
                Layouts.full(2, 16, 7919)));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> new BlockPool(Tier.DEVICE, coprime, 1));
    assertTrue(e.getMessage().contains("bytes_per_block="), e.getMessage());
  }

  @Test
  void shouldReuseFreedChildrenOfPartialParentsFirst() {
    BlockPool pool = CacheFixture.track(new BlockPool(Tier.DEVICE, LAYOUT, 2));
    int[][] out = {new int[4], new int[0], new int[0]};
    pool.tryAcquire(new int[] {4, 0, 0}, out);
    assertEquals(1, pool.freeParents());
    pool.unref(out[0][2]);
    pool.free(out[0][2]);
    int[][] again = {new int[1], new int[0], new int[0]};
    pool.tryAcquire(new int[] {1, 0, 0}, again);
    assertEquals(out[0][2], again[0][0]);
    assertEquals(1, pool.freeParents());
  }

  @Test
  void shouldCountAParentReferencedWhileAnyOfItsChildrenIsReferenced() {
    BlockPool pool = CacheFixture.track(new BlockPool(Tier.DEVICE, LAYOUT, 3));
    int[][] out = {new int[2], new int[1], new int[0]};
    assertTrue(pool.tryAcquire(new int[] {2, 1, 0}, out));
    assertEquals(2, pool.referencedParents());
    pool.unref(out[0][0]); // cached: allocated, no reference; its sibling still pins the parent
    assertEquals(2, pool.referencedParents());
    pool.unref(out[0][1]);
    assertEquals(1, pool.referencedParents(), "a parent of cached blocks only is reclaimable");
    assertEquals(1, pool.freeParents(), "but still claimed");
    pool.ref(out[0][1]);
    assertEquals(2, pool.referencedParents());
    pool.unref(out[0][1]);
    pool.unref(out[1][0]);
    pool.free(out[1][0]);
    assertEquals(0, pool.referencedParents());
    pool.free(out[0][0]);
    pool.free(out[0][1]);
    assertEquals(3, pool.freeParents());
  }

  /**
   * Random acquisitions, references and frees: {@link BlockPool#referencedParents} equals the
   * parents, found from each referenced block's byte offset, that hold a referenced block.
   */
  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8})
  void shouldCountReferencedParentsLikeAScanOfByteOffsets(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    BlockPool pool = CacheFixture.track(new BlockPool(Tier.HOST, LAYOUT, 6));
    List<Integer> live = new ArrayList<>();
    for (int step = 0; step < 400; step++) {
      int op = rnd.nextInt(4);
      if (op == 0 || live.isEmpty()) {
        int g = rnd.nextInt(3);
        int[] needs = new int[3];
        needs[g] = 1 + rnd.nextInt(3);
        int[][] out = {new int[needs[0]], new int[needs[1]], new int[needs[2]]};
        if (pool.tryAcquire(needs, out)) {
          for (int b : out[g]) {
            live.add(b);
          }
        }
      } else {
        int b = live.get(rnd.nextInt(live.size()));
        if (op == 1) {
          pool.ref(b);
        } else if (pool.refCount(b) > 0) {
          pool.unref(b);
        } else {
          pool.free(b);
          live.remove(Integer.valueOf(b));
        }
      }
      Set<Long> pinned = new HashSet<>();
      for (int b : live) {
        if (pool.refCount(b) > 0) {
          pinned.add(pool.byteOffset(b) / pool.parentBytes());
        }
      }
      assertEquals(pinned.size(), pool.referencedParents(), "seed=" + seed + " step=" + step);
    }
    for (int b : live) {
      while (pool.refCount(b) > 0) {
        pool.unref(b);
      }
      pool.free(b);
    }
    assertEquals(0, pool.referencedParents());
  }
}

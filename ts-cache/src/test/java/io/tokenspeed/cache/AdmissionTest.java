package io.tokenspeed.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class AdmissionTest {

  private static final CacheLayout MIXED = Layouts.mixed(); // full bg16, swa80 bg32, state bg64
  private static final int[] PROMPT = Layouts.tokens(300, 3);

  private static List<CacheKey> needed(CacheFixture f, PromptKeys keys, int b) {
    return f.cache.neededKeys(keys, b);
  }

  @Test
  void shouldPinDeviceHitAndAllocateFreshBlocksForTheRest() {
    CacheFixture f = new CacheFixture(MIXED, 64, 8);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    f.put(Tier.DEVICE, needed(f, keys, 128));
    Admission a = f.admit(keys, keys.reusableBound(), 172);
    assertEquals(128, a.hit());
    assertEquals(128, a.deviceHit());
    assertTrue(a.copies().isEmpty());
    // full: rows 0..7 pinned in place, rows 8..18 fresh (300 tokens / 16)
    assertEquals(19, a.tables()[0].length);
    for (int r = 0; r < 8; r++) {
      assertEquals(f.cache.device().lookup(keys.keyOf(0, r, 128)), a.tables()[0][r]);
    }
    for (int r = 8; r < 19; r++) {
      assertNotEquals(0, a.tables()[0][r]);
      assertEquals(null, f.cache.device().keyOf(a.tables()[0][r]), "fresh blocks are private");
    }
    // swa 80 at 128: rows holding tokens [49, 127] are 1..3; row 0 is a hole
    assertEquals(0, a.tables()[1][0]);
    assertNotEquals(0, a.tables()[1][1]);
    // state: input checkpoint at 128 pinned, working slot fresh
    assertEquals(f.cache.device().lookup(keys.checkpointKey(2, 128)), a.tables()[2][0]);
    assertNotEquals(0, a.tables()[2][1]);
    f.release(a);
  }

  @Test
  void shouldLoadHostRowsAboveTheDeviceFloorAndPublishThemOnCompletion() {
    CacheFixture f = new CacheFixture(MIXED, 64, 64);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    f.put(Tier.DEVICE, needed(f, keys, 64));
    f.put(Tier.HOST, needed(f, keys, 192));
    Admission a = f.admit(keys, keys.reusableBound(), 10);
    assertEquals(192, a.hit());
    assertEquals(64, a.deviceHit());
    // Only rows not on the device are loaded: full rows 4..11, swa rows at 192 ([113,191] -> 3..5)
    // minus those already on the device (row 1 of swa at 64 is not needed at 192), the checkpoint.
    List<BlockCopy> loads = a.copies();
    assertTrue(loads.stream().allMatch(c -> c.srcTier() == Tier.HOST && c.publishOnComplete()));
    assertEquals(8 + 3 + 1, loads.size());
    for (BlockCopy c : loads) {
      assertFalse(f.cache.device().contains(c.key()));
    }
    f.finishCopies(a, true);
    for (BlockCopy c : loads) {
      assertEquals(c.dstBlock(), f.cache.device().lookup(c.key()), "loaded rows are published");
    }
    f.release(a);
    assertEquals(192, f.cache.probe(keys, keys.reusableBound()).deviceHit());
  }

  @Test
  void shouldCopyOnWriteThePartialBlockAtATailHit() {
    CacheFixture f = new CacheFixture(MIXED, 64, 8);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    f.put(Tier.DEVICE, needed(f, keys, 299));
    Admission a = f.admit(keys, keys.reusableBound(), 1);
    assertEquals(299, a.hit());
    // full row 18 covers [288, 304): partial; swa row 9 covers [288, 320): partial
    List<BlockCopy> cow = a.copies();
    assertEquals(2, cow.size());
    for (BlockCopy c : cow) {
      assertEquals(Tier.DEVICE, c.srcTier());
      assertFalse(c.publishOnComplete());
      assertEquals(c.dstBlock(), a.tables()[c.groupId()][c.row()]);
      assertEquals(c.srcBlock(), f.cache.device().lookup(c.key()));
      assertNull(f.cache.device().keyOf(c.dstBlock()), "the copy is private");
    }
    // the request may write its copy, never the published source
    BlockCopy full = cow.stream().filter(c -> c.groupId() == 0).findFirst().orElseThrow();
    assertEquals(18, full.row());
    f.finishCopies(a, true);
    f.cache.device().noteWrite(full.dstBlock());
    assertThrows(IllegalStateException.class, () -> f.cache.device().noteWrite(full.srcBlock()));
    assertNull(f.cache.device().keyOf(full.dstBlock()), "a copy-on-write block is never published");
    f.release(a);
  }

  @Test
  void shouldTakeNothingWhenTheDeviceCannotHoldTheRequest() {
    CacheFixture f = new CacheFixture(MIXED, 4, 8);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    f.put(Tier.HOST, needed(f, keys, 128));
    long deviceHeld = f.cache.device().pool().heldBlocks();
    assertNull(f.admit(keys, keys.reusableBound(), 172));
    assertEquals(deviceHeld, f.cache.device().pool().heldBlocks());
    for (CacheKey k : needed(f, keys, 128)) {
      assertEquals(0, f.cache.host().pool().refCount(f.cache.host().lookup(k)), "unpinned " + k);
    }
  }

  @Test
  void shouldEvictCachedDeviceBlocksOldestFirstButNeverPinnedOnes() {
    CacheFixture f = new CacheFixture(MIXED, 12, 4);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    PromptKeys other = PromptKeys.of(MIXED, Layouts.tokens(300, 99), List.of());
    f.put(Tier.DEVICE, needed(f, other, 64)); // oldest
    f.put(Tier.DEVICE, needed(f, keys, 64));
    int[] before = f.cache.device().evictionCandidates(100);
    assertEquals(f.cache.device().cachedCount(), before.length);
    assertEquals(other.keyOf(0, 0, 64), f.cache.device().keyOf(before[0]), "oldest first");
    Admission a = f.admit(keys, keys.reusableBound(), 200);
    assertEquals(64, a.hit());
    assertTrue(f.cache.device().evictions() > 0);
    for (CacheKey k : needed(f, keys, 64)) {
      assertTrue(f.cache.device().contains(k), "a pinned hit is never evicted: " + k);
    }
    f.release(a);
  }

  @Test
  void shouldReturnPublishedBlocksToTheLruAndFreePrivateOnesOnRelease() {
    CacheFixture f = new CacheFixture(MIXED, 64, 8);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    f.put(Tier.DEVICE, needed(f, keys, 64));
    int cached = f.cache.device().cachedCount();
    long held = f.cache.device().pool().heldBlocks();
    Admission a = f.admit(keys, 64, 64);
    assertTrue(f.cache.device().cachedCount() < cached);
    f.release(a);
    assertEquals(cached, f.cache.device().cachedCount());
    assertEquals(held, f.cache.device().pool().heldBlocks());
  }

  @Test
  void shouldShareAPublishedKeyOnceWhenTwoRequestsComputeIt() {
    CacheFixture f = new CacheFixture(MIXED, 64, 8);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    Admission a = f.admit(keys, 0, 64);
    Admission b = f.admit(keys, 0, 64);
    CacheKey k = keys.keyOf(0, 0, 64);
    f.cache.device().noteWrite(a.tables()[0][0]);
    f.cache.device().noteWrite(b.tables()[0][0]);
    assertTrue(f.cache.device().publish(k, a.tables()[0][0]));
    assertFalse(f.cache.device().publish(k, b.tables()[0][0]), "duplicate stays private");
    assertEquals(a.tables()[0][0], f.cache.device().lookup(k));
    f.release(a);
    f.release(b);
    assertTrue(f.cache.device().contains(k));
  }

  @Test
  void shouldMatchAgainAtAdmissionAfterEviction() {
    CacheFixture f = new CacheFixture(MIXED, 64, 64);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    f.put(Tier.HOST, needed(f, keys, 256));
    assertEquals(256, f.cache.probe(keys, keys.reusableBound()).hostHit());
    // Once the checkpoint at 256 is evicted, admission must fall back to 192, whose blocks exist.
    List<CacheKey> at192 = new ArrayList<>(needed(f, keys, 192));
    f.put(Tier.HOST, at192);
    f.cache.host().evict(f.cache.host().lookup(keys.checkpointKey(2, 256)));
    Admission a = f.admit(keys, keys.reusableBound(), 1);
    assertEquals(192, a.hit(), "lost dependencies shorten reuse");
    f.release(a);
  }

  @Test
  void shouldRejectInvalidRequests() {
    CacheFixture f = new CacheFixture(MIXED, 8, 8);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    assertThrows(IllegalArgumentException.class, () -> f.cache.admit(keys, 10, 0));
    assertThrows(IllegalArgumentException.class, () -> f.cache.admit(keys, 300, 1));
    PromptKeys foreign =
        PromptKeys.of(
            new CacheLayout(32, "bf16", List.of(Layouts.full(0, 16, 64))), PROMPT, List.of());
    assertThrows(IllegalArgumentException.class, () -> f.cache.probe(foreign, 10));
    assertArrayEquals(new int[] {0, 64, 128, 192, 256, 299}, f.cache.candidates(keys, 0, 299));
    assertArrayEquals(new int[] {100, 128, 192}, f.cache.candidates(keys, 100, 200));
  }

  @Test
  void shouldSizeTheTableInAbsoluteTokensWhenAdmittingUpTo() {
    CacheFixture f = new CacheFixture(MIXED, 64, 8);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    f.put(Tier.DEVICE, needed(f, keys, 128));
    Admission a = f.adopt(f.cache.admitUpTo(keys, keys.reusableBound(), 316));
    assertEquals(128, a.hit());
    assertEquals(20, a.tables()[0].length, "316 tokens at bg 16");
    assertThrows(
        IllegalArgumentException.class, () -> f.cache.admitUpTo(keys, keys.reusableBound(), 128));
    f.release(a);
  }
}

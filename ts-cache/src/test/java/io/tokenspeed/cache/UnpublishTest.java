package io.tokenspeed.cache;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** {@link TierCache#unpublish} and the full {@link CacheCoordinator#clear} built on it. */
class UnpublishTest {

  private static final CacheLayout MIXED = Layouts.mixed(); // full bg16, swa80 bg32, state bg64

  private static PromptKeys prompt(int n, int seed) {
    return PromptKeys.of(MIXED, Layouts.tokens(n, seed), List.of());
  }

  /** A published block of group 0 under {@code key}, holding one reference. */
  private static int publishedHeld(TierCache t, CacheKey key) {
    int b = t.allocate(new int[] {1, 0, 0})[0][0];
    t.noteWrite(b);
    assertTrue(t.publish(key, b));
    return b;
  }

  @Test
  void shouldFreeAReferencedBlockExactlyOnceWhenItsLastReferenceGoesAfterUnpublish() {
    CacheFixture f = new CacheFixture(MIXED, 4, 4);
    TierCache host = f.cache.host();
    CacheKey key = prompt(64, 1).keyOf(0, 0, 64);
    int b = publishedHeld(host, key);
    host.ref(b); // two holders: say a PUT's source and a copy's source
    long held = host.pool().heldBlocks();
    long evictions = host.evictions();

    assertTrue(host.unpublish(b));
    assertFalse(host.contains(key));
    assertEquals(0, host.lookup(key));
    assertNull(host.keyOf(b));
    assertTrue(host.isWithdrawn(b));
    assertEquals(held, host.pool().heldBlocks(), "the memory stays with its holders");
    assertEquals(2, host.pool().refCount(b));
    assertEquals(0, host.cachedCount(), "never cached");
    CacheInvariants.check(
        f.cache, List.of(new HeldBlock(Tier.HOST, b), new HeldBlock(Tier.HOST, b)));

    host.unref(b);
    assertTrue(host.pool().isAllocated(b), "one holder left");
    CacheInvariants.check(f.cache, List.of(new HeldBlock(Tier.HOST, b)));
    host.unref(b);
    assertFalse(host.pool().isAllocated(b), "freed with the last reference");
    assertFalse(host.isWithdrawn(b));
    assertEquals(held - 1, host.pool().heldBlocks(), "freed exactly once");
    assertEquals(evictions, host.evictions(), "freed, not evicted");
    assertEquals(4, host.pool().freeParents());
    assertThrows(IllegalStateException.class, () -> host.unref(b), "nothing left to drop");
  }

  @Test
  void shouldNeverMatchAnUnpublishedBlock() {
    CacheFixture f = new CacheFixture(MIXED, 64, 64);
    PromptKeys p = prompt(300, 2);
    List<CacheKey> keys = f.cache.neededKeys(p, 256);
    f.put(Tier.HOST, keys);
    assertEquals(256, f.cache.probe(p, p.reusableBound()).hostHit());
    Admission a = f.admit(p, p.reusableBound(), 1); // pins the Host rows as copy sources
    assertEquals(256, a.hit());
    List<Integer> sources = new ArrayList<>();
    for (BlockCopy c : a.copies()) {
      sources.add(c.srcBlock());
    }
    f.cache.clear();
    for (int b : sources) {
      assertTrue(f.cache.host().isWithdrawn(b), "still held by the copy: " + b);
    }
    for (CacheKey k : keys) {
      assertFalse(f.cache.host().contains(k), "left the index: " + k);
    }
    for (int g = 0; g < MIXED.numGroups(); g++) {
      assertEquals(0, f.cache.host().publishedCount(g));
      assertEquals(0, f.cache.device().publishedCount(g));
    }
    assertEquals(0, f.cache.probe(p, p.reusableBound()).hostHit(), "nothing matches");
    assertEquals(0, f.cache.matchAssuming(p, f.cache.candidates(p, 0, 256), k -> false));
    assertEquals(f.cache.neededKeys(p, 256), f.cache.missingKeys(p, 256), "a query asks again");
    Admission b = f.admit(p, p.reusableBound(), 1);
    assertEquals(0, b.hit(), "admission after the clear reuses nothing");
    f.finishCopies(a, true);
    for (CacheKey k : keys) {
      assertFalse(f.cache.device().contains(k), "a load from before the clear publishes: " + k);
    }
    for (int s : sources) {
      assertFalse(f.cache.host().pool().isAllocated(s), "freed when the copy let go: " + s);
    }
    f.release(a);
    f.release(b);
  }

  @Test
  void shouldIgnoreASecondUnpublish() {
    CacheFixture f = new CacheFixture(MIXED, 4, 4);
    TierCache device = f.cache.device();
    CacheKey key = prompt(64, 3).keyOf(0, 0, 64);
    int b = publishedHeld(device, key);
    assertTrue(device.unpublish(b));
    assertFalse(device.unpublish(b), "already withdrawn");
    assertEquals(1, device.withdrawnCount());
    assertEquals(1, device.pool().refCount(b));
    assertThrows(IllegalStateException.class, () -> device.publish(key, b), "never again");
    assertThrows(IllegalStateException.class, () -> device.noteWrite(b), "read-only");
    device.unref(b);
    assertFalse(device.unpublish(b), "free: nothing to do");
    assertEquals(0, device.withdrawnCount());
    int fresh = device.allocate(new int[] {1, 0, 0})[0][0];
    assertFalse(device.unpublish(fresh), "a private block was never findable");
    assertFalse(device.isWithdrawn(fresh));
    device.noteWrite(fresh); // still its owner's to write
    device.unref(fresh);
  }

  @Test
  void shouldEvictAnUnreferencedBlockOnUnpublish() {
    CacheFixture f = new CacheFixture(MIXED, 4, 4);
    TierCache host = f.cache.host();
    CacheKey key = prompt(64, 4).keyOf(0, 0, 64);
    int b = publishedHeld(host, key);
    host.unref(b);
    assertEquals(1, host.cachedCount());
    long evictions = host.evictions();
    assertTrue(host.unpublish(b));
    assertFalse(host.pool().isAllocated(b), "freed at once");
    assertFalse(host.isWithdrawn(b));
    assertFalse(host.contains(key));
    assertEquals(0, host.cachedCount());
    assertEquals(evictions + 1, host.evictions(), "the same as evict");
    assertEquals(4, host.pool().freeParents());
  }

  @Test
  void shouldKeepARunningRequestsBlocksButPublishNothingOfItAfterAClear() {
    CacheFixture f = new CacheFixture(MIXED, 64, 8);
    PromptKeys p = prompt(300, 5);
    f.put(Tier.DEVICE, f.cache.neededKeys(p, 128));
    Admission a = f.admit(p, p.reusableBound(), 172);
    Admission same = f.admit(p, p.reusableBound(), 172); // shares the pinned Device rows
    assertEquals(128, same.hit());
    int shared = a.tables()[0][0];
    assertEquals(shared, same.tables()[0][0]);
    f.cache.recordTail(p, 100);
    assertEquals(1, f.cache.tails().size());

    f.cache.clear();
    assertEquals(0, f.cache.tails().size(), "tail hints of the old data are gone");
    assertTrue(f.cache.device().isWithdrawn(shared), "both requests still use it");
    assertEquals(2, f.cache.device().pool().refCount(shared));
    assertFalse(f.cache.isCurrent(a));
    assertEquals(0, f.cache.probe(p, p.reusableBound()).hostHit());
    Admission after = f.admit(p, p.reusableBound(), 1);
    assertTrue(f.cache.isCurrent(after));
    assertEquals(0, after.hit(), "a new request matches nothing of the running ones");
    f.release(a);
    assertTrue(f.cache.device().pool().isAllocated(shared), "the other request still holds it");
    f.release(same);
    assertFalse(f.cache.device().pool().isAllocated(shared));
    f.release(after);
    assertEquals(0, f.cache.device().pool().heldBlocks());
  }

  @Test
  void shouldReportAWithdrawnBlockWithoutHolders() {
    CacheCoordinator cache = new CacheCoordinator(MIXED, 4, 4, 8);
    CacheKey key = prompt(64, 6).keyOf(0, 0, 64);
    int b = publishedHeld(cache.host(), key);
    cache.host().unpublish(b);
    CacheInvariants.check(cache, List.of(new HeldBlock(Tier.HOST, b)));
    AssertionError e =
        assertThrows(AssertionError.class, () -> CacheInvariants.check(cache, List.of()));
    assertTrue(e.getMessage().contains("ref_count=1 but 0 holder refs"), e.getMessage());
    cache.host().unref(b);
    CacheInvariants.check(cache, List.of());
  }
}

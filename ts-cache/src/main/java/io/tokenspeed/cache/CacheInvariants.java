package io.tokenspeed.cache;

import io.tokenspeed.core.CacheKey;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * Checks everything the cache promises, from the outside in; tests run it after every step.
 *
 * <ul>
 *   <li>free + held = total per pool, parent by parent and group by group; the null block is never
 *       allocated;
 *   <li>every allocated block's reference count equals the number of holder references to it, and
 *       every holder reference names an allocated block;
 *   <li>every index entry points at a live block of its group published under that key, and every
 *       published block is in the index;
 *   <li>a block is in the LRU exactly when it is published and unreferenced; an unpublished block
 *       is never unreferenced;
 *   <li>a withdrawn block (unpublished while referenced) is allocated, in no index, referenced, and
 *       counted; a free or published block is never withdrawn;
 *   <li>no published or withdrawn block was written after publication.
 * </ul>
 */
public final class CacheInvariants {

  private CacheInvariants() {}

  /** Throws {@link AssertionError} naming the first broken invariant. */
  public static void check(CacheCoordinator cache, Iterable<HeldBlock> holders) {
    Map<HeldBlock, Integer> expectedRefs = new HashMap<>();
    for (HeldBlock h : holders) {
      expectedRefs.merge(h, 1, Integer::sum);
    }
    for (Tier t : Tier.values()) {
      checkTier(cache.tier(t), expectedRefs);
    }
  }

  /** Checks a pool's own accounting: free + held = total, parent by parent and group by group. */
  public static void checkPool(BlockPool pool) {
    Tier t = pool.tier();
    if (pool.isAllocated(0)) {
      fail(t + ": the null block is allocated");
    }
    int maxChildren = pool.maxChildren();
    long held = 0;
    int freeParents = 0;
    int groups = pool.numGroups();
    long[] freeChildren = new long[groups];
    for (int p = 0; p < pool.numParents(); p++) {
      int g = pool.parentGroup(p);
      int used = 0;
      for (int c = 0; c < maxChildren; c++) {
        int id = 1 + p * maxChildren + c;
        if (pool.isAllocated(id)) {
          if (!(g >= 0)) {
            fail(t + ": block " + id + " is allocated in free parent " + p);
          }
          if (!(c < pool.childrenPerParent(g))) {
            fail(t + ": block " + id + " lies beyond group " + g + "'s children in parent " + p);
          }
          used++;
        }
      }
      if (!(used == pool.usedChildren(p))) {
        fail(t + ": parent " + p + " counts " + pool.usedChildren(p) + " used, has " + used);
      }
      if (g < 0) {
        if (!(used == 0)) {
          fail(t + ": free parent " + p + " has used children");
        }
        freeParents++;
      } else {
        if (!(used > 0)) {
          fail(t + ": parent " + p + " of group " + g + " is empty but not free");
        }
        freeChildren[g] += pool.childrenPerParent(g) - used;
      }
      held += used;
    }
    if (!(held == pool.heldBlocks())) {
      fail(t + ": held=" + pool.heldBlocks() + " counted=" + held);
    }
    if (!(freeParents == pool.freeParents())) {
      fail(t + ": free parents=" + pool.freeParents() + " counted=" + freeParents);
    }
    for (int g = 0; g < groups; g++) {
      if (!(freeChildren[g] == pool.freeChildrenOfGroup(g))) {
        fail(
            t
                + ": group "
                + g
                + " free children="
                + pool.freeChildrenOfGroup(g)
                + " counted="
                + freeChildren[g]);
      }
    }
  }

  private static void checkTier(TierCache tier, Map<HeldBlock, Integer> expectedRefs) {
    BlockPool pool = tier.pool();
    Tier t = tier.tier();
    int groups = pool.numGroups();
    checkPool(pool);
    Set<Integer> lru = new HashSet<>();
    for (int b : tier.lruOrder()) {
      if (!(lru.add(b))) {
        fail(t + ": block " + b + " is twice in the LRU");
      }
    }
    if (!(tier.lruConsistent())) {
      fail(t + ": LRU links are broken");
    }
    int published = 0;
    int withdrawn = 0;
    for (int id = 1; id < pool.blockIdLimit(); id++) {
      if (!pool.isAllocated(id)) {
        if (!(tier.keyOf(id) == null)) {
          fail(t + ": free block " + id + " is still published");
        }
        if (tier.isWithdrawn(id)) {
          fail(t + ": free block " + id + " is still withdrawn");
        }
        if (lru.contains(id)) {
          fail(t + ": free block " + id + " is in the LRU");
        }
        continue;
      }
      int refs = pool.refCount(id);
      int expected = expectedRefs.getOrDefault(new HeldBlock(t, id), 0);
      if (!(refs == expected)) {
        fail(t + ": block " + id + " has ref_count=" + refs + " but " + expected + " holder refs");
      }
      CacheKey key = tier.keyOf(id);
      if (tier.isWithdrawn(id)) {
        withdrawn++;
        if (!(key == null)) {
          fail(t + ": withdrawn block " + id + " is still published as " + key);
        }
        if (!(refs > 0)) {
          fail(t + ": withdrawn block " + id + " is allocated with no holder (leak)");
        }
        if (tier.writtenSincePublish(id)) {
          fail(t + ": withdrawn block " + id + " was written");
        }
      } else if (key == null) {
        if (!(refs > 0)) {
          fail(t + ": private block " + id + " is allocated with no owner (leak)");
        }
      } else {
        published++;
        if (!(tier.indexes().get(key.groupId()).lookup(key) == id)) {
          fail(t + ": block " + id + " is published as " + key + " but the index disagrees");
        }
        if (tier.writtenSincePublish(id)) {
          fail(t + ": published block " + id + " was written");
        }
      }
      if (!(lru.contains(id) == (key != null && refs == 0))) {
        fail(t + ": block " + id + " LRU membership is wrong (refs=" + refs + ", key=" + key + ")");
      }
    }
    int indexed = 0;
    for (int g = 0; g < groups; g++) {
      int group = g;
      tier.indexes()
          .get(g)
          .forEach(
              (key, b) -> {
                if (!(pool.isAllocated(b))) {
                  fail(t + ": index entry " + key + " points at free " + b);
                }
                if (!(pool.groupOf(b) == group)) {
                  fail(t + ": index entry " + key + " in wrong group");
                }
                if (!(key.equals(tier.keyOf(b)))) {
                  fail(t + ": index entry " + key + " mismatch");
                }
              });
      indexed += tier.indexes().get(g).size();
    }
    if (!(indexed == published)) {
      fail(t + ": indexed=" + indexed + " published=" + published);
    }
    if (!(withdrawn == tier.withdrawnCount())) {
      fail(t + ": withdrawn=" + tier.withdrawnCount() + " counted=" + withdrawn);
    }
    for (HeldBlock h : expectedRefs.keySet()) {
      if (h.tier() == t) {
        if (!(pool.isAllocated(h.blockId()))) {
          fail(t + ": a holder names free block " + h.blockId());
        }
      }
    }
  }

  /** A broken invariant (its message is built only then: the checks run every round in tests). */
  private static void fail(String message) {
    throw new AssertionError("cache invariant broken: " + message);
  }
}

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
    require(!pool.isAllocated(0), t + ": the null block is allocated");
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
          require(g >= 0, t + ": block " + id + " is allocated in free parent " + p);
          require(
              c < pool.childrenPerParent(g),
              t + ": block " + id + " lies beyond group " + g + "'s children in parent " + p);
          used++;
        }
      }
      require(
          used == pool.usedChildren(p),
          t + ": parent " + p + " counts " + pool.usedChildren(p) + " used, has " + used);
      if (g < 0) {
        require(used == 0, t + ": free parent " + p + " has used children");
        freeParents++;
      } else {
        require(used > 0, t + ": parent " + p + " of group " + g + " is empty but not free");
        freeChildren[g] += pool.childrenPerParent(g) - used;
      }
      held += used;
    }
    require(held == pool.heldBlocks(), t + ": held=" + pool.heldBlocks() + " counted=" + held);
    require(
        freeParents == pool.freeParents(),
        t + ": free parents=" + pool.freeParents() + " counted=" + freeParents);
    for (int g = 0; g < groups; g++) {
      require(
          freeChildren[g] == pool.freeChildrenOfGroup(g),
          t
              + ": group "
              + g
              + " free children="
              + pool.freeChildrenOfGroup(g)
              + " counted="
              + freeChildren[g]);
    }
  }

  private static void checkTier(TierCache tier, Map<HeldBlock, Integer> expectedRefs) {
    BlockPool pool = tier.pool();
    Tier t = tier.tier();
    int groups = pool.numGroups();
    checkPool(pool);
    Set<Integer> lru = new HashSet<>();
    for (int b : tier.lruOrder()) {
      require(lru.add(b), t + ": block " + b + " is twice in the LRU");
    }
    require(tier.lruConsistent(), t + ": LRU links are broken");
    int published = 0;
    int withdrawn = 0;
    for (int id = 1; id < pool.blockIdLimit(); id++) {
      if (!pool.isAllocated(id)) {
        require(tier.keyOf(id) == null, t + ": free block " + id + " is still published");
        require(!tier.isWithdrawn(id), t + ": free block " + id + " is still withdrawn");
        require(!lru.contains(id), t + ": free block " + id + " is in the LRU");
        continue;
      }
      int refs = pool.refCount(id);
      int expected = expectedRefs.getOrDefault(new HeldBlock(t, id), 0);
      require(
          refs == expected,
          t + ": block " + id + " has ref_count=" + refs + " but " + expected + " holder refs");
      CacheKey key = tier.keyOf(id);
      if (tier.isWithdrawn(id)) {
        withdrawn++;
        require(key == null, t + ": withdrawn block " + id + " is still published as " + key);
        require(refs > 0, t + ": withdrawn block " + id + " is allocated with no holder (leak)");
        require(!tier.writtenSincePublish(id), t + ": withdrawn block " + id + " was written");
      } else if (key == null) {
        require(refs > 0, t + ": private block " + id + " is allocated with no owner (leak)");
      } else {
        published++;
        require(
            tier.indexes().get(key.groupId()).lookup(key) == id,
            t + ": block " + id + " is published as " + key + " but the index disagrees");
        require(!tier.writtenSincePublish(id), t + ": published block " + id + " was written");
      }
      require(
          lru.contains(id) == (key != null && refs == 0),
          t + ": block " + id + " LRU membership is wrong (refs=" + refs + ", key=" + key + ")");
    }
    int indexed = 0;
    for (int g = 0; g < groups; g++) {
      int group = g;
      tier.indexes()
          .get(g)
          .forEach(
              (key, b) -> {
                require(pool.isAllocated(b), t + ": index entry " + key + " points at free " + b);
                require(pool.groupOf(b) == group, t + ": index entry " + key + " in wrong group");
                require(key.equals(tier.keyOf(b)), t + ": index entry " + key + " mismatch");
              });
      indexed += tier.indexes().get(g).size();
    }
    require(indexed == published, t + ": indexed=" + indexed + " published=" + published);
    require(
        withdrawn == tier.withdrawnCount(),
        t + ": withdrawn=" + tier.withdrawnCount() + " counted=" + withdrawn);
    for (HeldBlock h : expectedRefs.keySet()) {
      if (h.tier() == t) {
        require(pool.isAllocated(h.blockId()), t + ": a holder names free block " + h.blockId());
      }
    }
  }

  private static void require(boolean ok, String message) {
    if (!ok) {
      throw new AssertionError("cache invariant broken: " + message);
    }
  }
}

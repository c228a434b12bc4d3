package io.tokenspeed.cache;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * One tier (Device or Host) of the local cache: its {@link BlockPool}, a {@link PrefixCacheIndex}
 * per group mapping {@link CacheKey}s to published blocks, and the LRU of published blocks nobody
 * references.
 *
 * <p>A block is in exactly one of these states:
 *
 * <pre>
 *   free ──acquire──▶ private (refs ≥ 1, unpublished, writable by its single owner)
 *                       │ publish                      │ last unref
 *                       ▼                              ▼
 *                     published, refs ≥ 1  ◀──ref──  free
 *                       │ last unref      │ unpublish
 *                       ▼                 ▼
 *                     cached             withdrawn (refs ≥ 1, in no index, read-only,
 *                       │ evict            never published again) ──last unref──▶ free
 *                       │ (or unpublish)
 *                       ▼
 *                     free
 * </pre>
 *
 * <p>Published blocks are immutable: {@link #noteWrite} refuses them, and the invariant checker
 * compares each published block's write count with the count it had when published. Eviction only
 * ever takes cached blocks, oldest first, so a referenced block is never lost.
 *
 * <p>{@link #unpublish} is how a full clear makes a block nobody may find again without taking it
 * from its holders: a referenced block leaves its index at once (no probe, match, admission or
 * lookup can see it) but keeps its allocation and its references, so native I/O still reading it or
 * a running request still attending to it keep valid memory; it is freed by its last {@link
 * #unref}, exactly as a private block is, and never if its last reference is never dropped
 * (quarantine). A withdrawn block stays read-only: its bytes are what was published, and it may
 * still be shared. Single-threaded.
 */
public final class TierCache {

  private final Tier tier;
  private final BlockPool pool;
  private final List<PrefixCacheIndex> indexes;
  private final CacheKey[] keyOfBlock;
  private final long[] writes;
  private final long[] writesAtPublish;

  /** Per block id: published once, then unpublished while referenced (see the class essay). */
  private final boolean[] withdrawn;

  private int withdrawnBlocks;

  // Intrusive doubly linked LRU over block ids; 0 is the sentinel.
  private final int[] lruPrev;
  private final int[] lruNext;
  private int lruSize;

  private long evictions;
  private long publications;

  /** The most recent publications, for owners that react to new entries (a bounded ring). */
  private static final int RECENT_CAPACITY = 4096;

  private final CacheKey[] recent = new CacheKey[RECENT_CAPACITY];

  /** Hears publications and removals (KV events); null for none. */
  private TierListener listener;

  TierCache(Tier tier, CacheLayout layout, int numParents) {
    this.tier = tier;
    this.pool = new BlockPool(tier, layout, numParents);
    this.indexes = new ArrayList<>(layout.numGroups());
    for (int g = 0; g < layout.numGroups(); g++) {
      indexes.add(new PrefixCacheIndex(g));
    }
    int ids = pool.blockIdLimit();
    this.keyOfBlock = new CacheKey[ids];
    this.writes = new long[ids];
    this.writesAtPublish = new long[ids];
    this.withdrawn = new boolean[ids];
    this.lruPrev = new int[ids];
    this.lruNext = new int[ids];
  }

  /** This tier. */
  public Tier tier() {
    return tier;
  }

  /**
   * Sets who hears this tier's publications and removals ({@link TierListener}); null for nobody
   * (the default).
   */
  public void listener(TierListener listener) {
    this.listener = listener;
  }

  /** The block pool of this tier. */
  public BlockPool pool() {
    return pool;
  }

  /** The published block holding {@code key}, or 0. */
  public int lookup(CacheKey key) {
    return indexes.get(key.groupId()).lookup(key);
  }

  /** True when {@code key} is published in this tier. */
  public boolean contains(CacheKey key) {
    return indexes.get(key.groupId()).contains(key);
  }

  /** The key a block is published under, or null for a private or free block. */
  public CacheKey keyOf(int blockId) {
    return keyOfBlock[blockId];
  }

  /** Number of published entries of group {@code g}. */
  public int publishedCount(int groupId) {
    return indexes.get(groupId).size();
  }

  /**
   * True when the block was unpublished while referenced: allocated, in no index, read-only, freed
   * with its last reference.
   */
  public boolean isWithdrawn(int blockId) {
    return blockId > 0 && blockId < withdrawn.length && withdrawn[blockId];
  }

  /** Number of withdrawn blocks (allocated only for the holders they still have). */
  public int withdrawnCount() {
    return withdrawnBlocks;
  }

  /** Number of published blocks that nobody references (the eviction candidates). */
  public int cachedCount() {
    return lruSize;
  }

  /** Blocks published since start: changes exactly when a new entry may make a new hit. */
  public long publications() {
    return publications;
  }

  /**
   * The keys published after the {@code mark}-th publication, oldest first, or null when more than
   * the ring holds were published since (the caller then rescans what it cares about).
   */
  public List<CacheKey> publishedSince(long mark) {
    if (mark < 0 || publications - mark > RECENT_CAPACITY) {
      return null;
    }
    List<CacheKey> out = new ArrayList<>((int) (publications - mark));
    for (long i = mark; i < publications; i++) {
      out.add(recent[(int) (i % RECENT_CAPACITY)]);
    }
    return out;
  }

  /** Blocks evicted since start. */
  public long evictions() {
    return evictions;
  }

  /**
   * Allocates {@code needs[g]} private blocks per group, each with one reference, evicting cached
   * blocks oldest first when the pool is short. Returns null when even evicting every cached block
   * cannot satisfy the request; blocks evicted on the way stay evicted (only cache is lost).
   */
  public int[][] allocate(int[] needs) {
    int[][] out = new int[needs.length][];
    for (int g = 0; g < needs.length; g++) {
      if (needs[g] < 0) {
        throw new IllegalArgumentException("needs[" + g + "]=" + needs[g] + " is negative");
      }
      out[g] = new int[needs[g]];
    }
    while (!pool.canAcquire(needs)) {
      if (lruSize == 0) {
        return null;
      }
      evict(lruNext[0]);
    }
    pool.tryAcquire(needs, out);
    return out;
  }

  /** Adds a reference; a cached block leaves the LRU. */
  public void ref(int blockId) {
    if (pool.refCount(blockId) == 0) {
      lruRemove(blockId);
    }
    pool.ref(blockId);
  }

  /**
   * Drops a reference. A published block whose last reference goes becomes cached (newest in the
   * LRU); a private block whose last reference goes is freed.
   */
  public void unref(int blockId) {
    if (pool.unref(blockId) == 0) {
      if (keyOfBlock[blockId] != null) {
        lruAppend(blockId);
      } else {
        if (withdrawn[blockId]) {
          withdrawn[blockId] = false;
          withdrawnBlocks--;
        }
        pool.free(blockId);
      }
    }
  }

  /**
   * Publishes a private, referenced block under {@code key}. Returns false, changing nothing, when
   * the key is already published (another request computed the same block first): the caller keeps
   * its private copy, which is freed with its last reference.
   */
  public boolean publish(CacheKey key, int blockId) {
    if (pool.groupOf(blockId) != key.groupId()) {
      throw new IllegalArgumentException(
          tier
              + " block "
              + blockId
              + " belongs to group "
              + pool.groupOf(blockId)
              + ", key names group "
              + key.groupId());
    }
    if (keyOfBlock[blockId] != null) {
      throw new IllegalStateException(
          tier + " block " + blockId + " is already published as " + keyOfBlock[blockId]);
    }
    if (withdrawn[blockId]) {
      throw new IllegalStateException(
          tier + " block " + blockId + " was unpublished: it is never published again");
    }
    if (pool.refCount(blockId) == 0) {
      throw new IllegalStateException(tier + " block " + blockId + " has no owner to publish it");
    }
    if (!indexes.get(key.groupId()).putIfAbsent(key, blockId)) {
      return false;
    }
    keyOfBlock[blockId] = key;
    writesAtPublish[blockId] = writes[blockId];
    recent[(int) (publications % RECENT_CAPACITY)] = key;
    publications++;
    if (listener != null) {
      listener.published(tier, key);
    }
    return true;
  }

  /** Removes a cached (unreferenced, published) block from the index and frees it. */
  public void evict(int blockId) {
    CacheKey key = keyOfBlock[blockId];
    if (key == null || pool.refCount(blockId) != 0) {
      throw new IllegalStateException(
          tier + " block " + blockId + " is not cached (key=" + key + ", refs>0 or private)");
    }
    lruRemove(blockId);
    indexes.get(key.groupId()).remove(key);
    keyOfBlock[blockId] = null;
    pool.free(blockId);
    evictions++;
    if (listener != null) {
      listener.removed(tier, key);
    }
  }

  /**
   * Removes a published block from its index so that no lookup, probe, match or admission can find
   * it again, and returns true; does nothing and returns false for a block that is not published
   * (private, already withdrawn, or free), so unpublishing twice is harmless. A cached block
   * (nobody references it) is evicted: freed at once. A referenced block keeps its allocation and
   * every reference and becomes withdrawn: read-only, never published again, freed by its last
   * {@link #unref} (never, if that reference is never dropped).
   */
  public boolean unpublish(int blockId) {
    if (!pool.isAllocated(blockId) || keyOfBlock[blockId] == null) {
      return false;
    }
    if (pool.refCount(blockId) == 0) {
      evict(blockId);
      return true;
    }
    CacheKey key = keyOfBlock[blockId];
    indexes.get(key.groupId()).remove(key);
    keyOfBlock[blockId] = null;
    withdrawn[blockId] = true;
    withdrawnBlocks++;
    if (listener != null) {
      listener.removed(tier, key);
    }
    return true;
  }

  /**
   * Unpublishes every published block of this tier (a full clear): cached blocks are freed,
   * referenced ones withdrawn. Afterwards every index of the tier is empty. Returns how many blocks
   * were withdrawn (the rest were evicted). Costs a walk over the block ids.
   */
  public int unpublishAll() {
    int withdrawnNow = 0;
    for (int b = 1; b < keyOfBlock.length; b++) {
      if (keyOfBlock[b] != null) {
        boolean referenced = pool.refCount(b) > 0;
        unpublish(b);
        if (referenced) {
          withdrawnNow++;
        }
      }
    }
    return withdrawnNow;
  }

  /**
   * Up to {@code limit} cached blocks, oldest first: what eviction would take next. The engine
   * copies Device candidates to Host before they go (demotion).
   */
  public int[] evictionCandidates(int limit) {
    int n = Math.min(limit, lruSize);
    int[] out = new int[n];
    int b = lruNext[0];
    for (int i = 0; i < n; i++) {
      out[i] = b;
      b = lruNext[b];
    }
    return out;
  }

  /** Records that the owner is about to write the block; published blocks are immutable. */
  public void noteWrite(int blockId) {
    if (withdrawn[blockId]) {
      throw new IllegalStateException(
          tier + " block " + blockId + " was published and withdrawn: read-only");
    }
    if (keyOfBlock[blockId] != null) {
      throw new IllegalStateException(
          tier + " block " + blockId + " is published as " + keyOfBlock[blockId] + ": read-only");
    }
    if (pool.refCount(blockId) != 1) {
      throw new IllegalStateException(
          tier
              + " block "
              + blockId
              + " has ref_count="
              + pool.refCount(blockId)
              + ": only a single private owner may write it");
    }
    writes[blockId]++;
  }

  // ---- invariant checker access ----

  List<PrefixCacheIndex> indexes() {
    return indexes;
  }

  boolean writtenSincePublish(int blockId) {
    return writes[blockId] != writesAtPublish[blockId];
  }

  int[] lruOrder() {
    int[] out = new int[lruSize];
    int b = lruNext[0];
    for (int i = 0; i < lruSize; i++) {
      out[i] = b;
      b = lruNext[b];
    }
    return out;
  }

  boolean lruConsistent() {
    int forward = 0;
    for (int b = lruNext[0]; b != 0 && forward <= lruSize; b = lruNext[b]) {
      if (lruNext[lruPrev[b]] != b) {
        return false;
      }
      forward++;
    }
    return forward == lruSize;
  }

  private void lruAppend(int b) {
    int tail = lruPrev[0];
    lruNext[tail] = b;
    lruPrev[b] = tail;
    lruNext[b] = 0;
    lruPrev[0] = b;
    lruSize++;
  }

  private void lruRemove(int b) {
    int p = lruPrev[b];
    int n = lruNext[b];
    lruNext[p] = n;
    lruPrev[n] = p;
    lruPrev[b] = 0;
    lruNext[b] = 0;
    lruSize--;
  }

  @Override
  public String toString() {
    return tier
        + "{held="
        + pool.heldBlocks()
        + ", cached="
        + lruSize
        + ", withdrawn="
        + withdrawnBlocks
        + ", freeParents="
        + pool.freeParents()
        + ", published="
        + Arrays.toString(indexes.stream().mapToInt(PrefixCacheIndex::size).toArray())
        + "}";
  }
}

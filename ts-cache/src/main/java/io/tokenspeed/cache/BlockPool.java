package io.tokenspeed.cache;

import io.tokenspeed.core.CacheLayout;
import java.util.Arrays;

/**
 * The blocks of one tier, packed into byte-uniform LCM parents.
 *
 * <p>Every parent has {@code parentBytes} = the least common multiple of the groups' block sizes. A
 * free parent can be claimed by any group, which then carves it into {@code parentBytes /
 * bytesPerBlock(g)} children of its own; the parent returns to the free list only when its last
 * child is freed. Free space is therefore counted in parents, and one live child pins its whole
 * parent: that is the conservative unit every credit charges.
 *
 * <pre>
 *   parent p:  [ child 0 | child 1 | ... | child k_g-1 ]    k_g = parentBytes / bytesPerBlock(g)
 *   block id:  1 + p * maxChildren + child                   id 0 is the null block (a hole)
 *   bytes:     p * parentBytes + child * bytesPerBlock(g)
 * </pre>
 *
 * <p>Guarantees: the null block is never handed out; {@link #tryAcquire} either returns every block
 * asked for or changes nothing; reference counts never go negative; a block is freed only with a
 * count of zero. Single-threaded: the owner is the event loop, so there are no locks.
 */
public final class BlockPool {

  /** Largest parent size accepted; a layout whose LCM is larger is rejected. */
  public static final long MAX_PARENT_BYTES = 1L << 32;

  private static final int FREE = -1;

  private final Tier tier;
  private final int numParents;
  private final long parentBytes;
  private final int maxChildren;
  private final int[] childrenPerParent;
  private final long[] bytesPerBlock;

  private final int[] parentGroup;
  private final int[] parentUsed;
  private final int[] freeParentStack;
  private int freeParents;
  private final int[] freeChildrenOfGroup;
  private final IntStack[] partialParents;

  /** Per parent: the group whose partial stack lists it, or -1. */
  private final int[] queuedInGroup;

  /** Per block id: {@link #FREE}, or the reference count (0 means allocated but unreferenced). */
  private final int[] refs;

  private long heldBlocks;

  public BlockPool(Tier tier, CacheLayout layout, int numParents) {
    if (numParents < 1) {
      throw new IllegalArgumentException(
          tier + " pool num_parents=" + numParents + " must be at least 1");
    }
    this.tier = tier;
    this.numParents = numParents;
    int groups = layout.numGroups();
    this.bytesPerBlock = new long[groups];
    long lcm = 1;
    for (int g = 0; g < groups; g++) {
      bytesPerBlock[g] = layout.group(g).bytesPerBlock();
      lcm = lcm(lcm, bytesPerBlock[g]);
      if (lcm > MAX_PARENT_BYTES) {
        throw new IllegalArgumentException(
            "LCM of group block sizes exceeds "
                + MAX_PARENT_BYTES
                + " bytes at group "
                + g
                + " (bytes_per_block="
                + bytesPerBlock[g]
                + "): choose block sizes with a smaller common multiple");
      }
    }
    this.parentBytes = lcm;
    this.childrenPerParent = new int[groups];
    int max = 1;
    for (int g = 0; g < groups; g++) {
      childrenPerParent[g] = Math.toIntExact(lcm / bytesPerBlock[g]);
      max = Math.max(max, childrenPerParent[g]);
    }
    this.maxChildren = max;
    long ids = 1L + (long) numParents * maxChildren;
    if (ids > Integer.MAX_VALUE) {
      throw new IllegalArgumentException(
          tier
              + " pool num_parents="
              + numParents
              + " with "
              + maxChildren
              + " children per parent exceeds the block id space");
    }
    this.parentGroup = new int[numParents];
    this.parentUsed = new int[numParents];
    this.freeParentStack = new int[numParents];
    Arrays.fill(parentGroup, FREE);
    for (int p = 0; p < numParents; p++) {
      freeParentStack[p] = numParents - 1 - p;
    }
    this.freeParents = numParents;
    this.queuedInGroup = new int[numParents];
    Arrays.fill(queuedInGroup, FREE);
    this.freeChildrenOfGroup = new int[groups];
    this.partialParents = new IntStack[groups];
    for (int g = 0; g < groups; g++) {
      partialParents[g] = new IntStack();
    }
    this.refs = new int[(int) ids];
    Arrays.fill(refs, FREE);
  }

  /** The tier this pool belongs to. */
  public Tier tier() {
    return tier;
  }

  /** Number of parents. */
  public int numParents() {
    return numParents;
  }

  /** Bytes of one parent: the LCM of the groups' block sizes. */
  public long parentBytes() {
    return parentBytes;
  }

  /** Blocks of group {@code g} packed into one parent. */
  public int childrenPerParent(int groupId) {
    return childrenPerParent[groupId];
  }

  /** Parents claimed by no group. */
  public int freeParents() {
    return freeParents;
  }

  /** Blocks currently allocated (referenced or cached). */
  public long heldBlocks() {
    return heldBlocks;
  }

  /**
   * Parents holding at least one referenced block: the part of the tier that no eviction can free
   * (a parent whose allocated children are all unreferenced holds only cached blocks). It scans
   * every block id, so it is for metrics, never for a decision.
   */
  public int referencedParents() {
    int n = 0;
    for (int p = 0; p < numParents; p++) {
      int g = parentGroup[p];
      if (g == FREE) {
        continue;
      }
      int base = 1 + p * maxChildren;
      for (int c = 0; c < childrenPerParent[g]; c++) {
        if (refs[base + c] > 0) {
          n++;
          break;
        }
      }
    }
    return n;
  }

  /** Blocks of group {@code g} that could be handed out now without eviction. */
  public long available(int groupId) {
    return freeChildrenOfGroup[groupId] + (long) freeParents * childrenPerParent[groupId];
  }

  /** Exclusive upper bound of block ids. */
  public int blockIdLimit() {
    return refs.length;
  }

  /** True when {@code needs[g]} blocks of every group can be handed out together now. */
  public boolean canAcquire(int[] needs) {
    long parentsNeeded = 0;
    for (int g = 0; g < needs.length; g++) {
      long missing = needs[g] - (long) freeChildrenOfGroup[g];
      if (missing > 0) {
        parentsNeeded += Math.ceilDiv(missing, childrenPerParent[g]);
      }
    }
    return parentsNeeded <= freeParents;
  }

  /**
   * Hands out {@code needs[g]} blocks of every group {@code g}, each with one reference, into
   * {@code out[g]}; or returns false and changes nothing.
   */
  public boolean tryAcquire(int[] needs, int[][] out) {
    if (!canAcquire(needs)) {
      return false;
    }
    for (int g = 0; g < needs.length; g++) {
      for (int i = 0; i < needs[g]; i++) {
        out[g][i] = acquireOne(g);
      }
    }
    return true;
  }

  private int acquireOne(int g) {
    IntStack partial = partialParents[g];
    while (!partial.isEmpty()) {
      int p = partial.peek();
      if (parentGroup[p] == g && parentUsed[p] < childrenPerParent[g]) {
        int id = takeChild(p, g);
        if (parentUsed[p] == childrenPerParent[g]) {
          unqueue(g, partial.pop());
        }
        return id;
      }
      unqueue(g, partial.pop()); // stale: the parent went back to the free list
    }
    int p = freeParentStack[--freeParents];
    parentGroup[p] = g;
    freeChildrenOfGroup[g] += childrenPerParent[g];
    int id = takeChild(p, g);
    if (parentUsed[p] < childrenPerParent[g]) {
      queuePartial(g, p);
    }
    return id;
  }

  private int takeChild(int p, int g) {
    int base = 1 + p * maxChildren;
    for (int c = 0; c < childrenPerParent[g]; c++) {
      if (refs[base + c] == FREE) {
        refs[base + c] = 1;
        parentUsed[p]++;
        freeChildrenOfGroup[g]--;
        heldBlocks++;
        return base + c;
      }
    }
    throw new IllegalStateException(
        tier + " parent " + p + " of group " + g + " has no free child but used=" + parentUsed[p]);
  }

  /** Adds a reference to an allocated block. */
  public void ref(int blockId) {
    checkAllocated(blockId);
    refs[blockId]++;
  }

  /** Drops a reference; returns the remaining count. */
  public int unref(int blockId) {
    checkAllocated(blockId);
    if (refs[blockId] == 0) {
      throw new IllegalStateException(tier + " block " + blockId + " has no reference to drop");
    }
    return --refs[blockId];
  }

  /** Reference count of an allocated block. */
  public int refCount(int blockId) {
    checkAllocated(blockId);
    return refs[blockId];
  }

  /** True when the block id is currently allocated. */
  public boolean isAllocated(int blockId) {
    return blockId > 0 && blockId < refs.length && refs[blockId] != FREE;
  }

  /** Returns an unreferenced block to its parent (and the parent to the free list if empty). */
  public void free(int blockId) {
    checkAllocated(blockId);
    if (refs[blockId] != 0) {
      throw new IllegalStateException(
          tier + " block " + blockId + " freed with ref_count=" + refs[blockId]);
    }
    refs[blockId] = FREE;
    heldBlocks--;
    int p = (blockId - 1) / maxChildren;
    int g = parentGroup[p];
    parentUsed[p]--;
    freeChildrenOfGroup[g]++;
    if (parentUsed[p] == 0) {
      parentGroup[p] = FREE;
      freeChildrenOfGroup[g] -= childrenPerParent[g];
      freeParentStack[freeParents++] = p;
    } else {
      queuePartial(g, p);
    }
  }

  private void queuePartial(int g, int p) {
    if (queuedInGroup[p] != g) {
      queuedInGroup[p] = g;
      partialParents[g].push(p);
    }
  }

  private void unqueue(int g, int p) {
    if (queuedInGroup[p] == g) {
      queuedInGroup[p] = FREE;
    }
  }

  /** The group whose parent holds this block. */
  public int groupOf(int blockId) {
    checkAllocated(blockId);
    return parentGroup[(blockId - 1) / maxChildren];
  }

  /** The LCM parent an allocated block is a child of. */
  public int parentOf(int blockId) {
    checkAllocated(blockId);
    return (blockId - 1) / maxChildren;
  }

  /** Byte offset of the block inside the tier's arena. */
  public long byteOffset(int blockId) {
    int p = (blockId - 1) / maxChildren;
    int c = (blockId - 1) % maxChildren;
    return p * parentBytes + c * bytesPerBlock[groupOf(blockId)];
  }

  int freeChildrenOfGroup(int groupId) {
    return freeChildrenOfGroup[groupId];
  }

  int usedChildren(int parent) {
    return parentUsed[parent];
  }

  int parentGroup(int parent) {
    return parentGroup[parent];
  }

  /** Number of groups the pool serves. */
  public int numGroups() {
    return childrenPerParent.length;
  }

  int maxChildren() {
    return maxChildren;
  }

  private void checkAllocated(int blockId) {
    if (!isAllocated(blockId)) {
      throw new IllegalStateException(
          tier + " block " + blockId + " is not allocated (null or free)");
    }
  }

  private static long lcm(long a, long b) {
    return Math.multiplyExact(a / gcd(a, b), b);
  }

  private static long gcd(long a, long b) {
    while (b != 0) {
      long t = a % b;
      a = b;
      b = t;
    }
    return a;
  }

  /** A growable stack of ints. */
  static final class IntStack {
    private int[] items = new int[8];
    private int size;

    void push(int v) {
      if (size == items.length) {
        items = Arrays.copyOf(items, size * 2);
      }
      items[size++] = v;
    }

    int pop() {
      return items[--size];
    }

    int peek() {
      return items[size - 1];
    }

    boolean isEmpty() {
      return size == 0;
    }
  }
}

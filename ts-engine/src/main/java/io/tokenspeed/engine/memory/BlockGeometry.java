package io.tokenspeed.engine.memory;

import io.tokenspeed.cache.BlockPool;
import io.tokenspeed.core.CacheLayout;
import java.util.Arrays;

/**
 * The CPU-only block geometry of a tier, derived from a {@link CacheLayout}: the same packing of
 * blocks into byte-uniform LCM parents that {@link BlockPool} hands out, so a block id the cache
 * allocates maps to the bytes it describes.
 *
 * <pre>
 *   parent p:  [ child 0 | child 1 | ... | child k_g-1 ]    k_g = parentBytes / bytesPerBlock(g)
 *   block id:  1 + p * maxChildren + child                   id 0 is the null block (a hole)
 *   bytes:     p * parentBytes + child * bytesPerBlock(g)
 * </pre>
 *
 * <p>The geometry knows no parent count: {@link #byteOffset} checks everything an id can get wrong
 * on its own (the null block, a child index that only a parent of another group has), and the tier
 * that holds {@code numParents} parents checks the upper bound. Immutable; two geometries are equal
 * when their groups' block sizes are.
 */
public final class BlockGeometry {

  private final long[] bytesPerBlock;
  private final long parentBytes;
  private final int[] childrenPerParent;
  private final int maxChildren;
  private final long maxBytesPerBlock;

  private BlockGeometry(long[] bytesPerBlock, long parentBytes) {
    this.bytesPerBlock = bytesPerBlock;
    this.parentBytes = parentBytes;
    this.childrenPerParent = new int[bytesPerBlock.length];
    int children = 1;
    long largest = 0;
    for (int g = 0; g < bytesPerBlock.length; g++) {
      childrenPerParent[g] = Math.toIntExact(parentBytes / bytesPerBlock[g]);
      children = Math.max(children, childrenPerParent[g]);
      largest = Math.max(largest, bytesPerBlock[g]);
    }
    this.maxChildren = children;
    this.maxBytesPerBlock = largest;
  }

  /**
   * The geometry of {@code layout}.
   *
   * @throws IllegalArgumentException when the LCM of the groups' block sizes exceeds {@link
   *     BlockPool#MAX_PARENT_BYTES}, with the message {@link BlockPool} gives for that layout
   */
  public static BlockGeometry of(CacheLayout layout) {
    if (layout == null) {
      throw new IllegalArgumentException("a cache layout is required");
    }
    int groups = layout.numGroups();
    long[] bytes = new long[groups];
    long lcm = 1;
    for (int g = 0; g < groups; g++) {
      bytes[g] = layout.group(g).bytesPerBlock();
      lcm = lcmWithinLimit(lcm, bytes[g]);
      if (lcm > BlockPool.MAX_PARENT_BYTES) {
        throw new IllegalArgumentException(
            "LCM of group block sizes exceeds "
                + BlockPool.MAX_PARENT_BYTES
                + " bytes at group "
                + g
                + " (bytes_per_block="
                + bytes[g]
                + "): choose block sizes with a smaller common multiple");
      }
    }
    return new BlockGeometry(bytes, lcm);
  }

  /** The LCM of {@code a} and {@code b}, or a value above the limit when it would overflow. */
  private static long lcmWithinLimit(long a, long b) {
    long reduced = a / gcd(a, b);
    if (reduced > Long.MAX_VALUE / b) {
      return Long.MAX_VALUE;
    }
    return reduced * b;
  }

  private static long gcd(long a, long b) {
    while (b != 0) {
      long t = a % b;
      a = b;
      b = t;
    }
    return a;
  }

  /** Number of groups. */
  public int numGroups() {
    return bytesPerBlock.length;
  }

  /** Bytes of one parent: the LCM of the groups' block sizes. */
  public long parentBytes() {
    return parentBytes;
  }

  /** Blocks of group {@code groupId} packed into one parent. */
  public int childrenPerParent(int groupId) {
    checkGroup(groupId);
    return childrenPerParent[groupId];
  }

  /** The largest {@link #childrenPerParent} over the groups: the id stride of one parent. */
  public int maxChildren() {
    return maxChildren;
  }

  /** Bytes of one block of group {@code groupId}. */
  public long bytesPerBlock(int groupId) {
    checkGroup(groupId);
    return bytesPerBlock[groupId];
  }

  /** The largest {@link #bytesPerBlock} over the groups. */
  public long maxBytesPerBlock() {
    return maxBytesPerBlock;
  }

  /**
   * Exclusive upper bound of the block ids of a tier of {@code numParents} parents: {@code 1 +
   * numParents * maxChildren}.
   *
   * @throws IllegalArgumentException when {@code numParents < 1} or the ids do not fit an int
   */
  public int blockIdLimit(int numParents) {
    if (numParents < 1) {
      throw new IllegalArgumentException("num_parents=" + numParents + " must be at least 1");
    }
    long ids = 1L + (long) numParents * maxChildren;
    if (ids > Integer.MAX_VALUE) {
      throw new IllegalArgumentException(
          "num_parents="
              + numParents
              + " with "
              + maxChildren
              + " children per parent exceeds the block id space");
    }
    return (int) ids;
  }

  /**
   * Byte offset of block {@code blockId} of group {@code groupId} from the start of its tier's
   * blocks: exactly {@link BlockPool#byteOffset} when the block's parent belongs to the group.
   *
   * @throws IllegalArgumentException when the group does not exist, the id is the null block or
   *     negative, or the id's child index is one only a parent of another group has
   */
  public long byteOffset(int groupId, int blockId) {
    checkGroup(groupId);
    if (blockId < 1) {
      throw new IllegalArgumentException(
          "block id="
              + blockId
              + " of group "
              + groupId
              + " must be at least 1: block 0 is the null block");
    }
    int parent = (blockId - 1) / maxChildren;
    int child = (blockId - 1) % maxChildren;
    if (child >= childrenPerParent[groupId]) {
      throw new IllegalArgumentException(
          "block id="
              + blockId
              + " is child "
              + child
              + " of parent "
              + parent
              + " but group "
              + groupId
              + " has "
              + childrenPerParent[groupId]
              + " children per parent: the id is not a block of group "
              + groupId);
    }
    return parent * parentBytes + child * bytesPerBlock[groupId];
  }

  private void checkGroup(int groupId) {
    if (groupId < 0 || groupId >= bytesPerBlock.length) {
      throw new IllegalArgumentException(
          "group id=" + groupId + " outside [0, " + bytesPerBlock.length + ")");
    }
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof BlockGeometry other && Arrays.equals(bytesPerBlock, other.bytesPerBlock);
  }

  @Override
  public int hashCode() {
    return Arrays.hashCode(bytesPerBlock);
  }

  @Override
  public String toString() {
    return "BlockGeometry[bytes_per_block="
        + Arrays.toString(bytesPerBlock)
        + ", parent_bytes="
        + parentBytes
        + "]";
  }
}

package io.tokenspeed.engine.memory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The blocks of one tier as one off-heap allocation: {@code numParents} LCM parents of {@link
 * BlockGeometry#parentBytes()} bytes each, in a shared arena aligned to 64 bytes, block {@code b}
 * of group {@code g} at {@link BlockGeometry#byteOffset byteOffset(g, b)} of {@link #segment()}.
 *
 * <pre>
 *   allocation: [ leading pad | parent 0 | parent 1 | ... | parent numParents-1 ]
 *                               ^ segment() starts here, byteSize() = numParents * parentBytes
 * </pre>
 *
 * <p>The leading pad is zero except for the Device tier, whose model view needs room for each
 * group's null block in front of the blocks (see {@link DevicePools}). Any thread may read and
 * write the blocks; {@link #close()} frees the allocation, once.
 */
public final class TierMemory implements AutoCloseable {

  /** Alignment of the allocation and of {@link #segment()}. */
  static final long ALIGNMENT = 64;

  private final String tierName;
  private final BlockGeometry geometry;
  private final int numParents;
  private final int blockIdLimit;
  private final Arena arena;
  private final MemorySegment allocation;
  private final MemorySegment segment;
  private final AtomicBoolean closed = new AtomicBoolean();

  private TierMemory(
      String tierName,
      BlockGeometry geometry,
      int numParents,
      int blockIdLimit,
      Arena arena,
      MemorySegment allocation,
      long leadingPad) {
    this.tierName = tierName;
    this.geometry = geometry;
    this.numParents = numParents;
    this.blockIdLimit = blockIdLimit;
    this.arena = arena;
    this.allocation = allocation;
    this.segment = allocation.asSlice(leadingPad);
  }

  /**
   * Allocates {@code numParents} parents of {@code geometry} for the tier named {@code tierName}.
   *
   * @throws IllegalArgumentException naming the tier when {@code numParents < 1}, the byte size
   *     overflows or the block ids do not fit an int
   * @throws OutOfMemoryError naming the tier when the allocation cannot be reserved
   */
  public static TierMemory allocate(String tierName, BlockGeometry geometry, int numParents) {
    return allocate(tierName, geometry, numParents, 0);
  }

  /** {@link #allocate(String, BlockGeometry, int)} with {@code leadingPad} bytes in front. */
  static TierMemory allocate(
      String tierName, BlockGeometry geometry, int numParents, long leadingPad) {
    if (tierName == null || tierName.isBlank()) {
      throw new IllegalArgumentException("tier name=" + tierName + " must be non-empty");
    }
    if (geometry == null) {
      throw new IllegalArgumentException(tierName + " tier needs a block geometry");
    }
    if (numParents < 1) {
      throw new IllegalArgumentException(
          tierName + " tier num_parents=" + numParents + " must be at least 1");
    }
    long parentBytes = geometry.parentBytes();
    if (numParents > (Long.MAX_VALUE - leadingPad) / parentBytes) {
      throw new IllegalArgumentException(
          tierName
              + " tier num_parents="
              + numParents
              + " x parent_bytes="
              + parentBytes
              + " (+ "
              + leadingPad
              + " pad bytes) overflows a byte size");
    }
    int blockIdLimit;
    try {
      blockIdLimit = geometry.blockIdLimit(numParents);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(tierName + " tier " + e.getMessage(), e);
    }
    long bytes = leadingPad + numParents * parentBytes;
    Arena arena = Arena.ofShared();
    MemorySegment allocation;
    try {
      allocation = arena.allocate(bytes, ALIGNMENT);
    } catch (OutOfMemoryError e) {
      arena.close();
      OutOfMemoryError named =
          new OutOfMemoryError(
              tierName + " tier cannot reserve " + bytes + " bytes for " + numParents + " parents");
      named.initCause(e);
      throw named;
    }
    return new TierMemory(
        tierName, geometry, numParents, blockIdLimit, arena, allocation, leadingPad);
  }

  /** The tier's name, as errors give it. */
  public String tierName() {
    return tierName;
  }

  /** The geometry the blocks are laid out in. */
  public BlockGeometry geometry() {
    return geometry;
  }

  /** Number of LCM parents. */
  public int numParents() {
    return numParents;
  }

  /** Exclusive upper bound of the tier's block ids. */
  public int blockIdLimit() {
    return blockIdLimit;
  }

  /** Bytes of the tier's blocks: {@code numParents * parentBytes}. */
  public long byteSize() {
    return segment.byteSize();
  }

  /** The tier's blocks, parent 0 at offset 0. */
  public MemorySegment segment() {
    return segment;
  }

  /** The whole allocation, the leading pad included. */
  MemorySegment allocation() {
    return allocation;
  }

  /** The bytes of block {@code blockId} of group {@code groupId}: {@code bytesPerBlock(g)} long. */
  public MemorySegment block(int groupId, int blockId) {
    return segment.asSlice(offsetOf(groupId, blockId), geometry.bytesPerBlock(groupId));
  }

  /**
   * Byte offset of a block in {@link #segment()}.
   *
   * @throws IllegalArgumentException naming the tier when the id is no block of the group here
   */
  long offsetOf(int groupId, int blockId) {
    return offsetOf(tierName, geometry, numParents, blockIdLimit, groupId, blockId);
  }

  /**
   * Byte offset of a block in a tier of {@code numParents} parents of {@code geometry} whose ids
   * stay below {@code blockIdLimit}.
   *
   * @throws IllegalArgumentException naming the tier when the id is no block of the group there
   */
  static long offsetOf(
      String tierName,
      BlockGeometry geometry,
      int numParents,
      int blockIdLimit,
      int groupId,
      int blockId) {
    if (blockId >= blockIdLimit) {
      throw new IllegalArgumentException(
          tierName
              + " tier block id="
              + blockId
              + " of group "
              + groupId
              + " is beyond the tier: "
              + numParents
              + " parents hold ids below "
              + blockIdLimit);
    }
    try {
      return geometry.byteOffset(groupId, blockId);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(tierName + " tier " + e.getMessage(), e);
    }
  }

  /** Frees the allocation; later calls do nothing. Slices handed out become inaccessible. */
  @Override
  public void close() {
    if (closed.compareAndSet(false, true)) {
      arena.close();
    }
  }
}

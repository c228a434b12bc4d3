package io.tokenspeed.model.kv;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import java.lang.foreign.MemorySegment;

/**
 * The physical blocks of one cache group: one off-heap {@link MemorySegment} of {@code numBlocks ×
 * bytesPerBlock} bytes, block {@code b} at byte {@code b · bytesPerBlock}. Block 0 is the null
 * block of the concepts (a hole in a block table): it exists so ids index directly, and a forward
 * pass never reads or writes it.
 *
 * <pre>
 *   block b:  | field 0 | field 1 | ... |        fields in the group spec's order
 *   attention field "layers.L.k" (and ".v"): float32 little-endian
 *             [kvHead 0: slot 0 (headDim) | slot 1 | ... | slot bg-1][kvHead 1: ...] ...
 * </pre>
 *
 * <p>Head-major inside a field keeps one head's keys for a block contiguous (what attention streams
 * over) and is the slicing a head-partitioned TP rank would hold. The pool does not allocate or
 * free blocks: whoever owns the cache hands the forward pass block tables into it.
 */
public final class PagedKvPool {
  private final CacheGroupSpec spec;
  private final int numBlocks;
  private final MemorySegment memory;
  private final long[] fieldOffsets;

  /**
   * Wraps {@code memory} as the pool of {@code spec}.
   *
   * @throws IllegalArgumentException when the memory does not hold exactly {@code numBlocks} blocks
   */
  public PagedKvPool(CacheGroupSpec spec, int numBlocks, MemorySegment memory) {
    if (spec == null || memory == null) {
      throw new IllegalArgumentException(
          "spec=" + spec + " and memory=" + memory + " are required");
    }
    if (numBlocks < 2) {
      throw new IllegalArgumentException(
          "group "
              + spec.groupId()
              + " num_blocks="
              + numBlocks
              + " must be at least 2 (block 0 is null)");
    }
    long need = Math.multiplyExact(spec.bytesPerBlock(), (long) numBlocks);
    if (memory.byteSize() != need) {
      throw new IllegalArgumentException(
          "group "
              + spec.groupId()
              + " memory bytes="
              + memory.byteSize()
              + " but num_blocks="
              + numBlocks
              + " x bytes_per_block="
              + spec.bytesPerBlock()
              + " = "
              + need);
    }
    this.spec = spec;
    this.numBlocks = numBlocks;
    this.memory = memory;
    this.fieldOffsets = new long[spec.fields().size()];
    long off = 0;
    for (int i = 0; i < fieldOffsets.length; i++) {
      fieldOffsets[i] = off;
      off += spec.fields().get(i).bytesPerBlock();
    }
  }

  public CacheGroupSpec spec() {
    return spec;
  }

  public int numBlocks() {
    return numBlocks;
  }

  public MemorySegment memory() {
    return memory;
  }

  public long bytesPerBlock() {
    return spec.bytesPerBlock();
  }

  /** Byte offset of field {@code index} inside a block. */
  public long fieldOffset(int index) {
    return fieldOffsets[index];
  }

  /**
   * Byte offset inside a block of the field named {@code name}.
   *
   * @throws IllegalArgumentException when the group has no such field
   */
  public long fieldOffset(String name) {
    for (int i = 0; i < fieldOffsets.length; i++) {
      CacheField f = spec.fields().get(i);
      if (f.name().equals(name)) {
        return fieldOffsets[i];
      }
    }
    throw new IllegalArgumentException("group " + spec.groupId() + " has no field name=" + name);
  }

  /** The bytes of block {@code id}. */
  public MemorySegment block(int id) {
    if (id < 0 || id >= numBlocks) {
      throw new IllegalArgumentException(
          "block id=" + id + " outside [0, " + numBlocks + ") of group " + spec.groupId());
    }
    return memory.asSlice(id * spec.bytesPerBlock(), spec.bytesPerBlock());
  }
}

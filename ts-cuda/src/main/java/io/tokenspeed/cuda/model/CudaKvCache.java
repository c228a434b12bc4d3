package io.tokenspeed.cuda.model;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.cuda.DeviceBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * The pools of every cache group of a {@link CacheLayout} in device memory, laid out exactly as the
 * CPU's {@code KvCache}: block {@code b} of group {@code g} at {@code b · bytesPerBlock} from the
 * pool's start, its fields in the spec's order. It holds memory, not bookkeeping; block 0 exists
 * and is never written.
 */
public final class CudaKvCache implements AutoCloseable {
  private final CacheLayout layout;
  private final long[] bases;
  private final int[] numBlocks;
  private final List<DeviceBuffer> owned = new ArrayList<>();

  /** Allocates zeroed pools of {@code numBlocks} blocks (block 0 included) for every group. */
  public CudaKvCache(CudaDevice device, CacheLayout layout, int numBlocks) {
    if (numBlocks < 2) {
      throw new IllegalArgumentException("num_blocks=" + numBlocks + " must be at least 2");
    }
    this.layout = layout;
    this.bases = new long[layout.numGroups()];
    this.numBlocks = new int[layout.numGroups()];
    try {
      for (CacheGroupSpec g : layout.groups()) {
        DeviceBuffer b =
            device.allocateZeroed(Math.multiplyExact(g.bytesPerBlock(), (long) numBlocks));
        owned.add(b);
        bases[g.groupId()] = b.pointer();
        this.numBlocks[g.groupId()] = numBlocks;
      }
    } catch (RuntimeException e) {
      close();
      throw e;
    }
  }

  /**
   * The pools of another allocation (the engine's Device tier): group {@code g}'s block 0 at device
   * address {@code bases[g]}, {@code numBlocks[g]} blocks. The allocation stays its owner's.
   */
  CudaKvCache(CacheLayout layout, long[] bases, int[] numBlocks) {
    this.layout = layout;
    this.bases = bases.clone();
    this.numBlocks = numBlocks.clone();
  }

  public CacheLayout layout() {
    return layout;
  }

  /** Blocks of group {@code g}'s pool, block 0 included. */
  public int numBlocks(int g) {
    return numBlocks[g];
  }

  /** Device address of block 0 of group {@code g}'s pool. */
  public long base(int g) {
    return bases[g];
  }

  /** Byte offset of field {@code name} inside a block of group {@code g}. */
  public long fieldOffset(int g, String name) {
    long off = 0;
    for (CacheField f : layout.group(g).fields()) {
      if (f.name().equals(name)) {
        return off;
      }
      off += f.bytesPerBlock();
    }
    throw new IllegalArgumentException("group " + g + " has no field " + name);
  }

  @Override
  public void close() {
    for (DeviceBuffer b : owned) {
      b.close();
    }
    owned.clear();
  }
}

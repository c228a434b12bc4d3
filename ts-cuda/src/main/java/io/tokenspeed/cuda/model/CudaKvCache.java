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
 * CPU's {@code KvCache}: block {@code b} of group {@code g} at {@code b · bytesPerBlock}, its
 * fields in the spec's order. It holds memory, not bookkeeping; block 0 exists and is never
 * written.
 */
public final class CudaKvCache implements AutoCloseable {
  private final CacheLayout layout;
  private final int numBlocks;
  private final List<DeviceBuffer> pools = new ArrayList<>();

  /** Allocates zeroed pools of {@code numBlocks} blocks (block 0 included) for every group. */
  public CudaKvCache(CudaDevice device, CacheLayout layout, int numBlocks) {
    if (numBlocks < 2) {
      throw new IllegalArgumentException("num_blocks=" + numBlocks + " must be at least 2");
    }
    this.layout = layout;
    this.numBlocks = numBlocks;
    try {
      for (CacheGroupSpec g : layout.groups()) {
        pools.add(device.allocateZeroed(Math.multiplyExact(g.bytesPerBlock(), (long) numBlocks)));
      }
    } catch (RuntimeException e) {
      close();
      throw e;
    }
  }

  public CacheLayout layout() {
    return layout;
  }

  public int numBlocks() {
    return numBlocks;
  }

  /** The pool of group {@code g}. */
  public DeviceBuffer pool(int g) {
    return pools.get(g);
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
    for (DeviceBuffer b : pools) {
      b.close();
    }
  }
}

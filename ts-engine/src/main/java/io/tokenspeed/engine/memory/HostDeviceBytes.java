package io.tokenspeed.engine.memory;

import io.tokenspeed.model.device.DeviceBytes;
import io.tokenspeed.model.kv.KvCache;
import java.lang.foreign.MemorySegment;
import java.util.Optional;

/**
 * The Device tier in host memory (the CPU backend): copies run at once, in call order, so every one
 * has completed when it returns; the CPU model reads the same bytes through {@link #kvCache()}. It
 * borrows the memory: {@link DevicePools} frees it.
 */
public final class HostDeviceBytes implements DeviceBytes {
  private final MemorySegment blocks;
  private final KvCache kvCache;

  HostDeviceBytes(MemorySegment blocks, KvCache kvCache) {
    this.blocks = blocks;
    this.kvCache = kvCache;
  }

  /** The model's view of the same bytes. */
  public KvCache kvCache() {
    return kvCache;
  }

  @Override
  public long byteSize() {
    return blocks.byteSize();
  }

  @Override
  public void copyFromHost(MemorySegment src, long dstOffset) {
    MemorySegment.copy(src, 0, blocks, dstOffset, src.byteSize());
  }

  @Override
  public void copyToHost(long srcOffset, MemorySegment dst) {
    MemorySegment.copy(blocks, srcOffset, dst, 0, dst.byteSize());
  }

  @Override
  public void copyWithin(long srcOffset, long dstOffset, long bytes) {
    MemorySegment.copy(blocks, srcOffset, blocks, dstOffset, bytes);
  }

  @Override
  public void awaitCopies() {}

  @Override
  public Optional<MemorySegment> hostSegment() {
    return Optional.of(blocks);
  }

  @Override
  public void close() {}
}

package io.tokenspeed.engine.memory;

import io.tokenspeed.core.CacheLayout;

/**
 * The Host tier: one shared off-heap allocation of whole LCM parents and its CPU-only block
 * geometry. It holds no Device memory and no transfer layout; {@link DeviceHandle} binds the two
 * tiers together.
 */
public final class HostCacheStorage implements AutoCloseable {

  /** The tier name errors give. */
  public static final String TIER_NAME = "Host";

  private final CacheLayout layout;
  private final TierMemory memory;

  private HostCacheStorage(CacheLayout layout, TierMemory memory) {
    this.layout = layout;
    this.memory = memory;
  }

  /**
   * A Host tier of {@code max(1, floor(deviceParents * ratio))} parents.
   *
   * @throws IllegalArgumentException when the ratio is not finite and positive, {@code
   *     deviceParents < 1}, or the parent count does not fit the block id space
   */
  public static HostCacheStorage ofRatio(CacheLayout layout, int deviceParents, double ratio) {
    if (!Double.isFinite(ratio) || ratio <= 0) {
      throw new IllegalArgumentException(
          TIER_NAME + " tier ratio=" + ratio + " must be finite and greater than 0");
    }
    if (deviceParents < 1) {
      throw new IllegalArgumentException(
          TIER_NAME + " tier device_parents=" + deviceParents + " must be at least 1");
    }
    BlockGeometry geometry = BlockGeometry.of(layout);
    double parents = Math.floor(deviceParents * ratio);
    if (parents > Integer.MAX_VALUE) {
      throw new IllegalArgumentException(
          TIER_NAME
              + " tier device_parents="
              + deviceParents
              + " x ratio="
              + ratio
              + " gives more than "
              + Integer.MAX_VALUE
              + " parents");
    }
    int numParents = Math.max(1, (int) parents);
    return new HostCacheStorage(layout, TierMemory.allocate(TIER_NAME, geometry, numParents));
  }

  /**
   * A Host tier of the whole LCM parents that fit in {@code bytes}: {@code floor(bytes /
   * parentBytes)}.
   *
   * @throws IllegalArgumentException naming the parent size when not one parent fits, or when the
   *     parent count does not fit the block id space
   */
  public static HostCacheStorage ofBytes(CacheLayout layout, long bytes) {
    BlockGeometry geometry = BlockGeometry.of(layout);
    long parents = bytes / geometry.parentBytes();
    if (parents < 1) {
      throw new IllegalArgumentException(
          TIER_NAME
              + " tier bytes="
              + bytes
              + " holds no whole parent: one parent is parent_bytes="
              + geometry.parentBytes()
              + " (the LCM of the groups' block sizes)");
    }
    if (parents > Integer.MAX_VALUE) {
      throw new IllegalArgumentException(
          TIER_NAME
              + " tier bytes="
              + bytes
              + " is "
              + parents
              + " parents of parent_bytes="
              + geometry.parentBytes()
              + ", more than "
              + Integer.MAX_VALUE);
    }
    return new HostCacheStorage(layout, TierMemory.allocate(TIER_NAME, geometry, (int) parents));
  }

  /** The layout the tier serves. */
  public CacheLayout layout() {
    return layout;
  }

  /** The tier's memory, addressed by cache block ids. */
  public TierMemory memory() {
    return memory;
  }

  /** Number of LCM parents. */
  public int numParents() {
    return memory.numParents();
  }

  /** The tier's geometry. */
  public BlockGeometry geometry() {
    return memory.geometry();
  }

  /** Frees the tier. Later calls do nothing. */
  @Override
  public void close() {
    memory.close();
  }
}

package io.tokenspeed.l3.store.memory;

/**
 * Limits of a {@link MemoryStore}.
 *
 * @param maxKeyBytes longest key accepted, in UTF-8 bytes, in {@code [1, MAX_KEY_BYTES_LIMIT]}
 * @param maxValueBytes largest object accepted, in {@code [1, MAX_VALUE_BYTES_LIMIT]} (objects are
 *     Java arrays)
 * @param capacityBytes total payload bytes the store may hold, in {@code [1, Long.MAX_VALUE]};
 *     {@link #UNBOUNDED_CAPACITY_BYTES} for no limit. A PUT that would exceed it is refused for
 *     that row ({@link MemoryStore#REJECTED_NO_SPACE}).
 */
public record MemoryStoreSettings(int maxKeyBytes, long maxValueBytes, long capacityBytes) {

  /** Default longest key: comfortably above a tsl3 object key (about 160 bytes). */
  public static final int DEFAULT_MAX_KEY_BYTES = 1024;

  /** Upper bound of {@code maxKeyBytes}, the same as the file store's. */
  public static final int MAX_KEY_BYTES_LIMIT = 65_535;

  /** Default largest object: 256 MiB, above any single KV page or state checkpoint we expect. */
  public static final long DEFAULT_MAX_VALUE_BYTES = 256L << 20;

  /** Upper bound of {@code maxValueBytes}: the largest Java byte array. */
  public static final long MAX_VALUE_BYTES_LIMIT = Integer.MAX_VALUE - 8;

  /** The capacity that means "no limit". */
  public static final long UNBOUNDED_CAPACITY_BYTES = Long.MAX_VALUE;

  /** Default capacity: unbounded (tests and single-process setups). */
  public static final long DEFAULT_CAPACITY_BYTES = UNBOUNDED_CAPACITY_BYTES;

  public MemoryStoreSettings {
    if (maxKeyBytes < 1 || maxKeyBytes > MAX_KEY_BYTES_LIMIT) {
      throw new IllegalArgumentException(
          "max_key_bytes=" + maxKeyBytes + " must be in [1, " + MAX_KEY_BYTES_LIMIT + "]");
    }
    if (maxValueBytes < 1 || maxValueBytes > MAX_VALUE_BYTES_LIMIT) {
      throw new IllegalArgumentException(
          "max_value_bytes=" + maxValueBytes + " must be in [1, " + MAX_VALUE_BYTES_LIMIT + "]");
    }
    if (capacityBytes < 1) {
      throw new IllegalArgumentException(
          "capacity_bytes=" + capacityBytes + " must be in [1, " + Long.MAX_VALUE + "]");
    }
  }

  /** The defaults: documented {@code DEFAULT_*} limits and no capacity bound. */
  public static MemoryStoreSettings defaults() {
    return new MemoryStoreSettings(
        DEFAULT_MAX_KEY_BYTES, DEFAULT_MAX_VALUE_BYTES, DEFAULT_CAPACITY_BYTES);
  }

  /** These settings with another capacity. */
  public MemoryStoreSettings withCapacityBytes(long newCapacityBytes) {
    return new MemoryStoreSettings(maxKeyBytes, maxValueBytes, newCapacityBytes);
  }
}

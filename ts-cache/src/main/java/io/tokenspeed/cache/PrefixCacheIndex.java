package io.tokenspeed.cache;

import io.tokenspeed.core.CacheKey;
import java.util.HashMap;
import java.util.Map;
import java.util.function.BiConsumer;

/**
 * The published blocks of one group in one tier: {@link CacheKey} to block id. An entry exists
 * exactly while its block is published; {@link TierCache} keeps the reverse mapping and the LRU.
 */
final class PrefixCacheIndex {

  private final int groupId;
  private final Map<CacheKey, Integer> blocks = new HashMap<>();

  PrefixCacheIndex(int groupId) {
    this.groupId = groupId;
  }

  /** The block published under {@code key}, or 0. */
  int lookup(CacheKey key) {
    Integer b = blocks.get(key);
    return b == null ? 0 : b;
  }

  boolean contains(CacheKey key) {
    return blocks.containsKey(key);
  }

  /** Adds an entry; false when the key is already published. */
  boolean putIfAbsent(CacheKey key, int blockId) {
    if (key.groupId() != groupId) {
      throw new IllegalArgumentException(
          "key of group " + key.groupId() + " offered to the index of group " + groupId);
    }
    return blocks.putIfAbsent(key, blockId) == null;
  }

  void remove(CacheKey key) {
    blocks.remove(key);
  }

  int size() {
    return blocks.size();
  }

  void forEach(BiConsumer<CacheKey, Integer> action) {
    blocks.forEach(action);
  }
}

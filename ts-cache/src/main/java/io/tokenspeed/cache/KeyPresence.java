package io.tokenspeed.cache;

import io.tokenspeed.core.CacheKey;

/** Whether a block is available to a match: published in a tier, or assumed to exist in L3. */
@FunctionalInterface
public interface KeyPresence {
  /** True when the block named by {@code key} counts as present. */
  boolean has(CacheKey key);

  /** Present in this or in {@code other}. */
  default KeyPresence or(KeyPresence other) {
    return key -> has(key) || other.has(key);
  }
}

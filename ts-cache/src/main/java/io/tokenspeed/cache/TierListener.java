package io.tokenspeed.cache;

import io.tokenspeed.core.CacheKey;

/**
 * Hears what a {@link TierCache}'s indexes gain and lose: every successful {@link
 * TierCache#publish}, and every entry that leaves an index ({@link TierCache#evict}, eviction
 * inside {@link TierCache#allocate}, {@link TierCache#unpublish} and {@link
 * TierCache#unpublishAll}). It is called on the thread that owns the tier (the event loop), inside
 * the tier's operation: it must be cheap, must not block and must not call back into the tier.
 */
public interface TierListener {

  /** {@code key} was published in {@code tier}: lookups find it from now on. */
  void published(Tier tier, CacheKey key);

  /**
   * {@code key} left {@code tier}'s index (evicted, or unpublished): no lookup finds it any more.
   */
  void removed(Tier tier, CacheKey key);
}

package io.tokenspeed.cache;

import io.tokenspeed.core.CacheKey;

/**
 * One block copy that admission asks the data plane to perform before the forward reads the row: a
 * Host→Device load, or a Device→Device copy-on-write of a partial block at a tail.
 *
 * @param groupId the cache group
 * @param row the request's block row the destination serves
 * @param srcTier where the source lives ({@link Tier#HOST} for a load)
 * @param srcBlock the source block; admission holds a reference on it until the copy completes
 * @param dstBlock the fresh Device destination, owned by the request
 * @param key the key of the source's content
 * @param publishOnComplete true when the destination becomes a published Device copy of {@code key}
 *     once written; false for a copy-on-write destination, which the request goes on writing
 */
public record BlockCopy(
    int groupId,
    int row,
    Tier srcTier,
    int srcBlock,
    int dstBlock,
    CacheKey key,
    boolean publishOnComplete) {}

package io.tokenspeed.cache;

import java.util.List;

/**
 * What admitting one request produced: the reused boundary, the request's Device block table per
 * group, and the copies the data plane performs before the forward.
 *
 * <pre>
 *   Full / SWA table: one entry per row of [0, ceil((hit + newTokens) / bg))
 *     rows below hit:  a pinned Device hit, or a load destination (SWA: 0 outside the window)
 *     partial row at a tail hit: a private copy-on-write destination
 *     rows above: fresh private blocks
 *   State table: [input checkpoint at hit (0 when hit = 0), working block]
 * </pre>
 *
 * <p>The request owns one reference on every non-zero table entry. The sources in {@link #copies()}
 * hold one reference each until {@link CacheCoordinator#finishCopies} is called.
 *
 * @param hit the boundary reused, in tokens
 * @param deviceHit the part of it that was already on the Device
 * @param tables per group the Device block of each row (0 for a hole)
 * @param copies Host→Device loads and Device→Device copy-on-write copies to perform
 * @param clearEpoch the coordinator's count of full clears when it admitted: an admission made
 *     before a clear publishes nothing after it (see {@link CacheCoordinator#clear})
 */
public record Admission(
    int hit, int deviceHit, int[][] tables, List<BlockCopy> copies, long clearEpoch) {}

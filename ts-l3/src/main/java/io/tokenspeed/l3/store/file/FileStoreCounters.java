package io.tokenspeed.l3.store.file;

/**
 * What a {@link FileStore}'s reads did since it opened: which way each object that passed its open
 * was read, and how many payload bytes took the detour through a bounce buffer.
 *
 * @param directObjects objects read with {@code O_DIRECT}
 * @param cachedObjects objects read through the page cache although O_DIRECT was available: every
 *     page was cached already ({@code direct_io=auto}), or this file's O_DIRECT open was refused
 * @param bufferedObjects objects read through the page cache because O_DIRECT is off or refused for
 *     the root
 * @param directOpenRefusals O_DIRECT opens of single files refused on a root that took the probe
 *     (the object was then read through the page cache)
 * @param bouncedBytes payload bytes read with O_DIRECT into a bounce buffer and copied, because the
 *     file offset or the destination's address was not block-aligned, or the payload ended within a
 *     block
 */
public record FileStoreCounters(
    long directObjects,
    long cachedObjects,
    long bufferedObjects,
    long directOpenRefusals,
    long bouncedBytes) {}

package io.tokenspeed.pd;

import java.lang.foreign.MemorySegment;

/**
 * The Host staging blocks a decode engine reserved for one room ({@link Landing#reserve}): one
 * writable segment per (cache group, block index), of exactly the group's bytes per block. The
 * receiver reads each DATA frame's bytes straight into its block's segment, from the connection's
 * reader thread, so every segment must be accessible from any thread (a global, automatic or shared
 * arena's, never a confined one's).
 *
 * <p>Ownership: the receiver holds the destinations from the moment the reservation completes until
 * the engine acknowledges the landing ({@link Landed#acknowledge} returning true: the engine owns
 * them from then on and releases them itself once its Host-to-Device copies are fenced), or until
 * the room ends otherwise, when the receiver calls {@link #release} exactly once, and only once no
 * more bytes can land in them.
 */
public interface Destinations {

  /** The number of cache groups (must equal the BOOTSTRAP's). */
  int numGroups();

  /** The blocks reserved in {@code group}; the ACK tells the prefill side these counts. */
  int numBlocks(int group);

  /** The segment block {@code index} of {@code group} lands in; always the same segment. */
  MemorySegment block(int group, int index);

  /** Gives the blocks back to the engine; called at most once. */
  void release();
}

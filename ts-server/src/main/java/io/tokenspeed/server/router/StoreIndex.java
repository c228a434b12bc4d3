package io.tokenspeed.server.router;

/**
 * The blocks of the shared L3 store, as the backends' KV events reported them (any medium other
 * than {@code GPU} and {@code CPU}): one set for all backends, since every backend of a deployment
 * reads the same store and may restore what another wrote. A block removed from the store by any
 * backend's event is gone for all.
 *
 * <p>An engine clearing its own caches ({@code AllBlocksCleared}) leaves the store as it is: the
 * store outlives an engine's caches, and only a removal event for its medium takes a block out.
 *
 * <p>Bounded by a {@link BlockTable}. Thread-safe: one lock.
 */
final class StoreIndex {
  private static final int STORED = 1;

  private final BlockTable blocks;

  StoreIndex(int maxBlocks) {
    this.blocks = new BlockTable(maxBlocks);
  }

  synchronized void onStored(long[] hashes) {
    for (long h : hashes) {
      blocks.add(h, STORED);
    }
  }

  synchronized void onRemoved(long[] hashes) {
    for (long h : hashes) {
      blocks.remove(h, STORED);
    }
  }

  /**
   * How many pages of {@code hashes} from {@code from} on (up to {@code numPages}) the store holds,
   * one after the other.
   */
  synchronized int extend(long[] hashes, int from, int numPages) {
    int i = from;
    while (i < numPages && blocks.get(hashes[i]) != 0) {
      i++;
    }
    return i - from;
  }

  synchronized boolean contains(long hash) {
    return blocks.get(hash) != 0;
  }

  synchronized int size() {
    return blocks.size();
  }

  synchronized long evicted() {
    return blocks.evicted();
  }
}

package io.tokenspeed.server.router;

import java.util.List;

/**
 * The blocks of the shared L3 store, as the routed backends' KV events reported writing them (any
 * medium other than {@code GPU} and {@code CPU}): the union of what each backend's {@link
 * PrefixIndex} holds under {@link PrefixIndex#STORE}. Every backend of a deployment reads the same
 * store, so a block any of them wrote counts for all.
 *
 * <p>Each backend's reports stay its own: the engine announces what it wrote, and says {@code
 * AllBlocksCleared} when a full clear (a cache clear, a namespace rotation, a weight update) leaves
 * what it wrote before out of its reach, after which the router forgets that backend's reports
 * (docs/kv-events.md). A removal from the store, by any backend's event, takes the block from every
 * backend's reports: the object is gone for all.
 *
 * <p>Thread-safe: each index locks itself.
 */
final class StoreIndex {
  private final List<PrefixIndex> reporters;

  StoreIndex(List<PrefixIndex> reporters) {
    this.reporters = List.copyOf(reporters);
  }

  /** The blocks {@code hashes} left the store. */
  void onRemoved(long[] hashes) {
    for (PrefixIndex r : reporters) {
      r.onRemoved(hashes, PrefixIndex.STORE);
    }
  }

  /** Whether any backend reported writing {@code hash} to the store. */
  boolean contains(long hash) {
    for (PrefixIndex r : reporters) {
      if ((r.tiersOf(hash) & PrefixIndex.STORE) != 0) {
        return true;
      }
    }
    return false;
  }

  /**
   * For each page of {@code hashes}, how many pages from it on the store holds one after the other
   * ({@code runs[i]}; one entry more, 0, past the last page).
   */
  int[] runs(long[] hashes) {
    int[] runs = new int[hashes.length + 1];
    for (int i = hashes.length - 1; i >= 0; i--) {
      runs[i] = contains(hashes[i]) ? runs[i + 1] + 1 : 0;
    }
    return runs;
  }
}

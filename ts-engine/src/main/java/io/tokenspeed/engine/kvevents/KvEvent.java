package io.tokenspeed.engine.kvevents;

import java.util.Arrays;
import java.util.List;

/**
 * One KV block event of an engine (docs/kv-events.md), a block being one page of P tokens:
 *
 * <pre>
 *   BlockStored       pages a tier now holds, consecutive: each page's parent is the page before
 *                     it; the first page's parent is the event's parent (none for a prefix's start)
 *   BlockRemoved      pages a tier no longer holds, by event hash
 *   AllBlocksCleared  a full clear: no tier holds anything from before (the store included, as far
 *                     as the events go: its namespace may have changed)
 * </pre>
 */
public sealed interface KvEvent {

  /** Pages {@code medium} now holds; {@code pages} is a non-empty chain, parent first. */
  record BlockStored(KvMedium medium, List<KvPage> pages) implements KvEvent {
    public BlockStored {
      if (pages.isEmpty()) {
        throw new IllegalArgumentException("a BlockStored event names at least one page");
      }
      pages = List.copyOf(pages);
    }
  }

  /** Pages {@code medium} no longer holds, by event hash. */
  final class BlockRemoved implements KvEvent {
    private final KvMedium medium;
    private final long[] hashes;

    public BlockRemoved(KvMedium medium, long[] hashes) {
      if (hashes.length == 0) {
        throw new IllegalArgumentException("a BlockRemoved event names at least one page");
      }
      this.medium = medium;
      this.hashes = hashes.clone();
    }

    public KvMedium medium() {
      return medium;
    }

    /** Number of pages removed. */
    public int size() {
      return hashes.length;
    }

    /** The event hash of removed page {@code i}. */
    public long hash(int i) {
      return hashes[i];
    }

    /** The removed pages' event hashes (a copy). */
    public long[] hashes() {
      return hashes.clone();
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof BlockRemoved r && r.medium == medium && Arrays.equals(r.hashes, hashes);
    }

    @Override
    public int hashCode() {
      return 31 * medium.hashCode() + Arrays.hashCode(hashes);
    }

    @Override
    public String toString() {
      return "BlockRemoved[" + medium + ", " + hashes.length + " pages]";
    }
  }

  /** A full clear. */
  record AllBlocksCleared() implements KvEvent {
    /** The one instance needed. */
    public static final AllBlocksCleared INSTANCE = new AllBlocksCleared();
  }
}

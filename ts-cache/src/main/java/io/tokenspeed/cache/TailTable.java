package io.tokenspeed.cache;

import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Local, bounded hints of tails: exact boundaries that are not multiples of P under which this
 * replica published Host data (after a retired, attached GET). A hint only makes a boundary a
 * candidate; it never makes a hit — the matcher still demands every group's blocks at that
 * boundary. There is no shared tail directory and no scan of every token position: a prompt finds
 * its hints by looking up each of its full page hashes (the page a tail chains on).
 *
 * <p>Bounded FIFO: recording a hint beyond {@link #capacity()} forgets the oldest one. Recording
 * the same tail twice keeps one entry.
 */
public final class TailTable {

  /** Default number of remembered tails. */
  public static final int DEFAULT_CAPACITY = 4096;

  /** Stand-in for "no page below": a tail inside page 0. */
  private static final ContentHash ROOT = new ContentHash(0, 0, 0, 0);

  private record Tail(ContentHash base, int numTokens, ContentHash hash) {}

  private final int capacity;
  private final Map<ContentHash, List<Tail>> byBase = new HashMap<>();
  private final ArrayDeque<Tail> fifo = new ArrayDeque<>();

  public TailTable(int capacity) {
    if (capacity < 0) {
      throw new IllegalArgumentException("tail_table_capacity=" + capacity + " must be >= 0");
    }
    this.capacity = capacity;
  }

  /** Maximum number of remembered tails. */
  public int capacity() {
    return capacity;
  }

  /** Number of remembered tails. */
  public int size() {
    return fifo.size();
  }

  /** Remembers the tail of {@code keys} ending at {@code boundary} (not a multiple of P). */
  public void record(PromptKeys keys, int boundary) {
    if (capacity == 0) {
      return;
    }
    Tail tail = new Tail(baseOf(keys, boundary), boundary, keys.tailHash(boundary));
    List<Tail> list = byBase.computeIfAbsent(tail.base(), k -> new ArrayList<>(2));
    if (list.contains(tail)) {
      return;
    }
    list.add(tail);
    fifo.addLast(tail);
    if (fifo.size() > capacity) {
      Tail old = fifo.removeFirst();
      List<Tail> l = byBase.get(old.base());
      l.remove(old);
      if (l.isEmpty()) {
        byBase.remove(old.base());
      }
    }
  }

  /** Forgets every tail (a full clear: the data they were recorded under is gone). */
  public void clear() {
    byBase.clear();
    fifo.clear();
  }

  /** Tails of this prompt in {@code (floor, max]} that were recorded, ascending. */
  public int[] hintsFor(PromptKeys keys, int floor, int max) {
    if (fifo.isEmpty()) {
      return new int[0];
    }
    int p = keys.layout().prefixGranularity();
    List<Integer> found = new ArrayList<>();
    int lastPage = Math.min(max / p, keys.numFullPages());
    for (int page = floor / p; page <= lastPage; page++) {
      ContentHash base = page == 0 ? ROOT : keys.pageHash(page - 1);
      List<Tail> list = byBase.get(base);
      if (list == null) {
        continue;
      }
      for (Tail t : list) {
        int b = t.numTokens();
        if (b > floor && b <= max && b / p == page && keys.tailHash(b).equals(t.hash())) {
          found.add(b);
        }
      }
    }
    return found.stream().mapToInt(Integer::intValue).sorted().distinct().toArray();
  }

  private static ContentHash baseOf(PromptKeys keys, int boundary) {
    int page = boundary / keys.layout().prefixGranularity();
    return page == 0 ? ROOT : keys.pageHash(page - 1);
  }
}

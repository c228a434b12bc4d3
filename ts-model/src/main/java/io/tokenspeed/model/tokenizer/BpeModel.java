package io.tokenspeed.model.tokenizer;

import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The byte-level BPE model: a vocabulary of byte strings and a ranked list of merges. A word (one
 * pre-token, as UTF-8 bytes) starts as one symbol per byte; the merge of lowest rank among adjacent
 * pairs is applied, leftmost first on ties, until no adjacent pair has a merge. The symbols left
 * are the word's ids.
 *
 * <pre>
 *   word "lower"   l  o  w  e  r
 *   rank 3: l o    lo    w  e  r
 *   rank 7: e r    lo    w  er
 *   rank 9: lo w   low   er        → ids [low, er]
 * </pre>
 *
 * <p>Cost is O(n log n) in the word's length: symbols form a linked list over arrays, candidate
 * merges sit in a min-heap of {@code (rank << 32) | position} longs, and a popped entry is checked
 * against the current pair (a rank names exactly one pair) instead of being removed when a
 * neighbour merges. A word of a hundred thousand letters (CJK text has no spaces) is therefore as
 * cheap per byte as a short one. Results of short words are cached (word → ids); the cache is
 * dropped wholesale when full, which keeps it bounded without bookkeeping.
 *
 * <p>Immutable apart from the cache, which is a concurrent map: thread-safe.
 */
final class BpeModel {

  /** Words up to this many chars are cached. */
  static final int DEFAULT_MAX_CACHED_WORD_CHARS = 128;

  /** Entries the cache holds before it is cleared. */
  static final int DEFAULT_CACHE_CAPACITY = 50_000;

  private static final long EMPTY_KEY = -1L;

  /** Id of the symbol for each byte value, or -1 if the vocabulary lacks it. */
  private final int[] byteIds = new int[256];

  private final Map<String, Integer> vocab;
  private final int unkId;
  private final boolean ignoreMerges;

  // Open-addressing map (left id, right id) -> rank.
  private final long[] mergeKeys;
  private final int[] mergeRanks;
  private final int mergeMask;

  /** Id of the token each merge produces, by rank. */
  private final int[] mergeResults;

  private final ConcurrentHashMap<String, int[]> cache = new ConcurrentHashMap<>();

  /**
   * @param vocab token (in byte-level characters) → id
   * @param merges pairs of tokens, by rank
   * @param unkId id for a byte missing from the vocabulary, or -1 to drop such bytes
   * @param ignoreMerges whether a word found whole in the vocabulary skips merging
   */
  BpeModel(Map<String, Integer> vocab, String[][] merges, int unkId, boolean ignoreMerges) {
    this.vocab = vocab;
    this.unkId = unkId;
    this.ignoreMerges = ignoreMerges;
    for (int b = 0; b < 256; b++) {
      Integer id = vocab.get(String.valueOf(ByteLevel.charOf(b)));
      byteIds[b] = id == null ? -1 : id;
    }
    int capacity = Integer.highestOneBit(Math.max(16, merges.length * 2 + 1)) << 1;
    mergeKeys = new long[capacity];
    Arrays.fill(mergeKeys, EMPTY_KEY);
    mergeRanks = new int[capacity];
    mergeMask = capacity - 1;
    mergeResults = new int[merges.length];
    for (int rank = 0; rank < merges.length; rank++) {
      String left = merges[rank][0];
      String right = merges[rank][1];
      Integer leftId = vocab.get(left);
      Integer rightId = vocab.get(right);
      Integer resultId = vocab.get(left + right);
      if (leftId == null || rightId == null || resultId == null) {
        throw new TokenizerFormatException(
            "merge "
                + rank
                + " \""
                + left
                + " "
                + right
                + "\" uses a token missing from model.vocab: "
                + (leftId == null ? left : rightId == null ? right : left + right));
      }
      long key = pairKey(leftId, rightId);
      int slot = slotOf(key);
      if (mergeKeys[slot] == key) {
        continue; // a repeated merge keeps its first (lowest) rank
      }
      mergeKeys[slot] = key;
      mergeRanks[slot] = rank;
      mergeResults[rank] = resultId;
    }
  }

  /** Id of a token given in byte-level characters, or null. */
  Integer idOf(String token) {
    return vocab.get(token);
  }

  /**
   * Appends the ids of one word to {@code out}.
   *
   * @param word the pre-token as text (the cache key)
   * @param bytes its UTF-8 bytes
   */
  void encodeWord(String word, byte[] bytes, IntList out) {
    boolean cacheable = word.length() <= DEFAULT_MAX_CACHED_WORD_CHARS;
    if (cacheable) {
      int[] cached = cache.get(word);
      if (cached != null) {
        out.addAll(cached);
        return;
      }
    }
    int[] ids = merge(bytes);
    if (cacheable) {
      if (cache.size() >= DEFAULT_CACHE_CAPACITY) {
        cache.clear();
      }
      cache.put(word, ids);
    }
    out.addAll(ids);
  }

  private int[] merge(byte[] bytes) {
    int n = bytes.length;
    if (ignoreMerges) {
      Integer whole = vocab.get(ByteLevel.toChars(bytes, 0, n));
      if (whole != null) {
        return new int[] {whole};
      }
    }
    int[] sym = new int[n];
    int[] prev = new int[n];
    int[] next = new int[n];
    int numSymbols = 0;
    for (int i = 0; i < n; i++) {
      int id = byteIds[bytes[i] & 0xFF];
      if (id < 0) {
        id = unkId;
      }
      sym[i] = id;
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    // Bytes without an id and no unk token are dropped, as the reference does.
    if (unkId < 0) {
      int w = 0;
      for (int i = 0; i < n; i++) {
        if (sym[i] >= 0) {
          sym[w++] = sym[i];
        }
      }
      n = w;
      for (int i = 0; i < n; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
      }
    }
    numSymbols = n;
    long[] heap = new long[Math.max(4, 3 * n)];
    int heapSize = 0;
    for (int i = 0; i + 1 < n; i++) {
      int rank = rankOf(sym[i], sym[i + 1]);
      if (rank >= 0) {
        heapSize = push(heap, heapSize, ((long) rank << 32) | i);
      }
    }
    while (heapSize > 0) {
      long top = heap[0];
      heapSize = pop(heap, heapSize);
      int rank = (int) (top >>> 32);
      int pos = (int) top;
      if (sym[pos] < 0) {
        continue; // merged into its left neighbour
      }
      int right = next[pos];
      if (right < 0 || rankOf(sym[pos], sym[right]) != rank) {
        continue; // the pair changed since this entry was pushed
      }
      sym[pos] = mergeResults[rank];
      sym[right] = -1;
      int after = next[right];
      next[pos] = after;
      if (after >= 0) {
        prev[after] = pos;
      }
      numSymbols--;
      if (heapSize + 2 > heap.length) {
        heap = Arrays.copyOf(heap, heap.length * 2);
      }
      int before = prev[pos];
      if (before >= 0) {
        int r = rankOf(sym[before], sym[pos]);
        if (r >= 0) {
          heapSize = push(heap, heapSize, ((long) r << 32) | before);
        }
      }
      if (after >= 0) {
        int r = rankOf(sym[pos], sym[after]);
        if (r >= 0) {
          heapSize = push(heap, heapSize, ((long) r << 32) | pos);
        }
      }
    }
    int[] ids = new int[numSymbols];
    int k = 0;
    for (int i = n > 0 ? 0 : -1; i >= 0; i = next[i]) {
      ids[k++] = sym[i];
    }
    return ids;
  }

  private int rankOf(int left, int right) {
    if (left < 0 || right < 0) {
      return -1;
    }
    long key = pairKey(left, right);
    int slot = slotOf(key);
    return mergeKeys[slot] == key ? mergeRanks[slot] : -1;
  }

  /** The slot holding {@code key}, or the empty slot where it would go. */
  private int slotOf(long key) {
    int slot = (int) mix(key) & mergeMask;
    while (mergeKeys[slot] != EMPTY_KEY && mergeKeys[slot] != key) {
      slot = (slot + 1) & mergeMask;
    }
    return slot;
  }

  private static long pairKey(int left, int right) {
    return ((long) left << 32) | (right & 0xFFFFFFFFL);
  }

  private static long mix(long x) {
    x ^= x >>> 33;
    x *= 0xff51afd7ed558ccdL;
    x ^= x >>> 33;
    return x;
  }

  private static int push(long[] heap, int size, long value) {
    int i = size;
    while (i > 0) {
      int parent = (i - 1) >>> 1;
      if (heap[parent] <= value) {
        break;
      }
      heap[i] = heap[parent];
      i = parent;
    }
    heap[i] = value;
    return size + 1;
  }

  private static int pop(long[] heap, int size) {
    int last = size - 1;
    long value = heap[last];
    int i = 0;
    while (true) {
      int child = 2 * i + 1;
      if (child >= last) {
        break;
      }
      if (child + 1 < last && heap[child + 1] < heap[child]) {
        child++;
      }
      if (heap[child] >= value) {
        break;
      }
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = value;
    return last;
  }
}

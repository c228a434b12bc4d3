package io.tokenspeed.model.parallel;

/**
 * One rank's place in a tensor-parallel replica of {@code size} ranks, and how the model's
 * dimensions split over them.
 *
 * <pre>
 *   query heads H, rank r of T:      [r·H/T, (r+1)·H/T)                        (T divides H)
 *   KV heads Hkv, T ≤ Hkv:           [r·Hkv/T, (r+1)·Hkv/T)                    (T divides Hkv)
 *   KV heads Hkv, T > Hkv:           the one head r / (T/Hkv), held by T/Hkv ranks (Hkv divides T)
 *   MLP columns I:                   [r·I/T, (r+1)·I/T)                        (T divides I)
 *   vocabulary V:                    ranks before V mod T get ⌈V/T⌉ ids, the others ⌊V/T⌋
 * </pre>
 *
 * A query head always finds its KV head on its own rank: query head {@code h} reads KV head {@code
 * h / (H/Hkv)}, and both ranges above keep those together.
 *
 * <p>The KV of full-history attention splits one of two ways ({@link KvSplit}): by heads (above),
 * or by pages: every rank then holds every attention head, and the full-history cache groups are
 * page-cyclic over the T ranks — each page's K/V lives on one rank, each rank attends over its own
 * pages, and the ranks' partial results are combined with their log-sum-exp. The MLP and the
 * vocabulary split as above either way.
 *
 * @param rank this rank, in {@code [0, size)}
 * @param size the tensor-parallel size T
 * @param kvSplit how full-history KV is split over the ranks
 */
public record Shard(int rank, int size, KvSplit kvSplit) {

  /** A replica of one rank: every range is the whole dimension. */
  public static final Shard NONE = new Shard(0, 1);

  /** How the KV of full-history attention is split over the ranks. */
  public enum KvSplit {
    /** Each rank holds its share of the attention heads and their KV, for every page. */
    HEADS,
    /** Each rank holds every head, and the KV of the pages it owns (page-cyclic groups). */
    PAGES;

    /** The split named {@code heads} or {@code pages}. */
    public static KvSplit parse(String name) {
      return switch (name) {
        case "heads" -> HEADS;
        case "pages" -> PAGES;
        default ->
            throw new IllegalArgumentException(
                "KV split '" + name + "' is unknown; allowed: heads, pages");
      };
    }

    /** The name {@link #parse} reads. */
    public String label() {
      return name().toLowerCase(java.util.Locale.ROOT);
    }
  }

  public Shard {
    if (size < 1 || rank < 0 || rank >= size) {
      throw new IllegalArgumentException(
          "tensor-parallel rank=" + rank + " size=" + size + ": need 0 <= rank < size");
    }
    if (kvSplit == null) {
      throw new IllegalArgumentException("a KV split is required");
    }
  }

  /** Rank {@code rank} of {@code size}, with the KV split by heads. */
  public Shard(int rank, int size) {
    this(rank, size, KvSplit.HEADS);
  }

  /** True when full-history KV pages are dealt over several ranks. */
  public boolean pagesSplit() {
    return kvSplit == KvSplit.PAGES && size > 1;
  }

  /** A first index and a count. */
  public record Range(int from, int count) {
    public int to() {
      return from + count;
    }
  }

  /**
   * This rank's equal share of {@code total} (named {@code what} in the error).
   *
   * @throws IllegalArgumentException when {@code size} does not divide {@code total}
   */
  public Range even(String what, int total) {
    if (total % size != 0) {
      throw new IllegalArgumentException(
          "tensor-parallel size " + size + " does not divide " + what + "=" + total);
    }
    int n = total / size;
    return new Range(rank * n, n);
  }

  /** This rank's query heads: all of them when the KV is split by pages. */
  public Range queryHeads(int numHeads) {
    if (kvSplit == KvSplit.PAGES) {
      return new Range(0, numHeads);
    }
    return even("num_attention_heads", numHeads);
  }

  /**
   * This rank's KV heads: its equal share when {@code size} divides {@code numKvHeads}, else the
   * one head its query heads read, replicated on {@code size / numKvHeads} ranks; all of them when
   * the KV is split by pages.
   *
   * @throws IllegalArgumentException when neither divides the other
   */
  public Range kvHeads(int numKvHeads) {
    if (kvSplit == KvSplit.PAGES) {
      return new Range(0, numKvHeads);
    }
    if (size <= numKvHeads) {
      return even("num_key_value_heads", numKvHeads);
    }
    if (size % numKvHeads != 0) {
      throw new IllegalArgumentException(
          "tensor-parallel size "
              + size
              + " neither divides nor is a multiple of num_key_value_heads="
              + numKvHeads);
    }
    return new Range(rank / (size / numKvHeads), 1);
  }

  /** Every rank's share of a vocabulary of {@code total} ids, in rank order. */
  public int[] vocabCounts(int total) {
    if (total < size) {
      throw new IllegalArgumentException(
          "tensor-parallel size " + size + " exceeds vocab_size=" + total);
    }
    int[] counts = new int[size];
    for (int r = 0; r < size; r++) {
      counts[r] = total / size + (r < total % size ? 1 : 0);
    }
    return counts;
  }

  /** This rank's share of a vocabulary of {@code total} ids. */
  public Range vocab(int total) {
    int[] counts = vocabCounts(total);
    int from = 0;
    for (int r = 0; r < rank; r++) {
      from += counts[r];
    }
    return new Range(from, counts[rank]);
  }
}

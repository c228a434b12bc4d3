package io.tokenspeed.core;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The cache keys of one prompt under one layout: which {@link CacheKey} names row {@code i} of
 * group {@code g} when the prefix ends at boundary {@code B}.
 *
 * <pre>
 *   B aligned (B mod P = 0): every row below B lies in a full page
 *       key(g, i) = (g, h[i*bg / P], (i*bg mod P) / bg)
 *   B a tail (B mod P = r &gt; 0): rows of the last, partial page use the tail's hash
 *       |-- page 0 --|-- page 1 --|-- partial (r tokens) --|
 *       h[0]          h[1]         tailHash(B)
 * </pre>
 *
 * <p>A state group's row {@code i} is the checkpoint at {@code (i+1)*bg}; the checkpoint at a tail
 * B is row {@code ceil(B/bg) - 1} under the tail's hash. Page hashes are computed once; tail hashes
 * are computed on first use and remembered.
 */
public final class PromptKeys {

  private final CacheLayout layout;
  private final int[] tokens;
  private final ContentHash[] pageHashes;
  private final PrefixHasher hasher;
  private final Map<Integer, ContentHash> tailHashes = new HashMap<>();

  private PromptKeys(
      CacheLayout layout, int[] tokens, ContentHash[] pageHashes, PrefixHasher hasher) {
    this.layout = layout;
    this.tokens = tokens;
    this.pageHashes = pageHashes;
    this.hasher = hasher;
  }

  /** Hashes {@code tokens} under {@code layout} with the given request-level extra keys. */
  public static PromptKeys of(CacheLayout layout, int[] tokens, List<String> extraKeys) {
    if (tokens.length == 0) {
      throw new IllegalArgumentException("prompt is empty: at least one token is needed");
    }
    PrefixHasher hasher = new PrefixHasher(layout.prefixGranularity(), extraKeys);
    return new PromptKeys(layout, tokens.clone(), hasher.pageHashes(tokens), hasher);
  }

  /** The layout the keys belong to. */
  public CacheLayout layout() {
    return layout;
  }

  /** Number of prompt tokens. */
  public int numTokens() {
    return tokens.length;
  }

  /** The largest boundary a request may reuse: the last prompt token is always computed. */
  public int reusableBound() {
    return tokens.length - 1;
  }

  /** Token {@code index} of the prompt. */
  public int token(int index) {
    return tokens[index];
  }

  /** Number of full pages. */
  public int numFullPages() {
    return pageHashes.length;
  }

  /** Hash of full page {@code page}. */
  public ContentHash pageHash(int page) {
    return pageHashes[page];
  }

  /** Hash of the partial page that ends at tail {@code boundary} (not a multiple of P). */
  public ContentHash tailHash(int boundary) {
    checkBoundary(boundary);
    ContentHash cached = tailHashes.get(boundary);
    if (cached == null) {
      int page = boundary / layout.prefixGranularity();
      cached = hasher.tailHash(page == 0 ? null : pageHashes[page - 1], tokens, boundary);
      tailHashes.put(boundary, cached);
    }
    return cached;
  }

  /** The hash that names the page holding token {@code token} in a prefix ending at B. */
  public ContentHash hashForToken(int token, int boundary) {
    int p = layout.prefixGranularity();
    int page = token / p;
    if ((page + 1) * (long) p <= boundary) {
      return pageHashes[page];
    }
    return tailHash(boundary);
  }

  /** The key of row {@code row} of group {@code groupId} in a prefix that ends at B. */
  public CacheKey keyOf(int groupId, int row, int boundary) {
    int bg = layout.group(groupId).blockGranularity();
    int firstToken = row * bg;
    if (row < 0 || firstToken >= boundary) {
      throw new IllegalArgumentException(
          "row=" + row + " of group " + groupId + " lies outside boundary=" + boundary);
    }
    int offset = (firstToken % layout.prefixGranularity()) / bg;
    return new CacheKey(groupId, hashForToken(firstToken, boundary), offset);
  }

  /** The key of the state checkpoint at boundary B: row {@code ceil(B/bg) - 1}. */
  public CacheKey checkpointKey(int groupId, int boundary) {
    return keyOf(groupId, layout.group(groupId).rowsFor(boundary) - 1, boundary);
  }

  /** True when B is a P-aligned boundary. */
  public boolean aligned(int boundary) {
    return boundary % layout.prefixGranularity() == 0;
  }

  private void checkBoundary(int boundary) {
    if (boundary < 1 || boundary > tokens.length || aligned(boundary)) {
      throw new IllegalArgumentException(
          "tail boundary="
              + boundary
              + " must be in [1, "
              + tokens.length
              + "] and not a multiple of prefix_granularity="
              + layout.prefixGranularity());
    }
  }
}

package io.tokenspeed.engine;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.engine.sim.SimModel;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The bytes every cached block of a simulation's requests must hold, from the tokens alone: which
 * token sequence a content hash names, and the rows {@link SimModel} writes for it.
 *
 * <pre>
 *   a request's sequence S = prompt ++ its reference tokens
 *   full page i of S  ─► pageHash(i)   names rows [i·P, (i+1)·P)
 *   tail at bound B   ─► tailHash(B)   names rows [⌊B/P⌋·P, B)     B = known − 1 of a submission:
 *                                                                  the prompt, or (after a
 *                                                                  retraction) the prompt and
 *                                                                  the tokens generated so far
 *   block (g, offset o) of the page starting at s: rows [s + o·bg, min(s + (o+1)·bg, end))
 * </pre>
 *
 * A full page's hash is registered with its sequence; a tail's only at the prompt's bound, and the
 * tails of later bounds on the first key no registered hash names (each sequence's once). A block
 * holds the reference bytes of its key when each row it names is the row the model writes for that
 * position of the sequence on the block's rank; what lies past the rows a tail names (a partial
 * last row) is not part of the key.
 */
final class ReferenceBlocks {

  private final SimModel model;
  private final CacheLayout layout;
  private final int ranks;
  private final int rowWords;
  private final Map<ContentHash, Source> sources = new HashMap<>();

  /** Sequences whose tails past the prompt's bound are not registered yet. */
  private final List<Sequence> unexpanded = new ArrayList<>();

  /** A prompt and its reference tokens; the rows of each rank and group, once asked for. */
  private static final class Sequence {
    final int[] tokens;
    final int promptLength;
    final long[][][] rows;

    Sequence(int[] tokens, int promptLength, int ranks, int groups) {
      this.tokens = tokens;
      this.promptLength = promptLength;
      this.rows = new long[ranks][groups][];
    }
  }

  /** What a hash names: the rows below {@code end} of the page that holds row {@code end - 1}. */
  private record Source(Sequence sequence, int end) {}

  ReferenceBlocks(SimModel model, CacheLayout layout, int ranks) {
    this.model = model;
    this.layout = layout;
    this.ranks = ranks;
    this.rowWords = model.rowWords();
  }

  /** Registers the keys of a request of {@code prompt} whose reference tokens are {@code ref}. */
  void add(int[] prompt, int[] ref) {
    int[] tokens = new int[prompt.length + ref.length];
    System.arraycopy(prompt, 0, tokens, 0, prompt.length);
    System.arraycopy(ref, 0, tokens, prompt.length, ref.length);
    Sequence s = new Sequence(tokens, prompt.length, ranks, layout.numGroups());
    PromptKeys keys = PromptKeys.of(layout, tokens, List.of());
    int p = layout.prefixGranularity();
    for (int page = 0; page < keys.numFullPages(); page++) {
      sources.putIfAbsent(keys.pageHash(page), new Source(s, (page + 1) * p));
    }
    int bound = prompt.length - 1;
    if (bound > 0 && bound % p != 0) {
      sources.putIfAbsent(keys.tailHash(bound), new Source(s, bound));
    }
    if (ref.length > 1) {
      unexpanded.add(s);
    }
  }

  /**
   * Null when {@code bytes} hold the reference bytes of {@code key} on rank {@code rank}; else what
   * differs.
   */
  String check(CacheKey key, int rank, MemorySegment bytes) {
    Source src = source(key.pageHash());
    if (src == null) {
      return "its hash names no prefix of any request";
    }
    int g = key.groupId();
    int bg = layout.group(g).blockGranularity();
    int p = layout.prefixGranularity();
    int first = (src.end() - 1) / p * p + key.pageOffset() * bg;
    int last = Math.min(first + bg, src.end());
    if (first >= last || bytes.byteSize() < (long) bg * rowWords * Long.BYTES) {
      return "block "
          + key.pageOffset()
          + " of a page that ends at "
          + src.end()
          + " names no rows in "
          + bytes.byteSize()
          + " bytes";
    }
    long[] rows = rows(src.sequence(), rank, g);
    for (int pos = first; pos < last; pos++) {
      for (int w = 0; w < rowWords; w++) {
        long at = model.wordOffset(bg, pos - first, w);
        long word = bytes.get(ValueLayout.JAVA_LONG_UNALIGNED, at);
        if (word != rows[pos * rowWords + w]) {
          return "the row of position "
              + pos
              + " (word "
              + w
              + ") is not the reference row of rank "
              + rank
              + ", group "
              + g;
        }
      }
    }
    return null;
  }

  private Source source(ContentHash hash) {
    Source src = sources.get(hash);
    while (src == null && !unexpanded.isEmpty()) {
      expand(unexpanded.removeLast());
      src = sources.get(hash);
    }
    return src;
  }

  /** Registers the tails of every bound a retracted submission of {@code s} may have. */
  private void expand(Sequence s) {
    int p = layout.prefixGranularity();
    PromptKeys keys = PromptKeys.of(layout, s.tokens, List.of());
    for (int bound = s.promptLength; bound < s.tokens.length - 1; bound++) {
      if (bound % p != 0) {
        sources.putIfAbsent(keys.tailHash(bound), new Source(s, bound));
      }
    }
  }

  private long[] rows(Sequence s, int rank, int group) {
    long[] r = s.rows[rank][group];
    if (r == null) {
      r = model.referenceRows(s.tokens, s.tokens.length, rank, group);
      s.rows[rank][group] = r;
    }
    return r;
  }
}

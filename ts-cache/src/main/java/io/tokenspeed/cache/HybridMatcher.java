package io.tokenspeed.cache;

import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayList;
import java.util.List;

/**
 * The hybrid matcher: the longest candidate boundary that every cache group covers.
 *
 * <p>A group covers boundary {@code B} when every row it needs there is present (see {@link
 * CacheGroupSpec#firstNeededRow}): Full history needs every row below B, a sliding window only the
 * rows holding tokens {@code [B-W+1, B-1]}, a state group only the checkpoint at B. Only Full
 * history is prefix-closed, so the answer is found as a monotone fixed point over the sorted
 * candidates:
 *
 * <pre>
 *   b := the largest candidate
 *   repeat
 *     for each group g: b := the largest candidate &lt;= b that g covers
 *   until no group lowers b
 * </pre>
 *
 * <p>b never drops below the true answer (every group covers it, so every step stops at or above
 * it) and stops only at a boundary every group covers, hence it is the answer. Full-history groups
 * are answered from one scan of their leading present rows; the other kinds are tested row by row
 * at each candidate they are asked about. Boundary 0 is always covered.
 *
 * <p>Query planning, reservation and admission all call this same code with different {@link
 * KeyPresence}s, so the three can never disagree on what a boundary needs.
 */
final class HybridMatcher {

  private HybridMatcher() {}

  /** True when group {@code g} covers boundary {@code b}: every needed row is present. */
  static boolean covers(PromptKeys keys, CacheGroupSpec g, int b, KeyPresence presence) {
    int end = g.rowsFor(b);
    for (int row = g.firstNeededRow(b); row < end; row++) {
      if (!presence.has(keys.keyOf(g.groupId(), row, b))) {
        return false;
      }
    }
    return true;
  }

  /** The keys every group needs at boundary {@code b}, group by group, row by row. */
  static List<CacheKey> neededKeys(PromptKeys keys, int b) {
    List<CacheKey> out = new ArrayList<>();
    for (CacheGroupSpec g : keys.layout().groups()) {
      int end = g.rowsFor(b);
      for (int row = g.firstNeededRow(b); row < end; row++) {
        out.add(keys.keyOf(g.groupId(), row, b));
      }
    }
    return out;
  }

  /**
   * The largest of {@code candidates} (sorted ascending, distinct, starting with a covered floor)
   * that every group covers under {@code presence}.
   */
  static int match(PromptKeys keys, int[] candidates, KeyPresence presence) {
    CacheLayout layout = keys.layout();
    int idx = candidates.length - 1;
    if (idx <= 0) {
      return candidates.length == 0 ? 0 : candidates[0];
    }
    int p = layout.prefixGranularity();
    int maxBoundary = candidates[idx];
    int[] leadingRows = new int[layout.numGroups()];
    for (CacheGroupSpec g : layout.groups()) {
      if (g.kind() instanceof GroupKind.FullHistory) {
        leadingRows[g.groupId()] = leadingAlignedRows(keys, g, maxBoundary, presence);
      }
    }
    boolean lowered = true;
    while (lowered && idx > 0) {
      lowered = false;
      for (CacheGroupSpec g : layout.groups()) {
        int before = idx;
        while (idx > 0 && !coversFast(keys, g, candidates[idx], presence, leadingRows, p)) {
          idx--;
        }
        lowered |= idx != before;
      }
    }
    return candidates[idx];
  }

  private static boolean coversFast(
      PromptKeys keys,
      CacheGroupSpec g,
      int b,
      KeyPresence presence,
      int[] leadingRows,
      int pageTokens) {
    if (!(g.kind() instanceof GroupKind.FullHistory)) {
      return covers(keys, g, b, presence);
    }
    int bg = g.blockGranularity();
    int rem = b % pageTokens;
    if (rem == 0) {
      return b / bg <= leadingRows[g.groupId()];
    }
    int alignedBelow = b - rem;
    if (alignedBelow / bg > leadingRows[g.groupId()]) {
      return false;
    }
    int end = g.rowsFor(b);
    for (int row = alignedBelow / bg; row < end; row++) {
      if (!presence.has(keys.keyOf(g.groupId(), row, b))) {
        return false;
      }
    }
    return true;
  }

  /** Leading present rows of a full group, over the full pages up to {@code maxBoundary}. */
  private static int leadingAlignedRows(
      PromptKeys keys, CacheGroupSpec g, int maxBoundary, KeyPresence presence) {
    int pageTokens = keys.layout().prefixGranularity();
    int fullPages = Math.min(maxBoundary / pageTokens, keys.numFullPages());
    int rowsPerPage = pageTokens / g.blockGranularity();
    int rows = fullPages * rowsPerPage;
    int alignedEnd = fullPages * pageTokens;
    for (int row = 0; row < rows; row++) {
      if (!presence.has(keys.keyOf(g.groupId(), row, alignedEnd))) {
        return row;
      }
    }
    return rows;
  }
}

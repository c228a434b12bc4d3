package io.tokenspeed.scheduler;

import io.tokenspeed.cache.KeyPresence;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * Which keys a query asks for, in time linear in the prompt.
 *
 * <p>The rule (specification, read transaction step 1): walk the candidate boundaries from the
 * longest down; the first whose whole set of missing keys fits the key budget is taken entirely;
 * each shorter one adds its distinct missing keys only when all of them fit. A boundary that needs
 * a key confirmed missing is skipped. "Missing" means on neither the Device nor the Host (the
 * Host-suffix rule), and "needs" is the matcher's own rule ({@link CacheGroupSpec#firstNeededRow}).
 *
 * <p>Evaluating every boundary's set from scratch would cost O(B) per boundary, O(n²) per prompt.
 * Instead the Full-history rows under page hashes are classified once, with prefix counts of
 * missing and confirmed-missing rows; per boundary only the few rows that differ — the partial page
 * of a tail, the window, the checkpoint — are looked up.
 */
final class QueryPlanner {

  private QueryPlanner() {}

  static List<CacheKey> plan(
      PromptKeys prompt, int[] cands, KeyPresence local, Set<CacheKey> negative, int maxKeys) {
    CacheLayout layout = prompt.layout();
    int p = layout.prefixGranularity();
    int maxBoundary = cands[cands.length - 1];
    int alignedMax = Math.min(maxBoundary / p, prompt.numFullPages()) * p;
    int groups = layout.numGroups();
    int[][] missPrefix = new int[groups][];
    int[][] negPrefix = new int[groups][];
    for (CacheGroupSpec g : layout.groups()) {
      if (!(g.kind() instanceof GroupKind.FullHistory)) {
        continue;
      }
      int rows = alignedMax / g.blockGranularity();
      int[] miss = new int[rows + 1];
      int[] neg = new int[rows + 1];
      for (int r = 0; r < rows; r++) {
        CacheKey k = prompt.keyOf(g.groupId(), r, alignedMax);
        boolean missing = !local.has(k);
        miss[r + 1] = miss[r] + (missing ? 1 : 0);
        neg[r + 1] = neg[r] + (missing && negative.contains(k) ? 1 : 0);
      }
      missPrefix[g.groupId()] = miss;
      negPrefix[g.groupId()] = neg;
    }
    LinkedHashSet<CacheKey> chosen = new LinkedHashSet<>();
    int[] chosenAligned = new int[groups];
    List<CacheKey> extra = new ArrayList<>();
    for (int i = cands.length - 1; i >= 1; i--) {
      int b = cands[i];
      int alignedB = b / p * p;
      extra.clear();
      int add = 0;
      boolean known = false;
      for (CacheGroupSpec g : layout.groups()) {
        int gid = g.groupId();
        int end = g.rowsFor(b);
        int first = g.firstNeededRow(b);
        if (g.kind() instanceof GroupKind.FullHistory) {
          int alignedRows = alignedB / g.blockGranularity();
          if (negPrefix[gid][alignedRows] > 0) {
            known = true;
            break;
          }
          if (chosenAligned[gid] < alignedRows) {
            add += missPrefix[gid][alignedRows] - missPrefix[gid][chosenAligned[gid]];
          }
          first = alignedRows; // only the partial page's rows remain
        }
        for (int r = first; r < end; r++) {
          CacheKey k = prompt.keyOf(gid, r, b);
          if (local.has(k) || chosen.contains(k) || extra.contains(k)) {
            continue;
          }
          if (negative.contains(k)) {
            known = true;
            break;
          }
          extra.add(k);
        }
        if (known) {
          break;
        }
      }
      add += extra.size();
      if (known || add == 0 || chosen.size() + add > maxKeys) {
        continue;
      }
      for (CacheGroupSpec g : layout.groups()) {
        if (g.kind() instanceof GroupKind.FullHistory) {
          int gid = g.groupId();
          int alignedRows = alignedB / g.blockGranularity();
          for (int r = chosenAligned[gid]; r < alignedRows; r++) {
            CacheKey k = prompt.keyOf(gid, r, alignedMax);
            if (!local.has(k)) {
              chosen.add(k);
            }
          }
          chosenAligned[gid] = Math.max(chosenAligned[gid], alignedRows);
        }
      }
      chosen.addAll(extra);
    }
    return new ArrayList<>(chosen);
  }
}

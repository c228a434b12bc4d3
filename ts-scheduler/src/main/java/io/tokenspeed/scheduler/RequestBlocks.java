package io.tokenspeed.scheduler;

import io.tokenspeed.cache.Admission;
import io.tokenspeed.cache.TierCache;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import java.util.Arrays;

/**
 * A running request's Device block table, grown as it decodes. It starts as the admission's tables;
 * the request owns one reference on every non-zero entry and drops them all on release.
 *
 * <pre>
 *   Full / SWA:  row i covers tokens [i*bg, (i+1)*bg); rows are added as the sequence grows; SWA
 *                rows that fell wholly out of the window are released (set to 0)
 *   State:       [input checkpoint, working block] (the two-slot contract); never grows
 * </pre>
 */
final class RequestBlocks {

  private final CacheLayout layout;
  private final TierCache device;
  private final int[][] rows;
  final Admission admission;

  /** How many times {@link #rows} changed since the admission (grown, or window rows released). */
  private int changes;

  RequestBlocks(CacheLayout layout, TierCache device, Admission admission) {
    this.layout = layout;
    this.device = device;
    this.admission = admission;
    this.rows = new int[layout.numGroups()][];
    for (int g = 0; g < rows.length; g++) {
      rows[g] = admission.tables()[g].clone();
    }
  }

  /**
   * Makes room for {@code numTokens} tokens. Returns false, taking nothing, when the Device cannot
   * hold the new rows even after evicting cached blocks.
   */
  boolean ensureCapacity(int numTokens) {
    int[] needs = new int[rows.length];
    boolean any = false;
    for (CacheGroupSpec g : layout.groups()) {
      if (!(g.kind() instanceof GroupKind.StateCheckpoints)) {
        needs[g.groupId()] = Math.max(0, g.rowsFor(numTokens) - rows[g.groupId()].length);
        any |= needs[g.groupId()] > 0;
      }
    }
    if (!any) {
      return true;
    }
    int[][] fresh = device.allocate(needs);
    if (fresh == null) {
      return false;
    }
    for (int g = 0; g < rows.length; g++) {
      if (needs[g] > 0) {
        int old = rows[g].length;
        int[] grown = Arrays.copyOf(rows[g], old + needs[g]);
        System.arraycopy(fresh[g], 0, grown, old, needs[g]);
        rows[g] = grown;
      }
    }
    changes++;
    return true;
  }

  /** Releases window rows no later token can attend to, once {@code numTokens} are computed. */
  void slideWindows(int numTokens) {
    for (CacheGroupSpec g : layout.groups()) {
      if (g.kind() instanceof GroupKind.SlidingWindow(int w)) {
        int firstKept = g.firstNeededRow(numTokens);
        int[] r = rows[g.groupId()];
        for (int i = 0; i < Math.min(firstKept, r.length); i++) {
          if (r[i] != 0) {
            device.unref(r[i]);
            r[i] = 0;
            changes++;
          }
        }
      }
    }
  }

  /** Changes of the table since the admission: equal counts, equal tables. */
  int changes() {
    return changes;
  }

  /**
   * Publishes the rows of full pages below {@code computed} that this request wrote, so later
   * requests (and this one after a retraction) hit them. Rows already published (hits, loads) and
   * rows another request published first stay as they are.
   */
  void publishComputed(PromptKeys prompt, int computed) {
    int p = layout.prefixGranularity();
    int alignedEnd = Math.min(computed, prompt.numFullPages() * p) / p * p;
    for (CacheGroupSpec g : layout.groups()) {
      if (g.kind() instanceof GroupKind.StateCheckpoints) {
        continue; // the working slot keeps changing; checkpoints publish through the engine
      }
      int[] r = rows[g.groupId()];
      int bg = g.blockGranularity();
      for (int i = 0; i < r.length && (i + 1) * bg <= alignedEnd; i++) {
        int b = r[i];
        if (b != 0
            && device.keyOf(b) == null
            && !device.isWithdrawn(b)
            && device.pool().refCount(b) == 1) {
          CacheKey key = prompt.keyOf(g.groupId(), i, alignedEnd);
          device.noteWrite(b);
          device.publish(key, b);
        }
      }
    }
  }

  /** Drops every reference. */
  void release() {
    for (int[] r : rows) {
      for (int i = 0; i < r.length; i++) {
        if (r[i] != 0) {
          device.unref(r[i]);
          r[i] = 0;
        }
      }
    }
  }

  /** The non-zero blocks (for the invariant checker). */
  int[][] rows() {
    return rows;
  }
}

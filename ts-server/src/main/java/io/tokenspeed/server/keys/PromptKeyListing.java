package io.tokenspeed.server.keys;

import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.ObjectKey;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * Every L3 object key that a request for one prompt could read or write on one attention-TP rank:
 * the operator's view of "what would this prompt touch in the shared store".
 *
 * <p>Boundaries considered, in increasing order: every P-aligned boundary {@code B = kP <= len}
 * (the full pages of the prompt, which a request publishes after computing them), then the exact
 * reusable bound {@code len - 1} when it is a tail (not a multiple of P), which is the one tail a
 * cold replica may probe. At each boundary, each group contributes the rows it needs to cover
 * {@code B}:
 *
 * <pre>
 *   tokens          0                                  B-W+1            B-1 | B
 *   Full history    [row 0][row 1] ...                                [row] |   all rows below B
 *   SWA window W                                 [row][row] ... [row][row]  |   rows holding
 *                                                                           |   [B-W+1, B-1]
 *   State                                                          [ckpt]   |   the checkpoint at B
 * </pre>
 *
 * <p>A row of a full page has the same key at every boundary above it, so rows repeat across
 * boundaries; each key is listed once, at the first (smallest) boundary that needs it. Rows of the
 * partial page at a tail are named by the tail's hash, so they never collide with full-page rows.
 *
 * <p>Keys come from {@link PromptKeys} and {@link ObjectKey#forRank}: this class decides only which
 * rows matter, never how they are named.
 */
public record PromptKeyListing(Namespace namespace, List<Entry> entries) {

  public PromptKeyListing {
    entries = List.copyOf(entries);
  }

  /**
   * One object key of the listing.
   *
   * @param boundary the first boundary that needs the object
   * @param group the cache group
   * @param row the block row inside the request ({@code [row*bg, (row+1)*bg)})
   * @param key the store key, for {@code attentionTpRank}
   */
  public record Entry(int boundary, CacheGroupSpec group, int row, ObjectKey key) {}

  /**
   * The boundaries of the listing, increasing: aligned ones up to the prompt length and the tail.
   */
  private static List<Integer> boundaries(PromptKeys keys) {
    int p = keys.layout().prefixGranularity();
    List<Integer> out = new ArrayList<>();
    for (int b = p; b <= keys.numTokens(); b += p) {
      out.add(b);
    }
    int bound = keys.reusableBound();
    if (bound >= 1 && !keys.aligned(bound)) {
      // Below the last aligned boundary when the prompt ends on a page boundary.
      out.add(bound);
      out.sort(null);
    }
    return out;
  }

  /** Lists the keys of {@code keys} under {@code identity} for one attention-TP rank. */
  public static PromptKeyListing of(
      DeploymentIdentity identity, PromptKeys keys, int attentionTpRank) {
    CacheLayout layout = identity.layout();
    if (!layout.equals(keys.layout())) {
      throw new IllegalArgumentException("prompt keys were computed for another cache layout");
    }
    if (attentionTpRank < 0 || attentionTpRank >= identity.attentionTpSize()) {
      throw new IllegalArgumentException(
          "rank="
              + attentionTpRank
              + " must be in [0, "
              + identity.attentionTpSize()
              + ") for attention_tp_size="
              + identity.attentionTpSize());
    }
    Namespace namespace = Namespace.of(identity);
    List<Entry> out = new ArrayList<>();
    Set<ObjectKey> seen = new HashSet<>();
    for (int boundary : boundaries(keys)) {
      for (CacheGroupSpec group : layout.groups()) {
        int firstRow = firstRow(group, boundary, layout.prefixGranularity());
        int endRow = group.rowsFor(boundary);
        for (int row = firstRow; row < endRow; row++) {
          CacheKey cacheKey = keys.keyOf(group.groupId(), row, boundary);
          ObjectKey key = ObjectKey.forRank(namespace, cacheKey, group, attentionTpRank);
          if (seen.add(key)) {
            out.add(new Entry(boundary, group, row, key));
          }
        }
      }
    }
    return new PromptKeyListing(namespace, out);
  }

  /**
   * The first row worth visiting at {@code boundary}: the group's own rule ({@link
   * CacheGroupSpec#firstNeededRow}), except that a full group's rows below the previous page
   * boundary were already listed there under the same page hashes, so they are skipped and the
   * listing stays linear in the prompt length.
   */
  private static int firstRow(CacheGroupSpec group, int boundary, int p) {
    int first = group.firstNeededRow(boundary);
    if (group.kind() instanceof GroupKind.FullHistory) {
      first = Math.max(first, (boundary - 1) / p * p / group.blockGranularity());
    }
    return first;
  }
}

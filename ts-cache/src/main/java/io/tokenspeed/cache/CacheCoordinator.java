package io.tokenspeed.cache;

import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayList;
import java.util.List;

/**
 * The owner of the local cache of one rank: the Device and Host {@link TierCache}s, the {@link
 * TailTable}, and the one matcher every decision goes through.
 *
 * <p>What it guarantees:
 *
 * <ul>
 *   <li>Every hit — Device probe, Host extension, query planning with L3 existence assumptions,
 *       admission — comes from the same {@link HybridMatcher}: a boundary counts only when every
 *       group covers it (Full history below it, the window just below it, the state checkpoint at
 *       it). A tail hint never makes a hit on its own.
 *   <li>The Host extends the Device floor: the probe first matches the Device alone, then the
 *       Device and Host together, so a Host row is only used above or beside what the Device holds.
 *   <li>Admission is all-or-nothing: it pins what it reuses, allocates everything else, or takes
 *       nothing and returns null. Published blocks are never handed out for writing; a partial
 *       block at a tail is copied into a private block first (copy-on-write).
 *   <li>Query planning allocates nothing.
 *   <li>After a full {@link #clear} nothing from before it can be found: every index of both tiers
 *       is empty and the tail hints are gone. A block somebody still holds (a PUT's source, a
 *       quarantined reference, a running request's row, a copy's source) is withdrawn rather than
 *       freed — it keeps its memory for its holders and is freed with their last reference — and an
 *       admission made before the clear publishes nothing after it.
 * </ul>
 *
 * <p>Single-threaded: owned by the event loop. It holds no locks and must never be called from an
 * I/O worker.
 */
public final class CacheCoordinator {

  private final CacheLayout layout;
  private final TierCache device;
  private final TierCache host;
  private final TailTable tails;

  /** Full clears so far; an admission remembers the count it was made under. */
  private long clears;

  public CacheCoordinator(
      CacheLayout layout, int deviceParents, int hostParents, int tailTableCapacity) {
    this.layout = layout;
    this.device = new TierCache(Tier.DEVICE, layout, deviceParents);
    this.host = new TierCache(Tier.HOST, layout, hostParents);
    this.tails = new TailTable(tailTableCapacity);
  }

  public CacheLayout layout() {
    return layout;
  }

  /** The Device tier (L1). */
  public TierCache device() {
    return device;
  }

  /** The Host tier (L2). */
  public TierCache host() {
    return host;
  }

  /**
   * Sets who hears both tiers' publications and removals ({@link TierListener}); null for nobody.
   */
  public void tierListener(TierListener listener) {
    device.listener(listener);
    host.listener(listener);
  }

  /** The tier of the given kind. */
  public TierCache tier(Tier tier) {
    return tier == Tier.DEVICE ? device : host;
  }

  /** The local tail hints. */
  public TailTable tails() {
    return tails;
  }

  /**
   * The boundaries a match considers in {@code [floor, max]}, ascending: {@code floor} itself (the
   * caller's already covered fallback), every multiple of P above it, every recorded tail of this
   * prompt, and the exact reusable bound when it lies in range and is not a multiple of P.
   */
  public int[] candidates(PromptKeys keys, int floor, int max) {
    checkPrompt(keys);
    if (floor < 0 || max < floor || max > keys.reusableBound()) {
      throw new IllegalArgumentException(
          "candidate range floor="
              + floor
              + " max="
              + max
              + " must satisfy 0 <= floor <= max <= reusable bound "
              + keys.reusableBound());
    }
    int p = layout.prefixGranularity();
    int[] hints = tails.hintsFor(keys, floor, max);
    int bound = keys.reusableBound();
    boolean boundIsTail = bound > floor && bound <= max && bound % p != 0;
    int firstAligned = floor / p + 1;
    int lastAligned = max / p;
    int aligned = Math.max(0, lastAligned - firstAligned + 1);
    int[] out = new int[1 + aligned + hints.length + (boundIsTail ? 1 : 0)];
    int n = 0;
    out[n++] = floor;
    for (int k = firstAligned; k <= lastAligned; k++) {
      out[n++] = k * p;
    }
    System.arraycopy(hints, 0, out, n, hints.length);
    n += hints.length;
    if (boundIsTail) {
      out[n++] = bound;
    }
    java.util.Arrays.sort(out);
    return distinct(out);
  }

  /**
   * The Device hit, and its extension with Host blocks, for a request reusing at most {@code max}.
   */
  public Probe probe(PromptKeys keys, int max) {
    int[] candidates = candidates(keys, 0, max);
    int deviceHit = HybridMatcher.match(keys, candidates, device::contains);
    int hostHit = HybridMatcher.match(keys, candidates, deviceOrHost());
    return new Probe(deviceHit, Math.max(deviceHit, hostHit));
  }

  /**
   * The longest candidate every group covers when the blocks in {@code assumed} are taken to exist
   * (besides the Device and Host entries). Query planning passes L3 existence assumptions here;
   * nothing is allocated or pinned.
   */
  public int matchAssuming(PromptKeys keys, int[] candidates, KeyPresence assumed) {
    checkPrompt(keys);
    return HybridMatcher.match(keys, candidates, deviceOrHost().or(assumed));
  }

  /** Every key the groups need at {@code boundary}, as the matcher checks them. */
  public List<CacheKey> neededKeys(PromptKeys keys, int boundary) {
    checkPrompt(keys);
    return HybridMatcher.neededKeys(keys, boundary);
  }

  /**
   * The tail object at {@code boundary} (not a multiple of P): the keys the groups need there that
   * lie in its partial page, all named by the tail's hash, in {@link #neededKeys} order. The rest
   * of what a restore at the tail needs is named by full page hashes and belongs to the aligned
   * boundaries below it.
   *
   * <pre>
   *   |-- page 0 --|-- page 1 --|-- partial page: tokens [B - B mod P, B) --|
   *    page keys     page keys    Full rows, window rows, the checkpoint at B
   *                               under tailHash(B); the last row may hold fewer
   *                               than bg tokens of the tail (copy-on-write)
   * </pre>
   */
  public List<CacheKey> tailKeys(PromptKeys keys, int boundary) {
    checkPrompt(keys);
    var hash = keys.tailHash(boundary);
    List<CacheKey> out = new ArrayList<>();
    for (CacheKey k : HybridMatcher.neededKeys(keys, boundary)) {
      if (k.pageHash().equals(hash)) {
        out.add(k);
      }
    }
    return out;
  }

  /**
   * The keys needed at {@code boundary} that neither the Device nor the Host holds: exactly what a
   * query to L3 asks for (the Host-suffix rule — what the Device holds below the split is never
   * read again, and Host entries are not read twice).
   */
  public List<CacheKey> missingKeys(PromptKeys keys, int boundary) {
    List<CacheKey> out = new ArrayList<>();
    KeyPresence local = deviceOrHost();
    for (CacheKey k : neededKeys(keys, boundary)) {
      if (!local.has(k)) {
        out.add(k);
      }
    }
    return out;
  }

  /**
   * Admits a request: matches the real Device and Host again, reuses at most {@code maxReuse}
   * tokens, and allocates Device blocks for {@code newTokens} more. Returns null, changing no
   * reference, when the Device cannot hold it even after evicting every cached block.
   */
  public Admission admit(PromptKeys keys, int maxReuse, int newTokens) {
    if (newTokens < 1) {
      throw new IllegalArgumentException("new_tokens=" + newTokens + " must be at least 1");
    }
    Probe probe = probe(keys, maxReuse);
    return admitProbed(keys, probe, probe.hostHit() + newTokens);
  }

  /**
   * Like {@link #admit}, with Device blocks for every token up to {@code endTokens} (at least one
   * token past the reused prefix): the caller sizes the table in absolute tokens without probing
   * first.
   */
  public Admission admitUpTo(PromptKeys keys, int maxReuse, int endTokens) {
    Probe probe = probe(keys, maxReuse);
    if (endTokens <= probe.hostHit()) {
      throw new IllegalArgumentException(
          "end_tokens=" + endTokens + " must exceed the reused prefix " + probe.hostHit());
    }
    return admitProbed(keys, probe, endTokens);
  }

  private Admission admitProbed(PromptKeys keys, Probe probe, int end) {
    int hit = probe.hostHit();
    int groups = layout.numGroups();
    List<RowPlan> plans = new ArrayList<>();
    int[] needs = new int[groups];
    int[][] tables = new int[groups][];
    for (CacheGroupSpec g : layout.groups()) {
      int gid = g.groupId();
      boolean state = g.kind() instanceof GroupKind.StateCheckpoints;
      tables[gid] = new int[state ? 2 : g.rowsFor(end)];
      int rowsAtHit = g.rowsFor(hit);
      boolean partialTail = !state && hit % g.blockGranularity() != 0;
      boolean partialPlanned = false;
      for (int row = g.firstNeededRow(hit); row < rowsAtHit; row++) {
        CacheKey key = keys.keyOf(gid, row, hit);
        int slot = state ? 0 : row;
        int d = device.lookup(key);
        boolean partial = partialTail && row == rowsAtHit - 1;
        partialPlanned |= partial;
        if (d != 0 && !partial) {
          plans.add(new RowPlan(gid, slot, row, key, Tier.DEVICE, d, false, false));
        } else {
          int src = d != 0 ? d : host.lookup(key);
          Tier srcTier = d != 0 ? Tier.DEVICE : Tier.HOST;
          if (src == 0) {
            throw new IllegalStateException(
                "matched boundary " + hit + " but " + key + " is in neither tier");
          }
          plans.add(new RowPlan(gid, slot, row, key, srcTier, src, true, !partial));
          needs[gid]++;
        }
      }
      if (state) {
        needs[gid]++; // the working slot
      } else {
        // rows from the one holding token `hit` on are written by this request
        needs[gid] += tables[gid].length - hit / g.blockGranularity() - (partialPlanned ? 1 : 0);
      }
    }
    for (RowPlan plan : plans) {
      tier(plan.srcTier()).ref(plan.src());
    }
    int[][] fresh = device.allocate(needs);
    if (fresh == null) {
      for (RowPlan plan : plans) {
        tier(plan.srcTier()).unref(plan.src());
      }
      return null;
    }
    int[] used = new int[groups];
    List<BlockCopy> copies = new ArrayList<>();
    for (RowPlan plan : plans) {
      int g = plan.groupId();
      if (!plan.copy()) {
        tables[g][plan.slot()] = plan.src();
        continue;
      }
      int dst = fresh[g][used[g]++];
      tables[g][plan.slot()] = dst;
      copies.add(
          new BlockCopy(
              g, plan.row(), plan.srcTier(), plan.src(), dst, plan.key(), plan.publish()));
    }
    for (CacheGroupSpec g : layout.groups()) {
      int gid = g.groupId();
      if (g.kind() instanceof GroupKind.StateCheckpoints) {
        tables[gid][1] = fresh[gid][used[gid]++];
      } else {
        for (int row = hit / g.blockGranularity(); row < tables[gid].length; row++) {
          if (tables[gid][row] == 0) {
            tables[gid][row] = fresh[gid][used[gid]++];
          }
        }
      }
    }
    return new Admission(hit, probe.deviceHit(), tables, List.copyOf(copies), clears);
  }

  /**
   * Admits a retracted request from its exact {@link RetractionImage}: every image block is loaded
   * into a fresh private Device block (never published: the request goes on writing the partial row
   * and the running state), and fresh blocks are allocated up to {@code endTokens}. The admission's
   * hit is the image's tokens, none of them from the Device. The image's Host references become the
   * copies' source references, dropped by {@link #finishCopies}. Returns null, changing nothing,
   * when the Device cannot hold it even after evicting every cached block.
   */
  public Admission admitImage(RetractionImage image, int endTokens) {
    int hit = image.tokens();
    if (endTokens <= hit) {
      throw new IllegalArgumentException(
          "end_tokens=" + endTokens + " must exceed the image's " + hit + " tokens");
    }
    int groups = layout.numGroups();
    int[] needs = new int[groups];
    int[][] tables = new int[groups][];
    for (CacheGroupSpec g : layout.groups()) {
      int gid = g.groupId();
      int[] rows = image.hostBlocks()[gid];
      boolean state = g.kind() instanceof GroupKind.StateCheckpoints;
      if (rows.length != (state ? 1 : g.rowsFor(hit)) || (state && rows[0] == 0)) {
        throw new IllegalArgumentException(
            "group " + gid + " of an image of " + hit + " tokens has " + rows.length + " rows");
      }
      tables[gid] = new int[state ? 2 : g.rowsFor(endTokens)];
      for (int b : rows) {
        if (b != 0) {
          needs[gid]++;
        }
      }
      needs[gid] += state ? 1 : tables[gid].length - rows.length;
    }
    int[][] fresh = device.allocate(needs);
    if (fresh == null) {
      return null;
    }
    int[] used = new int[groups];
    List<BlockCopy> copies = new ArrayList<>();
    for (CacheGroupSpec g : layout.groups()) {
      int gid = g.groupId();
      int[] rows = image.hostBlocks()[gid];
      boolean state = g.kind() instanceof GroupKind.StateCheckpoints;
      for (int row = 0; row < rows.length; row++) {
        if (rows[row] != 0) {
          int dst = fresh[gid][used[gid]++];
          tables[gid][row] = dst;
          copies.add(new BlockCopy(gid, row, Tier.HOST, rows[row], dst, null, false));
        }
      }
      int from = state ? 1 : g.rowsFor(hit);
      for (int row = from; row < tables[gid].length; row++) {
        if (tables[gid][row] == 0) {
          tables[gid][row] = fresh[gid][used[gid]++];
        }
      }
    }
    return new Admission(hit, 0, tables, List.copyOf(copies), clears);
  }

  /**
   * Called once the data plane has performed (or abandoned) an admission's copies: publishes each
   * loaded Device block that is a plain copy of its key (when {@code completed}), and drops the
   * references held on the sources.
   */
  public void finishCopies(Admission admission, boolean completed) {
    boolean publish = completed && isCurrent(admission);
    for (BlockCopy c : admission.copies()) {
      if (publish && c.publishOnComplete() && !device.contains(c.key())) {
        device.publish(c.key(), c.dstBlock());
      }
      tier(c.srcTier()).unref(c.srcBlock());
    }
  }

  /** Drops the request's references on its whole block table. */
  public void release(Admission admission) {
    for (int[] table : admission.tables()) {
      for (int b : table) {
        if (b != 0) {
          device.unref(b);
        }
      }
    }
  }

  /**
   * A full clear (a cache reset, namespace rotation or weight update): afterwards no probe, match
   * or admission finds anything published before it. In both tiers every cached block is evicted
   * and every block still referenced — by a storage ticket (a PUT's source, a quarantined
   * reference), by a running request's table or by a copy in flight — is unpublished: withdrawn
   * from its index but left allocated for its holders, who keep using it, and freed with their last
   * reference. The tail hints are forgotten. Admissions made before the clear publish nothing after
   * it ({@link #isCurrent}). Costs a walk over both tiers' block ids; it allocates nothing.
   */
  public void clear() {
    clears++;
    device.unpublishAll();
    host.unpublishAll();
    tails.clear();
  }

  /** Full clears so far. */
  public long clears() {
    return clears;
  }

  /**
   * True when {@code admission} was made after the last full clear; only such an admission may
   * publish what it loads or computes (an older one's rows are its own until released).
   */
  public boolean isCurrent(Admission admission) {
    return admission.clearEpoch() == clears;
  }

  /** Records that this replica published Host data under the tail ending at {@code boundary}. */
  public void recordTail(PromptKeys keys, int boundary) {
    checkPrompt(keys);
    tails.record(keys, boundary);
  }

  private KeyPresence deviceOrHost() {
    return key -> device.contains(key) || host.contains(key);
  }

  private void checkPrompt(PromptKeys keys) {
    if (keys.layout() != layout && !keys.layout().equals(layout)) {
      throw new IllegalArgumentException("prompt keys were made for another cache layout");
    }
  }

  private static int[] distinct(int[] sorted) {
    int n = 0;
    for (int i = 0; i < sorted.length; i++) {
      if (i == 0 || sorted[i] != sorted[i - 1]) {
        sorted[n++] = sorted[i];
      }
    }
    return java.util.Arrays.copyOf(sorted, n);
  }

  /** One reused row: pinned in place, or copied from {@code src} into a fresh Device block. */
  private record RowPlan(
      int groupId,
      int slot,
      int row,
      CacheKey key,
      Tier srcTier,
      int src,
      boolean copy,
      boolean publish) {}
}

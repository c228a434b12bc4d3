package io.tokenspeed.engine;

import io.tokenspeed.cache.Admission;
import io.tokenspeed.cache.BlockPool;
import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.cache.RetractionImage;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.scheduler.Scheduler;
import io.tokenspeed.scheduler.StorageCounters;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * What the loop copies to the Host besides the scheduler's demotions: the exact images of retracted
 * requests, and, with L3, the write-through of finished prefixes and of their exact tails.
 *
 * <ul>
 *   <li>An image goes Device → Host into private Host blocks the request holds; it is never
 *       published, matched or evicted, and only that request's next admission loads it.
 *   <li>A written-through page goes Device → Host into a private Host block and is published under
 *       its content key only once its copy completed; a published Host block becomes a backup
 *       candidate for L3.
 *   <li>A finished prompt whose reusable bound B is not a multiple of P also writes its tail
 *       object: the rows of the partial page below B ({@link CacheCoordinator#tailKeys}), taken
 *       from the request's own block table (they are private, or published under a full page's key)
 *       and pinned from its end until the next round copies them. They go the way of any
 *       written-through page: a private Host block, published under the tail key once copied, a
 *       backup candidate, a create-only PUT, except that a tail takes only free Host room. Only
 *       layouts without State groups write tails: the forward runs the last chunk through the last
 *       prompt token, so no checkpoint at B exists.
 * </ul>
 *
 * <p>It never overwrites a published block and never publishes a block whose copy has not
 * completed.
 */
final class HostPublication {
  private final CacheLayout layout;
  private final CacheCoordinator cache;
  private final Scheduler scheduler;
  private final Map<Long, ActiveRequest> active;

  /** The storage transfer manager with L3, else null (and nothing is written through). */
  private final StorageTransferManager stm;

  /** Keys of finished requests to write through to the Host in the next round (with L3). */
  private final List<CacheKey> backups = new ArrayList<>();

  /** Tails of finished requests to write through in the next round, their blocks pinned. */
  private final List<Tail> tails = new ArrayList<>();

  /** No group keeps State checkpoints: a tail's every key is a row the request computed. */
  private final boolean tailsWritable;

  private long imageBlocks;

  /** Every group keeps full history: a shorter boundary needs nothing the longest does not. */
  private final boolean historyOnly;

  /**
   * A finished request's page copied to a private Host block, to publish there once copied; its
   * published Device block stays pinned until then.
   */
  record ImagePage(CacheKey key, int hostBlock, int deviceBlock) {}

  /** A finished prompt's tail object: its keys and the Device blocks holding them, pinned. */
  private record Tail(List<CacheKey> keys, int[] deviceBlocks) {}

  HostPublication(
      CacheLayout layout,
      CacheCoordinator cache,
      Scheduler scheduler,
      StorageTransferManager stm,
      Map<Long, ActiveRequest> active) {
    this.layout = layout;
    this.cache = cache;
    this.scheduler = scheduler;
    this.active = active;
    this.stm = stm;
    this.historyOnly =
        layout.groups().stream().allMatch(g -> g.kind() instanceof GroupKind.FullHistory);
    this.tailsWritable =
        layout.groups().stream().noneMatch(g -> g.kind() instanceof GroupKind.StateCheckpoints);
  }

  /** Image blocks of retracted requests saved to the Host since start. */
  long imageBlocks() {
    return imageBlocks;
  }

  /** Whether finished prefixes wait to be written through. */
  boolean backupsPending() {
    return !backups.isEmpty() || !tails.isEmpty();
  }

  /** Forgets the prefixes waiting for write-through and unpins their tails (a full clear). */
  void clearBackups() {
    backups.clear();
    for (Tail t : tails) {
      unpin(t);
    }
    tails.clear();
  }

  private void unpin(Tail t) {
    for (int b : t.deviceBlocks()) {
      cache.device().unref(b);
    }
  }

  /** The Device references pinned for tails waiting for write-through (the invariant checkers). */
  List<HeldBlock> heldBlocks() {
    List<HeldBlock> out = new ArrayList<>();
    for (Tail t : tails) {
      for (int b : t.deviceBlocks()) {
        out.add(new HeldBlock(Tier.DEVICE, b));
      }
    }
    return out;
  }

  /**
   * With L3: what a request that just finished computed goes to the Host in the next round — every
   * key a restore at its longest full boundary needs, then, for a model with sliding windows or
   * State, the windows and checkpoints of each shorter aligned boundary, longest first: a later
   * prompt that shares only a shorter prefix restores at that boundary (the specification's shorter
   * fallback boundaries). Full history below a boundary is part of the longest one's keys. Then the
   * tail object at its reusable bound, when that bound is not a multiple of P.
   */
  void writeThroughLater(ActiveRequest a) {
    int p = layout.prefixGranularity();
    int longest = a.keys.numFullPages() * p;
    if (longest > 0) {
      Set<CacheKey> keys = new LinkedHashSet<>(cache.neededKeys(a.keys, longest));
      if (!historyOnly) {
        for (int b = longest - p; b >= p; b -= p) {
          keys.addAll(cache.neededKeys(a.keys, b));
        }
      }
      backups.addAll(keys);
    }
    writeTailLater(a);
  }

  /**
   * Pins the rows of the tail object at the prompt's reusable bound, when that bound is not a
   * multiple of P, for the next round's write-through: called before the request's blocks go back.
   * Nothing is pinned when a row is gone (a window that slid past it) or the request was admitted
   * before a full clear (what it computed is published nowhere).
   */
  private void writeTailLater(ActiveRequest a) {
    int bound = a.keys.reusableBound();
    if (!tailsWritable || bound == 0 || a.keys.aligned(bound)) {
      return;
    }
    Admission admission = scheduler.admission(a.id);
    int[][] rows = scheduler.blockTables(a.id);
    if (admission == null || rows == null || !cache.isCurrent(admission)) {
      return;
    }
    List<CacheKey> keys = cache.tailKeys(a.keys, bound);
    int pageStart = bound / layout.prefixGranularity() * layout.prefixGranularity();
    int[] blocks = new int[keys.size()];
    for (int i = 0; i < blocks.length; i++) {
      CacheKey key = keys.get(i);
      int row = pageStart / layout.group(key.groupId()).blockGranularity() + key.pageOffset();
      int[] table = rows[key.groupId()];
      blocks[i] = row < table.length ? table[row] : 0;
      if (blocks[i] == 0) {
        return;
      }
    }
    for (int b : blocks) {
      cache.device().ref(b);
    }
    tails.add(new Tail(keys, blocks));
  }

  /**
   * A planted bug for the engine's simulation (never set outside its tests): a victim keeps what it
   * knew of its Device KV after its retraction.
   */
  private boolean plantedKeepsVictimKv;

  /** Plants the bug above (the simulation's planted-bug tests only). */
  void plantKeepVictimKv() {
    plantedKeepsVictimKv = true;
  }

  /**
   * The exact images of the requests this round retracted (the specification's retraction through
   * the Host executor): for each, every Device block it needs to go on from the tokens it computed
   * — the rows of its history and window groups, the partial last row included, and its State
   * groups' running state — is copied D2H into private Host blocks it holds ({@link
   * RetractionImage}), and its admission later loads them back byte for byte, so it computes
   * nothing again. Adds the copies to {@code ops}, which must run before this round's Device copies
   * and forward: the retracted blocks may already belong to another request. The image is all or
   * nothing: when the Host cannot hold it, the request keeps none and recomputes through ordinary
   * admission. Each victim's image waits in {@link ActiveRequest#image} until the loop hands it to
   * the scheduler, after the copies completed.
   */
  void saveRetractedImages(List<BlockTransfer> ops) {
    for (Scheduler.RetractedBlocks rb : scheduler.retractedThisRound()) {
      ActiveRequest a = active.get(rb.requestId());
      if (a == null) {
        continue;
      }
      int tokens = a.kvTokens;
      boolean working = a.stateInWorkingSlot;
      // every victim forgets its Device KV, whether or not it keeps an image: a request retracted
      // again before its next forward holds blocks that were never written for its keys
      if (!plantedKeepsVictimKv) {
        a.kvTokens = 0;
        a.admission = null;
        a.stateInWorkingSlot = false;
      }
      if (tokens == 0 || tokens >= a.known || a.image != null) {
        continue; // nothing computed since its last admission (which keeps its image, if any)
      }
      int[][] sources = imageSources(rb.rows(), tokens, working);
      int[] needs = new int[layout.numGroups()];
      for (int g = 0; sources != null && g < sources.length; g++) {
        for (int b : sources[g]) {
          needs[g] += b != 0 ? 1 : 0;
        }
      }
      int[][] dst = sources == null ? null : cache.host().allocate(needs);
      if (dst == null) {
        continue; // recomputed through ordinary admission
      }
      int[][] blocks = new int[sources.length][];
      int[] used = new int[sources.length];
      for (int g = 0; g < sources.length; g++) {
        blocks[g] = new int[sources[g].length];
        for (int r = 0; r < sources[g].length; r++) {
          if (sources[g][r] != 0) {
            blocks[g][r] = dst[g][used[g]++];
            ops.add(new BlockTransfer.Store(g, sources[g][r], blocks[g][r]));
            imageBlocks++;
          }
        }
      }
      a.image = new RetractionImage(tokens, blocks);
    }
  }

  /**
   * The Device blocks an image of {@code tokens} computed tokens copies, per group as {@link
   * RetractionImage} lays them out, from the table the request held; null when a needed row is
   * missing.
   */
  private int[][] imageSources(int[][] rows, int tokens, boolean stateInWorkingSlot) {
    int[][] out = new int[layout.numGroups()][];
    for (var g : layout.groups()) {
      int gid = g.groupId();
      int[] held = rows[gid];
      if (g.kind() instanceof GroupKind.StateCheckpoints) {
        int running = stateInWorkingSlot ? held[1] : held[0];
        if (running == 0) {
          return null;
        }
        out[gid] = new int[] {running};
        continue;
      }
      out[gid] = new int[g.rowsFor(tokens)];
      for (int r = g.firstNeededRow(tokens); r < out[gid].length; r++) {
        if (r >= held.length || held[r] == 0) {
          return null;
        }
        out[gid][r] = held[r];
      }
    }
    return out;
  }

  /** Drops the Host references of an image nobody took. */
  void dropImage(RetractionImage image) {
    for (int b : image.blocks()) {
      cache.host().unref(b);
    }
  }

  /**
   * With L3, the prefix of every finished request goes to the Host as soon as it finishes (so that
   * it becomes a backup candidate, not only under Device pressure): each key of its longest full
   * boundary that the Device has published and the Host lacks, and each row of its tail the Host
   * lacks, is copied D2H with this round's demotions. The Device source stays pinned until the copy
   * is done.
   */
  List<ImagePage> writeThrough(List<BlockTransfer> ops) {
    if (!backupsPending()) {
      return List.of();
    }
    List<ImagePage> pages = new ArrayList<>();
    int unavailable = 0;
    boolean hostFull = false;
    for (CacheKey key : backups) {
      if (cache.host().contains(key)) {
        continue; // on the Host already: its publication offered it
      }
      int b = cache.device().lookup(key);
      if (b == 0 || hostFull || !copyToHost(key, b, ops, pages)) {
        hostFull |= b != 0; // the Host is full of referenced blocks: the rest stay local
        unavailable++;
      }
    }
    backups.clear();
    for (Tail t : tails) {
      writeTail(t, ops, pages);
      unpin(t); // each copy holds its own pin
    }
    tails.clear();
    if (unavailable > 0) {
      stm.onBackupsDropped(StorageCounters.DropReason.UNAVAILABLE, unavailable);
    }
    return pages;
  }

  /**
   * Copies the rows of a tail the Host lacks, all of them or none, into free Host room only, and
   * only while more than half of the Host tier's parents are free: a tail never evicts a cached
   * block, and it leaves the pages of later rounds the room they need. Most tails belong to one
   * prompt alone, while what eviction would take are pages many prompts share, or the room a
   * restore is about to need; and a written tail holds its Host blocks until its PUT is done. A
   * tail that finds no such room is simply not written (best effort beside the pages, not counted
   * as a dropped backup).
   */
  private void writeTail(Tail t, List<BlockTransfer> ops, List<ImagePage> pages) {
    int[] needs = new int[layout.numGroups()];
    for (CacheKey k : t.keys()) {
      needs[k.groupId()] += cache.host().contains(k) ? 0 : 1;
    }
    BlockPool pool = cache.host().pool();
    if (pool.freeParents() <= pool.numParents() / 2 || !pool.canAcquire(needs)) {
      return; // the pages come first: they need the room more than one prompt's tail does
    }
    for (int i = 0; i < t.keys().size(); i++) {
      CacheKey k = t.keys().get(i);
      if (!cache.host().contains(k)) {
        copyToHost(k, t.deviceBlocks()[i], ops, pages); // fits: the room was checked
      }
    }
  }

  /**
   * Allocates a private Host block for {@code key} and adds the D2H copy of {@code deviceBlock}
   * into it; pins the Device block until publication. False when the Host has no free or evictable
   * block.
   */
  private boolean copyToHost(
      CacheKey key, int deviceBlock, List<BlockTransfer> ops, List<ImagePage> pages) {
    int g = key.groupId();
    int[] needs = new int[layout.numGroups()];
    needs[g] = 1;
    int[][] dst = cache.host().allocate(needs);
    if (dst == null) {
      return false;
    }
    cache.device().ref(deviceBlock);
    ops.add(new BlockTransfer.Store(g, deviceBlock, dst[g][0]));
    pages.add(new ImagePage(key, dst[g][0], deviceBlock));
    return true;
  }

  /** Publishes copied pages on the Host (their copies completed) and offers them for backup. */
  void publish(List<ImagePage> pages) {
    if (pages.isEmpty()) {
      return;
    }
    List<CacheKey> published = new ArrayList<>();
    for (ImagePage page : pages) {
      cache.host().noteWrite(page.hostBlock());
      if (cache.host().publish(page.key(), page.hostBlock())) {
        published.add(page.key());
      }
      cache.host().unref(page.hostBlock()); // cached if published, freed if another copy won
      cache.device().unref(page.deviceBlock());
    }
    scheduler.onHostPublished(published); // backup candidates for L3
  }
}

package io.tokenspeed.engine;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.scheduler.Scheduler;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * What the loop publishes on the Host besides the scheduler's demotions: the images of retracted
 * requests and, with L3, the write-through of finished prefixes. Each page goes Device → Host into
 * a private Host block and is published under its content key only once its copy completed; a
 * published Host block becomes a backup candidate for L3.
 *
 * <p>It never overwrites a published block and never publishes a block whose copy has not
 * completed.
 */
final class HostPublication {
  private final CacheLayout layout;
  private final CacheCoordinator cache;
  private final Scheduler scheduler;
  private final Map<Long, ActiveRequest> active;

  /** Keys of finished requests to write through to the Host in the next round (with L3). */
  private final List<CacheKey> backups = new ArrayList<>();

  private long imageBlocks;

  /**
   * A page block copied to a private Host block, to publish there once copied: a retracted
   * request's (deviceBlock 0: the Device block is no longer held) or a finished request's written
   * through (its published Device block, pinned until then).
   */
  record ImagePage(CacheKey key, int hostBlock, int deviceBlock) {}

  HostPublication(
      CacheLayout layout,
      CacheCoordinator cache,
      Scheduler scheduler,
      Map<Long, ActiveRequest> active) {
    this.layout = layout;
    this.cache = cache;
    this.scheduler = scheduler;
    this.active = active;
  }

  /** Image blocks of retracted requests saved to the Host since start. */
  long imageBlocks() {
    return imageBlocks;
  }

  /** Whether finished prefixes wait to be written through. */
  boolean backupsPending() {
    return !backups.isEmpty();
  }

  /** Forgets the prefixes waiting for write-through (a full clear). */
  void clearBackups() {
    backups.clear();
  }

  /** With L3: the full pages of a request that just finished go to the Host in the next round. */
  void writeThroughLater(ActiveRequest a) {
    if (a.keys.numFullPages() > 0) {
      backups.addAll(cache.neededKeys(a.keys, a.keys.numFullPages() * layout.prefixGranularity()));
    }
  }

  /**
   * The images of the requests this round retracted: every full page of their computed KV (groups
   * with history or a window; a State group's running state lies between checkpoints and is not
   * kept) that the Host lacks goes by D2H into a fresh Host block, to be published under its
   * content key once copied. A resumed request then finds those pages on the Host and loads them by
   * H2D like any Host hit, computing only its partial last page again. Adds the copies to {@code
   * ops} (which must run before this round's Device copies and forward: the retracted blocks may
   * already belong to another request). A Host without room keeps fewer pages: those are
   * recomputed.
   */
  List<ImagePage> saveRetractedImages(List<BlockTransfer> ops) {
    List<ImagePage> pages = new ArrayList<>();
    int p = layout.prefixGranularity();
    for (Scheduler.RetractedBlocks rb : scheduler.retractedThisRound()) {
      ActiveRequest a = active.get(rb.requestId());
      if (a == null) {
        continue;
      }
      int boundary = a.kvTokens / p * p;
      a.kvTokens = 0;
      a.admission = null;
      if (boundary == 0) {
        continue;
      }
      PromptKeys keys = PromptKeys.of(layout, Arrays.copyOf(a.tokens, boundary), List.of());
      for (var g : layout.groups()) {
        if (g.kind() instanceof GroupKind.StateCheckpoints) {
          continue;
        }
        int gid = g.groupId();
        int[] row = rb.rows()[gid];
        for (int r = g.firstNeededRow(boundary); r < g.rowsFor(boundary) && r < row.length; r++) {
          CacheKey key = keys.keyOf(gid, r, boundary);
          if (row[r] == 0 || cache.host().contains(key)) {
            continue;
          }
          if (!copyToHost(key, row[r], false, ops, pages)) {
            return pages; // the Host is full of referenced blocks
          }
        }
      }
    }
    return pages;
  }

  /**
   * With L3, the prefix of every finished request goes to the Host as soon as it finishes (so that
   * it becomes a backup candidate, not only under Device pressure): each key of its longest full
   * boundary that the Device has published and the Host lacks is copied D2H with this round's
   * demotions. The Device source stays pinned until the copy is done.
   */
  List<ImagePage> writeThrough(List<BlockTransfer> ops) {
    if (backups.isEmpty()) {
      return List.of();
    }
    List<ImagePage> pages = new ArrayList<>();
    for (CacheKey key : backups) {
      int b = cache.device().lookup(key);
      if (b == 0 || cache.host().contains(key)) {
        continue;
      }
      if (!copyToHost(key, b, true, ops, pages)) {
        break; // the Host is full of referenced blocks: these keys stay local
      }
    }
    backups.clear();
    return pages;
  }

  /**
   * Allocates a private Host block for {@code key} and adds the D2H copy of {@code deviceBlock}
   * into it; pins the Device block until publication when {@code pin}. False when the Host has no
   * free or evictable block.
   */
  private boolean copyToHost(
      CacheKey key, int deviceBlock, boolean pin, List<BlockTransfer> ops, List<ImagePage> pages) {
    int g = key.groupId();
    int[] needs = new int[layout.numGroups()];
    needs[g] = 1;
    int[][] dst = cache.host().allocate(needs);
    if (dst == null) {
      return false;
    }
    if (pin) {
      cache.device().ref(deviceBlock);
    }
    ops.add(new BlockTransfer.Store(g, deviceBlock, dst[g][0]));
    pages.add(new ImagePage(key, dst[g][0], pin ? deviceBlock : 0));
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
      if (page.deviceBlock() != 0) {
        cache.device().unref(page.deviceBlock());
      } else {
        imageBlocks++;
      }
    }
    scheduler.onHostPublished(published); // backup candidates for L3
  }
}

package io.tokenspeed.engine;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.engine.memory.DeviceHandle;
import io.tokenspeed.model.checkpoint.Tensor;
import io.tokenspeed.model.parallel.Collective;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * The block transfers of one rank of a replica whose layout has page-cyclic groups. A block of such
 * a group lives on one rank, its owner ({@link Sharding.PageCyclic#ownerOf}: Device and Host block
 * ids alike), and the cache pairs blocks without regard to owners, so a transfer is one of three:
 *
 * <pre>
 *   owner(src) = owner(dst) = this rank    a copy here, queued with the batch
 *   owner(src) = owner(dst) = another      nothing here: that rank copies it
 *   owner(src) ≠ owner(dst)                the source's owner sends the bytes, the destination's
 *                                          owner writes them: one all-gather per batch, now
 * </pre>
 *
 * Every rank runs the same plan, so every rank sees the same batches in the same order and enters
 * the same all-gathers; the loop thread makes them, the thread that runs the forward pass's
 * collectives. Before the bytes move every batch submitted earlier has run, so the moved blocks
 * keep the order of the copy queue. Groups that are not page-cyclic are copied as they are.
 */
final class PageTransfers {
  private final CacheLayout layout;
  private final Collective collective;
  private final DeviceHandle handle;

  /** Blocks moved between owners so far (loop thread writes, any thread reads). */
  private volatile long movedBlocks;

  PageTransfers(CacheLayout layout, Collective collective, DeviceHandle handle) {
    this.layout = layout;
    this.collective = collective;
    this.handle = handle;
  }

  /**
   * True when a replica of {@code collective}'s ranks over {@code layout} deals some group's pages
   * over several owners.
   */
  static boolean needed(CacheLayout layout, Collective collective) {
    if (collective.size() < 2) {
      return false;
    }
    for (var g : layout.groups()) {
      if (g.sharding() instanceof Sharding.PageCyclic pc && pc.shardCount() > 1) {
        return true;
      }
    }
    return false;
  }

  /**
   * Moves the transfers of {@code ops} whose blocks have different owners (waiting first for every
   * batch submitted before), and returns the ones this rank copies itself, in order.
   */
  List<BlockTransfer> localPart(List<BlockTransfer> ops) throws InterruptedException {
    List<BlockTransfer> local = new ArrayList<>(ops.size());
    List<BlockTransfer> moved = new ArrayList<>();
    int rank = collective.rank();
    for (BlockTransfer op : ops) {
      Sharding.PageCyclic pc = cyclic(op.groupId());
      if (pc == null) {
        local.add(op);
        continue;
      }
      int from = pc.ownerOf(source(op));
      int to = pc.ownerOf(destination(op));
      if (from != to) {
        moved.add(op);
      } else if (from == rank) {
        local.add(op);
      }
    }
    if (!moved.isEmpty()) {
      move(moved);
      movedBlocks += moved.size();
    }
    return local;
  }

  /** Transfers whose blocks had two owners, moved through the collective so far. */
  long movedBlocks() {
    return movedBlocks;
  }

  private void move(List<BlockTransfer> moved) throws InterruptedException {
    Copies.await(handle.submit(List.of()));
    int rank = collective.rank();
    int[] counts = new int[collective.size()];
    for (BlockTransfer op : moved) {
      counts[cyclic(op.groupId()).ownerOf(source(op))] += floatsOf(op);
    }
    float[] mine = new float[counts[rank]];
    int at = 0;
    for (BlockTransfer op : moved) {
      if (cyclic(op.groupId()).ownerOf(source(op)) == rank) {
        int n = floatsOf(op);
        MemorySegment.copy(handle.sourceBytes(op), Tensor.F32_LE, 0, mine, at, n);
        at += n;
      }
    }
    int[] cursor = new int[counts.length];
    int total = 0;
    for (int r = 0; r < counts.length; r++) {
      cursor[r] = total;
      total += counts[r];
    }
    float[] all = new float[total];
    collective.allGather(mine, counts, all);
    for (BlockTransfer op : moved) {
      Sharding.PageCyclic pc = cyclic(op.groupId());
      int from = pc.ownerOf(source(op));
      int n = floatsOf(op);
      if (pc.ownerOf(destination(op)) == rank) {
        MemorySegment.copy(all, cursor[from], handle.destinationBytes(op), Tensor.F32_LE, 0, n);
      }
      cursor[from] += n;
    }
  }

  private Sharding.PageCyclic cyclic(int groupId) {
    return layout.group(groupId).sharding() instanceof Sharding.PageCyclic pc && pc.shardCount() > 1
        ? pc
        : null;
  }

  private int floatsOf(BlockTransfer op) {
    long bytes = layout.group(op.groupId()).bytesPerBlock();
    if (bytes % Float.BYTES != 0) {
      throw new IllegalStateException(
          "group " + op.groupId() + " block of " + bytes + " bytes is not whole float32 values");
    }
    return Math.toIntExact(bytes / Float.BYTES);
  }

  private static int source(BlockTransfer op) {
    return switch (op) {
      case BlockTransfer.Load l -> l.hostBlock();
      case BlockTransfer.Store s -> s.deviceBlock();
      case BlockTransfer.DeviceCopy d -> d.srcBlock();
    };
  }

  private static int destination(BlockTransfer op) {
    return switch (op) {
      case BlockTransfer.Load l -> l.deviceBlock();
      case BlockTransfer.Store s -> s.hostBlock();
      case BlockTransfer.DeviceCopy d -> d.dstBlock();
    };
  }
}

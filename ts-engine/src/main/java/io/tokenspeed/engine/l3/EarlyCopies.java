package io.tokenspeed.engine.l3;

import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageOp;
import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.engine.memory.CopyFence;
import io.tokenspeed.engine.memory.DeviceHandle;
import io.tokenspeed.l3.L3Executor;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The early Device copies of one rank's GETs ({@code async.early_h2d}): as the executor reports
 * rows of a GET landed on the Host ({@link L3Executor.LandingListener}, on its worker threads),
 * each row that has an early Device destination is queued as a Host→Device copy on the engine's
 * copy thread, while the rest of the read runs.
 *
 * <pre>
 *   GET workers:  [share 1][share 2][share 3] ... [share n]
 *   ts-copy:               [H2D 1]  [H2D 2]  ...           [H2D n]
 *   loop poll:                                                     ^ settle: await, report
 * </pre>
 *
 * <p>Nothing here publishes anything. The rank's completion record of the GET leaves {@link
 * #settle} only after every copy queued for it has run, so when the replica agrees on the GET's
 * facts every owner's copies are done, and the scheduler publishes the Device blocks of exactly the
 * rows it publishes on the Host (read in full on every owner). A row whose copy could not be queued
 * or failed, or that the listener never named, is reported failed (not an object fact): neither
 * tier publishes it, and the request computes it.
 */
final class EarlyCopies implements L3Executor.LandingListener {
  private static final System.Logger LOG = System.getLogger(EarlyCopies.class.getName());

  /** One GET's destinations and the copies queued for it so far. */
  private static final class Pending {
    final int[] groups;
    final int[] hostBlocks;
    final int[] deviceBlocks;
    final BitSet copied = new BitSet();
    final List<CopyFence> fences = new ArrayList<>();
    Throwable failure;

    Pending(int[] groups, int[] hostBlocks, int[] deviceBlocks) {
      this.groups = groups;
      this.hostBlocks = hostBlocks;
      this.deviceBlocks = deviceBlocks;
    }
  }

  private final DeviceHandle handle;
  private final ConcurrentHashMap<Long, Pending> pending = new ConcurrentHashMap<>();
  private volatile boolean closed;

  EarlyCopies(DeviceHandle handle) {
    this.handle = handle;
  }

  /** Before {@code get} goes to the executor: its rows' destinations (loop thread). */
  void register(StorageOp.Get get) {
    if (get.deviceBlocks().isEmpty()) {
      return;
    }
    int n = get.keys().size();
    int[] groups = new int[n];
    int[] host = new int[n];
    int[] device = new int[n];
    for (int i = 0; i < n; i++) {
      groups[i] = get.keys().get(i).groupId();
      host[i] = get.hostBlocks().get(i);
      device[i] = get.deviceBlock(i);
    }
    pending.put(get.operationId(), new Pending(groups, host, device));
  }

  /** Queues the copies of the landed rows that have early destinations (a GET worker's thread). */
  @Override
  public void landed(long operationId, int[] rows) {
    Pending p = pending.get(operationId);
    if (p == null || closed) {
      return;
    }
    List<BlockTransfer> loads = new ArrayList<>(rows.length);
    BitSet these = new BitSet();
    for (int row : rows) {
      int d = p.deviceBlocks[row];
      if (d != 0) {
        loads.add(new BlockTransfer.Load(p.groups[row], p.hostBlocks[row], d));
        these.set(row);
      }
    }
    if (loads.isEmpty()) {
      return;
    }
    synchronized (p) {
      if (p.failure != null) {
        return;
      }
      try {
        p.fences.add(handle.submitBackground(loads));
        p.copied.or(these);
      } catch (RuntimeException e) {
        p.failure = e; // a closed or full copy queue: these rows are computed instead
      }
    }
  }

  /**
   * The record of a completed job as this rank reports it (loop thread, at poll): for a GET with
   * early destinations, once every copy queued for it has run, with each destination row whose copy
   * did not run in full turned from OK into FAILED. Other records pass unchanged.
   */
  StorageDone settle(StorageDone done) {
    Pending p = pending.remove(done.operationId());
    if (p == null) {
      return done;
    }
    List<CopyFence> fences;
    Throwable failure;
    synchronized (p) {
      fences = List.copyOf(p.fences);
      failure = p.failure;
    }
    for (CopyFence f : fences) {
      try {
        f.await();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        failure = e;
        break;
      }
      if (f.failure() != null && failure == null) {
        failure = f.failure();
      }
    }
    if (failure != null) {
      LOG.log(
          System.Logger.Level.WARNING,
          "early Device copies of GET "
              + done.operationId()
              + " failed: its rows are computed instead: "
              + failure);
    }
    List<KeyOutcome> outcomes = new ArrayList<>(done.outcomes());
    boolean changed = false;
    for (int i = 0; i < outcomes.size(); i++) {
      if (p.deviceBlocks[i] != 0
          && outcomes.get(i) == KeyOutcome.OK
          && (failure != null || !p.copied.get(i))) {
        outcomes.set(i, KeyOutcome.FAILED);
        changed = true;
      }
    }
    return changed
        ? new StorageDone(
            done.operationId(),
            done.kind(),
            outcomes,
            done.retired(),
            done.bytes(),
            done.detached())
        : done;
  }

  /** No copy is queued from now on (the executor is closing). */
  void close() {
    closed = true;
  }
}

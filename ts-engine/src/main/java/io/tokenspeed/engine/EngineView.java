package io.tokenspeed.engine;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.engine.memory.DeviceHandle;
import io.tokenspeed.scheduler.Scheduler;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;

/**
 * The loop's state as an observer sees it between rounds ({@link EngineObserver#afterRound}): the
 * scheduler, the cache, the storage transfer manager, the write-through's pinned tails and the
 * requests the loop serves. Read it on the loop thread only; tests check their invariants through
 * it.
 */
final class EngineView {
  private final Scheduler scheduler;
  private final CacheCoordinator cache;
  private final StorageTransferManager stm;
  private final HostPublication publication;
  private final DeviceHandle copies;
  private final Map<Long, ActiveRequest> active;
  private final Supplier<ControlState> control;

  EngineView(
      Scheduler scheduler,
      CacheCoordinator cache,
      StorageTransferManager stm,
      HostPublication publication,
      DeviceHandle copies,
      Map<Long, ActiveRequest> active,
      Supplier<ControlState> control) {
    this.scheduler = scheduler;
    this.cache = cache;
    this.stm = stm;
    this.publication = publication;
    this.copies = copies;
    this.active = active;
    this.control = control;
  }

  /** The engine's PD port, whose Host references count (null for a fused engine). */
  private PdPort pd;

  void pd(PdPort pd) {
    this.pd = pd;
  }

  /** The control state the latest round took its permissions from. */
  ControlState control() {
    return control.get();
  }

  Scheduler scheduler() {
    return scheduler;
  }

  CacheCoordinator cache() {
    return cache;
  }

  /**
   * The storage transfer manager (its counters, credits, leases and Host references); null without
   * L3.
   */
  StorageTransferManager storageTransferManager() {
    return stm;
  }

  /** Requests the loop serves right now. */
  int activeCount() {
    return active.size();
  }

  /** The ids of the requests the loop serves right now. */
  List<Long> activeIds() {
    return List.copyOf(active.keySet());
  }

  /**
   * Every reference the scheduler, the storage transfer manager, the tails waiting for
   * write-through and the PD port's transfers hold (for the checker).
   */
  List<HeldBlock> heldBlocks() {
    List<HeldBlock> out = new ArrayList<>(scheduler.heldBlocks());
    out.addAll(publication.heldBlocks());
    if (stm != null) {
      out.addAll(stm.heldBlocks());
      stm.checkInvariants();
    }
    if (pd != null) {
      out.addAll(pd.heldBlocks());
    }
    return out;
  }

  /**
   * The loop's copy batches submitted but not completed (0 between rounds: every round waits for
   * its own).
   */
  long copyBacklog() {
    return copies.foregroundBacklog(); // early L3 copies may still run: no round waits for them
  }
}

package io.tokenspeed.engine;

import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.engine.memory.CopyFence;
import io.tokenspeed.engine.memory.DeviceHandle;
import io.tokenspeed.engine.memory.LoadStages;
import io.tokenspeed.engine.memory.StagedFence;
import io.tokenspeed.model.LayerGate;
import java.util.List;
import java.util.function.LongSupplier;

/**
 * The loop's side of the copy thread: submits batches of Device/Host copies and waits for their
 * fences, and remembers the latest batch the forward depends on, so that the forward refuses to run
 * before it completed (a storage completion never stands in for a copy fence). The one exception is
 * the round's staged loads ({@link #submitStaged}): the forward runs while they copy, waiting for
 * each layer's stage through their gate, and the round checks after it that it waited for all.
 */
final class Copies {
  private final DeviceHandle handle;

  /** The owner-aware split of page-cyclic groups' transfers, or null when no group has one. */
  private final PageTransfers pages;

  /** The latest copy batch the forward depends on (loads, copy-on-write, State copies). */
  private long awaitedFence;

  /** How the round's loads are staged by layer; null to copy them whole before the forward. */
  private final LoadStages stages;

  /** The round's staged loads that the forward waits on layer by layer, or null. */
  private StagedFence staged;

  /** Planted (the simulation's tests only): staged loads never copy their last stage. */
  private boolean plantedSkipsLastStage;

  /** Plants the bug above. */
  void plantSkipLastStage() {
    plantedSkipsLastStage = true;
  }

  /** Times the waits (the settings' clock). */
  private final LongSupplier nanoClock;

  /** Nanoseconds the loop spent waiting for copy batches since start. */
  private long waitNanos;

  Copies(DeviceHandle handle, PageTransfers pages, LoadStages stages, LongSupplier nanoClock) {
    this.handle = handle;
    this.pages = pages;
    this.stages = stages;
    this.nanoClock = nanoClock;
  }

  /**
   * Queues the round's copies that the forward reads (loads, copy-on-write) and returns the gate
   * the forward waits on: with load stages, the copies run stage by stage while the forward
   * computes, and {@link #finishStaged} must follow the forward; without (or with nothing to copy),
   * they are awaited here and the gate is {@link LayerGate#OPEN}.
   */
  LayerGate submitStaged(List<BlockTransfer> ops) throws InterruptedException {
    if (staged != null) {
      throw new IllegalStateException("the previous round's staged loads were not finished");
    }
    if (stages == null) {
      await(ops);
      return LayerGate.OPEN;
    }
    if (pages != null) {
      ops = pages.localPart(ops);
    }
    if (ops.isEmpty()) {
      return LayerGate.OPEN;
    }
    staged =
        handle.submitStaged(
            ops, plantedSkipsLastStage ? stages.withoutStage(stages.numStages() - 1) : stages);
    return staged;
  }

  /**
   * After the round's forward (or in its place when it had none): waits for the staged loads to end
   * and fails when one failed, or when the forward ran without waiting for every stage ({@code
   * forwardRan}): a model that did not honour its gate may have read layers before their copies.
   */
  void finishStaged(boolean forwardRan) throws InterruptedException {
    StagedFence s = staged;
    if (s == null) {
      return;
    }
    staged = null;
    awaitTimed(s.fence());
    awaitedFence = Math.max(awaitedFence, s.fence().sequence());
    if (forwardRan && !s.awaitedAll()) {
      throw new IllegalStateException(
          "the forward pass ran without waiting for every stage of its loads: " + s);
    }
  }

  /** Nanoseconds the loop spent waiting for copy batches since start (a part of its rounds). */
  long waitNanos() {
    return waitNanos;
  }

  /** Runs {@code ops} on the copy thread and waits for them; the forward depends on them. */
  void await(List<BlockTransfer> ops) throws InterruptedException {
    if (pages != null) {
      ops = pages.localPart(ops);
    }
    if (ops.isEmpty()) {
      return;
    }
    CopyFence f = handle.submit(ops);
    awaitTimed(f);
    awaitedFence = Math.max(awaitedFence, f.sequence());
  }

  /** Waits for {@code f} as {@link #await(CopyFence)} does, counting the wait. */
  void awaitTimed(CopyFence f) throws InterruptedException {
    long t0 = nanoClock.getAsLong();
    try {
      await(f);
    } finally {
      waitNanos += nanoClock.getAsLong() - t0;
    }
  }

  /**
   * Submits {@code ops} without waiting (null when there are none). Transfers of a page-cyclic
   * group between blocks of two owners are moved before this returns.
   */
  CopyFence submit(List<BlockTransfer> ops) throws InterruptedException {
    if (pages != null) {
      ops = pages.localPart(ops);
    }
    return ops.isEmpty() ? null : handle.submit(ops);
  }

  /**
   * Submits {@code ops} that no round waits for (a disaggregated request's copies, whose blocks the
   * caller keeps referenced until the fence): they run in order with every other batch, but the
   * round's backlog leaves them out. Null when there are none.
   */
  CopyFence submitBackground(List<BlockTransfer> ops) {
    if (pages != null) {
      throw new IllegalStateException("page-cyclic groups move no background copies");
    }
    return ops.isEmpty() ? null : handle.submitBackground(ops);
  }

  /** Waits for {@code f}; a failed copy fails the loop. */
  static void await(CopyFence f) throws InterruptedException {
    f.await();
    if (f.failure() != null) {
      throw new IllegalStateException("a Device/Host copy failed", f.failure());
    }
  }

  /** Page-cyclic transfers moved between two owners so far (0 without page-cyclic groups). */
  long movedPageBlocks() {
    return pages == null ? 0 : pages.movedBlocks();
  }

  /**
   * Fails when a copy batch the forward depends on has not completed, other than the round's staged
   * loads, which the forward waits for through their gate.
   */
  void checkForwardMayRun() {
    if (handle.completedSequence() < awaitedFence) {
      throw new IllegalStateException(
          "the forward would run before copy batch " + awaitedFence + " completed");
    }
  }
}

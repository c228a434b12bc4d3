package io.tokenspeed.engine;

import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.engine.memory.CopyFence;
import io.tokenspeed.engine.memory.DeviceHandle;
import java.util.List;
import java.util.function.LongSupplier;

/**
 * The loop's side of the copy thread: submits batches of Device/Host copies and waits for their
 * fences, and remembers the latest batch the forward depends on, so that the forward refuses to run
 * before it completed (a storage completion never stands in for a copy fence).
 */
final class Copies {
  private final DeviceHandle handle;

  /** The owner-aware split of page-cyclic groups' transfers, or null when no group has one. */
  private final PageTransfers pages;

  /** The latest copy batch the forward depends on (loads, copy-on-write, State copies). */
  private long awaitedFence;

  /** Times the waits (the settings' clock). */
  private final LongSupplier nanoClock;

  /** Nanoseconds the loop spent waiting for copy batches since start. */
  private long waitNanos;

  Copies(DeviceHandle handle, PageTransfers pages, LongSupplier nanoClock) {
    this.handle = handle;
    this.pages = pages;
    this.nanoClock = nanoClock;
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

  /** Fails when a copy batch the forward depends on has not completed. */
  void checkForwardMayRun() {
    if (handle.completedSequence() < awaitedFence) {
      throw new IllegalStateException(
          "the forward would run before copy batch " + awaitedFence + " completed");
    }
  }
}

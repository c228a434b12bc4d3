package io.tokenspeed.engine;

import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.engine.memory.CopyFence;
import io.tokenspeed.engine.memory.DeviceHandle;
import java.util.List;

/**
 * The loop's side of the copy thread: submits batches of Device/Host copies and waits for their
 * fences, and remembers the latest batch the forward depends on, so that the forward refuses to run
 * before it completed (a storage completion never stands in for a copy fence).
 */
final class Copies {
  private final DeviceHandle handle;

  /** The latest copy batch the forward depends on (loads, copy-on-write, State copies). */
  private long awaitedFence;

  Copies(DeviceHandle handle) {
    this.handle = handle;
  }

  /** Runs {@code ops} on the copy thread and waits for them; the forward depends on them. */
  void await(List<BlockTransfer> ops) throws InterruptedException {
    if (ops.isEmpty()) {
      return;
    }
    CopyFence f = handle.submit(ops);
    await(f);
    awaitedFence = Math.max(awaitedFence, f.sequence());
  }

  /** Submits {@code ops} without waiting (null when there are none). */
  CopyFence submit(List<BlockTransfer> ops) {
    return ops.isEmpty() ? null : handle.submit(ops);
  }

  /** Waits for {@code f}; a failed copy fails the loop. */
  static void await(CopyFence f) throws InterruptedException {
    f.await();
    if (f.failure() != null) {
      throw new IllegalStateException("a Device/Host copy failed", f.failure());
    }
  }

  /** Fails when a copy batch the forward depends on has not completed. */
  void checkForwardMayRun() {
    if (handle.completedSequence() < awaitedFence) {
      throw new IllegalStateException(
          "the forward would run before copy batch " + awaitedFence + " completed");
    }
  }
}

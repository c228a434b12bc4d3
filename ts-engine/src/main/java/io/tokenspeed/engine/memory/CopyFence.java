package io.tokenspeed.engine.memory;

import java.util.concurrent.TimeUnit;

/**
 * The completion of one batch submitted to a {@link DeviceHandle}. Batches complete in submission
 * order, so a fence is done exactly when its handle's {@link DeviceHandle#completedSequence()} has
 * reached its {@link #sequence()}: a later fence is never done before an earlier one. A failed
 * batch is done too, with its {@link #failure()} set before it counts as done.
 */
public final class CopyFence {

  private final DeviceHandle owner;
  private final long sequence;
  private volatile Throwable failure;

  CopyFence(DeviceHandle owner, long sequence) {
    this.owner = owner;
    this.sequence = sequence;
  }

  /** The batch's position in its handle's submission order, from 1. */
  public long sequence() {
    return sequence;
  }

  /** True once every copy of the batch has run, or the batch failed. */
  public boolean isDone() {
    return owner.completedSequence() >= sequence;
  }

  /** Waits until the batch is done. */
  public void await() throws InterruptedException {
    owner.awaitCompleted(sequence);
  }

  /** Waits at most {@code timeout} for the batch; returns whether it is done. */
  public boolean await(long timeout, TimeUnit unit) throws InterruptedException {
    return owner.awaitCompleted(sequence, unit.toNanos(timeout));
  }

  /**
   * Why the batch failed: what its copy threw, or, for a batch that never ran because an earlier
   * one failed, an {@link IllegalStateException} caused by that failure. Null while not done and
   * after success.
   */
  public Throwable failure() {
    return failure;
  }

  void fail(Throwable cause) {
    failure = cause;
  }

  @Override
  public String toString() {
    return "CopyFence[sequence=" + sequence + ", done=" + isDone() + ", failure=" + failure + "]";
  }
}

package io.tokenspeed.engine.memory;

import io.tokenspeed.model.LayerGate;

/**
 * A batch of copies run stage by stage ({@link DeviceHandle#submitStaged}): its {@link CopyFence}
 * completes after the last stage as any batch's does, and each stage completes on its own before,
 * which the forward pass waits for layer by layer through this {@link LayerGate}.
 *
 * <p>The copy thread completes the stages in order; the forward's thread waits. The gate remembers
 * how far it was waited for, so that the round can check after the pass that the model waited for
 * every stage before it read the layers the stage copies ({@link #awaitedAll}).
 */
public final class StagedFence implements LayerGate {
  private final CopyFence fence;
  private final LoadStages stages;

  /** Stages completed so far (copy thread writes, under this object's monitor). */
  private volatile int completed;

  /** What failed the batch, or why it did not run (set before {@link #completed} stops moving). */
  private volatile Throwable failure;

  /** Stages the forward waited for so far (its thread only). */
  private int awaited;

  StagedFence(CopyFence fence, LoadStages stages) {
    this.fence = fence;
    this.stages = stages;
  }

  /** The fence of the whole batch. */
  public CopyFence fence() {
    return fence;
  }

  /** The stages the batch is copied in. */
  public LoadStages stages() {
    return stages;
  }

  /** Stages whose copies have all run so far. */
  public int completedStages() {
    return completed;
  }

  @Override
  public void awaitLayer(int layer) {
    int stage = stages.stageOfLayer(layer);
    if (completed <= stage) {
      synchronized (this) {
        try {
          while (completed <= stage && failure == null) {
            wait();
          }
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new IllegalStateException(
              "interrupted while waiting for the copies of layer " + layer, e);
        }
        if (completed <= stage) {
          throw new IllegalStateException(
              "the copies of layer " + layer + " (stage " + stage + ") failed", failure);
        }
      }
    }
    awaited = Math.max(awaited, stage + 1);
  }

  /** Whether the forward waited for every stage (through its last layer, or a later one). */
  public boolean awaitedAll() {
    return awaited == stages.numStages();
  }

  /** Copy thread: stage {@code stage} has run. */
  synchronized void stageDone(int stage) {
    completed = stage + 1;
    notifyAll();
  }

  /** Copy thread: the batch failed or will not run; waiting ends with {@code cause}. */
  synchronized void fail(Throwable cause) {
    failure = cause;
    notifyAll();
  }

  @Override
  public String toString() {
    return "StagedFence["
        + fence
        + ", stages="
        + stages.numStages()
        + ", completed="
        + completed
        + ", failure="
        + failure
        + "]";
  }
}

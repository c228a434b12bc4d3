package io.tokenspeed.model.parallel;

import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A collective of threads in one JVM for tests of the sharded forward pass: ranks meet at a
 * barrier, read each other's arrays and add them in rank order, as the contract of {@link
 * Collective} asks. Build the ranks with {@link #group}.
 */
public final class LocalCollective implements Collective {
  private final Shared shared;
  private final int rank;

  private static final class Shared {
    final CyclicBarrier barrier;
    final float[][] slots;

    /** Why a rank aborted the collective, or null: every waiting and later call throws. */
    volatile String aborted;

    Shared(int size) {
      barrier = new CyclicBarrier(size);
      slots = new float[size][];
    }
  }

  private LocalCollective(Shared shared, int rank) {
    this.shared = shared;
    this.rank = rank;
  }

  /** The {@code size} ranks of one replica, in rank order. */
  public static LocalCollective[] group(int size) {
    Shared shared = new Shared(size);
    LocalCollective[] ranks = new LocalCollective[size];
    for (int r = 0; r < size; r++) {
      ranks[r] = new LocalCollective(shared, r);
    }
    return ranks;
  }

  @Override
  public int rank() {
    return rank;
  }

  @Override
  public int size() {
    return shared.slots.length;
  }

  @Override
  public void allReduceSum(float[] data, int offset, int length) {
    shared.slots[rank] = java.util.Arrays.copyOfRange(data, offset, offset + length);
    await();
    for (int i = 0; i < length; i++) {
      float sum = shared.slots[0][i];
      for (int r = 1; r < size(); r++) {
        sum += shared.slots[r][i];
      }
      data[offset + i] = sum;
    }
    await();
  }

  @Override
  public void allGather(float[] local, int[] counts, float[] out) {
    shared.slots[rank] = java.util.Arrays.copyOf(local, counts[rank]);
    await();
    int at = 0;
    for (int r = 0; r < size(); r++) {
      System.arraycopy(shared.slots[r], 0, out, at, counts[r]);
      at += counts[r];
    }
    await();
  }

  private void await() {
    checkAborted();
    try {
      shared.barrier.await(30, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new CollectiveException("rank " + rank + " interrupted", e);
    } catch (BrokenBarrierException | TimeoutException e) {
      checkAborted();
      throw new CollectiveException("rank " + rank + ": the barrier broke", e);
    }
  }

  private void checkAborted() {
    String why = shared.aborted;
    if (why != null) {
      throw new CollectiveException("rank " + rank + ": the collective was aborted: " + why);
    }
  }

  @Override
  public void abort(String reason) {
    shared.aborted = reason == null ? "aborted" : reason;
    shared.barrier.reset();
  }

  @Override
  public void close() {}
}

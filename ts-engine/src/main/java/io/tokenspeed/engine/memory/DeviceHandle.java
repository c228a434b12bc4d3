package io.tokenspeed.engine.memory;

import io.tokenspeed.model.device.DeviceBytes;
import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongConsumer;

/**
 * The copy engine between the Device and Host tiers (the HostCacheExecutor): one platform thread,
 * {@value #THREAD_NAME}, runs submitted batches of {@link BlockTransfer}s strictly in submission
 * order, and each batch's {@link CopyFence} completes when it has run.
 *
 * <pre>
 *   event loop:  submit(b1) submit(b2) ... poll completedSequence() ... submit(bn)
 *   ts-copy:          [ b1 copies ][ b2 copies ] ...                       [ bn ]
 *   fences:                       ^ 1 done      ^ 2 done
 * </pre>
 *
 * <p>Both tiers' memory and geometry are bound once, here, and every op is checked against them at
 * {@link #submit}, so the copy thread only moves bytes: through the Device tier's {@link
 * DeviceBytes}, which copies at once for host memory and queues {@code cudaMemcpyAsync} on a copy
 * stream for a GPU, and waits for them all before the batch's fence completes. A copy that throws
 * completes its fence with that failure and every later fence with a failure too: nothing after a
 * failed copy runs, and no fence waits forever. The queue is bounded: {@link #submit} throws rather
 * than blocks when {@code maxPendingBatches} batches are pending.
 *
 * <p>The handle borrows the tiers: close it before closing them.
 */
public final class DeviceHandle implements AutoCloseable {

  /** Default bound on batches submitted and not yet done. */
  public static final int DEFAULT_MAX_PENDING_BATCHES = 1024;

  /** Name of the copy thread. */
  public static final String THREAD_NAME = "ts-copy";

  /** Which way a resolved copy goes. */
  private enum Direction {
    HOST_TO_DEVICE,
    DEVICE_TO_HOST,
    WITHIN_DEVICE
  }

  /** One resolved copy: a byte range of one tier into a byte range of the other (or the same). */
  private record Copy(Direction direction, int group, long srcOffset, long dstOffset, long bytes) {}

  /**
   * A batch; a background one is not the loop's (see {@link #submitBackground}); a staged one
   * ({@link #submitStaged}) is copied stage by stage.
   */
  private record Batch(
      CopyFence fence, List<Copy> copies, boolean background, StagedFence staged) {}

  /** The first failed batch and what it threw. */
  private record Failure(long sequence, Throwable cause) {}

  private final DevicePools device;
  private final TierMemory host;
  private final DeviceBytes deviceBytes;
  private final MemorySegment hostBlocks;
  private final BlockGeometry geometry;
  private final int maxPendingBatches;
  private final LongConsumer beforeBatch;
  private final Thread thread;

  private final ReentrantLock lock = new ReentrantLock();
  private final Condition work = lock.newCondition();
  private final Condition progress = lock.newCondition();

  // Guarded by lock.
  private final ArrayDeque<Batch> queue = new ArrayDeque<>();
  private long submittedSequence;
  private int pending;
  private int pendingBackground;

  // Written under lock; read without it to reject a closed handle before validating.
  private volatile boolean closing;

  // Written by the copy thread (completedSequence also by submit, under the lock when idle).
  private volatile long completedSequence;
  private volatile long copiedBytes;
  private volatile long copyNanos;
  private volatile long loadedBytes;
  private volatile long stagedLoadedBytes;
  private volatile long loadNanos;
  private volatile Failure failure;

  /** A handle with at most {@link #DEFAULT_MAX_PENDING_BATCHES} pending batches. */
  public DeviceHandle(DevicePools device, HostCacheStorage host) {
    this(device, host, DEFAULT_MAX_PENDING_BATCHES);
  }

  /**
   * Binds both tiers and starts the copy thread.
   *
   * @throws IllegalArgumentException when a tier is missing or freed, their geometries differ, or
   *     {@code maxPendingBatches < 1}
   */
  public DeviceHandle(DevicePools device, HostCacheStorage host, int maxPendingBatches) {
    this(device, host, maxPendingBatches, sequence -> {});
  }

  /** As the public constructor, with {@code beforeBatch} run on the copy thread before a batch. */
  DeviceHandle(
      DevicePools device, HostCacheStorage host, int maxPendingBatches, LongConsumer beforeBatch) {
    if (device == null || host == null) {
      throw new IllegalArgumentException(
          "device=" + device + " and host=" + host + " tiers are required");
    }
    if (maxPendingBatches < 1) {
      throw new IllegalArgumentException(
          "max_pending_batches=" + maxPendingBatches + " must be at least 1");
    }
    this.device = device;
    this.host = host.memory();
    if (!device.geometry().equals(this.host.geometry())) {
      throw new IllegalArgumentException(
          "Device geometry "
              + device.geometry()
              + " differs from Host geometry "
              + this.host.geometry()
              + ": both tiers must serve the same cache layout");
    }
    if (device.memory() != null) {
      checkAlive(device.memory());
    }
    this.deviceBytes = device.bytes();
    this.hostBlocks = checkAlive(this.host);
    this.geometry = device.geometry();
    this.maxPendingBatches = maxPendingBatches;
    this.beforeBatch = beforeBatch;
    this.thread = Thread.ofPlatform().name(THREAD_NAME).daemon(true).unstarted(this::runCopies);
    thread.start();
  }

  private static MemorySegment checkAlive(TierMemory tier) {
    MemorySegment blocks = tier.segment();
    if (!blocks.scope().isAlive()) {
      throw new IllegalArgumentException(tier.tierName() + " tier memory is already freed");
    }
    return blocks;
  }

  /**
   * Queues {@code ops} as one batch, to run after every batch submitted before it. An empty batch
   * submitted while nothing is pending is done at once. Once a batch has failed ({@link
   * #failure()}), no later batch runs: each one's fence completes with a failure.
   *
   * @throws IllegalArgumentException naming the op when an op's group or a block id is not one of
   *     the tiers'
   * @throws IllegalStateException after {@link #close()}, or when {@code maxPendingBatches} batches
   *     are pending
   */
  public CopyFence submit(List<BlockTransfer> ops) {
    return submit(ops, false, null).fence();
  }

  /**
   * As {@link #submit}, for a batch that no round waits for (the early copies of L3 reads, queued
   * from other threads): it runs in the same order as every other batch, but {@link
   * #foregroundBacklog} does not count it.
   */
  public CopyFence submitBackground(List<BlockTransfer> ops) {
    return submit(ops, true, null).fence();
  }

  /**
   * As {@link #submit}, for a batch whose copies run stage by stage ({@link LoadStages}): first
   * every op's part of stage 0, in submission order, then every op's part of stage 1, and so on;
   * each stage completes on the returned gate once its copies have run. Since the stages of one
   * block are disjoint byte ranges and each stage keeps the ops' order, the bytes end as the
   * unstaged batch leaves them, as long as no two groups' blocks of the batch share bytes (the
   * cache's parents hold one group's blocks at a time).
   *
   * @throws IllegalArgumentException as {@link #submit} does, or when {@code stages} is null
   */
  public StagedFence submitStaged(List<BlockTransfer> ops, LoadStages stages) {
    if (stages == null) {
      throw new IllegalArgumentException("load stages are required");
    }
    return submit(ops, false, stages).staged();
  }

  /** What {@link #submit(List, boolean, LoadStages)} made: the fence, and the staged gate. */
  private record Submitted(CopyFence fence, StagedFence staged) {}

  private Submitted submit(List<BlockTransfer> ops, boolean background, LoadStages stages) {
    if (ops == null) {
      throw new IllegalArgumentException("a list of block transfers is required");
    }
    if (closing) {
      throw closed(ops);
    }
    List<Copy> copies = new ArrayList<>(ops.size());
    for (BlockTransfer op : ops) {
      copies.add(resolve(op));
    }
    lock.lock();
    try {
      if (closing) {
        throw closed(ops);
      }
      if (pending >= maxPendingBatches) {
        throw new IllegalStateException(
            "copy queue is full: "
                + pending
                + " batches pending (max_pending_batches="
                + maxPendingBatches
                + ")");
      }
      CopyFence fence = new CopyFence(this, ++submittedSequence);
      StagedFence staged = stages == null ? null : new StagedFence(fence, stages);
      Failure failed = failure;
      if (pending == 0 && (copies.isEmpty() || failed != null)) {
        if (failed != null) {
          fence.fail(notRun(fence.sequence(), failed));
          if (staged != null) {
            staged.fail(fence.failure());
          }
        } else if (staged != null) {
          staged.stageDone(stages.numStages() - 1);
        }
        completedSequence = fence.sequence();
        progress.signalAll();
      } else {
        queue.addLast(new Batch(fence, List.copyOf(copies), background, staged));
        pending++;
        if (background) {
          pendingBackground++;
        }
        work.signal();
      }
      return new Submitted(fence, staged);
    } finally {
      lock.unlock();
    }
  }

  private static IllegalStateException closed(List<BlockTransfer> ops) {
    return new IllegalStateException(
        "DeviceHandle is closed: a batch of " + ops.size() + " transfers is rejected");
  }

  private Copy resolve(BlockTransfer op) {
    if (op == null) {
      throw new IllegalArgumentException("a block transfer is null");
    }
    try {
      int g = op.groupId();
      // the offsets first: their errors name the tier
      Copy c =
          switch (op) {
            case BlockTransfer.Load l ->
                new Copy(
                    Direction.HOST_TO_DEVICE,
                    g,
                    host.offsetOf(g, l.hostBlock()),
                    device.offsetOf(g, l.deviceBlock()),
                    0);
            case BlockTransfer.Store s ->
                new Copy(
                    Direction.DEVICE_TO_HOST,
                    g,
                    device.offsetOf(g, s.deviceBlock()),
                    host.offsetOf(g, s.hostBlock()),
                    0);
            case BlockTransfer.DeviceCopy d ->
                new Copy(
                    Direction.WITHIN_DEVICE,
                    g,
                    device.offsetOf(g, d.srcBlock()),
                    device.offsetOf(g, d.dstBlock()),
                    0);
          };
      return new Copy(c.direction(), g, c.srcOffset(), c.dstOffset(), geometry.bytesPerBlock(g));
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(op + ": " + e.getMessage(), e);
    }
  }

  /**
   * The bytes {@code op} reads (its source block), checked as {@link #submit} checks it. For a
   * caller that moves a block's bytes itself, after every batch submitted before has completed.
   */
  public MemorySegment sourceBytes(BlockTransfer op) {
    Copy c = resolve(op);
    return c.direction() == Direction.HOST_TO_DEVICE
        ? hostBlocks.asSlice(c.srcOffset(), c.bytes())
        : deviceHostSegment().asSlice(c.srcOffset(), c.bytes());
  }

  /** The bytes {@code op} writes (its destination block); see {@link #sourceBytes}. */
  public MemorySegment destinationBytes(BlockTransfer op) {
    Copy c = resolve(op);
    return c.direction() == Direction.DEVICE_TO_HOST
        ? hostBlocks.asSlice(c.dstOffset(), c.bytes())
        : deviceHostSegment().asSlice(c.dstOffset(), c.bytes());
  }

  private MemorySegment deviceHostSegment() {
    return deviceBytes
        .hostSegment()
        .orElseThrow(
            () ->
                new UnsupportedOperationException(
                    "the Device tier is not host memory: its blocks are reached by copies only"));
  }

  /** Sequence of the last batch submitted; 0 before the first. */
  public long submittedSequence() {
    lock.lock();
    try {
      return submittedSequence;
    } finally {
      lock.unlock();
    }
  }

  /** Highest sequence whose batch is done (run or failed); 0 before the first. */
  public long completedSequence() {
    return completedSequence;
  }

  /** Bytes copied so far. */
  public long copiedBytes() {
    return copiedBytes;
  }

  /** Nanoseconds the copy thread spent in its copies, failed ones included (idle time excluded). */
  public long copyNanos() {
    return copyNanos;
  }

  /**
   * Host→Device bytes copied so far (the {@link BlockTransfer.Load}s: restored blocks going up).
   */
  public long loadedBytes() {
    return loadedBytes;
  }

  /**
   * Of {@link #loadedBytes()}, those of staged batches ({@link #submitStaged}): copied stage by
   * stage, the forward starting each layer once its stage was in.
   */
  public long stagedLoadedBytes() {
    return stagedLoadedBytes;
  }

  /**
   * Nanoseconds the copy thread spent moving {@link #loadedBytes()}: the time of each batch (its
   * copies queued and waited for) shared out by bytes, so a batch of loads alone counts whole and a
   * batch that also stores counts its loads' share.
   */
  public long loadNanos() {
    return loadNanos;
  }

  /** Batches submitted with {@link #submit} and not yet done (background batches left out). */
  public int foregroundBacklog() {
    lock.lock();
    try {
      return pending - pendingBackground;
    } finally {
      lock.unlock();
    }
  }

  /** What the first failed batch threw; null while every batch has succeeded. */
  public Throwable failure() {
    Failure f = failure;
    return f == null ? null : f.cause();
  }

  void awaitCompleted(long sequence) throws InterruptedException {
    if (completedSequence >= sequence) {
      return;
    }
    lock.lockInterruptibly();
    try {
      while (completedSequence < sequence) {
        progress.await();
      }
    } finally {
      lock.unlock();
    }
  }

  boolean awaitCompleted(long sequence, long nanos) throws InterruptedException {
    if (completedSequence >= sequence) {
      return true;
    }
    lock.lockInterruptibly();
    try {
      long left = nanos;
      while (completedSequence < sequence) {
        if (left <= 0) {
          return false;
        }
        left = progress.awaitNanos(left);
      }
      return true;
    } finally {
      lock.unlock();
    }
  }

  private void runCopies() {
    while (true) {
      Batch batch;
      lock.lock();
      try {
        while (queue.isEmpty() && !closing) {
          work.awaitUninterruptibly();
        }
        batch = queue.pollFirst();
      } finally {
        lock.unlock();
      }
      if (batch == null) {
        return;
      }
      long sequence = batch.fence().sequence();
      Failure failed = failure;
      if (failed == null) {
        try {
          beforeBatch.accept(sequence);
          long t0 = System.nanoTime();
          long batchBytes = 0;
          long batchLoaded = 0;
          try {
            StagedFence staged = batch.staged();
            if (staged == null) {
              for (Copy c : batch.copies()) {
                copy(c, 0, c.bytes());
                batchBytes += c.bytes();
                if (c.direction() == Direction.HOST_TO_DEVICE) {
                  batchLoaded += c.bytes();
                }
              }
              deviceBytes.awaitCopies();
            } else {
              LoadStages stages = staged.stages();
              for (int s = 0; s < stages.numStages(); s++) {
                for (Copy c : batch.copies()) {
                  long length = stages.length(c.group(), s);
                  if (length > 0) {
                    copy(c, stages.offset(c.group(), s), length);
                    batchBytes += length;
                    if (c.direction() == Direction.HOST_TO_DEVICE) {
                      batchLoaded += length;
                    }
                  }
                }
                deviceBytes.awaitCopies();
                staged.stageDone(s);
              }
            }
          } finally {
            long nanos = System.nanoTime() - t0;
            copyNanos += nanos;
            if (batchLoaded > 0) {
              loadedBytes += batchLoaded;
              if (batch.staged() != null) {
                stagedLoadedBytes += batchLoaded;
              }
              loadNanos +=
                  batchLoaded == batchBytes
                      ? nanos
                      : (long) ((double) nanos * batchLoaded / batchBytes);
            }
          }
        } catch (Throwable t) {
          failure = new Failure(sequence, t);
          batch.fence().fail(t);
          if (batch.staged() != null) {
            batch.staged().fail(t);
          }
        }
      } else {
        batch.fence().fail(notRun(sequence, failed));
        if (batch.staged() != null) {
          batch.staged().fail(batch.fence().failure());
        }
      }
      lock.lock();
      try {
        completedSequence = sequence;
        pending--;
        if (batch.background()) {
          pendingBackground--;
        }
        progress.signalAll();
      } finally {
        lock.unlock();
      }
    }
  }

  /** Queues the copy of bytes {@code [from, from + length)} of {@code c}'s block (copy thread). */
  private void copy(Copy c, long from, long length) {
    switch (c.direction()) {
      case HOST_TO_DEVICE ->
          deviceBytes.copyFromHost(
              hostBlocks.asSlice(c.srcOffset() + from, length), c.dstOffset() + from);
      case DEVICE_TO_HOST ->
          deviceBytes.copyToHost(
              c.srcOffset() + from, hostBlocks.asSlice(c.dstOffset() + from, length));
      case WITHIN_DEVICE ->
          deviceBytes.copyWithin(c.srcOffset() + from, c.dstOffset() + from, length);
    }
    copiedBytes += length;
  }

  private static IllegalStateException notRun(long sequence, Failure failed) {
    return new IllegalStateException(
        "copy batch " + sequence + " did not run: batch " + failed.sequence() + " failed",
        failed.cause());
  }

  /**
   * Stops accepting batches, lets the copy thread finish every batch already submitted, and waits
   * for it to end. Later calls return at once.
   *
   * @throws IllegalStateException when called on the copy thread itself
   */
  @Override
  public void close() {
    if (Thread.currentThread() == thread) {
      throw new IllegalStateException("DeviceHandle cannot be closed from its own copy thread");
    }
    lock.lock();
    try {
      closing = true;
      work.signalAll();
    } finally {
      lock.unlock();
    }
    boolean interrupted = false;
    while (true) {
      try {
        thread.join();
        break;
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }
}

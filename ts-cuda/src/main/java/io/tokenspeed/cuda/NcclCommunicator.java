package io.tokenspeed.cuda;

import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One rank's NCCL communicator ({@code ncclComm_t}), opened by {@link Nccl#open}: the {@link
 * DeviceCollective} of a replica whose ranks run on several GPUs. Its collectives are float32 and
 * enqueued on the stream the caller gives; they return once enqueued and complete in stream order
 * (a rank's kernels issued after them on that stream read the result). Every rank issues the same
 * collectives in the same order.
 *
 * <p>Calls come from one thread at a time (the rank's), on which the rank's GPU is bound; only
 * {@link #abort()} may come from another thread, to free a rank stuck waiting for a peer that is
 * gone. A failed call throws a {@link CudaException} naming the call and NCCL's error; errors that
 * arise later, while the work runs (a peer gone), are reported by {@link #checkAsyncError()}.
 */
public final class NcclCommunicator implements DeviceCollective {
  private final Nccl nccl;
  private final long comm;
  private final int rank;
  private final int size;
  private final AtomicBoolean released = new AtomicBoolean();

  NcclCommunicator(Nccl nccl, long comm, int rank, int size) {
    this.nccl = nccl;
    this.comm = comm;
    this.rank = rank;
    this.size = size;
  }

  @Override
  public int rank() {
    return rank;
  }

  @Override
  public int size() {
    return size;
  }

  /**
   * Sums {@code count} float32 values at {@code buffer} over the ranks in place ({@code
   * ncclAllReduce} with the same send and receive buffer, {@code ncclSum}), on {@code stream}.
   */
  @Override
  public void allReduceSum(long buffer, long count, long stream) {
    if (count < 0) {
      throw new IllegalArgumentException("count=" + count + " must not be negative");
    }
    nccl.allReduceSum(
        buffer,
        buffer,
        count,
        handle(),
        stream,
        "ncclAllReduce(" + count + " floats, " + this + ")");
  }

  /**
   * Concatenates the ranks' {@code countPerRank} float32 values at {@code send} in rank order into
   * {@code recv} on every rank ({@code ncclAllGather}), on {@code stream}: rank r's values land at
   * element {@code r * countPerRank} of {@code recv}, which holds {@code size() * countPerRank}
   * values. In place when {@code send} is {@code recv}'s slot of this rank.
   */
  public void allGather(long send, long recv, long countPerRank, long stream) {
    if (countPerRank < 0) {
      throw new IllegalArgumentException("countPerRank=" + countPerRank + " must not be negative");
    }
    nccl.allGather(
        send,
        recv,
        countPerRank,
        handle(),
        stream,
        "ncclAllGather(" + countPerRank + " floats per rank, " + this + ")");
  }

  /**
   * Throws when the communicator has met an error since its calls returned ({@code
   * ncclCommGetAsyncError}: a peer that is gone, a network failure); a rank that sees one aborts
   * the communicator ({@link #abort()}) rather than wait for work that will not complete.
   *
   * @throws CudaException naming the error
   */
  public void checkAsyncError() {
    int error = nccl.commAsyncError(handle(), "ncclCommGetAsyncError(" + this + ")");
    if (error != Nccl.SUCCESS) {
      throw new CudaException(
          "NCCL communicator (" + this + ")", error, nccl.describe(error, comm));
    }
  }

  /**
   * Frees the communicator ({@code ncclCommDestroy}), after the work it was given has completed;
   * later calls do nothing, and so does a call after {@link #abort()}.
   */
  @Override
  public void close() {
    if (released.compareAndSet(false, true)) {
      nccl.commDestroy(comm, "ncclCommDestroy(" + this + ")");
    }
  }

  /**
   * Frees the communicator at once ({@code ncclCommAbort}), stopping the operations still running
   * on the GPU: for a rank that stops on an error, or whose peers are gone. May come from another
   * thread than the rank's; later calls, and {@link #close()}, do nothing.
   */
  public void abort() {
    if (released.compareAndSet(false, true)) {
      nccl.commAbort(comm, "ncclCommAbort(" + this + ")");
    }
  }

  private long handle() {
    if (released.get()) {
      throw new IllegalStateException("the NCCL communicator of " + this + " is closed");
    }
    return comm;
  }

  @Override
  public String toString() {
    return "rank " + rank + " of " + size;
  }
}

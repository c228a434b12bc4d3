package io.tokenspeed.cuda;

/**
 * The collective of a tensor-parallel replica's ranks over their GPUs' memory: what a sharded GPU
 * model sums its partial products with. Each rank runs one process on its own GPU; every call is
 * issued by every rank in the same order (a collective), on the rank's compute stream, and
 * completes in stream order, so the kernels issued after it read the sum.
 *
 * <p>{@link #single()} is the replica of one rank (nothing to sum); the NCCL communicator is the
 * one across GPUs. The host-side agreements of the ranks (the engine's round) use the replica's
 * {@code io.tokenspeed.model.parallel.Collective}, not this.
 */
public interface DeviceCollective extends AutoCloseable {

  /** This rank, in {@code [0, size())}. */
  int rank();

  /** Ranks of the replica. */
  int size();

  /**
   * Replaces {@code count} float32 values at device address {@code buffer} with their sum over the
   * ranks, on {@code stream} (every rank's buffer holds the same sum afterwards).
   */
  void allReduceSum(long buffer, long count, long stream);

  /** Frees the communicator; the collective must not be used afterwards. */
  @Override
  void close();

  /** The collective of a replica of one rank: the sum of one rank's values is its values. */
  static DeviceCollective single() {
    return Single.INSTANCE;
  }

  /** {@link #single()}. */
  enum Single implements DeviceCollective {
    INSTANCE;

    @Override
    public int rank() {
      return 0;
    }

    @Override
    public int size() {
      return 1;
    }

    @Override
    public void allReduceSum(long buffer, long count, long stream) {}

    @Override
    public void close() {}
  }
}

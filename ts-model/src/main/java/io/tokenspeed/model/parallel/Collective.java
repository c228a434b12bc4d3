package io.tokenspeed.model.parallel;

/**
 * The data-plane collective of one tensor-parallel replica: the operations the sharded forward pass
 * needs to join its ranks' partial results. Every rank calls the same operations in the same order
 * with the same lengths; a call returns when this rank's result is complete.
 *
 * <p>Contract every implementation keeps:
 *
 * <ul>
 *   <li><b>Identical results on every rank.</b> {@link #allReduceSum} adds the ranks' values in
 *       rank order (0, 1, ..., size − 1) on every rank, so every rank ends with the same bits; the
 *       sharded forward pass relies on it (every rank samples the same token from the same logits).
 *       The order differs from a single rank's summation, so results differ from TP = 1 by rounding
 *       only.
 *   <li><b>Bounded waits.</b> A rank that does not arrive within the collective's timeout (dead,
 *       frozen, or diverged onto another operation) makes the call fail with a {@link
 *       CollectiveException} naming the missing ranks; a failed collective stays failed, and the
 *       other ranks' calls fail as soon as they see it.
 *   <li><b>One thread per rank.</b> Calls on one instance come from one thread at a time.
 * </ul>
 *
 * The interface hides the transport: shared memory between the processes of one host ({@link
 * SharedMemoryCollective}), or a GPU library such as NCCL behind the same calls.
 */
public interface Collective extends AutoCloseable {

  /** This rank, in {@code [0, size)}. */
  int rank();

  /** The number of ranks. */
  int size();

  /**
   * Replaces {@code data[offset, offset + length)} on every rank with the element-wise sum of every
   * rank's values there, added in rank order.
   *
   * @throws CollectiveException when a rank does not arrive in time or the collective failed
   */
  void allReduceSum(float[] data, int offset, int length);

  /**
   * Concatenates the ranks' {@code local} arrays in rank order into {@code out} on every rank: rank
   * r contributes {@code counts[r]} values ({@code local.length >= counts[rank()]}), written at
   * offset {@code counts[0] + ... + counts[r-1]} of {@code out}.
   *
   * @throws CollectiveException when a rank does not arrive in time or the collective failed
   */
  void allGather(float[] local, int[] counts, float[] out);

  /**
   * Marks the collective failed for every rank (their waiting and later calls throw at once, naming
   * this rank and {@code reason}); for a rank that stops on an error of its own.
   */
  void abort(String reason);

  /** Releases this rank's resources; other ranks' later calls fail with this rank named. */
  @Override
  void close();

  /** The collective of a replica of one rank: every operation is a copy or nothing. */
  static Collective single() {
    return SingleRank.INSTANCE;
  }
}

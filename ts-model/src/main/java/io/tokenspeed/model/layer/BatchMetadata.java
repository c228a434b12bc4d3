package io.tokenspeed.model.layer;

import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kv.KvCache;
import io.tokenspeed.model.parallel.Collective;

/**
 * What every layer of one forward pass needs to know about the batch, flattened to token rows.
 *
 * <pre>
 *   rows:        | request 0 chunk (n0 tokens) | request 1 (1 decode token) | request 2 chunk ... |
 *   positions:   | s0, s0+1, ..., s0+n0-1      | s1                         | s2, ...             |
 *   tokenRequest:| 0 ...                     0 | 1                          | 2 ...               |
 *   blockTables[request][group][row] = physical block id of rows [row·bg, (row+1)·bg) of that group
 * </pre>
 *
 * @param pool the threads the kernels split work over
 * @param numTokens rows of the batch
 * @param positions absolute position of each row in its request
 * @param tokenRequest the request index of each row
 * @param blockTables per request, per cache group, the block table
 * @param kv the pools the block tables point into
 * @param collective the tensor-parallel ranks' collective (a single rank's without TP)
 */
public record BatchMetadata(
    ComputePool pool,
    int numTokens,
    int[] positions,
    int[] tokenRequest,
    int[][][] blockTables,
    KvCache kv,
    Collective collective) {

  public BatchMetadata {
    if (positions.length != numTokens || tokenRequest.length != numTokens) {
      throw new IllegalArgumentException(
          "num_tokens="
              + numTokens
              + " positions="
              + positions.length
              + " token_request="
              + tokenRequest.length);
    }
  }

  /**
   * Sums every rank's partial {@code x[0, length)} in place (rank order, the same bits on every
   * rank): the end of a layer whose output projection is split over the ranks. Nothing without TP.
   */
  public void reducePartial(float[] x, int length) {
    if (collective.size() > 1) {
      collective.allReduceSum(x, 0, length);
    }
  }

  /** Block tables of group {@code groupId}, indexed by request. */
  public int[][] tablesOfGroup(int groupId) {
    int[][] out = new int[blockTables.length][];
    for (int r = 0; r < blockTables.length; r++) {
      out[r] = blockTables[r][groupId];
    }
    return out;
  }
}

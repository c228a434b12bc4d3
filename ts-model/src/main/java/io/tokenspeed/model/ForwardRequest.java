package io.tokenspeed.model;

import java.util.Arrays;

/**
 * One request's share of a forward batch: a prefill chunk or a decode step.
 *
 * <pre>
 *   positions:  0 ........ startPosition-1 | startPosition ... startPosition+n-1
 *               KV already in the blocks   | tokenIds (computed now, KV written now)
 *   blockTables[g][row] = physical block of group g holding tokens [row·bg, (row+1)·bg)
 * </pre>
 *
 * A decode step is a chunk of one token. The block tables must cover every row up to the chunk's
 * last token with real blocks (ids 1 .. numBlocks-1, no repeats); entries past that are ignored. In
 * a sliding-window group, rows entirely left of the chunk's first window (tokens {@code <
 * startPosition - W + 1}) may be holes (0): they are never read.
 *
 * @param tokenIds the tokens computed in this step (at least one)
 * @param startPosition tokens of this request whose KV is already in the blocks
 * @param blockTables per cache group, the request's block table
 * @param allLogits return logits for every token of the chunk (else only for the last)
 */
public record ForwardRequest(
    int[] tokenIds, int startPosition, int[][] blockTables, boolean allLogits) {

  public ForwardRequest {
    if (tokenIds == null || tokenIds.length == 0) {
      throw new IllegalArgumentException("token_ids must hold at least one token");
    }
    if (startPosition < 0) {
      throw new IllegalArgumentException(
          "start_position=" + startPosition + " must be non-negative");
    }
    if (blockTables == null || blockTables.length == 0) {
      throw new IllegalArgumentException("block_tables must hold one table per cache group");
    }
    tokenIds = tokenIds.clone();
    int[][] copy = new int[blockTables.length][];
    for (int g = 0; g < copy.length; g++) {
      if (blockTables[g] == null) {
        throw new IllegalArgumentException("block_tables[" + g + "] is missing");
      }
      copy[g] = blockTables[g].clone();
    }
    blockTables = copy;
  }

  /** Tokens computed in this step. */
  public int numTokens() {
    return tokenIds.length;
  }

  /** Rows of logits this request gets back. */
  public int numLogitRows() {
    return allLogits ? tokenIds.length : 1;
  }

  @Override
  public String toString() {
    return "ForwardRequest[tokens="
        + tokenIds.length
        + ", startPosition="
        + startPosition
        + ", blockTables="
        + Arrays.deepToString(blockTables)
        + ", allLogits="
        + allLogits
        + "]";
  }
}

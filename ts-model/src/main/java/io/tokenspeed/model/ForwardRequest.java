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
 * <p>The public constructor copies the arrays; {@link #sharing} does not.
 */
public final class ForwardRequest {
  private final int[] tokenIds;
  private final int startPosition;
  private final int[][] blockTables;
  private final boolean allLogits;

  /** A request over copies of {@code tokenIds} and {@code blockTables}. */
  public ForwardRequest(int[] tokenIds, int startPosition, int[][] blockTables, boolean allLogits) {
    this(tokenIds, startPosition, blockTables, allLogits, true);
  }

  /**
   * A request over the caller's own arrays, not copied: the caller hands them over and changes none
   * of them while the batch is in use (the engine's round hands every request's tables to the model
   * each round, and reuses a decode request's tables from round to round while the scheduler's do
   * not change; copying each round's tables again cost the loop half its time at 64 running
   * requests).
   */
  public static ForwardRequest sharing(
      int[] tokenIds, int startPosition, int[][] blockTables, boolean allLogits) {
    return new ForwardRequest(tokenIds, startPosition, blockTables, allLogits, false);
  }

  private ForwardRequest(
      int[] tokenIds, int startPosition, int[][] blockTables, boolean allLogits, boolean copy) {
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
    int[][] tables = copy ? new int[blockTables.length][] : blockTables;
    for (int g = 0; g < tables.length; g++) {
      if (blockTables[g] == null) {
        throw new IllegalArgumentException("block_tables[" + g + "] is missing");
      }
      if (copy) {
        tables[g] = blockTables[g].clone();
      }
    }
    this.tokenIds = copy ? tokenIds.clone() : tokenIds;
    this.startPosition = startPosition;
    this.blockTables = tables;
    this.allLogits = allLogits;
  }

  /** The tokens computed in this step (not a copy: read only). */
  public int[] tokenIds() {
    return tokenIds;
  }

  /** Tokens of this request whose KV is already in the blocks. */
  public int startPosition() {
    return startPosition;
  }

  /** Per cache group, the request's block table (not a copy: read only). */
  public int[][] blockTables() {
    return blockTables;
  }

  /** Whether the step returns logits for every token of the chunk (else only for the last). */
  public boolean allLogits() {
    return allLogits;
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

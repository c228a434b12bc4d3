package io.tokenspeed.server.trace;

import java.util.Arrays;

/**
 * One request of a trace in the format of the Mooncake FAST'25 traces: when it arrives, how many
 * input tokens it has, how many it generates, and the ids of its input's blocks of {@link
 * Trace#BLOCK_TOKENS} tokens. Requests that share a prefix share its leading ids; the last block
 * holds what is left of the input, so {@code (ids - 1) · 512 < inputLength <= ids · 512}.
 *
 * @param timestampMs arrival, in milliseconds from the trace's start
 * @param inputLength input tokens, at least 1
 * @param outputLength tokens to generate, at least 0
 * @param hashIds the blocks' ids, each at least 0
 */
public record TraceRequest(long timestampMs, int inputLength, int outputLength, int[] hashIds) {

  public TraceRequest {
    if (timestampMs < 0) {
      throw new IllegalArgumentException("timestamp=" + timestampMs + " must be >= 0");
    }
    if (outputLength < 0) {
      throw new IllegalArgumentException("output_length=" + outputLength + " must be >= 0");
    }
    if (hashIds == null || hashIds.length == 0) {
      throw new IllegalArgumentException("hash_ids must name at least one block");
    }
    hashIds = hashIds.clone();
    for (int id : hashIds) {
      if (id < 0) {
        throw new IllegalArgumentException("hash_ids holds " + id + ": ids must be >= 0");
      }
    }
    long most = (long) hashIds.length * Trace.BLOCK_TOKENS;
    long fewest = most - Trace.BLOCK_TOKENS + 1;
    if (inputLength < fewest || inputLength > most) {
      throw new IllegalArgumentException(
          "input_length="
              + inputLength
              + " does not fit "
              + hashIds.length
              + " blocks of "
              + Trace.BLOCK_TOKENS
              + " tokens: it must be in ["
              + fewest
              + ", "
              + most
              + "]");
    }
  }

  /** Blocks of the input. */
  public int numBlocks() {
    return hashIds.length;
  }

  /** Tokens of block {@code j}: {@link Trace#BLOCK_TOKENS}, but for the last, what is left. */
  public int blockTokens(int j) {
    return j < hashIds.length - 1
        ? Trace.BLOCK_TOKENS
        : inputLength - (hashIds.length - 1) * Trace.BLOCK_TOKENS;
  }

  /** The id of block {@code j}. */
  public int hashId(int j) {
    return hashIds[j];
  }

  @Override
  public int[] hashIds() {
    return hashIds.clone();
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof TraceRequest r
        && r.timestampMs == timestampMs
        && r.inputLength == inputLength
        && r.outputLength == outputLength
        && Arrays.equals(r.hashIds, hashIds);
  }

  @Override
  public int hashCode() {
    return Long.hashCode(timestampMs) * 31
        + inputLength * 17
        + outputLength
        + Arrays.hashCode(hashIds);
  }

  @Override
  public String toString() {
    return "TraceRequest[timestamp="
        + timestampMs
        + ", input_length="
        + inputLength
        + ", output_length="
        + outputLength
        + ", blocks="
        + hashIds.length
        + "]";
  }
}

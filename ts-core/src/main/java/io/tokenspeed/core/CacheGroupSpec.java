package io.tokenspeed.core;

import java.util.List;

/**
 * One cache group: an attention structure of the model with its own block granularity and bytes.
 *
 * <p>Block row {@code i} of a request covers tokens {@code [i*bg, (i+1)*bg)}. For a {@link
 * GroupKind.StateCheckpoints state} group row {@code i} is the checkpoint taken at boundary {@code
 * (i+1)*bg}. The granularity must divide the layout's page size; {@link CacheLayout} checks that.
 *
 * @param groupId position of the group in its layout, {@code 0..n-1}
 * @param kind what the group keeps
 * @param blockGranularity tokens per block ({@code bg})
 * @param fields the block's tensor slices on one rank, in layout order
 * @param sharding how blocks spread over attention-TP ranks
 */
public record CacheGroupSpec(
    int groupId, GroupKind kind, int blockGranularity, List<CacheField> fields, Sharding sharding) {

  public CacheGroupSpec {
    if (groupId < 0) {
      throw new IllegalArgumentException("group_id=" + groupId + " must be non-negative");
    }
    if (kind == null) {
      throw new IllegalArgumentException("group " + groupId + " kind is missing");
    }
    if (blockGranularity < 1) {
      throw new IllegalArgumentException(
          "group " + groupId + " block_granularity=" + blockGranularity + " must be at least 1");
    }
    if (fields == null || fields.isEmpty()) {
      throw new IllegalArgumentException("group " + groupId + " needs at least one field");
    }
    fields = List.copyOf(fields);
    payloadBytes(groupId, fields); // refuses a sum past Long.MAX_VALUE
    if (sharding == null) {
      sharding = new Sharding.Replicated();
    }
    if (kind instanceof GroupKind.StateCheckpoints && sharding instanceof Sharding.PageCyclic) {
      throw new IllegalArgumentException(
          "group " + groupId + " kind=state cannot be page_cyclic: checkpoints are not paged");
    }
  }

  /** Payload bytes of one block on one rank: the sum of the field sizes. */
  public long bytesPerBlock() {
    return payloadBytes(groupId, fields);
  }

  /** The sum of {@code fields}' sizes; refuses one past {@link Long#MAX_VALUE}. */
  private static long payloadBytes(int groupId, List<CacheField> fields) {
    long total = 0;
    for (CacheField f : fields) {
      total += f.bytesPerBlock(); // each at least 1: an overflow turns the sum negative
      if (total < 0) {
        throw new IllegalArgumentException(
            "group "
                + groupId
                + " fields' bytes_per_block add up to more than "
                + Long.MAX_VALUE
                + " bytes");
      }
    }
    return total;
  }

  /** Rows of this group needed to hold {@code numTokens} tokens: {@code ceil(numTokens / bg)}. */
  public int rowsFor(int numTokens) {
    return Math.ceilDiv(numTokens, blockGranularity);
  }

  /**
   * The first row this group needs to cover boundary {@code b}; the needed rows run from here up to
   * {@code rowsFor(b)} (exclusive). Full history needs every row below B; a sliding window of W
   * tokens the rows holding tokens {@code [B-W+1, B-1]} (none when W = 1); a state group only the
   * checkpoint at B, row {@code ceil(B/bg) - 1} (none when B = 0). Every matcher, query planner and
   * key listing uses this one rule.
   */
  public int firstNeededRow(int b) {
    if (b < 0) {
      throw new IllegalArgumentException("boundary=" + b + " must be non-negative");
    }
    int end = rowsFor(b);
    return switch (kind) {
      case GroupKind.FullHistory f -> 0;
      case GroupKind.SlidingWindow(int w) -> {
        int lo = Math.max(0, b - w + 1);
        yield lo > b - 1 ? end : lo / blockGranularity;
      }
      case GroupKind.StateCheckpoints s -> b == 0 ? 0 : end - 1;
    };
  }
}

package io.tokenspeed.core;

/**
 * How a group's bytes are spread over the replica's attention-TP ranks.
 *
 * <ul>
 *   <li>{@link Replicated}: every rank holds the whole block (for example recurrent state).
 *   <li>{@link HeadPartitioned}: every rank holds its heads' slice of every block.
 *   <li>{@link PageCyclic}: whole blocks are dealt round-robin over {@code shardCount} owners;
 *       virtual block {@code v > 0} belongs to owner {@code (v-1) mod D} at local page {@code (v-1)
 *       div D + 1}.
 * </ul>
 */
public sealed interface Sharding
    permits Sharding.Replicated, Sharding.HeadPartitioned, Sharding.PageCyclic {

  /** The name used in configuration and in the namespace identity. */
  String wireName();

  /** Number of page owners (1 unless page-cyclic). */
  int shardCount();

  /** Parses a sharding by name; {@code shardCount} is read only for {@code page_cyclic}. */
  static Sharding parse(String name, Integer shardCount) {
    Sharding sharding =
        switch (name == null ? "replicated" : name) {
          case "replicated" -> new Replicated();
          case "head_partitioned" -> new HeadPartitioned();
          case "page_cyclic" -> {
            if (shardCount == null) {
              throw new IllegalArgumentException("sharding=page_cyclic needs shard_count");
            }
            yield new PageCyclic(shardCount);
          }
          default ->
              throw new IllegalArgumentException(
                  "sharding="
                      + name
                      + " is unknown; allowed: replicated, head_partitioned, page_cyclic");
        };
    if (shardCount != null && !(sharding instanceof PageCyclic)) {
      throw new IllegalArgumentException(
          "shard_count=" + shardCount + " applies only to sharding=page_cyclic, not " + name);
    }
    return sharding;
  }

  /** Every rank holds the whole block. */
  record Replicated() implements Sharding {
    @Override
    public String wireName() {
      return "replicated";
    }

    @Override
    public int shardCount() {
      return 1;
    }
  }

  /** Every rank holds a slice of heads of every block. */
  record HeadPartitioned() implements Sharding {
    @Override
    public String wireName() {
      return "head_partitioned";
    }

    @Override
    public int shardCount() {
      return 1;
    }
  }

  /** Whole blocks dealt round-robin over {@code shardCount} owners. */
  record PageCyclic(int shardCount) implements Sharding {
    public PageCyclic {
      if (shardCount < 1) {
        throw new IllegalArgumentException("shard_count=" + shardCount + " must be at least 1");
      }
    }

    @Override
    public String wireName() {
      return "page_cyclic";
    }

    /** The owner of virtual block {@code v} (v &gt; 0). */
    public int ownerOf(int virtualBlock) {
      if (virtualBlock <= 0) {
        throw new IllegalArgumentException("virtual block=" + virtualBlock + " must be positive");
      }
      return (virtualBlock - 1) % shardCount;
    }

    /** The owner-local page of virtual block {@code v} (v &gt; 0); local page 0 is null. */
    public int localPageOf(int virtualBlock) {
      if (virtualBlock <= 0) {
        throw new IllegalArgumentException("virtual block=" + virtualBlock + " must be positive");
      }
      return (virtualBlock - 1) / shardCount + 1;
    }
  }
}

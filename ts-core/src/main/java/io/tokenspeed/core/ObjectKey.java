package io.tokenspeed.core;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The key of one object in the shared store:
 *
 * <pre>
 *   {namespace}_{content hash}|g{group}|o{page offset}|r{payload replica}
 *   tsl3-3f2a...e1_9c0b...77|g1|o3|r0
 * </pre>
 *
 * <p>The payload replica is {@code attention_tp_rank / shard_count} for page-cyclic groups, so a
 * new Host allocation may restore the object on another cyclic owner, and the TP rank otherwise
 * (head-partitioned and replicated groups keep rank-local keys). DP replica ids are never part of a
 * key: every compatible replica shares the same objects.
 */
public record ObjectKey(Namespace namespace, CacheKey cacheKey, int payloadReplica) {

  private static final Pattern FORMAT =
      Pattern.compile(
          "(tsl3-[0-9a-f]{64})_([0-9a-f]{64})\\|g(\\d{1,9})\\|o(\\d{1,9})\\|r(\\d{1,9})");

  public ObjectKey {
    if (namespace == null || cacheKey == null) {
      throw new IllegalArgumentException("namespace and cache key are required");
    }
    if (payloadReplica < 0) {
      throw new IllegalArgumentException(
          "payload_replica=" + payloadReplica + " must be non-negative");
    }
  }

  /** The key of {@code cacheKey} as stored by attention-TP rank {@code attentionTpRank}. */
  public static ObjectKey forRank(
      Namespace namespace, CacheKey cacheKey, CacheGroupSpec group, int attentionTpRank) {
    if (group.groupId() != cacheKey.groupId()) {
      throw new IllegalArgumentException(
          "key group=" + cacheKey.groupId() + " does not match group spec " + group.groupId());
    }
    return new ObjectKey(namespace, cacheKey, payloadReplica(group, attentionTpRank));
  }

  /** {@code rank / shard_count} for page-cyclic groups, the rank otherwise. */
  public static int payloadReplica(CacheGroupSpec group, int attentionTpRank) {
    if (attentionTpRank < 0) {
      throw new IllegalArgumentException(
          "attention_tp_rank=" + attentionTpRank + " must be non-negative");
    }
    return switch (group.sharding()) {
      case Sharding.PageCyclic pc -> attentionTpRank / pc.shardCount();
      case Sharding.HeadPartitioned h -> attentionTpRank;
      case Sharding.Replicated r -> attentionTpRank;
    };
  }

  /** Parses the text form; rejects anything that {@link #toString()} could not have produced. */
  public static ObjectKey parse(String text) {
    Matcher m = FORMAT.matcher(text == null ? "" : text);
    if (!m.matches()) {
      throw new IllegalArgumentException("object key=" + text + " is not a tsl3 object key");
    }
    return new ObjectKey(
        new Namespace(m.group(1)),
        new CacheKey(
            Integer.parseInt(m.group(3)),
            ContentHash.fromHex(m.group(2)),
            Integer.parseInt(m.group(4))),
        Integer.parseInt(m.group(5)));
  }

  /** The store key. */
  @Override
  public String toString() {
    String ns = namespace.value();
    StringBuilder out = new StringBuilder(ns.length() + 1 + 2 * ContentHash.BYTES + 24);
    out.append(ns).append('_');
    cacheKey.pageHash().appendHex(out);
    return out.append("|g")
        .append(cacheKey.groupId())
        .append("|o")
        .append(cacheKey.pageOffset())
        .append("|r")
        .append(payloadReplica)
        .toString();
  }
}

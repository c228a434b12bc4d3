package io.tokenspeed.engine;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.model.parallel.Shard;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;

/**
 * How a request's KV moves from a prefill replica of {@code p} ranks to a decode replica of {@code
 * d} ranks (docs/pd.md, "Tensor parallelism"): one transfer per pair of ranks (prefill rank i,
 * decode rank j) that has anything to move, each on its own room of the transport.
 *
 * <pre>
 *   KV heads Hkv, split over each replica's ranks as {@link Shard#kvHeads} says:
 *     prefill rank i holds P_i, decode rank j needs D_j
 *     head h comes from src(h) = the lowest prefill rank whose P_i holds it
 *     pair (i, j) moves the heads S_ij = { h in D_j : src(h) = i }   (a contiguous range)
 *   a head-partitioned group's block is | field 0 | field 1 | ... |, each field head-major
 *     (PagedKvPool): the heads S_ij of one field are one contiguous slice on either side
 *     S_ij = P_i = D_j (same split on both sides): the pair moves whole blocks, one unit per row
 *     otherwise: one unit per (row, field) of |S_ij| heads, read from the sender's slice of the
 *       field and written into the receiver's slice
 *   a replicated group (State checkpoints): whole blocks, from the prefill rank src(D_j.from)
 *     (rank 0 when the layout has no head-partitioned group)
 * </pre>
 *
 * A pair's unit of a group is what the transport calls a block: the BOOTSTRAP declares its bytes
 * and the ACK how many the decode rank reserved; a group the pair moves nothing of declares units
 * of one byte and reserves none. Both sides compute the same pairs from the two replicas' sizes and
 * the model's KV heads alone; each side applies the offsets of its own layout.
 *
 * <p>A single rank on both sides moves whole blocks over one pair (0, 0), on the room the router
 * chose. Page-split KV ({@link Shard.KvSplit#PAGES}) is not transferred: its settings are refused.
 */
final class PdShards {
  private final CacheLayout layout;
  private final int kvHeads;
  private final Shard shard;
  private final boolean prefill;

  /**
   * The plans of one side: {@code layout} is this rank's, {@code shard} its place in its replica,
   * {@code prefill} whether it sends, {@code kvHeads} the model's KV heads (any positive value for
   * a model without head-partitioned groups).
   */
  PdShards(CacheLayout layout, int kvHeads, Shard shard, boolean prefill) {
    if (kvHeads < 1) {
      throw new IllegalArgumentException("kv_heads=" + kvHeads + " must be at least 1");
    }
    for (CacheGroupSpec g : layout.groups()) {
      if (g.sharding() instanceof Sharding.PageCyclic) {
        throw new IllegalArgumentException(
            "group "
                + g.groupId()
                + " is page-cyclic: disaggregated serving moves KV split by heads only");
      }
    }
    this.layout = layout;
    this.kvHeads = kvHeads;
    this.shard = shard;
    this.prefill = prefill;
  }

  /**
   * One pair's transfer as this side sees it.
   *
   * @param prefillRank the sending rank
   * @param decodeRank the receiving rank
   * @param unitBytes per group, the bytes of one unit (1 where the pair moves nothing)
   * @param unitsPerRow per group, the units of one block row (0 where the pair moves nothing)
   * @param offsets per group, each unit's byte offset inside this side's block
   */
  record Pair(
      int prefillRank, int decodeRank, int[] unitBytes, int[] unitsPerRow, long[][] offsets) {

    /** Whether the pair moves anything. */
    boolean moves() {
      for (int u : unitsPerRow) {
        if (u > 0) {
          return true;
        }
      }
      return false;
    }

    /** The units of group {@code g} for {@code rows} block rows: what the ACK reserves. */
    int units(int g, int rows) {
      return Math.multiplyExact(rows, unitsPerRow[g]);
    }
  }

  /**
   * The pairs this side takes part in that move anything, for a peer replica of {@code peerRanks}
   * ranks, in the peer's rank order.
   *
   * @throws IllegalArgumentException when the peer's size cannot split the model's KV heads
   */
  List<Pair> pairs(int peerRanks) {
    if (peerRanks < 1) {
      throw new IllegalArgumentException("peer ranks=" + peerRanks + " must be at least 1");
    }
    List<Pair> out = new ArrayList<>();
    for (int peer = 0; peer < peerRanks; peer++) {
      Pair pair =
          prefill
              ? pair(shard.rank(), shard.size(), peer, peerRanks)
              : pair(peer, peerRanks, shard.rank(), shard.size());
      if (pair.moves()) {
        out.add(pair);
      }
    }
    return out;
  }

  private Pair pair(int i, int p, int j, int d) {
    int groups = layout.numGroups();
    int[] unitBytes = new int[groups];
    int[] unitsPerRow = new int[groups];
    long[][] offsets = new long[groups][];
    Shard.Range dj = heads(j, d, "decode");
    Shard.Range pi = heads(i, p, "prefill");
    Shard.Range mine = prefill ? pi : dj;
    Shard.Range moved = moved(i, p, dj);
    boolean anyHeads = false;
    for (CacheGroupSpec g : layout.groups()) {
      anyHeads |= g.sharding() instanceof Sharding.HeadPartitioned;
    }
    int replicatedSource = anyHeads ? source(dj.from(), p) : 0;
    for (CacheGroupSpec g : layout.groups()) {
      int gid = g.groupId();
      unitBytes[gid] = 1;
      offsets[gid] = new long[0];
      if (!(g.sharding() instanceof Sharding.HeadPartitioned)) {
        if (i == replicatedSource) {
          whole(g, unitBytes, unitsPerRow, offsets);
        }
        continue;
      }
      if (moved.count() == 0) {
        continue;
      }
      if (moved.equals(pi) && moved.equals(dj)) {
        whole(g, unitBytes, unitsPerRow, offsets);
        continue;
      }
      List<CacheField> fields = g.fields();
      long[] off = new long[fields.size()];
      long unit = -1;
      long fieldStart = 0;
      for (int f = 0; f < fields.size(); f++) {
        long bytes = fields.get(f).bytesPerBlock();
        if (bytes % mine.count() != 0) {
          throw new IllegalArgumentException(
              "field "
                  + fields.get(f).name()
                  + " of "
                  + bytes
                  + " bytes does not split into "
                  + mine.count()
                  + " heads");
        }
        long perHead = bytes / mine.count();
        long u = perHead * moved.count();
        if (unit >= 0 && u != unit) {
          throw new IllegalArgumentException(
              "group "
                  + gid
                  + "'s fields differ in size: a head-partitioned group moves between replicas"
                  + " of different splits only when its fields are alike");
        }
        unit = u;
        off[f] = fieldStart + perHead * (moved.from() - mine.from());
        fieldStart += bytes;
      }
      unitBytes[gid] = Math.toIntExact(unit);
      unitsPerRow[gid] = fields.size();
      offsets[gid] = off;
    }
    return new Pair(i, j, unitBytes, unitsPerRow, offsets);
  }

  private static void whole(
      CacheGroupSpec g, int[] unitBytes, int[] unitsPerRow, long[][] offsets) {
    unitBytes[g.groupId()] = Math.toIntExact(g.bytesPerBlock());
    unitsPerRow[g.groupId()] = 1;
    offsets[g.groupId()] = new long[] {0};
  }

  /** The heads of {@code dj} whose source is prefill rank {@code i} of {@code p}. */
  private Shard.Range moved(int i, int p, Shard.Range dj) {
    int from = -1;
    int count = 0;
    for (int h = dj.from(); h < dj.to(); h++) {
      if (source(h, p) == i) {
        if (from < 0) {
          from = h;
        } else if (from + count != h) {
          throw new IllegalStateException("the heads prefill rank " + i + " sends are not one run");
        }
        count++;
      }
    }
    return new Shard.Range(Math.max(from, 0), count);
  }

  /** The lowest prefill rank of {@code p} that holds KV head {@code h}. */
  private int source(int h, int p) {
    for (int i = 0; i < p; i++) {
      Shard.Range r = heads(i, p, "prefill");
      if (h >= r.from() && h < r.to()) {
        return i;
      }
    }
    throw new IllegalStateException("no prefill rank of " + p + " holds KV head " + h);
  }

  private Shard.Range heads(int rank, int size, String side) {
    try {
      return new Shard(rank, size).kvHeads(kvHeads);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(
          "a "
              + side
              + " replica of "
              + size
              + " ranks cannot split the model's KV heads: "
              + e.getMessage(),
          e);
    }
  }

  /**
   * The room of pair (i, j) of the request's {@code room}: the room itself for (0, 0), else a
   * mixing of the three that both sides compute alike (non-zero).
   */
  static long room(long room, int prefillRank, int decodeRank) {
    if (prefillRank == 0 && decodeRank == 0) {
      return room;
    }
    long z = room + 0x9E3779B97F4A7C15L * (((long) prefillRank << 32) | (decodeRank + 1L));
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    z ^= z >>> 31;
    return z == 0 ? 1 : z;
  }

  /**
   * The identity digest a pair's BOOTSTRAP carries: the model (id, checkpoint revision, weight
   * version), the attention implementation, the layout as every rank of any split shares it (page
   * size, dtype, each group's kind, granularity, sharding and field names, the KV heads), and the
   * pair with both replicas' sizes and its units, so that a decode rank lands only what a prefill
   * rank of the same model computed for exactly this pair.
   */
  byte[] identity(
      String modelId,
      String revision,
      String weightVersion,
      String attentionBackend,
      Pair pair,
      int prefillRanks,
      int decodeRanks) {
    StringBuilder s = new StringBuilder("tokenspeed-pd-identity-v2\n");
    s.append(modelId).append('\n').append(revision).append('\n').append(weightVersion).append('\n');
    s.append(attentionBackend).append('\n');
    s.append(layout.prefixGranularity()).append(' ').append(layout.dtype()).append('\n');
    s.append("kv_heads ").append(kvHeads).append('\n');
    for (CacheGroupSpec g : layout.groups()) {
      s.append(g.groupId()).append(' ').append(g.kind()).append(' ');
      s.append(g.blockGranularity()).append(' ').append(g.sharding().getClass().getSimpleName());
      for (CacheField f : g.fields()) {
        s.append(' ').append(f.name());
      }
      s.append('\n');
    }
    s.append("pair ").append(pair.prefillRank()).append('/').append(prefillRanks);
    s.append(' ').append(pair.decodeRank()).append('/').append(decodeRanks).append('\n');
    for (int g = 0; g < pair.unitBytes().length; g++) {
      s.append(pair.unitBytes()[g]).append('x').append(pair.unitsPerRow()[g]).append(' ');
    }
    try {
      return MessageDigest.getInstance("SHA-256")
          .digest(s.toString().getBytes(StandardCharsets.UTF_8));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is missing from this JDK", e);
    }
  }
}

package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.model.parallel.Shard;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The pairs of ranks between a prefill replica and a decode replica move exactly the decode ranks'
 * blocks (docs/pd.md, "Tensor parallelism"): for random head counts, splits, field counts and block
 * sizes, every prefill rank's blocks are cut from one random model-wide block as {@link
 * io.tokenspeed.model.kv.PagedKvPool} lays them out (head-major fields), every pair's units are
 * copied from the sender's offsets to the receiver's, and each decode rank's blocks come out equal
 * to the ones its own split would hold, every byte written once. Both sides agree on every pair,
 * its units and its room.
 */
class PdShardsTest {
  static LongStream seeds() {
    return LongStream.range(0, 400);
  }

  /** The model: KV heads, fields of the attention group, bytes per head of a field, a State. */
  private record Model(int kvHeads, int fields, int headBytes, boolean state, int stateBytes) {

    /** The layout of rank {@code r} of {@code size}. */
    CacheLayout layout(int r, int size) {
      int local = new Shard(r, size).kvHeads(kvHeads).count();
      List<CacheField> f = new ArrayList<>();
      for (int i = 0; i < fields; i++) {
        f.add(
            new CacheField(
                "layers." + (i / 2) + (i % 2 == 0 ? ".k" : ".v"), (long) local * headBytes));
      }
      List<CacheGroupSpec> groups = new ArrayList<>();
      if (state) {
        groups.add(
            new CacheGroupSpec(
                0,
                new GroupKind.StateCheckpoints(),
                4,
                List.of(new CacheField("layers.0.ssm", stateBytes)),
                new Sharding.Replicated()));
      }
      groups.add(
          new CacheGroupSpec(
              groups.size(), new GroupKind.FullHistory(), 2, f, new Sharding.HeadPartitioned()));
      return new CacheLayout(4, "float32", groups);
    }

    int attentionGroup() {
      return state ? 1 : 0;
    }

    /** Rank r's block of the attention group, cut from the model-wide {@code whole}. */
    byte[] attentionBlock(byte[] whole, int r, int size) {
      Shard.Range h = new Shard(r, size).kvHeads(kvHeads);
      byte[] out = new byte[fields * h.count() * headBytes];
      for (int f = 0; f < fields; f++) {
        System.arraycopy(
            whole,
            (f * kvHeads + h.from()) * headBytes,
            out,
            f * h.count() * headBytes,
            h.count() * headBytes);
      }
      return out;
    }
  }

  private static int[] splitsOf(int kvHeads, SplittableRandom rnd) {
    List<Integer> ok = new ArrayList<>();
    for (int t = 1; t <= 8; t++) {
      if (kvHeads % t == 0 || t % kvHeads == 0) {
        ok.add(t);
      }
    }
    return new int[] {ok.get(rnd.nextInt(ok.size())), ok.get(rnd.nextInt(ok.size()))};
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldLandEveryDecodeRankExactlyItsBlocks(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int[] hkvChoices = {1, 2, 4, 8};
    Model m =
        new Model(
            hkvChoices[rnd.nextInt(hkvChoices.length)],
            2 * (1 + rnd.nextInt(3)),
            4 * (1 + rnd.nextInt(6)),
            rnd.nextBoolean(),
            4 * (1 + rnd.nextInt(10)));
    int[] split = splitsOf(m.kvHeads(), rnd);
    int p = split[0];
    int d = split[1];
    int g = m.attentionGroup();
    byte[] whole = new byte[m.fields() * m.kvHeads() * m.headBytes()];
    rnd.nextBytes(whole);
    byte[] state = new byte[m.stateBytes()];
    rnd.nextBytes(state);

    // every pair as each side sees it
    Map<String, PdShards.Pair> sent = new HashMap<>();
    for (int i = 0; i < p; i++) {
      for (PdShards.Pair pair :
          new PdShards(m.layout(i, p), m.kvHeads(), new Shard(i, p), true).pairs(d)) {
        assertEquals(i, pair.prefillRank());
        sent.put(pair.prefillRank() + "/" + pair.decodeRank(), pair);
      }
    }
    Set<String> received = new HashSet<>();
    for (int j = 0; j < d; j++) {
      CacheLayout mine = m.layout(j, d);
      byte[] want = m.attentionBlock(whole, j, d);
      byte[] got = new byte[want.length];
      int[] writes = new int[want.length];
      byte[] gotState = new byte[state.length];
      int stateWrites = 0;
      for (PdShards.Pair pair : new PdShards(mine, m.kvHeads(), new Shard(j, d), false).pairs(p)) {
        String key = pair.prefillRank() + "/" + pair.decodeRank();
        received.add(key);
        PdShards.Pair from = sent.get(key);
        assertTrue(from != null, "decode rank " + j + " expects pair " + key + " nobody sends");
        assertArrayEquals(from.unitBytes(), pair.unitBytes(), "unit bytes of " + key);
        assertArrayEquals(from.unitsPerRow(), pair.unitsPerRow(), "units per row of " + key);
        byte[] src = m.attentionBlock(whole, pair.prefillRank(), p);
        for (int u = 0; u < pair.unitsPerRow()[g]; u++) {
          int len = pair.unitBytes()[g];
          int s0 = Math.toIntExact(from.offsets()[g][u]);
          int d0 = Math.toIntExact(pair.offsets()[g][u]);
          System.arraycopy(src, s0, got, d0, len);
          for (int b = d0; b < d0 + len; b++) {
            writes[b]++;
          }
        }
        if (m.state() && pair.unitsPerRow()[0] > 0) {
          assertEquals(state.length, pair.unitBytes()[0]);
          System.arraycopy(state, 0, gotState, 0, state.length);
          stateWrites++;
        }
      }
      assertArrayEquals(want, got, "decode rank " + j + " of " + d + " from " + p + " ranks, " + m);
      int[] once = new int[want.length];
      Arrays.fill(once, 1);
      assertArrayEquals(once, writes, "every byte of decode rank " + j + " written once");
      if (m.state()) {
        assertEquals(1, stateWrites, "the State block lands once on decode rank " + j);
        assertArrayEquals(state, gotState);
      }
    }
    assertEquals(sent.keySet(), received, "both sides agree on the pairs");
  }

  @Test
  void shouldMoveWholeBlocksOnOnePairBetweenSingleRanks() {
    Model m = new Model(2, 4, 8, true, 12);
    PdShards one = new PdShards(m.layout(0, 1), 2, new Shard(0, 1), true);
    List<PdShards.Pair> pairs = one.pairs(1);
    assertEquals(1, pairs.size());
    PdShards.Pair pair = pairs.get(0);
    assertArrayEquals(new int[] {12, 4 * 2 * 8}, pair.unitBytes());
    assertArrayEquals(new int[] {1, 1}, pair.unitsPerRow());
    assertEquals(77L, PdShards.room(77, 0, 0), "pair (0, 0) keeps the router's room");
  }

  @Test
  void shouldGiveEveryPairItsOwnNonZeroRoom() {
    SplittableRandom rnd = new SplittableRandom(5);
    for (int n = 0; n < 2000; n++) {
      long room = rnd.nextLong() | 1;
      Set<Long> seen = new HashSet<>();
      for (int i = 0; i < 8; i++) {
        for (int j = 0; j < 8; j++) {
          long r = PdShards.room(room, i, j);
          assertNotEquals(0L, r);
          assertTrue(seen.add(r), "rooms of pairs collide for room " + room);
        }
      }
    }
  }

  @Test
  void shouldRefuseASplitThatCannotHoldTheHeads() {
    Model m = new Model(4, 2, 8, false, 4);
    PdShards prefill = new PdShards(m.layout(0, 1), 4, new Shard(0, 1), true);
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> prefill.pairs(3));
    assertTrue(e.getMessage().contains("decode replica of 3 ranks"), e.getMessage());
  }

  @Test
  void shouldRefusePageSplitKv() {
    CacheLayout pages =
        new CacheLayout(
            4,
            "float32",
            List.of(
                new CacheGroupSpec(
                    0,
                    new GroupKind.FullHistory(),
                    2,
                    List.of(new CacheField("layers.0.k", 64), new CacheField("layers.0.v", 64)),
                    new Sharding.PageCyclic(2))));
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> new PdShards(pages, 2, new Shard(0, 2), true));
    assertTrue(e.getMessage().contains("page-cyclic"), e.getMessage());
  }
}

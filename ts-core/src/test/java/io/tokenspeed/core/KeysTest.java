package io.tokenspeed.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HexFormat;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class KeysTest {

  private static final CacheLayout LAYOUT = TestLayouts.hybrid();

  private static int[] tokens(int n) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = (i * 31 + 7) % 50_000;
    }
    return t;
  }

  @Test
  void shouldNameRowsByPageHashAndOffsetWhenBoundaryIsAligned() {
    PromptKeys keys = PromptKeys.of(LAYOUT, tokens(200), List.of());
    // group 0: bg=16, 4 rows per page. Row 5 = tokens [80, 96): page 1, offset 1.
    CacheKey k = keys.keyOf(0, 5, 128);
    assertEquals(new CacheKey(0, keys.pageHash(1), 1), k);
    // group 2 (state, bg=64): the checkpoint at 128 is row 1, page 1, offset 0.
    assertEquals(new CacheKey(2, keys.pageHash(1), 0), keys.checkpointKey(2, 128));
  }

  @Test
  void shouldUseTailHashForRowsOfThePartialPage() {
    PromptKeys keys = PromptKeys.of(LAYOUT, tokens(200), List.of());
    int tail = 150; // page 2 holds 22 tokens
    ContentHash th = keys.tailHash(tail);
    assertNotEquals(keys.pageHash(1), th);
    // row 8 of group 0 covers [128, 144): partial page, offset 0
    assertEquals(new CacheKey(0, th, 0), keys.keyOf(0, 8, tail));
    // row 9 covers [144, 160): the partial history block, offset 1
    assertEquals(new CacheKey(0, th, 1), keys.keyOf(0, 9, tail));
    // rows below the last full page keep page hashes
    assertEquals(new CacheKey(0, keys.pageHash(1), 3), keys.keyOf(0, 7, tail));
    assertEquals(new CacheKey(2, th, 0), keys.checkpointKey(2, tail));
    assertThrows(IllegalArgumentException.class, () -> keys.keyOf(0, 10, tail));
  }

  @Test
  void shouldFormatAndParseObjectKeys() {
    PromptKeys keys = PromptKeys.of(LAYOUT, tokens(64), List.of());
    Namespace ns = Namespace.of(TestLayouts.identity(LAYOUT));
    ObjectKey k = ObjectKey.forRank(ns, keys.keyOf(1, 1, 64), LAYOUT.group(1), 1);
    String text = k.toString();
    assertEquals(ns.value() + "_" + keys.pageHash(0).toHex() + "|g1|o1|r1", text);
    assertEquals(k, ObjectKey.parse(text));
    assertThrows(IllegalArgumentException.class, () -> ObjectKey.parse(text + "x"));
  }

  @ParameterizedTest
  @ValueSource(longs = {1L, 2L, 3L, 0x5eedL})
  void shouldWriteHashesAsTheirDigestBytesInHexAndKeysThatParseBack(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    Namespace ns = Namespace.of(TestLayouts.identity(LAYOUT));
    for (int i = 0; i < 200; i++) {
      long[] w = {rnd.nextLong(), rnd.nextLong(), rnd.nextLong(), rnd.nextLong()};
      if (i % 10 == 0) {
        w[i / 10 % 4] = i % 20 == 0 ? 0 : -1; // all-zero and all-one words
      }
      ContentHash h = new ContentHash(w[0], w[1], w[2], w[3]);
      assertEquals(HexFormat.of().formatHex(h.toBytes()), h.toHex());
      assertEquals(h, ContentHash.fromHex(h.toHex()));
      CacheKey key = new CacheKey(rnd.nextInt(LAYOUT.numGroups()), h, rnd.nextInt(1_000_000));
      ObjectKey k = new ObjectKey(ns, key, rnd.nextInt(1_000));
      String text = k.toString();
      assertEquals(
          ns.value()
              + "_"
              + HexFormat.of().formatHex(h.toBytes())
              + "|g"
              + key.groupId()
              + "|o"
              + key.pageOffset()
              + "|r"
              + k.payloadReplica(),
          text);
      assertEquals(k, ObjectKey.parse(text));
    }
  }

  @Test
  void shouldNamePayloadReplicaForPageCyclicGroups() {
    CacheGroupSpec cyclic =
        new CacheGroupSpec(
            0,
            new GroupKind.FullHistory(),
            16,
            List.of(new CacheField("kv", 64)),
            new Sharding.PageCyclic(2));
    assertEquals(0, ObjectKey.payloadReplica(cyclic, 0));
    assertEquals(0, ObjectKey.payloadReplica(cyclic, 1));
    assertEquals(1, ObjectKey.payloadReplica(cyclic, 2));
    assertEquals(3, ObjectKey.payloadReplica(LAYOUT.group(1), 3));
    Sharding.PageCyclic pc = new Sharding.PageCyclic(3);
    assertEquals(0, pc.ownerOf(1));
    assertEquals(2, pc.ownerOf(3));
    assertEquals(0, pc.ownerOf(4));
    assertEquals(2, pc.localPageOf(4));
  }

  @Test
  void shouldRejectBadLayoutsNamingFieldAndValue() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> new CacheLayout(64, "bf16", List.of(TestLayouts.full(0, 24, 64))));
    assertTrue(e.getMessage().contains("block_granularity=24"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> new GroupKind.SlidingWindow(0));
    assertTrue(e.getMessage().contains("window_tokens=0"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> GroupKind.parse("mla", null));
    assertTrue(e.getMessage().contains("kind=mla"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> GroupKind.parse("full", 128));
    assertTrue(
        e.getMessage().contains("window_tokens=128 applies only to kind=swa"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> Sharding.parse("replicated", 2));
    assertTrue(e.getMessage().contains("shard_count=2"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> Sharding.parse("rows", null));
    assertTrue(e.getMessage().contains("sharding=rows"), e.getMessage());
    e =
        assertThrows(
            IllegalArgumentException.class, () -> PromptKeys.of(LAYOUT, new int[0], List.of()));
    assertTrue(e.getMessage().contains("prompt is empty"), e.getMessage());
  }
}

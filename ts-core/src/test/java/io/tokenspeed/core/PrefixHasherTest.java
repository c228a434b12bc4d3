package io.tokenspeed.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

class PrefixHasherTest {

  /*
   * The expected digests were computed independently of this code, with Python's hashlib:
   *
   *   def h(prev, toks, extras=None):
   *       b = struct.pack('<I', 0 if prev is None else 32) + (prev or b'')
   *       b += struct.pack('<I', len(toks)) + b''.join(struct.pack('<I', t) for t in toks)
   *       if extras:
   *           b += struct.pack('<I', len(extras))
   *           for e in extras:
   *               e = e.encode(); b += struct.pack('<I', len(e)) + e
   *       return hashlib.sha256(b).digest()
   */
  private static final String PAGE0 =
      "65a73aeec7de373d87d0bb665fb1b7e9c490f83287b644f3ea58f3eea1ee271f";
  private static final String PAGE1 =
      "9f99734c64c898db6698530d61968eeba422fe1f4f044203644087f9ec65e01c";
  private static final String TAIL_AT_6 =
      "3aca88bf1b81fbc9d0c9a4e7882793f944c3700f230a6370d1e90d1e5eddd5f7";
  private static final String PAGE0_WITH_EXTRAS =
      "765db236f4e3b6bb7e1f0e0445a1c4132ed4d4bdb21a2757eebe4fe3b3365d87";
  private static final String PAGE0_LARGE_IDS =
      "f6904c1ce87c119519bb328e1d1980dadb42e4640abb317941091c986a07d6e7";

  @Test
  void shouldMatchIndependentlyComputedDigestsWhenHashingTwoPages() {
    ContentHash[] hashes =
        new PrefixHasher(4, List.of()).pageHashes(new int[] {1, 2, 3, 4, 5, 6, 7, 8, 9});
    assertEquals(2, hashes.length, "the partial third page has no page hash");
    assertEquals(PAGE0, hashes[0].toHex());
    assertEquals(PAGE1, hashes[1].toHex());
  }

  @Test
  void shouldChainTailOnLastFullPage() {
    PrefixHasher hasher = new PrefixHasher(4, List.of());
    int[] tokens = {1, 2, 3, 4, 5, 6, 7, 8};
    ContentHash p0 = hasher.pageHashes(tokens)[0];
    assertEquals(TAIL_AT_6, hasher.tailHash(p0, tokens, 6).toHex());
    assertThrows(IllegalArgumentException.class, () -> hasher.tailHash(p0, tokens, 8));
  }

  @Test
  void shouldIncludeExtraKeysOnlyWhenPresent() {
    int[] tokens = {1, 2, 3, 4};
    assertEquals(
        PAGE0_WITH_EXTRAS,
        new PrefixHasher(4, List.of("lora-a", "salt")).pageHashes(tokens)[0].toHex());
    assertEquals(PAGE0, new PrefixHasher(4, List.of()).pageHashes(tokens)[0].toHex());
  }

  @Test
  void shouldEncodeLargeTokenIdsAsUnsignedLittleEndian() {
    assertEquals(
        PAGE0_LARGE_IDS,
        new PrefixHasher(4, List.of())
            .pageHashes(new int[] {100000, Integer.MAX_VALUE, 0, 7})[0].toHex());
  }

  @Test
  void shouldChangeEveryLaterPageWhenAnEarlyTokenChanges() {
    PrefixHasher hasher = new PrefixHasher(2, List.of());
    ContentHash[] a = hasher.pageHashes(new int[] {1, 2, 3, 4, 5, 6});
    ContentHash[] b = hasher.pageHashes(new int[] {1, 9, 3, 4, 5, 6});
    for (int i = 0; i < a.length; i++) {
      assertNotEquals(a[i], b[i], "page " + i);
    }
  }

  @Test
  void shouldRejectNegativeTokenIdNamingItsPosition() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> new PrefixHasher(2, List.of()).pageHashes(new int[] {1, 2, 3, -5}));
    assertTrue(e.getMessage().contains("token id=-5 at position 3"), e.getMessage());
  }

  @Test
  void shouldRejectBadPageSize() {
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> new PrefixHasher(0, List.of()));
    assertTrue(e.getMessage().contains("prefix_granularity=0"), e.getMessage());
  }

  @Test
  void shouldRoundTripHex() {
    ContentHash h = ContentHash.fromHex(PAGE1);
    assertEquals(PAGE1, h.toHex());
    assertEquals(h, ContentHash.of(h.toBytes()));
  }
}

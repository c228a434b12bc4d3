package io.tokenspeed.l3.spi;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** The stores' shared argument checks, message by message. */
class StoreArgumentsTest {

  private static void assertMessage(String expected, Executable call) {
    assertEquals(expected, assertThrows(IllegalArgumentException.class, call).getMessage());
  }

  @Test
  void shouldRefuseMissingEmptyAndLongKeysNamingTheIndexAndTheLimit() {
    assertMessage("keys=null must be a list of keys", () -> StoreArguments.checkKeys(null, 8));
    assertMessage(
        "key #1=null must be non-empty",
        () -> StoreArguments.checkKeys(Arrays.asList("a", null), 8));
    assertMessage("key #0= must be non-empty", () -> StoreArguments.checkKeys(List.of(""), 8));
    assertMessage(
        "key length=9 bytes of key #1 exceeds max_key_bytes=8",
        () -> StoreArguments.checkKeys(List.of("ab", "abcdefghi"), 8));
    // Three characters, nine UTF-8 bytes: counted in bytes, not characters.
    assertMessage(
        "key length=9 bytes of key #0 exceeds max_key_bytes=8",
        () -> StoreArguments.checkKeys(List.of("\u20ac\u20ac\u20ac"), 8));
    assertDoesNotThrow(() -> StoreArguments.checkKeys(List.of("abcdefgh", "\u20ac\u20ac"), 8));
    assertDoesNotThrow(() -> StoreArguments.checkKeys(List.of(), 1));
  }

  @Test
  void shouldReturnTheUtf8BytesOfAKeyWithinTheLimit() {
    assertArrayEquals(
        "k\u20ac".getBytes(StandardCharsets.UTF_8), StoreArguments.keyBytes("k\u20ac", 0, 4));
    assertMessage(
        "key length=5 bytes of key #3 exceeds max_key_bytes=4",
        () -> StoreArguments.keyBytes("kk\u20ac", 3, 4));
    assertMessage("key #2=null must be non-empty", () -> StoreArguments.keyBytes(null, 2, 4));
  }

  @Test
  void shouldRefuseSegmentsThatDoNotMatchTheKeysOneForOne() {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment segment = arena.allocate(16);
      List<String> keys = List.of("a", "b");
      assertMessage(
          "keys=2 and sources=null must have the same count",
          () -> StoreArguments.checkSegments(keys, null, "sources"));
      assertMessage(
          "keys=2 and destinations=1 must have the same count",
          () -> StoreArguments.checkSegments(keys, List.of(segment), "destinations"));
      assertMessage(
          "sources #1 is null",
          () -> StoreArguments.checkSegments(keys, Arrays.asList(segment, null), "sources"));
      assertDoesNotThrow(
          () -> StoreArguments.checkSegments(keys, List.of(segment, segment), "sources"));
    }
  }

  @Test
  void shouldRefuseTheFirstSegmentLargerThanTheValueLimit() {
    try (Arena arena = Arena.ofConfined()) {
      List<MemorySegment> segments =
          List.of(arena.allocate(16), arena.allocate(17), arena.allocate(18));
      assertMessage(
          "value size=17 bytes of key #1 exceeds max_value_bytes=16",
          () -> StoreArguments.checkValueSizes(segments, "value", 16));
      assertMessage(
          "destination size=18 bytes of key #2 exceeds max_value_bytes=17",
          () -> StoreArguments.checkValueSizes(segments, "destination", 17));
      assertDoesNotThrow(() -> StoreArguments.checkValueSizes(segments, "value", 18));
    }
  }
}

package io.tokenspeed.core.storage;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.ContentHash;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The checks of a GET's Host blocks and early Device destinations. */
class StorageOpTest {
  private static final List<CacheKey> KEYS =
      List.of(
          new CacheKey(0, new ContentHash(1, 2, 3, 4), 0),
          new CacheKey(0, new ContentHash(1, 2, 3, 4), 1));

  @Test
  void shouldTakeAGetWithoutDeviceBlocksAsOneWithNoneForEveryRow() {
    StorageOp.Get host = new StorageOp.Get(7, KEYS, List.of(3, 4));
    assertEquals(List.of(), host.deviceBlocks());
    assertEquals(0, host.deviceBlock(1));
    assertEquals(host, new StorageOp.Get(7, KEYS, List.of(3, 4), null));
    StorageOp.Get early = new StorageOp.Get(7, KEYS, List.of(3, 4), List.of(9, 0));
    assertEquals(9, early.deviceBlock(0));
    assertEquals(0, early.deviceBlock(1), "0: this row has no early destination");
  }

  @Test
  void shouldRejectDeviceBlocksThatDoNotLineUpWithTheKeysOrAreNegative() {
    IllegalArgumentException count =
        assertThrows(
            IllegalArgumentException.class,
            () -> new StorageOp.Get(7, KEYS, List.of(3, 4), List.of(9)));
    assertEquals("operation 7 has 2 keys but 1 Device blocks", count.getMessage());
    IllegalArgumentException negative =
        assertThrows(
            IllegalArgumentException.class,
            () -> new StorageOp.Get(7, KEYS, List.of(3, 4), List.of(9, -1)));
    assertEquals("operation 7 names Device block -1", negative.getMessage());
    IllegalArgumentException hostZero =
        assertThrows(
            IllegalArgumentException.class, () -> new StorageOp.Get(7, KEYS, List.of(3, 0)));
    assertEquals("operation 7 names Host block 0 (0 is the null block)", hostZero.getMessage());
  }
}

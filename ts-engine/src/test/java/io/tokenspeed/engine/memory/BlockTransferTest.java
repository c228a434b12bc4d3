package io.tokenspeed.engine.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.tokenspeed.cache.BlockCopy;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.ContentHash;
import io.tokenspeed.scheduler.ExecutionPlan;
import org.junit.jupiter.api.Test;

class BlockTransferTest {

  private static final CacheKey KEY = new CacheKey(2, new ContentHash(1, 2, 3, 4), 0);

  @Test
  void shouldValidateTransfersOnConstruction() {
    var zero = assertThrows(IllegalArgumentException.class, () -> new BlockTransfer.Load(0, 0, 3));
    assertEquals(
        "Load host_block=0 must be at least 1: block 0 is the null block", zero.getMessage());
    var negative =
        assertThrows(IllegalArgumentException.class, () -> new BlockTransfer.Store(0, 4, -1));
    assertEquals(
        "Store host_block=-1 must be at least 1: block 0 is the null block", negative.getMessage());
    var group =
        assertThrows(IllegalArgumentException.class, () -> new BlockTransfer.DeviceCopy(-1, 1, 2));
    assertEquals("DeviceCopy group_id=-1 must be non-negative", group.getMessage());
    var dst =
        assertThrows(IllegalArgumentException.class, () -> new BlockTransfer.DeviceCopy(0, 1, 0));
    assertEquals(
        "DeviceCopy dst_block=0 must be at least 1: block 0 is the null block", dst.getMessage());
  }

  @Test
  void shouldTurnPlannedCopiesIntoTransfers() {
    assertEquals(
        new BlockTransfer.Load(2, 7, 9),
        BlockTransfer.of(new BlockCopy(2, 0, Tier.HOST, 7, 9, KEY, true)));
    assertEquals(
        new BlockTransfer.DeviceCopy(2, 7, 9),
        BlockTransfer.of(new BlockCopy(2, 3, Tier.DEVICE, 7, 9, KEY, false)));
    assertEquals(
        new BlockTransfer.Store(2, 5, 11),
        BlockTransfer.of(new ExecutionPlan.Demotion(KEY, 5, 11)));
  }
}

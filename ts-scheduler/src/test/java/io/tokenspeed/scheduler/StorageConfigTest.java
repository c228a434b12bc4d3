package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class StorageConfigTest {

  @Test
  void shouldHalveCreditsForBackupsRoundingDown() {
    StorageConfig c = StorageConfig.defaults().withCredits(5, 7);
    assertEquals(2, c.backupOperationCredits());
    assertEquals(3, c.backupHostCredits());
    assertEquals(0, StorageConfig.defaults().withCredits(1, 7).backupOperationCredits());
  }

  @Test
  void shouldBoundTheKeysInFlightByEveryQueryAndEveryHostCreditWhenCreditsAreAtTheirExtremes() {
    assertEquals(64L * 4096 + 768, StorageConfig.defaults().forHost(1024).maxKeysInFlight());
    StorageConfig most =
        new StorageConfig(
            1 << 20,
            Integer.MAX_VALUE,
            0,
            200,
            1000,
            256,
            131072,
            1 << 24,
            16,
            4096,
            1 << 20,
            100,
            10,
            10,
            5,
            2000,
            500,
            10_000);
    assertEquals((1L << 44) + Integer.MAX_VALUE, most.maxKeysInFlight(), "no overflow");
  }

  @Test
  void shouldNameTheFieldTheValueAndTheRangeWhenAValueIsBad() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> StorageConfig.defaults().withCredits(0, 10));
    assertTrue(e.getMessage().contains("max_operations=0 must be in [1, "), e.getMessage());
    e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                new StorageConfig(
                    64, 0, 25, 200, 1000, 256, 131072, 4096, 16, 4096, 256, 100, 100, 10, 5, 2000,
                    500, 10_000));
    assertTrue(e.getMessage().contains("low_queued_jobs=100 must be in [0, 99]"), e.getMessage());
  }
}

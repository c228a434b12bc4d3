package io.tokenspeed.engine.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheLayout;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

class HostCacheStorageTest {

  private static final CacheLayout LAYOUT = MemoryFixtures.hybrid(); // parentBytes = 1920

  @ParameterizedTest(name = "device_parents={0} ratio={1} -> {2}")
  @CsvSource({"10, 0.5, 5", "3, 0.1, 1", "7, 2.5, 17", "4, 1.0, 4", "1, 0.999, 1"})
  void shouldSizeTheTierByRatioOfDeviceParents(int deviceParents, double ratio, int expected) {
    try (HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, deviceParents, ratio)) {
      assertEquals(expected, host.numParents());
      assertEquals(expected * 1920L, host.memory().byteSize());
      assertEquals("Host", host.memory().tierName());
      assertEquals(BlockGeometry.of(LAYOUT), host.geometry());
      assertEquals(LAYOUT, host.layout());
    }
  }

  @ParameterizedTest(name = "ratio={0}")
  @ValueSource(
      doubles = {0.0, -1.0, Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY})
  void shouldRejectARatioThatIsNotFiniteAndPositive(double ratio) {
    var e =
        assertThrows(
            IllegalArgumentException.class, () -> HostCacheStorage.ofRatio(LAYOUT, 4, ratio));
    assertEquals("Host tier ratio=" + ratio + " must be finite and greater than 0", e.getMessage());
  }

  @ParameterizedTest(name = "bytes={0} -> {1}")
  @CsvSource({"1920, 1", "3839, 1", "3840, 2", "19199, 9"})
  void shouldSizeTheTierInWholeParentsOfTheBytes(long bytes, int expected) {
    try (HostCacheStorage host = HostCacheStorage.ofBytes(LAYOUT, bytes)) {
      assertEquals(expected, host.numParents());
      assertEquals(expected * 1920L, host.memory().byteSize());
    }
  }

  @ParameterizedTest(name = "bytes={0}")
  @ValueSource(longs = {1919, 0, -5000})
  void shouldNameTheParentSizeWhenNoParentFits(long bytes) {
    var e =
        assertThrows(IllegalArgumentException.class, () -> HostCacheStorage.ofBytes(LAYOUT, bytes));
    assertTrue(e.getMessage().startsWith("Host tier bytes=" + bytes + " holds no whole parent"));
    assertTrue(e.getMessage().contains("parent_bytes=1920"), e.getMessage());
  }

  @ParameterizedTest(name = "device_parents={0}")
  @ValueSource(ints = {0, -2})
  void shouldRejectADeviceWithoutParents(int deviceParents) {
    var e =
        assertThrows(
            IllegalArgumentException.class,
            () -> HostCacheStorage.ofRatio(LAYOUT, deviceParents, 2.0));
    assertTrue(e.getMessage().contains("device_parents=" + deviceParents), e.getMessage());
  }

  @Test
  void shouldRejectMoreParentsThanAnInt() {
    var e =
        assertThrows(
            IllegalArgumentException.class, () -> HostCacheStorage.ofRatio(LAYOUT, 1000, 1e10));
    assertTrue(e.getMessage().contains("gives more than"), e.getMessage());
    var bytes =
        assertThrows(
            IllegalArgumentException.class, () -> HostCacheStorage.ofBytes(LAYOUT, Long.MAX_VALUE));
    assertTrue(bytes.getMessage().contains("more than " + Integer.MAX_VALUE), bytes.getMessage());
  }

  @ParameterizedTest(name = "close {0} times")
  @ValueSource(ints = {1, 2})
  void shouldFreeTheTierOnClose(int closes) {
    HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, 2, 1.0);
    for (int i = 0; i < closes; i++) {
      host.close();
    }
    assertFalse(host.memory().segment().scope().isAlive());
  }
}

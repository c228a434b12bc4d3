package io.tokenspeed.l3.store.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.StoreContractTest;
import io.tokenspeed.l3.store.StoreTesting;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.function.Supplier;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class MemoryStoreTest extends StoreContractTest {

  @Override
  protected Store newStore(int maxKeyBytes, long maxValueBytes) {
    return new MemoryStore(
        new MemoryStoreSettings(
            maxKeyBytes, maxValueBytes, MemoryStoreSettings.UNBOUNDED_CAPACITY_BYTES));
  }

  @Test
  void shouldRejectThePutWhenItWouldExceedTheCapacity() throws Exception {
    MemoryStoreSettings settings = MemoryStoreSettings.defaults().withCapacityBytes(10_000);
    try (MemoryStore bounded = new MemoryStore(settings)) {
      String ns = StoreTesting.namespace("capacity");
      String other = StoreTesting.namespace("capacity-other");
      MemorySegment source = host.asSlice(64, 4000);

      assertEquals(new RowResult.Ok(4000, false), put(bounded, StoreTesting.key(ns, 1), source));
      assertEquals(new RowResult.Ok(4000, false), put(bounded, StoreTesting.key(other, 1), source));
      assertEquals(
          RowResult.Rejected.noSpace("memory store full: capacity_bytes=10000 reached"),
          put(bounded, StoreTesting.key(ns, 2), source));
      assertEquals(RowResult.MISSING, row(bounded.exists(List.of(StoreTesting.key(ns, 2)))));
      assertEquals(new RowResult.Ok(4000, true), put(bounded, StoreTesting.key(ns, 1), source));
      assertEquals(
          new RowResult.Ok(2000, false),
          put(bounded, StoreTesting.key(ns, 3), source.asSlice(0, 2000)));
      assertEquals(10_000, bounded.usedBytes());

      assertEquals(2, bounded.deleteNamespace(ns));
      assertEquals(4000, bounded.usedBytes());
      assertEquals(new RowResult.Ok(4000, false), put(bounded, StoreTesting.key(ns, 2), source));
    }
  }

  static Stream<Arguments> invalidSettings() {
    return Stream.of(
        Arguments.of("max_key_bytes=0", (Supplier<?>) () -> new MemoryStoreSettings(0, 1, 1)),
        Arguments.of(
            "max_key_bytes=65536", (Supplier<?>) () -> new MemoryStoreSettings(65_536, 1, 1)),
        Arguments.of("max_value_bytes=0", (Supplier<?>) () -> new MemoryStoreSettings(1, 0, 1)),
        Arguments.of(
            "max_value_bytes=2147483648",
            (Supplier<?>) () -> new MemoryStoreSettings(1, 1L << 31, 1)),
        Arguments.of("capacity_bytes=0", (Supplier<?>) () -> new MemoryStoreSettings(1, 1, 0)));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("invalidSettings")
  void shouldNameFieldValueAndRangeWhenSettingsAreOutOfRange(String expected, Supplier<?> build) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, build::get);
    assertTrue(e.getMessage().startsWith(expected + " must be in ["), e.getMessage());
  }

  private static RowResult put(MemoryStore store, String key, MemorySegment source) {
    return row(store.put(List.of(key), List.of(source)));
  }
}

package io.tokenspeed.l3.store.mooncake;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * {@link MooncakeStore} against a running Mooncake master and an independently mounted storage
 * owner. Runs only in the {@code mooncake-live} Maven profiles (docs/mooncake.md): with {@code
 * MOONCAKE_MASTER} set, or with {@code MOONCAKE_REQUIRE_MASTER=1}, in which case a missing master
 * fails this class instead of skipping it. Objects go to a fresh namespace, removed at the end.
 */
@Tag("live")
class MooncakeLiveIT {

  private static final long HOST_BYTES = 8L << 20;

  private static Arena arena;
  private static MemorySegment host;
  private static MooncakeStore store;
  private static String namespace;

  @BeforeAll
  static void connect() throws Exception {
    MooncakeStoreSettings settings =
        MooncakeLiveGate.check(System.getenv())
            .orElseThrow(
                () ->
                    new IllegalStateException(
                        "MooncakeLiveIT needs MOONCAKE_MASTER and MOONCAKE_LIB (docs/mooncake.md)"));
    byte[] salt = new byte[8];
    new Random().nextBytes(salt);
    namespace = "tsl3-live" + HexFormat.of().formatHex(salt);
    arena = Arena.ofShared();
    host = arena.allocate(HOST_BYTES, 4096);
    store = MooncakeStore.open(settings);
    store.registerHostBuffer(host);
  }

  @AfterAll
  static void disconnect() throws Exception {
    try {
      if (store != null) {
        store.deleteNamespace(namespace);
        store.close();
      }
    } finally {
      if (arena != null) {
        arena.close();
      }
    }
  }

  private static String key(String name) {
    return namespace + "_" + name + "|g0|o0|r0";
  }

  @Test
  void shouldRoundTripBytesThroughTheMaster() {
    int[] lengths = {1, 4096, 65536, 1 << 20};
    List<String> keys = new ArrayList<>();
    List<MemorySegment> sources = new ArrayList<>();
    List<MemorySegment> destinations = new ArrayList<>();
    long offset = 17;
    for (int length : lengths) {
      MemorySegment source = host.asSlice(offset, length);
      Random random = new Random(length);
      for (long i = 0; i < length; i++) {
        source.set(ValueLayout.JAVA_BYTE, i, (byte) random.nextInt());
      }
      keys.add(key("rt" + length));
      sources.add(source);
      destinations.add(host.asSlice((4L << 20) + offset, length));
      offset += length + 13;
    }

    StoreResult put = store.put(keys, sources);
    StoreResult get = store.get(keys, destinations);

    assertTrue(put.retired(), put.toString());
    assertTrue(get.retired(), get.toString());
    for (int i = 0; i < lengths.length; i++) {
      assertEquals(new RowResult.Ok(lengths[i], false), put.rows().get(i));
      assertEquals(new RowResult.Ok(lengths[i], false), get.rows().get(i));
      assertEquals(-1, sources.get(i).mismatch(destinations.get(i)), "bytes differ at " + i);
    }
  }

  @Test
  void shouldSucceedIdempotentlyWhenPuttingAnExistingObject() {
    MemorySegment source = host.asSlice(0, 4096);
    store.put(List.of(key("twice")), List.of(source));

    StoreResult again = store.put(List.of(key("twice")), List.of(source));

    // The SDK may answer OBJECT_ALREADY_EXISTS or skip the object and answer 0: both succeed.
    assertTrue(again.retired(), again.toString());
    assertTrue(again.rows().getFirst() instanceof RowResult.Ok, again.toString());
  }

  @Test
  void shouldReportExistenceMissesAndDeletion() throws Exception {
    store.put(List.of(key("present")), List.of(host.asSlice(0, 512)));

    StoreResult exists = store.exists(List.of(key("present"), key("absent")));
    StoreResult miss = store.get(List.of(key("absent")), List.of(host.asSlice(4096, 512)));
    long removed = store.deleteNamespace(namespace);
    StoreResult after = store.exists(List.of(key("present")));

    assertEquals(StoreResult.of(List.of(new RowResult.Ok(0, false), RowResult.MISSING)), exists);
    assertEquals(StoreResult.of(List.of(RowResult.MISSING)), miss);
    assertTrue(removed >= 1, "removed=" + removed);
    assertEquals(StoreResult.of(List.of(RowResult.MISSING)), after);
  }
}

package io.tokenspeed.l3.store.mooncake;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.NamespaceDeletion;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * {@link MooncakeStore} against a running Mooncake master and an independently mounted storage
 * owner. Runs only in the {@code mooncake-live} Maven profiles (docs/mooncake.md): with {@code
 * MOONCAKE_MASTER} set, or with {@code MOONCAKE_REQUIRE_MASTER=1}, in which case a missing master
 * fails this class instead of skipping it.
 *
 * <p>Every test writes under namespaces of its own, derived from one random salt. The master grants
 * a read lease on every object a GET or an existence query finds and a removal without force skips
 * leased objects, so the tests say which case they are in: a deletion of keys never queried nor
 * read, which removes them at once, or a deletion after a query, which must wait the lease out
 * ({@link MooncakeStore#purgeNamespace}). The cleanup purges the shared namespace, waiting its
 * leases out (which also outlasts every lease this client took), then deletes the deletion tests'
 * namespaces in one pass each, and checks that no key written is left.
 */
@Tag("live")
class MooncakeLiveIT {

  private static final long HOST_BYTES = 8L << 20;

  private static Arena arena;
  private static MemorySegment host;
  private static MooncakeStore store;
  private static String salt;

  /** The namespace the tests that delete nothing share. */
  private static String shared;

  /** Every namespace written to and every key written, for the cleanup. */
  private static final List<String> written = new ArrayList<>();

  private static final ConcurrentHashMap.KeySetView<String, Boolean> namespaces =
      ConcurrentHashMap.newKeySet();

  @BeforeAll
  static void connect() throws Exception {
    MooncakeStoreSettings settings =
        MooncakeLiveGate.check(System.getenv())
            .orElseThrow(
                () ->
                    new IllegalStateException(
                        "MooncakeLiveIT needs MOONCAKE_MASTER and MOONCAKE_LIB (docs/mooncake.md)"));
    byte[] bytes = new byte[6];
    new Random().nextBytes(bytes);
    salt = HexFormat.of().formatHex(bytes);
    shared = "tsl3-live" + salt;
    arena = Arena.ofShared();
    host = arena.allocate(HOST_BYTES, 4096);
    store = MooncakeStore.open(settings);
    store.registerHostBuffer(host);
  }

  @AfterAll
  static void disconnect() throws Exception {
    try {
      if (store != null) {
        // the shared namespace's objects were queried and read: wait their leases out
        NamespaceDeletion d = store.purgeNamespace(shared);
        System.err.println("MooncakeLiveIT cleanup of " + shared + ": " + d);
        for (String namespace : namespaces) {
          store.deleteNamespace(namespace); // every lease this client took has ended
        }
        List<String> keys;
        synchronized (written) {
          keys = List.copyOf(written);
        }
        if (!keys.isEmpty()) {
          StoreResult left = store.exists(keys);
          for (int i = 0; i < keys.size(); i++) {
            assertEquals(RowResult.MISSING, left.rows().get(i), "left behind: " + keys.get(i));
          }
        }
        store.close();
      }
    } finally {
      if (arena != null) {
        arena.close();
      }
    }
  }

  /** A namespace of this run for one deletion test (no {@code _}: namespaces never have it). */
  private static String namespace(String name) {
    String namespace = "tsl3-live" + salt + "-" + name;
    namespaces.add(namespace);
    return namespace;
  }

  private static String key(String namespace, String name) {
    String key = namespace + "_" + name + "|g0|o0|r0";
    synchronized (written) {
      written.add(key);
    }
    return key;
  }

  private static MemorySegment filled(long offset, long length, long seed) {
    MemorySegment slice = host.asSlice(offset, length);
    Random random = new Random(seed);
    for (long i = 0; i < length; i++) {
      slice.set(ValueLayout.JAVA_BYTE, i, (byte) random.nextInt());
    }
    return slice;
  }

  @Test
  void shouldListenOnEveryInterfaceWhateverLocalHostnameSays() {
    // the real client's handshake daemon and TCP data listener bind to every interface even with
    // local_hostname 127.0.0.1 (docs/mooncake.md, Network exposure): the store names them
    List<String> listeners = store.clientListeners();
    assertFalse(listeners.isEmpty(), "no listener named after setup");
    assertTrue(
        listeners.stream().anyMatch(l -> l.startsWith("0.0.0.0:") || l.startsWith("[0:0:0:0:")),
        listeners::toString);
    System.out.println("MooncakeLiveIT: the client opened " + listeners);
  }

  @Test
  void shouldRoundTripBytesThroughTheMaster() {
    String ns = shared;
    int[] lengths = {1, 4096, 65536, 1 << 20};
    List<String> keys = new ArrayList<>();
    List<MemorySegment> sources = new ArrayList<>();
    List<MemorySegment> destinations = new ArrayList<>();
    long offset = 17;
    for (int length : lengths) {
      keys.add(key(ns, "rt" + length));
      sources.add(filled(offset, length, length));
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
  void shouldAnswerZeroAndKeepTheFirstBytesWhenPuttingAnExistingObject() {
    String ns = shared;
    String k = key(ns, "twice");
    MemorySegment first = filled(0, 4096, 1);
    byte[] firstBytes = first.toArray(ValueLayout.JAVA_BYTE);
    store.put(List.of(k), List.of(first));

    StoreResult again = store.put(List.of(k), List.of(filled(8192, 4096, 2)));
    MemorySegment back = host.asSlice(16384, 4096);
    StoreResult get = store.get(List.of(k), List.of(back));

    // the real client answers 0 for an object that already exists (never -705): success, but
    // "already existed" cannot be counted
    assertEquals(StoreResult.of(List.of(new RowResult.Ok(4096, false))), again);
    assertEquals(StoreResult.of(List.of(new RowResult.Ok(4096, false))), get);
    assertEquals(-1, back.mismatch(MemorySegment.ofArray(firstBytes)), "create-only");
  }

  @Test
  void shouldReadAnObjectShorterThanItsDestinationAsARetiredShortRead() {
    String ns = shared;
    String k = key(ns, "short");
    MemorySegment source = filled(0, 1000, 3);
    store.put(List.of(k), List.of(source));
    MemorySegment destination = host.asSlice(65536, 4096);

    StoreResult get = store.get(List.of(k), List.of(destination));

    // the client answers the object's own size; the adapter passes exactly the block's length,
    // so a smaller answer is an object shorter than the block
    assertEquals(StoreResult.of(List.of(new RowResult.Invalid(1000))), get);
    assertEquals(-1, source.mismatch(destination.asSlice(0, 1000)));
  }

  @Test
  void shouldRefuseAnObjectLongerThanItsDestinationBeforeAnyTransfer() {
    String ns = shared;
    String k = key(ns, "long");
    store.put(List.of(k), List.of(filled(0, 4096, 4)));
    MemorySegment destination = host.asSlice(65536, 1000);
    destination.fill((byte) 0x5a);

    StoreResult get = store.get(List.of(k), List.of(destination));

    assertEquals(
        StoreResult.of(List.of(new RowResult.Rejected(MooncakeCodes.INVALID_PARAMS, false))), get);
    for (long i = 0; i < destination.byteSize(); i++) {
      assertEquals((byte) 0x5a, destination.get(ValueLayout.JAVA_BYTE, i), "touched at " + i);
    }
  }

  @Test
  void shouldReportExistenceAndMisses() {
    String ns = shared;
    String present = key(ns, "present");
    store.put(List.of(present), List.of(host.asSlice(0, 512)));

    StoreResult exists = store.exists(List.of(present, key(ns, "absent")));
    StoreResult miss = store.get(List.of(key(ns, "absent")), List.of(host.asSlice(4096, 512)));

    assertEquals(StoreResult.of(List.of(new RowResult.Ok(0, false), RowResult.MISSING)), exists);
    assertEquals(StoreResult.of(List.of(RowResult.MISSING)), miss);
  }

  @Test
  void shouldDeleteKeysNeverQueriedOrReadInOnePass() throws Exception {
    // keys written and never queried nor read hold no lease: one pass removes all of them
    String ns = namespace("fresh");
    List<String> keys = List.of(key(ns, "a"), key(ns, "b"), key(ns, "c"));
    store.put(keys, List.of(host.asSlice(0, 64), host.asSlice(64, 64), host.asSlice(128, 64)));

    long removed = store.deleteNamespace(ns);

    assertEquals(3, removed);
    assertEquals(
        StoreResult.of(List.of(RowResult.MISSING, RowResult.MISSING, RowResult.MISSING)),
        store.exists(keys));
  }

  @Test
  void shouldWaitOutTheLeaseWhenDeletingKeysJustQueried() throws Exception {
    // an existence query leases both objects: a pass at once removes nothing, the purge waits
    // the lease out and then removes both
    String ns = namespace("leased");
    List<String> keys = List.of(key(ns, "a"), key(ns, "b"));
    store.put(keys, List.of(host.asSlice(0, 64), host.asSlice(64, 64)));
    assertEquals(
        StoreResult.of(List.of(new RowResult.Ok(0, false), new RowResult.Ok(0, false))),
        store.exists(keys));

    long atOnce = store.deleteNamespace(ns);
    NamespaceDeletion purged = store.purgeNamespace(ns);

    assertEquals(0, atOnce, "both objects are under the query's read lease");
    assertEquals(2, purged.removedObjects(), purged.toString());
    assertTrue(purged.waitedMs() >= store.settings().leaseTtlMs(), "waited the lease: " + purged);
    assertEquals(StoreResult.of(List.of(RowResult.MISSING, RowResult.MISSING)), store.exists(keys));
  }
}

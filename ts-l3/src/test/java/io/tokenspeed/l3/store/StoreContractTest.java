package io.tokenspeed.l3.store;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The Store SPI contract (architecture §8) that every store passes: exact byte round trips through
 * off-heap slices of one Host allocation, exact-length GET, create-only PUT, one row per key in
 * call order, namespace deletion, limits checked before any write, and racing writers.
 */
public abstract class StoreContractTest {

  protected static final int MAX_KEY_BYTES = 256;
  protected static final long MAX_VALUE_BYTES = 2L << 20;
  private static final long HOST_BYTES = 4L << 20;
  private static final byte SENTINEL = (byte) 0xA5;

  protected Store store;
  private Arena arena;

  /** One shared Host allocation per test; rows are slices of it at non-zero offsets. */
  protected MemorySegment host;

  /** A fresh, empty store with these limits. */
  protected abstract Store newStore(int maxKeyBytes, long maxValueBytes) throws Exception;

  /** What the store may leave behind once every call has returned (for example temp files). */
  protected void assertQuiescent() throws Exception {}

  @BeforeEach
  void openStore() throws Exception {
    store = newStore(MAX_KEY_BYTES, MAX_VALUE_BYTES);
    arena = Arena.ofShared();
    host = arena.allocate(HOST_BYTES, 64);
  }

  @AfterEach
  void closeStore() throws Exception {
    store.close();
    arena.close();
  }

  static Stream<Arguments> sizesAndSeeds() {
    List<Arguments> cases = new ArrayList<>();
    for (int size : new int[] {1, 4 << 10, 64 << 10, 1 << 20}) {
      for (long seed : new long[] {0x5EED_0001L, 0x5EED_0002L}) {
        cases.add(Arguments.of(size, seed));
      }
    }
    return cases.stream();
  }

  @ParameterizedTest(name = "size={0} seed={1}")
  @MethodSource("sizesAndSeeds")
  void shouldReturnTheSameBytesWhenAnObjectIsPutThenGot(int size, long seed) throws Exception {
    Random rnd = new Random(seed);
    String key = StoreTesting.key(StoreTesting.namespace("round-trip"), (int) seed);
    try (Arena confined = Arena.ofConfined()) {
      MemorySegment allocation = confined.allocate(2L * size + 16_384, 4096);
      long sourceOffset = 1 + rnd.nextInt(4096);
      long destinationOffset = size + 4096 + 1 + rnd.nextInt(4095);
      MemorySegment source = allocation.asSlice(sourceOffset, size);
      MemorySegment destination = allocation.asSlice(destinationOffset, size);
      StoreTesting.fill(source, seed);
      destination.fill(SENTINEL);

      assertEquals(new RowResult.Ok(size, false), row(store.put(List.of(key), List.of(source))));
      assertEquals(
          new RowResult.Ok(size, false), row(store.get(List.of(key), List.of(destination))));
      assertEquals(-1, source.mismatch(destination), "first differing byte");
      assertInstanceOf(RowResult.Ok.class, row(store.exists(List.of(key))));
    }
  }

  @ParameterizedTest(name = "destination delta={0}")
  @ValueSource(longs = {-4096, -1, 1, 4096})
  void shouldReportInvalidAndLeaveTheDestinationWhenLengthsDiffer(long delta) throws Exception {
    int size = 8192;
    String key = StoreTesting.key(StoreTesting.namespace("lengths"), 1);
    MemorySegment source = host.asSlice(128, size);
    StoreTesting.fill(source, 7);
    store.put(List.of(key), List.of(source));
    MemorySegment destination = host.asSlice(64 << 10, size + delta);
    destination.fill(SENTINEL);

    assertEquals(new RowResult.Invalid(size), row(store.get(List.of(key), List.of(destination))));
    assertUntouched(destination);
  }

  @Test
  void shouldKeepTheFirstBytesWhenASecondPutCarriesOtherBytes() throws Exception {
    int size = 4096;
    String key = StoreTesting.key(StoreTesting.namespace("create-only"), 1);
    MemorySegment first = host.asSlice(64, size);
    MemorySegment second = host.asSlice(64 + size, size);
    byte[] firstBytes = StoreTesting.fill(first, 1);
    StoreTesting.fill(second, 2);

    assertEquals(new RowResult.Ok(size, false), row(store.put(List.of(key), List.of(first))));
    assertEquals(new RowResult.Ok(size, true), row(store.put(List.of(key), List.of(second))));
    MemorySegment destination = host.asSlice(1 << 20, size);
    assertEquals(new RowResult.Ok(size, false), row(store.get(List.of(key), List.of(destination))));
    assertArrayEquals(firstBytes, destination.toArray(ValueLayout.JAVA_BYTE));
  }

  @Test
  void shouldReportMissingWhenAKeyWasNeverPut() throws Exception {
    String key = StoreTesting.key(StoreTesting.namespace("missing"), 1);
    MemorySegment destination = host.asSlice(4096, 4096);
    destination.fill(SENTINEL);

    assertEquals(RowResult.MISSING, row(store.exists(List.of(key))));
    assertEquals(RowResult.MISSING, row(store.get(List.of(key), List.of(destination))));
    assertUntouched(destination);
  }

  @Test
  void shouldAnswerOneRowPerKeyInCallOrderWhenOutcomesMix() throws Exception {
    String ns = StoreTesting.namespace("mixed");
    String k1 = StoreTesting.key(ns, 1);
    String k2 = StoreTesting.key(ns, 2);
    String k3 = StoreTesting.key(ns, 3);
    String k4 = StoreTesting.key(ns, 4);
    StoreResult put =
        store.put(List.of(k1, k3), List.of(host.asSlice(100, 100), host.asSlice(300, 300)));
    assertEquals(List.of(new RowResult.Ok(100, false), new RowResult.Ok(300, false)), put.rows());
    assertTrue(put.retired());

    StoreResult got =
        store.get(
            List.of(k1, k2, k3),
            List.of(host.asSlice(8192, 100), host.asSlice(9000, 100), host.asSlice(10_000, 200)));
    assertEquals(
        List.of(new RowResult.Ok(100, false), RowResult.MISSING, new RowResult.Invalid(300)),
        got.rows());
    assertEquals(RowResult.MISSING, store.exists(List.of(k2, k1)).rows().get(0));
    assertInstanceOf(RowResult.Ok.class, store.exists(List.of(k2, k1)).rows().get(1));
    assertEquals(
        List.of(new RowResult.Ok(100, true), new RowResult.Ok(50, false)),
        store.put(List.of(k1, k4), List.of(host.asSlice(0, 100), host.asSlice(0, 50))).rows());
  }

  @Test
  void shouldDeleteOnlyThatNamespaceWhenOthersShareTheStore() throws Exception {
    String a = StoreTesting.namespace("a");
    String b = StoreTesting.namespace("b");
    String aLonger = a + "f"; // shares a's text as a prefix, but not a + "_"
    List<String> aKeys =
        List.of(StoreTesting.key(a, 1), StoreTesting.key(a, 2), StoreTesting.key(a, 3));
    List<String> survivors =
        List.of(StoreTesting.key(b, 1), StoreTesting.key(b, 2), StoreTesting.key(aLonger, 1));
    List<byte[]> survivorBytes = new ArrayList<>();
    long offset = 64;
    for (String key : aKeys) {
      MemorySegment source = host.asSlice(offset, 1000);
      StoreTesting.fill(source, key.hashCode());
      store.put(List.of(key), List.of(source));
      offset += 1000;
    }
    for (String key : survivors) {
      MemorySegment source = host.asSlice(offset, 1000);
      survivorBytes.add(StoreTesting.fill(source, key.hashCode()));
      store.put(List.of(key), List.of(source));
      offset += 1000;
    }

    assertEquals(3, store.deleteNamespace(a));
    assertEquals(
        List.of(RowResult.MISSING, RowResult.MISSING, RowResult.MISSING),
        store.exists(aKeys).rows());
    for (int i = 0; i < survivors.size(); i++) {
      MemorySegment destination = host.asSlice(1 << 20, 1000);
      assertEquals(
          new RowResult.Ok(1000, false),
          row(store.get(List.of(survivors.get(i)), List.of(destination))),
          survivors.get(i));
      assertArrayEquals(survivorBytes.get(i), destination.toArray(ValueLayout.JAVA_BYTE));
    }
    assertEquals(0, store.deleteNamespace(a));
  }

  @Test
  void shouldThrowBeforeWritingAnyRowWhenAKeyIsTooLong() throws Exception {
    try (Store small = newStore(64, 4096)) {
      String good = "ns_ok";
      String longAscii = "ns_" + "k".repeat(62); // 65 bytes
      String longUtf8 = "ns_" + "\u00e9".repeat(31); // 34 chars, 65 bytes
      MemorySegment source = host.asSlice(64, 16);
      for (String tooLong : List.of(longAscii, longUtf8)) {
        IllegalArgumentException e =
            assertThrows(
                IllegalArgumentException.class,
                () -> small.put(List.of(good, tooLong), List.of(source, source)));
        assertTrue(e.getMessage().contains("key length=65"), e.getMessage());
        assertTrue(e.getMessage().contains("max_key_bytes=64"), e.getMessage());
        assertEquals(RowResult.MISSING, row(small.exists(List.of(good))));
        assertThrows(IllegalArgumentException.class, () -> small.exists(List.of(tooLong)));
        assertThrows(
            IllegalArgumentException.class, () -> small.get(List.of(tooLong), List.of(source)));
      }
      String exactlyAtLimit = "ns_" + "k".repeat(61);
      assertEquals(
          new RowResult.Ok(16, false), row(small.put(List.of(exactlyAtLimit), List.of(source))));
    }
  }

  @Test
  void shouldThrowBeforeWritingAnyRowWhenAValueIsTooLarge() throws Exception {
    try (Store small = newStore(64, 4096)) {
      List<String> keys = List.of("ns_first", "ns_second");
      List<MemorySegment> sources = List.of(host.asSlice(64, 4096), host.asSlice(8192, 4097));
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> small.put(keys, sources));
      assertTrue(e.getMessage().contains("value size=4097"), e.getMessage());
      assertTrue(e.getMessage().contains("max_value_bytes=4096"), e.getMessage());
      assertEquals(List.of(RowResult.MISSING, RowResult.MISSING), small.exists(keys).rows());
    }
  }

  @Test
  void shouldThrowWhenKeysAndSegmentsDifferInCount() {
    List<String> keys = List.of("ns_a", "ns_b");
    List<MemorySegment> one = List.of(host.asSlice(0, 8));
    assertThrows(IllegalArgumentException.class, () -> store.put(keys, one));
    assertThrows(IllegalArgumentException.class, () -> store.get(keys, one));
  }

  @Test
  void shouldRefuseCallsWhenClosed() throws Exception {
    store.close();
    assertThrows(IllegalStateException.class, () -> store.exists(List.of("ns_a")));
    assertThrows(IllegalStateException.class, () -> store.deleteNamespace("ns"));
  }

  @Test
  void shouldRetireFailedCallsWhenAllIoIsInsideTheCall() {
    assertTrue(store.failuresRetire());
    assertEquals(MAX_KEY_BYTES, store.maxKeyBytes());
  }

  @Test
  void shouldCreateEachKeyExactlyOnceWhenThreadsRacePuts() throws Exception {
    int threads = 4;
    int numKeys = 24;
    int size = 4096;
    String ns = StoreTesting.namespace("race");
    List<String> keys = new ArrayList<>();
    for (int k = 0; k < numKeys; k++) {
      keys.add(StoreTesting.key(ns, k));
    }
    byte[][][] written = new byte[threads][numKeys][];
    MemorySegment[][] sources = new MemorySegment[threads][numKeys];
    for (int t = 0; t < threads; t++) {
      for (int k = 0; k < numKeys; k++) {
        sources[t][k] = host.asSlice(64 + ((long) t * numKeys + k) * size, size);
        written[t][k] = StoreTesting.fill(sources[t][k], t * 1000L + k);
      }
    }
    CountDownLatch start = new CountDownLatch(1);
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try {
      List<Future<boolean[]>> futures = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        int thread = t;
        futures.add(
            pool.submit(
                () -> {
                  List<Integer> order = new ArrayList<>();
                  for (int k = 0; k < numKeys; k++) {
                    order.add(k);
                  }
                  Collections.shuffle(order, new Random(0x5EED + thread));
                  boolean[] created = new boolean[numKeys];
                  start.await();
                  for (int k : order) {
                    RowResult r = row(store.put(List.of(keys.get(k)), List.of(sources[thread][k])));
                    created[k] = !((RowResult.Ok) r).alreadyExisted();
                  }
                  return created;
                }));
      }
      start.countDown();
      int[] creator = new int[numKeys];
      Arrays.fill(creator, -1);
      for (int t = 0; t < threads; t++) {
        boolean[] created = futures.get(t).get(60, TimeUnit.SECONDS);
        for (int k = 0; k < numKeys; k++) {
          if (created[k]) {
            assertEquals(-1, creator[k], "key " + k + " created by two threads");
            creator[k] = t;
          }
        }
      }
      MemorySegment destination = host.asSlice(3 << 20, size);
      for (int k = 0; k < numKeys; k++) {
        assertTrue(creator[k] >= 0, "key " + k + " created by no thread");
        assertEquals(
            new RowResult.Ok(size, false),
            row(store.get(List.of(keys.get(k)), List.of(destination))));
        assertArrayEquals(
            written[creator[k]][k], destination.toArray(ValueLayout.JAVA_BYTE), "key " + k);
      }
    } finally {
      pool.shutdownNow();
    }
    assertQuiescent();
  }

  protected static RowResult row(StoreResult result) {
    assertTrue(result.retired(), "result is not retired: " + result);
    assertEquals(1, result.rows().size(), "rows of " + result);
    return result.rows().get(0);
  }

  private static void assertUntouched(MemorySegment destination) {
    for (long i = 0; i < destination.byteSize(); i++) {
      if (destination.get(ValueLayout.JAVA_BYTE, i) != SENTINEL) {
        throw new AssertionError("destination byte " + i + " was written");
      }
    }
  }
}

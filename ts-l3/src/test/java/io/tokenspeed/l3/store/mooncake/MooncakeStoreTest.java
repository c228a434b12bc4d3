package io.tokenspeed.l3.store.mooncake;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.NamespaceDeletion;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link MooncakeStore} across the real native boundary: every call goes through FFM downcalls into
 * the in-memory {@code store_c.h} stub ({@link MooncakeStub}), whose controls script the SDK's
 * answers. Each test starts from an empty stub and one registered 4 MiB Host allocation.
 */
class MooncakeStoreTest {

  private static final long HOST_BYTES = 4L << 20;
  private static final int MAX_KEY_BYTES = 64;
  private static final String NS = "tsl3-0f";

  private Arena arena;
  private MemorySegment host;
  private MooncakeStore store;

  @BeforeEach
  void openStore() throws IOException {
    MooncakeStub.reset();
    arena = Arena.ofShared();
    host = arena.allocate(HOST_BYTES, 4096);
    store = MooncakeStore.open(MooncakeStub.settings(MAX_KEY_BYTES));
    store.registerHostBuffer(host);
  }

  @AfterEach
  void closeStore() throws IOException {
    store.close();
    arena.close();
  }

  private static String key(String hash) {
    return NS + "_" + hash + "|g0|o0|r0";
  }

  private MemorySegment filled(long offset, long length, long seed) {
    MemorySegment slice = host.asSlice(offset, length);
    Random random = new Random(seed);
    for (long i = 0; i < length; i++) {
      slice.set(ValueLayout.JAVA_BYTE, i, (byte) random.nextInt());
    }
    return slice;
  }

  private MemorySegment putOne(String key, long offset, long length) {
    MemorySegment source = filled(offset, length, offset);
    StoreResult put = store.put(List.of(key), List.of(source));
    assertEquals(StoreResult.of(List.of(new RowResult.Ok(length, false))), put);
    return source;
  }

  // --- byte round trips -------------------------------------------------------------------------

  @ParameterizedTest(name = "{0} bytes")
  @ValueSource(ints = {1, 4096, 65536, 1 << 20})
  void shouldRoundTripBytesWhenSlicesLieInsideTheRegisteredAllocation(int length) {
    MemorySegment source = filled(17, length, length);
    long dstOffset = (2L << 20) + 13;
    MemorySegment destination = host.asSlice(dstOffset, length);

    StoreResult put = store.put(List.of(key("a")), List.of(source));
    StoreResult get = store.get(List.of(key("a")), List.of(destination));

    assertEquals(StoreResult.of(List.of(new RowResult.Ok(length, false))), put);
    assertEquals(StoreResult.of(List.of(new RowResult.Ok(length, false))), get);
    assertEquals(-1, source.mismatch(destination), "bytes differ");
    assertEquals(0, host.get(ValueLayout.JAVA_BYTE, dstOffset - 1), "byte before was touched");
    assertEquals(0, host.get(ValueLayout.JAVA_BYTE, dstOffset + length), "byte after was touched");
    MooncakeCounters counters = store.counters();
    assertEquals(1, counters.putsNewlyWritten());
    assertEquals(1, counters.getsOk());
  }

  @Test
  void shouldKeepRowsInKeyOrderWhenOneBatchMixesHitsAndMisses() {
    MemorySegment a = putOne(key("a"), 0, 100);
    MemorySegment c = putOne(key("c"), 100, 300);
    MemorySegment da = host.asSlice(1 << 20, 100);
    MemorySegment db = host.asSlice((1 << 20) + 100, 200);
    MemorySegment dc = host.asSlice((1 << 20) + 300, 300);

    StoreResult get = store.get(List.of(key("a"), key("b"), key("c")), List.of(da, db, dc));

    assertEquals(
        StoreResult.of(
            List.of(new RowResult.Ok(100, false), RowResult.MISSING, new RowResult.Ok(300, false))),
        get);
    assertEquals(-1, a.mismatch(da));
    assertEquals(-1, c.mismatch(dc));
  }

  // --- GET codes --------------------------------------------------------------------------------

  @Test
  void shouldReportMissingAndRetiredWhenObjectNotFound() {
    StoreResult get = store.get(List.of(key("absent")), List.of(host.asSlice(64, 64)));

    assertEquals(StoreResult.of(List.of(RowResult.MISSING)), get);
    assertEquals(1, store.counters().getsMissing());
  }

  @Test
  void shouldReportInvalidAndRetiredWhenReadIsShort() {
    putOne(key("a"), 0, 4096);
    MooncakeStub.shortReads(1, 1);

    StoreResult get = store.get(List.of(key("a")), List.of(host.asSlice(8192, 4096)));

    assertEquals(StoreResult.of(List.of(new RowResult.Invalid(4095))), get);
    assertEquals(1, store.counters().getsInvalid());
  }

  @Test
  void shouldReportMalformedAndUnretiredWhenReadIsLongerThanTheDestination() {
    putOne(key("a"), 0, 4096);
    MooncakeStub.shortReads(1, -5);

    StoreResult get = store.get(List.of(key("a")), List.of(host.asSlice(8192, 4096)));

    // 4,101 bytes cannot have landed in 4,096: a malformed answer proves no retirement
    assertEquals(
        new StoreResult(List.of(new RowResult.Unknown(MooncakeCodes.MALFORMED_RESULT)), false),
        get);
    assertEquals(0, store.counters().getsInvalid(), "no object evidence");
    assertTrue(store.counters().malformed() > 0);
  }

  @Test
  void shouldAnswerTheObjectsSizeAsAShortReadWhenTheDestinationIsLarger() {
    MemorySegment source = putOne(key("a"), 0, 100);
    MemorySegment destination = host.asSlice(8192, 160);

    StoreResult get = store.get(List.of(key("a")), List.of(destination));

    // the real client answers the object's own size; 100 of 160 bytes is an object shorter than
    // the block the key names, so a retired invalid row
    assertEquals(StoreResult.of(List.of(new RowResult.Invalid(100))), get);
    assertEquals(-1, source.mismatch(destination.asSlice(0, 100)), "the object's bytes landed");
    assertEquals(1, store.counters().getsInvalid());
  }

  @Test
  void shouldRetireWithoutObjectEvidenceWhenTheObjectIsLargerThanTheDestination() {
    putOne(key("a"), 0, 100);
    MemorySegment destination = host.asSlice(8192, 64);

    StoreResult get = store.get(List.of(key("a")), List.of(destination));

    assertEquals(
        StoreResult.of(List.of(new RowResult.Rejected(MooncakeCodes.INVALID_PARAMS, false))), get);
    assertEquals(-1, host.asSlice(8192, 64).mismatch(MemorySegment.ofArray(new byte[64])));
    assertEquals(1, store.counters().retiredFailures());
    assertEquals(0, store.counters().getsInvalid(), "no object evidence");
  }

  @ParameterizedTest(name = "code {0}")
  @ValueSource(ints = {-703, -702, -600, -200, -707})
  void shouldRetireWithoutOutageWhenGetRowFailsBeforeOrAfterItsTransfer(int code) {
    putOne(key("a"), 0, 64);
    putOne(key("b"), 64, 64);
    MooncakeStub.injectRows("batch_get_into", code, 1);

    StoreResult get =
        store.get(
            List.of(key("a"), key("b")), List.of(host.asSlice(4096, 64), host.asSlice(8192, 64)));

    assertEquals(
        StoreResult.of(List.of(new RowResult.Rejected(code, false), new RowResult.Ok(64, false))),
        get);
    assertEquals(1, store.counters().retiredFailures());
    assertEquals(0, store.counters().unknown());
  }

  @ParameterizedTest(name = "code {0}")
  @ValueSource(ints = {-801, -900, -901})
  void shouldRetireAndReportAnOutageWhenGetRowFailsAtTheMasterOrItsChecksum(int code) {
    putOne(key("a"), 0, 64);
    MooncakeStub.injectRows("batch_get_into", code, 1);

    StoreResult get = store.get(List.of(key("a")), List.of(host.asSlice(4096, 64)));

    assertEquals(StoreResult.of(List.of(new RowResult.Rejected(code, true))), get);
    assertEquals(1, store.counters().retiredFailures());
  }

  @ParameterizedTest(name = "code {0}")
  @ValueSource(ints = {-1, -706, -713, -800, -1000})
  void shouldReportUnknownAndUnretiredWhenGetRowFailsOtherwise(int code) {
    putOne(key("a"), 0, 64);
    putOne(key("b"), 64, 64);
    MooncakeStub.injectRows("batch_get_into", code, 1);

    StoreResult get =
        store.get(
            List.of(key("a"), key("b")), List.of(host.asSlice(4096, 64), host.asSlice(8192, 64)));

    assertEquals(
        new StoreResult(List.of(new RowResult.Unknown(code), new RowResult.Ok(64, false)), false),
        get);
    assertEquals(1, store.counters().unknown());
  }

  @Test
  void shouldReportUnknownAndUnretiredWhenTheWholeGetCallFails() {
    MooncakeStub.inject("batch_get_into", MooncakeCodes.INTERNAL_ERROR, 1);

    StoreResult get =
        store.get(List.of(key("a"), key("b")), List.of(host.asSlice(0, 8), host.asSlice(8, 8)));

    RowResult unknown = new RowResult.Unknown(MooncakeCodes.INTERNAL_ERROR);
    assertEquals(new StoreResult(List.of(unknown, unknown), false), get);
  }

  // --- PUT codes --------------------------------------------------------------------------------

  @Test
  void shouldAnswerZeroAndKeepTheBytesWhenPutRepeatsLikeTheRealClient() {
    MemorySegment first = putOne(key("a"), 0, 128);
    byte[] written = first.toArray(ValueLayout.JAVA_BYTE);
    MemorySegment other = filled(4096, 128, 99);

    StoreResult put = store.put(List.of(key("a")), List.of(other));
    MemorySegment back = host.asSlice(8192, 128);
    StoreResult get = store.get(List.of(key("a")), List.of(back));

    // the real client reports an existing object as a plain 0: it cannot be counted apart
    assertEquals(StoreResult.of(List.of(new RowResult.Ok(128, false))), put);
    assertEquals(StoreResult.of(List.of(new RowResult.Ok(128, false))), get);
    assertEquals(-1, back.mismatch(MemorySegment.ofArray(written)), "create-only: bytes kept");
    assertEquals(2, store.counters().putsNewlyWritten());
    assertEquals(0, store.counters().putsAlreadyExisted());
  }

  @Test
  void shouldCountAlreadyExistedApartWhenTheSdkAnswersObjectAlreadyExists() {
    MooncakeStub.injectRows("batch_put_from", MooncakeCodes.OBJECT_ALREADY_EXISTS, 1);

    StoreResult put =
        store.put(
            List.of(key("a"), key("b")), List.of(host.asSlice(0, 128), host.asSlice(128, 32)));

    assertEquals(
        StoreResult.of(List.of(new RowResult.Ok(128, true), new RowResult.Ok(32, false))), put);
    MooncakeCounters counters = store.counters();
    assertEquals(1, counters.putsNewlyWritten());
    assertEquals(1, counters.putsAlreadyExisted());
  }

  @ParameterizedTest(name = "code {0}")
  @ValueSource(ints = {-900, -901})
  void shouldRetireAndReportAnOutageWhenPutRowFailsAtTheMaster(int code) {
    MooncakeStub.injectRows("batch_put_from", code, 1);

    StoreResult put = store.put(List.of(key("a")), List.of(host.asSlice(0, 64)));

    assertEquals(StoreResult.of(List.of(new RowResult.Rejected(code, true))), put);
    assertFalse(MooncakeStub.has(key("a")));
    assertEquals(1, store.counters().retiredFailures());
  }

  @Test
  void shouldRejectAndRetireWhenNoAvailableHandle() {
    MooncakeStub.injectRows("batch_put_from", MooncakeCodes.NO_AVAILABLE_HANDLE, 1);

    StoreResult put =
        store.put(List.of(key("a"), key("b")), List.of(host.asSlice(0, 64), host.asSlice(64, 64)));

    assertEquals(
        StoreResult.of(
            List.of(
                new RowResult.Rejected(
                    MooncakeCodes.NO_AVAILABLE_HANDLE, false, MooncakeStore.NO_HANDLE_REASON),
                new RowResult.Ok(64, false))),
        put);
    assertFalse(MooncakeStub.has(key("a")), "a rejected PUT created the object");
    assertEquals(1, store.counters().rejected());
  }

  @ParameterizedTest(name = "code {0}")
  @ValueSource(ints = {-1, -600, -703, -704, -707, -800})
  void shouldReportUnknownAndUnretiredWhenPutRowFailsOtherwise(int code) {
    MooncakeStub.injectRows("batch_put_from", code, 1);

    StoreResult put = store.put(List.of(key("a")), List.of(host.asSlice(0, 64)));

    assertEquals(new StoreResult(List.of(new RowResult.Unknown(code)), false), put);
    assertEquals(1, store.counters().unknown());
  }

  @Test
  void shouldReportUnknownAndUnretiredWhenTheWholePutCallFails() {
    MooncakeStub.inject("batch_put_from", MooncakeCodes.TRANSFER_FAIL, 1);

    StoreResult put = store.put(List.of(key("a")), List.of(host.asSlice(0, 64)));

    assertEquals(
        new StoreResult(List.of(new RowResult.Unknown(MooncakeCodes.TRANSFER_FAIL)), false), put);
  }

  // --- malformed answers ------------------------------------------------------------------------

  @ParameterizedTest(name = "mode {0}")
  @ValueSource(
      ints = {
        MooncakeStub.LAST_ROW_UNWRITTEN,
        MooncakeStub.ROW_PAST_COUNT,
        MooncakeStub.VALUE_OUT_OF_SET
      })
  void shouldNotRetireWhenGetAnswerIsMalformed(int mode) {
    putOne(key("a"), 0, 64);
    putOne(key("b"), 64, 64);
    MooncakeStub.malform("batch_get_into", mode);

    StoreResult get =
        store.get(
            List.of(key("a"), key("b")), List.of(host.asSlice(4096, 64), host.asSlice(8192, 64)));

    assertFalse(get.retired());
    assertTrue(get.rows().contains(new RowResult.Unknown(MooncakeCodes.MALFORMED_RESULT)));
    assertTrue(store.counters().malformed() > 0);
  }

  @ParameterizedTest(name = "mode {0}")
  @ValueSource(
      ints = {
        MooncakeStub.LAST_ROW_UNWRITTEN,
        MooncakeStub.ROW_PAST_COUNT,
        MooncakeStub.VALUE_OUT_OF_SET
      })
  void shouldNotRetireWhenPutAnswerIsMalformed(int mode) {
    MooncakeStub.malform("batch_put_from", mode);

    StoreResult put =
        store.put(List.of(key("a"), key("b")), List.of(host.asSlice(0, 64), host.asSlice(64, 64)));

    assertFalse(put.retired());
    assertTrue(put.rows().contains(new RowResult.Unknown(MooncakeCodes.MALFORMED_RESULT)));
  }

  @Test
  void shouldNotRetireWhenCallStatusIsOutsideTheDocumentedSet() {
    MooncakeStub.inject("batch_put_from", 3, 1);

    StoreResult put = store.put(List.of(key("a")), List.of(host.asSlice(0, 64)));

    assertEquals(
        new StoreResult(List.of(new RowResult.Unknown(MooncakeCodes.MALFORMED_RESULT)), false),
        put);
  }

  // --- QUERY ------------------------------------------------------------------------------------

  @Test
  void shouldReportOkAndMissingWhenQueryingExistence() {
    putOne(key("a"), 0, 64);

    StoreResult exists = store.exists(List.of(key("a"), key("b")));

    assertEquals(StoreResult.of(List.of(new RowResult.Ok(0, false), RowResult.MISSING)), exists);
    MooncakeCounters counters = store.counters();
    assertEquals(1, counters.existsOk());
    assertEquals(1, counters.existsMissing());
  }

  @Test
  void shouldReportUnknownButRetiredWhenQueryFailsBecauseItTouchesNoPayload() {
    MooncakeStub.injectRows("batch_is_exist", MooncakeCodes.RPC_FAIL, 1);
    StoreResult rowFailure = store.exists(List.of(key("a"), key("b")));
    MooncakeStub.inject("batch_is_exist", MooncakeCodes.INTERNAL_ERROR, 1);
    StoreResult callFailure = store.exists(List.of(key("a")));
    MooncakeStub.malform("batch_is_exist", MooncakeStub.VALUE_OUT_OF_SET);
    StoreResult malformed = store.exists(List.of(key("a")));

    assertEquals(
        StoreResult.of(List.of(new RowResult.Unknown(MooncakeCodes.RPC_FAIL), RowResult.MISSING)),
        rowFailure);
    assertEquals(
        StoreResult.of(List.of(new RowResult.Unknown(MooncakeCodes.INTERNAL_ERROR))), callFailure);
    assertEquals(
        StoreResult.of(List.of(new RowResult.Unknown(MooncakeCodes.MALFORMED_RESULT))), malformed);
  }

  // --- the master's connection after an outage --------------------------------------------------

  @Test
  void shouldMakeNoReconnectRoundTripWhileTheMasterAnswers() {
    putOne(key("a"), 0, 64);
    store.exists(List.of(key("a"), key("b")));
    store.get(List.of(key("a")), List.of(host.asSlice(4096, 64)));

    assertEquals(0, store.counters().reconnectRoundTrips());
    assertEquals(0, MooncakeStub.calls("is_exist"));
  }

  @Test
  void shouldReconnectOnceBeforeTheCallAfterAnOutageAnswer() {
    putOne(key("a"), 0, 64);
    MooncakeStub.injectRows("batch_get_into", MooncakeCodes.RPC_FAIL, 1);
    assertEquals(
        StoreResult.of(List.of(new RowResult.Rejected(MooncakeCodes.RPC_FAIL, true))),
        store.get(List.of(key("a")), List.of(host.asSlice(4096, 64))));
    assertEquals(0, store.counters().reconnectRoundTrips(), "nothing before the next call");

    StoreResult query = store.exists(List.of(key("a")));
    store.exists(List.of(key("a")));

    assertEquals(StoreResult.of(List.of(new RowResult.Ok(0, false))), query);
    assertEquals(1, store.counters().reconnectRoundTrips(), "one answered round trip, once");
    assertEquals(1, MooncakeStub.calls("is_exist"));
    assertFalse(MooncakeStub.has(MooncakeStore.RECONNECT_KEY), "the round trip writes nothing");
  }

  @Test
  void shouldSpendTheConnectionsARestartLeftStaleBeforeTheNextCall() {
    putOne(key("a"), 0, 64);
    MooncakeStub.masterStop();
    MooncakeStub.masterStart(2); // a new master; this client's pool still holds 2 old connections

    StoreResult first = store.exists(List.of(key("a")));
    StoreResult next = store.put(List.of(key("a")), List.of(host.asSlice(0, 64)));

    assertEquals(StoreResult.of(List.of(new RowResult.Unknown(MooncakeCodes.RPC_FAIL))), first);
    assertEquals(StoreResult.of(List.of(new RowResult.Ok(64, false))), next, "the new master");
    assertEquals(2, MooncakeStub.staleFailures());
    assertEquals(2, store.counters().reconnectRoundTrips(), "one spent, one answered");
  }

  @Test
  void shouldStopReconnectingAtTheBoundAndLetTheCallReportTheOutage() {
    putOne(key("a"), 0, 64);
    MooncakeStub.masterStop(); // still down at the next calls

    StoreResult first = store.exists(List.of(key("a")));
    StoreResult second = store.exists(List.of(key("a")));

    assertEquals(StoreResult.of(List.of(new RowResult.Unknown(MooncakeCodes.RPC_FAIL))), first);
    assertEquals(first, second, "the master is still down: the call says so");
    assertEquals(
        2,
        store.counters().reconnectRoundTrips(),
        "at most one call was ever inside at once: two round trips, then the call");

    MooncakeStub.masterStart(0);
    assertEquals(
        StoreResult.of(List.of(RowResult.MISSING)), store.exists(List.of(key("a"))), "forgotten");
    assertEquals(3, store.counters().reconnectRoundTrips(), "tried again before the next call");
  }

  // --- the stand-in's read leases and buffers, as the real master and client behave --------------

  @Test
  void shouldLeaseExistingObjectsWhenQueriedOrReadAndLetTheLeaseEnd() {
    putOne(key("a"), 0, 64);
    putOne(key("b"), 64, 64);
    putOne(key("c"), 128, 64);
    assertEquals(0, MooncakeStub.leasedCount(), "a PUT grants no lease");

    store.exists(List.of(key("a"), key("absent")));
    store.get(List.of(key("b"), key("gone")), List.of(host.asSlice(4096, 64), host.asSlice(0, 8)));

    assertEquals(
        2, MooncakeStub.leasedCount(), "a and b leased, c untouched, misses lease nothing");
    MooncakeStub.advanceMs(MooncakeStub.DEFAULT_LEASE_TTL_MS - 1);
    assertEquals(2, MooncakeStub.leasedCount());
    MooncakeStub.advanceMs(1);
    assertEquals(0, MooncakeStub.leasedCount());
  }

  @ParameterizedTest(name = "protocol {0}")
  @ValueSource(strings = {"tcp", "rdma"})
  void shouldAcceptUnregisteredBuffersOnlyOverTcp(String protocol) {
    MooncakeNative library = MooncakeNative.load(MooncakeStub.LIBRARY);
    MemorySegment client = library.create();
    try (Arena call = Arena.ofConfined()) {
      assertEquals(
          0,
          library.setup(
              client,
              call.allocateFrom("127.0.0.1"),
              call.allocateFrom("P2PHANDSHAKE"),
              0,
              0,
              call.allocateFrom(protocol),
              call.allocateFrom(""),
              call.allocateFrom("127.0.0.1:50051")));
      MemorySegment unregistered = call.allocate(32);
      MemorySegment keys = call.allocate(ValueLayout.ADDRESS, 1);
      keys.setAtIndex(ValueLayout.ADDRESS, 0, call.allocateFrom(key("u")));
      MemorySegment buffers = call.allocate(ValueLayout.ADDRESS, 1);
      buffers.setAtIndex(ValueLayout.ADDRESS, 0, unregistered);
      MemorySegment sizes = call.allocate(ValueLayout.JAVA_LONG, 1);
      sizes.setAtIndex(ValueLayout.JAVA_LONG, 0, 32);
      MemorySegment results = call.allocate(ValueLayout.JAVA_INT, 1);

      assertEquals(0, library.batchPutFrom(client, keys, buffers, sizes, 1, results));

      int expected = protocol.equals("tcp") ? MooncakeCodes.OK : MooncakeCodes.TRANSFER_FAIL;
      assertEquals(expected, results.getAtIndex(ValueLayout.JAVA_INT, 0));
      assertEquals(protocol.equals("tcp"), MooncakeStub.has(key("u")));
    } finally {
      library.destroy(client);
    }
  }

  // --- namespace deletion -----------------------------------------------------------------------

  @Test
  void shouldDeleteOnlyTheNamespacesKeysWhenItsNameHasRegexCharacters() throws IOException {
    List<String> doomed = List.of("tsl3-a.b_1", "tsl3-a.b_2|g0");
    List<String> survivors =
        List.of("tsl3-aXb_1", "tsl3-a.bc_1", "x_tsl3-a.b_1", "tsl3-a.b", "tsl3-a.b-_1");
    long offset = 0;
    for (String k : doomed) {
      putOne(k, offset, 8);
      offset += 8;
    }
    for (String k : survivors) {
      putOne(k, offset, 8);
      offset += 8;
    }

    long removed = store.deleteNamespace("tsl3-a.b");

    assertEquals(2, removed);
    doomed.forEach(k -> assertFalse(MooncakeStub.has(k), k));
    survivors.forEach(k -> assertTrue(MooncakeStub.has(k), k));
  }

  @Test
  void shouldEscapeEveryMetacharacterWhenDeletingANamespace() throws IOException {
    String namespace = "n+(1)[x]{2}|$^*?\\";
    putOne(namespace + "_k", 0, 8);
    putOne("n_k", 8, 8);
    putOne("nn+(1)[x]{2}|$^*?\\_k", 16, 8);

    long removed = store.deleteNamespace(namespace);

    assertEquals(
        "^n\\+\\(1\\)\\[x\\]\\{2\\}\\|\\$\\^\\*\\?\\\\_",
        MooncakeStore.namespacePattern(namespace));
    assertEquals(1, removed);
    assertEquals(2, MooncakeStub.objectCount());
  }

  /** A manual clock whose waiting also moves the stub's lease clock; runs a hook per wait. */
  private static final class StubClock implements MooncakeStore.Clock {
    long nowNs = 1_000_000_000L;
    long sleptNs;
    Runnable onSleep = () -> {};

    @Override
    public long nowNs() {
      return nowNs;
    }

    @Override
    public void sleepNs(long ns) {
      nowNs += ns;
      sleptNs += ns;
      MooncakeStub.advanceMs(ns / 1_000_000);
      onSleep.run();
    }
  }

  private static final long LEASE_MS = MooncakeStub.DEFAULT_LEASE_TTL_MS;

  private MooncakeStore clocked(StubClock clock, long deleteWaitMs) throws IOException {
    return MooncakeStore.open(
        MooncakeStub.settings(MAX_KEY_BYTES).withLease(LEASE_MS, deleteWaitMs), clock);
  }

  @Test
  void shouldLeaveQueriedObjectsWhenOnePassRunsInsideTheirLeaseLikeTheRealMaster()
      throws IOException {
    putOne(key("a"), 0, 8);
    putOne(key("b"), 8, 8);
    store.exists(List.of(key("a")));

    long removed = store.deleteNamespace(NS);

    assertEquals(1, removed, "b went, a is leased and stays");
    assertTrue(MooncakeStub.has(key("a")));
    assertFalse(MooncakeStub.has(key("b")));
  }

  @Test
  void shouldWaitOutItsOwnLeasesThenRemoveEverythingWhenPurgingAQueriedNamespace()
      throws Exception {
    StubClock clock = new StubClock();
    try (MooncakeStore purger = clocked(clock, 25_000)) {
      putOne(key("a"), 0, 8);
      putOne(key("b"), 8, 8);
      putOne("other_k", 16, 8);
      assertEquals(2, purger.exists(List.of(key("a"), key("b"))).rows().size());

      NamespaceDeletion d = purger.purgeNamespace(NS);

      assertEquals(2, d.removedObjects());
      assertEquals(-1, d.remainingObjects(), "Mooncake cannot count what stays");
      assertEquals(2, d.passes(), "one after its own leases, one a lease later that removed 0");
      assertEquals(LEASE_MS + MooncakeStore.LEASE_MARGIN_MS + LEASE_MS, d.waitedMs());
      assertEquals(d.waitedMs() * 1_000_000, clock.sleptNs);
      assertTrue(d.remainingReason().contains("removed nothing"), d.remainingReason());
      assertFalse(MooncakeStub.has(key("a")));
      assertFalse(MooncakeStub.has(key("b")));
      assertTrue(MooncakeStub.has("other_k"), "another namespace's object");
    }
  }

  @Test
  void shouldRemoveObjectsAnotherClientLeasedOneLeaseLaterWhenPurging() throws Exception {
    StubClock clock = new StubClock();
    try (MooncakeStore purger = clocked(clock, 25_000)) {
      putOne(key("a"), 0, 8);
      putOne(key("b"), 8, 8);
      store.exists(List.of(key("a"))); // another client's lease; the purger holds none

      NamespaceDeletion d = purger.purgeNamespace(NS);

      // pass 1 at once removes b, pass 2 a lease later removes a, pass 3 removes nothing
      assertEquals(2, d.removedObjects());
      assertEquals(3, d.passes());
      assertEquals(2 * LEASE_MS, d.waitedMs());
      assertEquals(0, MooncakeStub.objectCount());
    }
  }

  @Test
  void shouldLeaveAnObjectAnotherClientKeepsReadingAndSaySo() throws Exception {
    StubClock clock = new StubClock();
    try (MooncakeStore purger = clocked(clock, 25_000)) {
      putOne(key("a"), 0, 8);
      putOne(key("b"), 8, 8);
      putOne(key("c"), 16, 8);
      store.exists(List.of(key("a"), key("b")));
      clock.onSleep = () -> store.exists(List.of(key("a"))); // a is read again every lease

      NamespaceDeletion d = purger.purgeNamespace(NS);

      // pass 1 removes c; b's lease ends and pass 2 removes it; a is leased at every pass, so
      // pass 3 removes nothing and a stays
      assertEquals(2, d.removedObjects());
      assertEquals(3, d.passes());
      assertTrue(MooncakeStub.has(key("a")));
      assertTrue(d.remainingReason().contains("another client read"), d.remainingReason());
    }
  }

  @Test
  void shouldSayTheBoundRanOutWhenEveryPassStillRemovesObjects() throws Exception {
    StubClock clock = new StubClock();
    try (MooncakeStore purger = clocked(clock, 25_000)) {
      putOne(key("a"), 0, 8);
      long[] next = {1};
      clock.onSleep = () -> putOne(key("late" + next[0]++), 8, 8); // a writer still at work

      NamespaceDeletion d = purger.purgeNamespace(NS);

      // passes at 0 s, 10 s and 20 s each remove one object; a fourth at 30 s would pass 25 s
      assertEquals(3, d.removedObjects());
      assertEquals(3, d.passes());
      assertEquals(2 * LEASE_MS, d.waitedMs());
      assertTrue(d.remainingReason().contains("ran out"), d.remainingReason());
    }
  }

  @Test
  void shouldRunOnePassAtOnceWhenTheWaitBoundIsZero() throws Exception {
    StubClock clock = new StubClock();
    try (MooncakeStore purger = clocked(clock, 0)) {
      putOne(key("a"), 0, 8);
      purger.exists(List.of(key("a")));

      NamespaceDeletion d = purger.purgeNamespace(NS);

      assertEquals(new NamespaceDeletion(0, -1, 1, 0, d.remainingReason()), d);
      assertTrue(d.remainingReason().contains("own read leases had not ended"));
      assertTrue(MooncakeStub.has(key("a")));
      assertEquals(0, clock.sleptNs);
    }
  }

  @Test
  void shouldFailThePurgeWhenAPassAnswersANegativeCode() throws Exception {
    StubClock clock = new StubClock();
    try (MooncakeStore purger = clocked(clock, 25_000)) {
      MooncakeStub.inject("remove_by_regex", MooncakeCodes.RPC_TIMEOUT, 1);

      IOException e = assertThrows(IOException.class, () -> purger.purgeNamespace(NS));

      assertTrue(e.getMessage().contains("RPC_TIMEOUT"), e.getMessage());
      assertEquals(0, clock.sleptNs, "a failed first pass ends the deletion");
    }
  }

  @Test
  void shouldThrowWhenNamespaceDeletionFails() {
    MooncakeStub.inject("remove_by_regex", MooncakeCodes.RPC_FAIL, 1);

    IOException e = assertThrows(IOException.class, () -> store.deleteNamespace(NS));

    assertTrue(e.getMessage().contains("RPC_FAIL"), e.getMessage());
  }

  // --- argument checks before any native call ---------------------------------------------------

  @Test
  void shouldRejectTooLongKeysBeforeAnyNativeCall() {
    String tooLong = "é".repeat(MAX_KEY_BYTES / 2 + 1); // MAX_KEY_BYTES / 2 + 1 chars, 2 bytes each
    String justFits = "k".repeat(MAX_KEY_BYTES);
    long before = MooncakeStub.calls("*");
    long nativeBefore = store.counters().nativeCalls();

    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> store.exists(List.of(justFits, tooLong)));
    assertThrows(
        IllegalArgumentException.class,
        () -> store.get(List.of(tooLong), List.of(host.asSlice(0, 8))));
    assertThrows(
        IllegalArgumentException.class,
        () -> store.put(List.of(tooLong), List.of(host.asSlice(0, 8))));
    assertThrows(IllegalArgumentException.class, () -> store.exists(List.of("a\0b")));
    assertThrows(IllegalArgumentException.class, () -> store.exists(List.of("")));

    assertTrue(e.getMessage().contains("max_key_bytes=" + MAX_KEY_BYTES), e.getMessage());
    assertEquals(before, MooncakeStub.calls("*"));
    assertEquals(nativeBefore, store.counters().nativeCalls());
    assertEquals(StoreResult.of(List.of(RowResult.MISSING)), store.exists(List.of(justFits)));
  }

  @Test
  void shouldRejectSegmentsOutsideTheRegisteredAllocationBeforeAnyNativeCall() {
    MemorySegment foreign = arena.allocate(64);
    MemorySegment straddling =
        MemorySegment.ofAddress(host.address() + HOST_BYTES - 8).reinterpret(16);
    MemorySegment heap = MemorySegment.ofArray(new byte[64]);
    long before = MooncakeStub.calls("*");

    for (MemorySegment bad : List.of(foreign, straddling, heap)) {
      assertThrows(
          IllegalArgumentException.class, () -> store.put(List.of(key("a")), List.of(bad)));
      assertThrows(
          IllegalArgumentException.class, () -> store.get(List.of(key("a")), List.of(bad)));
    }
    assertThrows(
        IllegalArgumentException.class,
        () -> store.get(List.of(key("a")), List.of(host.asSlice(0, 8).asReadOnly())));
    assertThrows(
        IllegalArgumentException.class,
        () -> store.put(List.of(key("a"), key("b")), List.of(host.asSlice(0, 8))));

    assertEquals(before, MooncakeStub.calls("*"));
    assertEquals(0, MooncakeStub.objectCount());
  }

  @Test
  void shouldAcceptTheWholeAllocationAndItsLastByte() {
    putOne(key("whole"), 0, HOST_BYTES);
    putOne(key("last"), HOST_BYTES - 1, 1);

    assertEquals(2, MooncakeStub.objectCount());
  }

  @Test
  void shouldNameTheSocketTheClientOpensOnEveryInterfaceAndSeeItClosed() throws IOException {
    // the stand-in, like the real client, listens on 0.0.0.0 although local_hostname is loopback
    assertTrue(MooncakeStub.settings(MAX_KEY_BYTES).localHostname().startsWith("127."));
    String listener;
    try (MooncakeStore fresh = MooncakeStore.open(MooncakeStub.settings(MAX_KEY_BYTES))) {
      assertEquals(1, fresh.clientListeners().size(), fresh.clientListeners()::toString);
      listener = fresh.clientListeners().getFirst();
      assertTrue(listener.startsWith("0.0.0.0:"), listener);
      assertTrue(Integer.parseInt(listener.substring("0.0.0.0:".length())) > 0, listener);
      assertTrue(listening().contains(listener), listener);
      // the other store of this test opened its own socket: different ports
      assertEquals(1, store.clientListeners().size(), store.clientListeners()::toString);
      assertNotEquals(listener, store.clientListeners().getFirst());
    }
    assertFalse(listening().contains(listener), listener);
    assertTrue(listening().contains(store.clientListeners().getFirst()));
  }

  private static List<String> listening() {
    return ListeningSockets.ofThisProcess().orElseThrow().stream()
        .map(ListeningSockets.Listener::toString)
        .toList();
  }

  @Test
  void shouldRefuseDataCallsBeforeRegistration() throws IOException {
    try (MooncakeStore fresh = MooncakeStore.open(MooncakeStub.settings(MAX_KEY_BYTES))) {
      long before = MooncakeStub.calls("*");

      assertThrows(
          IllegalStateException.class,
          () -> fresh.get(List.of(key("a")), List.of(host.asSlice(0, 8))));
      assertThrows(
          IllegalStateException.class,
          () -> fresh.put(List.of(key("a")), List.of(host.asSlice(0, 8))));
      assertEquals(before, MooncakeStub.calls("*"));
    }
  }

  @Test
  void shouldServeWorkersCallingConcurrently() throws Exception {
    int threads = 4;
    int rounds = 50;
    int length = 256;
    try (ExecutorService workers = Executors.newFixedThreadPool(threads)) {
      List<Future<?>> done = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        long base = (long) t * rounds * length * 2;
        int thread = t;
        done.add(
            workers.submit(
                () -> {
                  for (int r = 0; r < rounds; r++) {
                    long offset = base + (long) r * length * 2;
                    MemorySegment source = filled(offset, length, offset);
                    MemorySegment destination = host.asSlice(offset + length, length);
                    String k = key(thread + "-" + r);
                    StoreResult put = store.put(List.of(k), List.of(source));
                    StoreResult get = store.get(List.of(k), List.of(destination));
                    assertEquals(StoreResult.of(List.of(new RowResult.Ok(length, false))), put);
                    assertEquals(StoreResult.of(List.of(new RowResult.Ok(length, false))), get);
                    assertEquals(-1, source.mismatch(destination));
                  }
                  return null;
                }));
      }
      for (Future<?> f : done) {
        f.get();
      }
    }

    assertEquals(threads * rounds, store.counters().getsOk());
    assertEquals(threads * rounds, MooncakeStub.objectCount());
  }

  // --- lifecycle --------------------------------------------------------------------------------

  @Test
  void shouldPassSettingsToSetupWhenOpening() {
    assertEquals(
        "127.0.0.1:17812|P2PHANDSHAKE|0|16777216|tcp||127.0.0.1:50051", MooncakeStub.lastSetup());
    assertEquals(1, MooncakeStub.registeredCount());
    assertEquals(3, store.counters().nativeCalls());
  }

  @Test
  void shouldRegisterOnlyOnce() {
    IllegalStateException e =
        assertThrows(IllegalStateException.class, () -> store.registerHostBuffer(host));

    assertTrue(e.getMessage().contains("already registered"), e.getMessage());
    assertEquals(1, MooncakeStub.calls("register_buffer"));
  }

  @Test
  void shouldThrowWhenRegistrationIsRefused() throws IOException {
    try (MooncakeStore fresh = MooncakeStore.open(MooncakeStub.settings(MAX_KEY_BYTES))) {
      MooncakeStub.inject("register_buffer", MooncakeCodes.INTERNAL_ERROR, 1);

      assertThrows(IOException.class, () -> fresh.registerHostBuffer(host));
      assertThrows(
          IllegalArgumentException.class,
          () -> fresh.registerHostBuffer(MemorySegment.ofArray(new byte[8])));
    }
  }

  @Test
  void shouldDestroyOnceWhenClosedTwice() throws IOException {
    store.close();
    store.close();

    assertEquals(1, MooncakeStub.calls("destroy"));
    assertEquals(1, MooncakeStub.calls("unregister_buffer"));
    assertEquals(0, MooncakeStub.registeredCount());
    assertThrows(IllegalStateException.class, () -> store.exists(List.of(key("a"))));
  }

  @Test
  void shouldThrowAndDestroyTheClientWhenSetupFails() {
    MooncakeStub.inject("setup", MooncakeCodes.RPC_FAIL, 1);

    IOException e =
        assertThrows(
            IOException.class, () -> MooncakeStore.open(MooncakeStub.settings(MAX_KEY_BYTES)));

    assertTrue(e.getMessage().contains("master_server_address=127.0.0.1:50051"), e.getMessage());
    assertEquals(1, MooncakeStub.calls("destroy"));
  }

  @Test
  void shouldThrowWhenCreateReturnsNull() {
    long setups = MooncakeStub.calls("setup");
    MooncakeStub.createNull(1);

    assertThrows(IOException.class, () -> MooncakeStore.open(MooncakeStub.settings(MAX_KEY_BYTES)));
    assertEquals(setups, MooncakeStub.calls("setup"));
  }

  @Test
  void shouldNameTheLibraryWhenItCannotBeLoaded() {
    Path missing = Path.of("/nonexistent/libmooncake_store.so");
    MooncakeStoreSettings settings =
        MooncakeStoreSettings.pureClient(missing, "127.0.0.1", "127.0.0.1:50051");

    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> MooncakeStore.open(settings));

    assertTrue(e.getMessage().contains("library_path=" + missing), e.getMessage());
  }

  @Test
  void shouldDeclareThatFailuresDoNotRetire() {
    assertFalse(store.failuresRetire());
    assertEquals("mooncake", store.name());
    assertEquals(MAX_KEY_BYTES, store.maxKeyBytes());
  }
}

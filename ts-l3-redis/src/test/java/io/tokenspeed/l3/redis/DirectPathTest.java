package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.cluster.SlotHash;
import io.tokenspeed.l3.spi.RowResult;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The direct path against {@link FakeRedisServer}: rows against a model with replies cut into
 * random pieces, keys spread round-robin over a call's connections, a server that dies or stalls
 * mid-value, pooled connections that died while idle, error replies that leave a connection usable,
 * and cluster redirections (MOVED, ASK).
 */
class DirectPathTest {

  private static final long TIMEOUT_MS = 5_000;

  private final List<AutoCloseable> open = new ArrayList<>();
  private Arena arena;

  @BeforeEach
  void arena() {
    arena = Arena.ofShared();
  }

  @AfterEach
  void closeAll() throws Exception {
    for (AutoCloseable c : open.reversed()) {
      c.close();
    }
    arena.close();
  }

  private FakeRedisServer server(long seed, int maxPieceBytes) throws IOException {
    FakeRedisServer s = new FakeRedisServer(seed, maxPieceBytes);
    open.add(s);
    return s;
  }

  private DirectPath standalone(FakeRedisServer server, int connections, int depth, long timeoutMs)
      throws IOException {
    RedisStoreSettings settings =
        RedisStoreSettings.standalone(server.address())
            .withConnections(connections)
            .withPipelineDepth(depth)
            .withTimeouts(TIMEOUT_MS, timeoutMs);
    DirectPath path =
        DirectPath.standalone(
            settings, new DirectPath.Counters(), "127.0.0.1", server.port(), deadline(TIMEOUT_MS));
    open.add(path);
    return path;
  }

  private static long deadline(long ms) {
    return System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
  }

  static Stream<Long> seeds() {
    return LongStream.rangeClosed(1, 12).boxed();
  }

  // ------------------------------------------------------------------ rows against a model

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldAnswerLikeTheModelWhenRepliesArriveInRandomPieces(long seed) throws Exception {
    SplittableRandom random = new SplittableRandom(seed);
    FakeRedisServer server = server(seed, 1 + random.nextInt(random.nextBoolean() ? 8 : 9000));
    int connections = 1 + random.nextInt(4);
    int depth = 1 + random.nextInt(6);
    DirectPath path = standalone(server, connections, depth, TIMEOUT_MS);
    int n = 1 + random.nextInt(40);
    List<String> keys = new ArrayList<>();
    List<byte[]> values = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      keys.add("tsl3-model_" + seed + "_" + i);
      byte[] v = new byte[1 + random.nextInt(random.nextInt(4) == 0 ? 300_000 : 2_000)];
      random.nextBytes(v);
      values.add(v);
    }
    // PUT a random subset (some twice: the second finds the key)
    Map<String, byte[]> model = new HashMap<>();
    List<String> putKeys = new ArrayList<>();
    List<MemorySegment> sources = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      if (random.nextInt(3) != 0) {
        putKeys.add(keys.get(i));
        sources.add(copy(values.get(i)));
      }
    }
    if (!putKeys.isEmpty()) {
      DirectCall put = path.put(putKeys, sources, deadline(TIMEOUT_MS));
      for (int i = 0; i < putKeys.size(); i++) {
        assertEquals(new RowResult.Ok(sources.get(i).byteSize(), false), put.rows[i]);
        model.put(putKeys.get(i), values.get(keys.indexOf(putKeys.get(i))));
      }
      DirectCall again = path.put(putKeys.subList(0, 1), sources.subList(0, 1), deadline(5000));
      assertEquals(new RowResult.Ok(sources.getFirst().byteSize(), true), again.rows[0]);
    }
    // GET everything, some destinations of the wrong length
    List<MemorySegment> destinations = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      long length = values.get(i).length + (random.nextInt(5) == 0 ? 1 : 0);
      MemorySegment d = arena.allocate(length);
      d.fill((byte) 0x5A);
      destinations.add(d);
    }
    DirectCall get = path.get(keys, destinations, deadline(TIMEOUT_MS));
    DirectCall query = path.exists(keys, deadline(TIMEOUT_MS));
    for (int i = 0; i < n; i++) {
      byte[] stored = model.get(keys.get(i));
      MemorySegment d = destinations.get(i);
      assertNull(get.errors[i]);
      if (stored == null) {
        assertEquals(RowResult.MISSING, get.rows[i], "key " + i);
        assertEquals(RowResult.MISSING, query.rows[i], "key " + i);
        assertUntouched(d);
      } else if (stored.length != d.byteSize()) {
        assertEquals(new RowResult.Invalid(stored.length), get.rows[i], "key " + i);
        assertUntouched(d);
      } else {
        assertEquals(new RowResult.Ok(stored.length, false), get.rows[i], "key " + i);
        assertArrayEquals(stored, d.toArray(ValueLayout.JAVA_BYTE), "key " + i);
      }
      if (stored != null) {
        assertEquals(new RowResult.Ok(stored.length, false), query.rows[i], "key " + i);
      }
    }
    assertEquals(connections, server.accepted.get(), "no connection beyond the first ones");
  }

  @Test
  void shouldSpreadTheKeysRoundRobinOverTheConnectionsWhenOneCallGetsMany() throws Exception {
    FakeRedisServer server = server(1, 64);
    DirectPath path = standalone(server, 4, 2, TIMEOUT_MS);
    List<String> keys = new ArrayList<>();
    List<MemorySegment> destinations = new ArrayList<>();
    for (int i = 0; i < 12; i++) {
      keys.add("tsl3-spread_p" + i);
      server.objects.put(keys.get(i), new byte[] {(byte) i});
      destinations.add(arena.allocate(1));
    }
    DirectCall get = path.get(keys, destinations, deadline(TIMEOUT_MS));
    for (int i = 0; i < 12; i++) {
      assertEquals(new RowResult.Ok(1, false), get.rows[i]);
      assertEquals((byte) i, destinations.get(i).get(ValueLayout.JAVA_BYTE, 0));
    }
    Set<List<String>> perConnection = new HashSet<>();
    for (int c = 0; c < 4; c++) {
      perConnection.add(server.keysOn(c, "GET"));
    }
    Set<List<String>> expected = new HashSet<>();
    for (int lane = 0; lane < 4; lane++) {
      expected.add(List.of(keys.get(lane), keys.get(lane + 4), keys.get(lane + 8)));
    }
    assertEquals(expected, perConnection);
    assertEquals(4, server.accepted.get());
  }

  // ------------------------------------------------------------------ failures mid-value

  @Test
  void shouldThrowAndNeverWriteAfterwardsWhenTheServerDiesMidValue() throws Exception {
    FakeRedisServer server = server(2, 512);
    DirectPath path = standalone(server, 1, 4, TIMEOUT_MS);
    byte[] value = new byte[64 << 10];
    new SplittableRandom(3).nextBytes(value);
    byte[] reply = FakeRedisServer.bulk(value);
    server.script =
        (c, command) ->
            new FakeRedisServer.Answer(
                Arrays.copyOf(reply, reply.length / 2), FakeRedisServer.Then.CLOSE, null);
    MemorySegment destination = arena.allocate(value.length);
    IOException e =
        assertThrows(
            IOException.class,
            () -> path.get(List.of("tsl3-dies_k"), List.of(destination), deadline(TIMEOUT_MS)));
    assertFalse(e instanceof RedisStore.TimedOut, e.toString());
    assertTrue(RedisLinks.messages(e).contains("closed the connection"), e.toString());
    assertEquals(0, path.openLinks(), "the failed call's connection is closed");
    assertEquals(1, path.counters().abandonedReads.sum());
    // the server is back to normal: the next call opens a fresh connection and reads the value
    server.script = (c, command) -> null;
    server.objects.put("tsl3-dies_k", value);
    DirectCall get = path.get(List.of("tsl3-dies_k"), List.of(destination), deadline(TIMEOUT_MS));
    assertEquals(new RowResult.Ok(value.length, false), get.rows[0]);
    assertArrayEquals(value, destination.toArray(ValueLayout.JAVA_BYTE));
    assertEquals(2, server.accepted.get());
  }

  @Test
  void shouldThrowWithinTheTimeoutAndLeaveTheDestinationAloneAfterwardsWhenTheServerStalls()
      throws Exception {
    FakeRedisServer server = server(4, 4096);
    long timeoutMs = 300;
    DirectPath path = standalone(server, 1, 4, timeoutMs);
    byte[] value = new byte[1 << 20];
    new SplittableRandom(5).nextBytes(value);
    byte[] reply = FakeRedisServer.bulk(value);
    int half = reply.length / 2;
    server.script =
        (c, command) ->
            new FakeRedisServer.Answer(
                Arrays.copyOf(reply, half),
                FakeRedisServer.Then.STALL_THEN_CONTINUE,
                Arrays.copyOfRange(reply, half, reply.length));
    MemorySegment destination = arena.allocate(value.length);
    destination.fill((byte) 0x5A);
    long startNs = System.nanoTime();
    IOException e =
        assertThrows(
            IOException.class,
            () -> path.get(List.of("tsl3-stall_k"), List.of(destination), deadline(timeoutMs)));
    long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs);
    assertInstanceOf(RedisStore.TimedOut.class, e);
    assertTrue(elapsedMs >= timeoutMs - 1, "failed after " + elapsedMs + " ms");
    assertTrue(elapsedMs < timeoutMs + 5_000, "failed after " + elapsedMs + " ms");
    byte[] atFailure = destination.toArray(ValueLayout.JAVA_BYTE);
    // the server sends the rest now; the connection was closed, so it goes nowhere
    server.release();
    awaitTrue("the server saw the connection closed", () -> server.connectionsEnded.get() == 1);
    assertArrayEquals(atFailure, destination.toArray(ValueLayout.JAVA_BYTE));
    assertEquals(0, path.openLinks());
  }

  @Test
  void shouldSendAgainOnAFreshConnectionWhenThePooledOneDiedWhileIdle() throws Exception {
    FakeRedisServer server = server(6, 64);
    DirectPath path = standalone(server, 2, 4, TIMEOUT_MS);
    server.objects.put("tsl3-stale_a", new byte[] {1, 2, 3});
    awaitTrue("the server accepted both", () -> server.accepted.get() == 2);
    server.dropConnections(); // an idle timeout, or a restart, while the pool held them
    awaitTrue("the server closed both", () -> server.connectionsEnded.get() == 2);
    MemorySegment destination = arena.allocate(3);
    DirectCall get = path.get(List.of("tsl3-stale_a"), List.of(destination), deadline(5000));
    assertEquals(new RowResult.Ok(3, false), get.rows[0]);
    assertEquals(3, server.accepted.get(), "one fresh connection");
    // PUT too: its value goes again on a fresh connection, and is stored once
    server.dropConnections();
    MemorySegment source = copy(new byte[] {9, 9});
    DirectCall put = path.put(List.of("tsl3-stale_b"), List.of(source), deadline(5000));
    // created, or, when the dying connection still delivered the first send, found existing: the
    // create-only SET stored the value once either way
    RowResult.Ok ok = assertInstanceOf(RowResult.Ok.class, put.rows[0]);
    assertEquals(2, ok.bytes());
    assertArrayEquals(new byte[] {9, 9}, server.objects.get("tsl3-stale_b"));
  }

  @Test
  void shouldKeepTheConnectionAndAnswerPerKeyWhenTheServerRepliesWithErrors() throws Exception {
    FakeRedisServer server = server(7, 64);
    DirectPath path = standalone(server, 1, 3, TIMEOUT_MS);
    server.script =
        (c, command) -> {
          String key = new String(command.get(1), java.nio.charset.StandardCharsets.UTF_8);
          if (key.contains("noperm")) {
            return FakeRedisServer.Answer.of(
                FakeRedisServer.ascii("-NOPERM No permissions to access a key\r\n"));
          }
          if (key.contains("wrongtype")) {
            return FakeRedisServer.Answer.of(FakeRedisServer.ascii("-WRONGTYPE Operation\r\n"));
          }
          if (key.contains("oom")) {
            return FakeRedisServer.Answer.of(FakeRedisServer.ascii("-OOM command not allowed\r\n"));
          }
          return null;
        };
    List<String> keys =
        List.of("tsl3-e_ok", "tsl3-e_noperm", "tsl3-e_wrongtype", "tsl3-e_oom", "tsl3-e_ok2");
    List<MemorySegment> sources = new ArrayList<>();
    for (int i = 0; i < keys.size(); i++) {
      sources.add(copy(new byte[] {(byte) i}));
    }
    DirectCall put = path.put(keys, sources, deadline(TIMEOUT_MS));
    assertEquals(new RowResult.Ok(1, false), put.rows[0]);
    assertEquals("NOPERM No permissions to access a key", put.errors[1]);
    assertEquals("WRONGTYPE Operation", put.errors[2], "WRONGTYPE is no answer to SET");
    assertEquals(RowResult.Rejected.noSpace("OOM command not allowed"), put.rows[3]);
    assertEquals(new RowResult.Ok(1, false), put.rows[4]);
    DirectCall get = path.get(keys, sources, deadline(TIMEOUT_MS));
    assertEquals(new RowResult.Ok(1, false), get.rows[0]);
    assertEquals("NOPERM No permissions to access a key", get.errors[1]);
    assertEquals(new RowResult.Invalid(0), get.rows[2]);
    assertEquals("OOM command not allowed", get.errors[3]);
    assertEquals(1, server.accepted.get(), "error replies leave the connection in step");
    assertEquals(1, path.openLinks());
  }

  @Test
  void shouldCloseTheConnectionWhenAReplyIsOfTheWrongKind() throws Exception {
    FakeRedisServer server = server(8, 64);
    DirectPath path = standalone(server, 1, 3, TIMEOUT_MS);
    server.script = (c, command) -> FakeRedisServer.Answer.of(FakeRedisServer.ascii(":1\r\n"));
    assertThrows(
        ReplyDecoder.ProtocolException.class,
        () -> path.get(List.of("tsl3-kind_k"), List.of(arena.allocate(1)), deadline(TIMEOUT_MS)));
    assertEquals(0, path.openLinks());
  }

  // ------------------------------------------------------------------ cluster redirections

  private DirectPath cluster(FakeRedisServer owner, Runnable refresh) throws IOException {
    String[] table = new String[DirectPath.SLOTS];
    Arrays.fill(table, owner.address());
    RedisStoreSettings settings =
        RedisStoreSettings.cluster(List.of(owner.address()))
            .withConnections(2)
            .withTimeouts(TIMEOUT_MS, TIMEOUT_MS);
    DirectPath path =
        DirectPath.cluster(settings, new DirectPath.Counters(), table, refresh, deadline(5000));
    open.add(path);
    return path;
  }

  @Test
  void shouldFollowMovedAndRouteThereFromThenOnWhenASlotMoved() throws Exception {
    FakeRedisServer a = server(9, 64);
    FakeRedisServer b = server(10, 64);
    AtomicInteger refreshes = new AtomicInteger();
    DirectPath path = cluster(a, refreshes::incrementAndGet);
    a.script =
        (c, command) -> {
          String key = new String(command.get(1), java.nio.charset.StandardCharsets.UTF_8);
          return FakeRedisServer.Answer.of(
              FakeRedisServer.ascii(
                  "-MOVED " + SlotHash.getSlot(key) + " " + b.address() + "\r\n"));
        };
    List<String> keys = List.of("tsl3-moved_1", "tsl3-moved_2", "tsl3-moved_3");
    List<MemorySegment> sources = new ArrayList<>();
    for (int i = 0; i < keys.size(); i++) {
      sources.add(copy(new byte[] {(byte) (i + 1)}));
    }
    DirectCall put = path.put(keys, sources, deadline(TIMEOUT_MS));
    for (int i = 0; i < keys.size(); i++) {
      assertEquals(new RowResult.Ok(1, false), put.rows[i]);
      assertArrayEquals(new byte[] {(byte) (i + 1)}, b.objects.get(keys.get(i)));
    }
    assertEquals(3, path.counters().redirects.sum());
    assertEquals(3, refreshes.get(), "every MOVED asks for the topology");
    int seenByA = a.received.size();
    List<MemorySegment> destinations =
        List.of(arena.allocate(1), arena.allocate(1), arena.allocate(1));
    DirectCall get = path.get(keys, destinations, deadline(TIMEOUT_MS));
    for (int i = 0; i < keys.size(); i++) {
      assertEquals(new RowResult.Ok(1, false), get.rows[i]);
      assertEquals((byte) (i + 1), destinations.get(i).get(ValueLayout.JAVA_BYTE, 0));
    }
    assertEquals(seenByA, a.received.size(), "the moved slots now go straight to their owner");
    assertEquals(3, path.counters().redirects.sum());
  }

  @Test
  void shouldSendAskingFirstAndKeepTheSlotTableWhenAnAskRedirects() throws Exception {
    FakeRedisServer a = server(11, 64);
    FakeRedisServer b = server(12, 64);
    DirectPath path = cluster(a, () -> {});
    a.script =
        (c, command) -> {
          String key = new String(command.get(1), java.nio.charset.StandardCharsets.UTF_8);
          return FakeRedisServer.Answer.of(
              FakeRedisServer.ascii("-ASK " + SlotHash.getSlot(key) + " " + b.address() + "\r\n"));
        };
    b.objects.put("tsl3-ask_k", new byte[] {42});
    MemorySegment destination = arena.allocate(1);
    DirectCall get = path.get(List.of("tsl3-ask_k"), List.of(destination), deadline(TIMEOUT_MS));
    assertEquals(new RowResult.Ok(1, false), get.rows[0]);
    assertEquals(42, destination.get(ValueLayout.JAVA_BYTE, 0));
    List<String> onB = new ArrayList<>();
    for (FakeRedisServer.Received r : b.received) {
      onB.add(r.name());
    }
    assertEquals(List.of("ASKING", "GET"), onB);
    int seenByA = a.received.size();
    path.get(List.of("tsl3-ask_k"), List.of(destination), deadline(TIMEOUT_MS));
    assertEquals(seenByA + 1, a.received.size(), "ASK moves nothing: the owner is asked again");
  }

  @Test
  void shouldGiveUpAfterBoundedRoundsWhenRedirectionsNeverEnd() throws Exception {
    FakeRedisServer a = server(13, 64);
    DirectPath path = cluster(a, () -> {});
    a.script =
        (c, command) -> {
          String key = new String(command.get(1), java.nio.charset.StandardCharsets.UTF_8);
          return FakeRedisServer.Answer.of(
              FakeRedisServer.ascii(
                  "-MOVED " + SlotHash.getSlot(key) + " " + a.address() + "\r\n"));
        };
    IOException e =
        assertThrows(
            IOException.class, () -> path.exists(List.of("tsl3-loop_k"), deadline(TIMEOUT_MS)));
    assertTrue(e.getMessage().contains("kept redirecting"), e.getMessage());
    assertEquals(DirectCall.MAX_ROUNDS, path.counters().redirects.sum());
  }

  // ------------------------------------------------------------------ helpers

  private MemorySegment copy(byte[] bytes) {
    MemorySegment s = arena.allocate(bytes.length);
    MemorySegment.copy(bytes, 0, s, ValueLayout.JAVA_BYTE, 0, bytes.length);
    return s;
  }

  private static void assertUntouched(MemorySegment d) {
    for (long i = 0; i < d.byteSize(); i++) {
      assertEquals((byte) 0x5A, d.get(ValueLayout.JAVA_BYTE, i), "byte " + i);
    }
  }

  private static void awaitTrue(String what, BooleanSupplier condition) {
    long deadlineNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadlineNs > 0) {
        throw new AssertionError("timed out waiting for " + what);
      }
      LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(2));
    }
  }
}

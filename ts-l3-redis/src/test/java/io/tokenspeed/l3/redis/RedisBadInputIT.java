package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.store.StoreTesting;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.api.io.TempDir;

/**
 * Bad input against real servers: a wrong password, a missing one, nothing listening, an address
 * that never answers, the cluster flag wrong either way, a value over the limit, a hung server and
 * a full one. Each gives a clear error naming the setting, at startup or per operation, never later
 * than the configured timeout (plus a fixed allowance for a loaded machine).
 */
@Tag("live")
class RedisBadInputIT {

  private static final long CONNECT_TIMEOUT_MS = 2000;

  /**
   * The connect timeout against a server that answers: generous, since there the refusal (not the
   * bound) is the point, and a loaded machine can take seconds to finish a handshake.
   */
  private static final long LIVE_CONNECT_TIMEOUT_MS = 20_000;

  /**
   * Long enough that a healthy command on a loaded machine never times out (the hang test's calls
   * time out because the server is stopped, not because of a guess about scheduling).
   */
  private static final long COMMAND_TIMEOUT_MS = 2000;

  /**
   * The allowance over a configured timeout: generous for a loaded machine (class loading, two busy
   * cores), still far below what an unbounded wait would take (a TCP connect to a silent address
   * gives up after minutes; a stopped server never answers).
   */
  private static final long SLACK_MS = 10_000;

  private static final byte SENTINEL = (byte) 0xC3;

  /** The Lettuce connections a plain-TCP store keeps (startup checks, namespace deletion). */
  private static final int LETTUCE_CONNECTIONS = 1;

  @TempDir static Path dir;
  private static RedisServer server;
  private Arena arena;

  @BeforeAll
  static void startServerAndWarmUp() throws IOException {
    server = RedisServers.startStandalone(dir);
    // load the client's classes once, so that the timing checks below measure timeouts only
    RedisStore.open(RedisStoreSettings.standalone(server.uri())).close();
    RedisStore.open(RedisStoreSettings.cluster(RedisServers.sharedCluster().uris())).close();
  }

  @AfterAll
  static void stopServer() {
    server.close();
  }

  @BeforeEach
  void prepare() {
    if (!server.isAlive()) {
      server.restart();
    }
    server.flushAll();
    arena = Arena.ofShared();
  }

  @AfterEach
  void release() {
    arena.close();
  }

  /** Settings for a server that answers. */
  private static RedisStoreSettings settings(String uri) {
    return RedisStoreSettings.standalone(uri)
        .withTimeouts(LIVE_CONNECT_TIMEOUT_MS, COMMAND_TIMEOUT_MS);
  }

  @Test
  void shouldNameTheCredentialsWhenThePasswordIsWrong() {
    server.createAclUser("tenant", "right", "tsl3-*");
    IllegalArgumentException e =
        assertStartupFails(
            IllegalArgumentException.class,
            settings(server.uri()).withCredentials("tenant", "wrong"),
            LIVE_CONNECT_TIMEOUT_MS);
    assertContains(e, "WRONGPASS");
    assertContains(e, "username=tenant");
    assertContains(e, "check the username and password settings");
  }

  @Test
  void shouldNameTheCredentialsWhenTheServerRequiresAPasswordAndNoneIsSet() {
    try (RedisServer guarded =
        RedisServers.startStandalone(dir, List.of("--requirepass", "secret"))) {
      IllegalArgumentException e =
          assertStartupFails(
              IllegalArgumentException.class, settings(guarded.uri()), LIVE_CONNECT_TIMEOUT_MS);
      assertContains(e, "NOAUTH");
      assertContains(e, "no password is set");
      assertContains(e, "set username/password");
    }
  }

  @Test
  void shouldNameTheAddressWhenNothingListensThere() {
    int port = RedisServers.freePort();
    IOException e =
        assertStartupFails(
            IOException.class,
            settings("127.0.0.1:" + port).withTimeouts(CONNECT_TIMEOUT_MS, COMMAND_TIMEOUT_MS),
            CONNECT_TIMEOUT_MS);
    assertContains(e, "cannot connect to 127.0.0.1:" + port);
    assertContains(e, "connect_timeout_ms=" + CONNECT_TIMEOUT_MS);
    assertContains(e, "connection refused");
  }

  @Test
  void shouldGiveUpWithinTheConnectTimeoutWhenTheAddressNeverAnswers() {
    // TEST-NET-1 (RFC 5737): never routed, so a connect either hangs or is refused by the host
    IOException e =
        assertStartupFails(
            IOException.class, settings("192.0.2.1:6379").withTimeouts(300, 300), 300);
    assertContains(e, "cannot connect to 192.0.2.1:6379");
    assertContains(e, "connect_timeout_ms=300");
  }

  @Test
  void shouldNameTheClusterFlagWhenAStandaloneServerIsOpenedAsACluster() {
    IllegalArgumentException e =
        assertStartupFails(
            IllegalArgumentException.class,
            RedisStoreSettings.cluster(List.of(server.uri()))
                .withTimeouts(LIVE_CONNECT_TIMEOUT_MS, COMMAND_TIMEOUT_MS),
            LIVE_CONNECT_TIMEOUT_MS);
    assertContains(e, "cluster=true");
    assertContains(e, "set cluster=false");
  }

  @Test
  void shouldNameTheClusterFlagWhenAClusterNodeIsOpenedAsStandalone() {
    String node = RedisServers.sharedCluster().nodes().getFirst().uri();
    IllegalArgumentException e =
        assertStartupFails(IllegalArgumentException.class, settings(node), LIVE_CONNECT_TIMEOUT_MS);
    assertContains(e, "cluster=false");
    assertContains(e, "set cluster=true");
  }

  @Test
  void shouldRefuseAValueOverTheLimitBeforeSendingAnythingWhenPutOrSubmitted() throws Exception {
    MemorySegment host = arena.allocate(1 << 16, 64);
    RedisStore store = RedisStore.open(settings(server.uri()).withLimits(512, 4096));
    String key = StoreTesting.key(StoreTesting.namespace("too-large"), 1);
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> store.put(List.of(key), List.of(host.asSlice(0, 4097))));
    assertContains(e, "value size=4097");
    assertContains(e, "max_value_bytes=4096");
    IllegalArgumentException g =
        assertThrows(
            IllegalArgumentException.class,
            () -> store.get(List.of(key), List.of(host.asSlice(0, 4097))));
    assertContains(g, "max_value_bytes=4096");
    assertEquals(0, store.counters().commands());

    L3Executor ex = L3Executor.start(store, L3ExecutorConfig.defaults(), host, System::nanoTime);
    IllegalArgumentException s =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                ex.submit(
                    new StorageJob(
                        1, StorageKind.PUT, List.of(JobRow.owned(key, new HostRange(0, 4097))))));
    assertContains(s, "redis store's limit of 4096");
    assertEquals(0, ex.metrics().backendCalls());
    ex.close();
    assertEquals(0L, server.command("DBSIZE"));
  }

  @Test
  void shouldThrowWithinTheCommandTimeoutAndNeverWriteLaterWhenTheServerHangs() throws Exception {
    int size = 1 << 20;
    MemorySegment host = arena.allocate(3L * size + 4096, 64);
    MemorySegment source = host.asSlice(64, size);
    MemorySegment destination = host.asSlice(64 + size, size);
    byte[] payload = StoreTesting.fill(source, 0x5EED_0090L);
    String key = StoreTesting.key(StoreTesting.namespace("hang"), 1);
    String late = StoreTesting.key(StoreTesting.namespace("hang"), 2);
    try (RedisStore store = RedisStore.open(settings(server.uri()).withConnections(1))) {
      assertEquals(
          new RowResult.Ok(size, false),
          store.put(List.of(key), List.of(source)).rows().getFirst());
      destination.fill(SENTINEL);

      server.pause();
      try {
        IOException get =
            assertTimely(() -> store.get(List.of(key), List.of(destination)), COMMAND_TIMEOUT_MS);
        assertContains(get, "did not complete within command_timeout_ms=" + COMMAND_TIMEOUT_MS);
        IOException put =
            assertTimely(() -> store.put(List.of(late), List.of(source)), COMMAND_TIMEOUT_MS);
        assertContains(put, "did not complete within command_timeout_ms=" + COMMAND_TIMEOUT_MS);
      } finally {
        server.resume();
      }
      // The failed calls closed their connections, so the resumed server answers neither on
      // them; once it has dropped both (the store's own connections are all it has left, plus
      // the one that asks), nothing can ever reach the store on them.
      awaitTrue(
          "the server dropped the failed calls' connections",
          () -> connectedClients() == 1 + LETTUCE_CONNECTIONS + store.openConnections());
      assertEquals(1, store.counters().abandonedReads());
      assertEquals(0, store.counters().lateReplies());
      for (long i = 0; i < size; i++) {
        if (destination.get(ValueLayout.JAVA_BYTE, i) != SENTINEL) {
          throw new AssertionError("destination byte " + i + " written after the call failed");
        }
      }
      // the timed-out PUT ran only if the server had received its whole value before the close;
      // either way, no other object exists and the one that may exist holds the PUT's bytes
      if (Long.valueOf(1).equals(server.command("EXISTS", late))) {
        assertEquals(
            new RowResult.Ok(size, false),
            store.get(List.of(late), List.of(destination)).rows().getFirst());
        assertEquals(-1, destination.mismatch(MemorySegment.ofArray(payload)));
        destination.fill(SENTINEL);
      }
      assertEquals(
          new RowResult.Ok(size, false),
          store.get(List.of(key), List.of(destination)).rows().getFirst());
      assertEquals(-1, destination.mismatch(MemorySegment.ofArray(payload)));
      assertEquals(2, store.counters().failedCalls());
    }
  }

  /**
   * The Lettuce path (what tls=true uses), on plain TCP: its timed-out GET's reply arrives after
   * the call failed and is dropped by the abandoned decoder; the timed-out PUT's private copy is
   * sent later and creates its object.
   */
  @Test
  void shouldDropTheLateReplyWhenTheServerHangsOnTheLettucePath() throws Exception {
    int size = 1 << 20;
    MemorySegment host = arena.allocate(3L * size + 4096, 64);
    MemorySegment source = host.asSlice(64, size);
    MemorySegment destination = host.asSlice(64 + size, size);
    byte[] payload = StoreTesting.fill(source, 0x5EED_0090L);
    String key = StoreTesting.key(StoreTesting.namespace("hang"), 1);
    String late = StoreTesting.key(StoreTesting.namespace("hang"), 2);
    try (RedisStore store = RedisStore.open(settings(server.uri()).withConnections(1), false)) {
      assertEquals(
          new RowResult.Ok(size, false),
          store.put(List.of(key), List.of(source)).rows().getFirst());
      destination.fill(SENTINEL);

      server.pause();
      try {
        IOException get =
            assertTimely(() -> store.get(List.of(key), List.of(destination)), COMMAND_TIMEOUT_MS);
        assertContains(get, "did not complete within command_timeout_ms=" + COMMAND_TIMEOUT_MS);
        IOException put =
            assertTimely(() -> store.put(List.of(late), List.of(source)), COMMAND_TIMEOUT_MS);
        assertContains(put, "did not complete within command_timeout_ms=" + COMMAND_TIMEOUT_MS);
      } finally {
        server.resume();
      }
      // the hung GET's reply arrives now; its decoder was abandoned and drops it
      awaitTrue("the late GET reply", () -> store.counters().lateReplies() == 1);
      assertEquals(1, store.counters().abandonedReads());
      for (long i = 0; i < size; i++) {
        if (destination.get(ValueLayout.JAVA_BYTE, i) != SENTINEL) {
          throw new AssertionError("destination byte " + i + " written after the call failed");
        }
      }
      // the timed-out PUT was executed late: only the object it meant to create exists
      awaitTrue("the late PUT", () -> Long.valueOf(1).equals(server.command("EXISTS", late)));
      assertEquals(
          new RowResult.Ok(size, false),
          store.get(List.of(key), List.of(destination)).rows().getFirst());
      assertEquals(-1, destination.mismatch(MemorySegment.ofArray(payload)));
      assertEquals(2, store.counters().failedCalls());
    }
  }

  @Test
  void shouldRejectPutsForLackOfSpaceWhenTheServerIsFull() throws Exception {
    int size = 256 << 10;
    MemorySegment host = arena.allocate(size + 4096L, 64);
    MemorySegment source = host.asSlice(64, size);
    StoreTesting.fill(source, 3);
    String ns = StoreTesting.namespace("full");
    String info = (String) server.command("INFO", "memory");
    long used =
        Long.parseLong(
            info.lines()
                .filter(l -> l.startsWith("used_memory:"))
                .findFirst()
                .orElseThrow()
                .substring("used_memory:".length())
                .trim());
    server.command("CONFIG", "SET", "maxmemory-policy", "noeviction");
    server.command("CONFIG", "SET", "maxmemory", Long.toString(used + 16L * size));
    try (RedisStore store = RedisStore.open(settings(server.uri()))) {
      int rejected = 0;
      int created = 0;
      for (int i = 0; i < 100 && rejected == 0; i++) {
        RowResult row =
            store.put(List.of(StoreTesting.key(ns, i)), List.of(source)).rows().getFirst();
        if (row instanceof RowResult.Rejected r) {
          assertEquals(RowResult.Rejected.NO_SPACE, r.code());
          assertTrue(r.reason().startsWith("OOM "), "the server's reply: " + r.reason());
          rejected++;
        } else {
          assertEquals(new RowResult.Ok(size, false), row);
          created++;
        }
      }
      assertEquals(1, rejected, "created " + created + " before the server was full");
      assertTrue(created >= 2, "created " + created);
      assertEquals(1, store.counters().putsRejected());
    } finally {
      server.command("CONFIG", "SET", "maxmemory", "0");
    }
  }

  // ------------------------------------------------------------------ helpers

  private static <T extends Exception> T assertStartupFails(
      Class<T> type, RedisStoreSettings settings, long timeoutMs) {
    long startNs = System.nanoTime();
    Exception e = assertThrows(Exception.class, () -> RedisStore.open(settings).close());
    long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs);
    assertTrue(
        elapsedMs <= timeoutMs + SLACK_MS,
        "startup failed after " + elapsedMs + " ms, limit " + timeoutMs + " ms: " + e);
    assertInstanceOf(type, e, () -> "wrong exception type: " + e);
    assertTrue(!e.getMessage().contains("\n"), "one line: " + e.getMessage());
    return type.cast(e);
  }

  private static IOException assertTimely(Executable call, long timeoutMs) {
    long startNs = System.nanoTime();
    IOException e = assertThrows(IOException.class, call);
    long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs);
    assertTrue(
        elapsedMs <= timeoutMs + SLACK_MS,
        "call failed after " + elapsedMs + " ms, limit " + timeoutMs + " ms: " + e);
    return e;
  }

  private static void awaitTrue(String what, BooleanSupplier condition) {
    long deadlineNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadlineNs > 0) {
        throw new AssertionError("timed out waiting for " + what);
      }
      LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(5));
    }
  }

  /** The server's {@code connected_clients}, counting the connection that asks. */
  private static long connectedClients() {
    String info = String.valueOf(server.command("INFO", "clients"));
    return info.lines()
        .filter(l -> l.startsWith("connected_clients:"))
        .mapToLong(l -> Long.parseLong(l.substring("connected_clients:".length()).trim()))
        .findFirst()
        .orElseThrow();
  }

  private static void assertContains(Exception e, String text) {
    assertTrue(
        e.getMessage() != null && e.getMessage().contains(text),
        "expected '" + text + "' in: " + e.getMessage());
  }
}

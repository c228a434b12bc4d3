package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
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
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Tenant isolation on one real Redis: two deployments (two namespaces) never read each other's
 * objects, and with ACL users confined to their key pattern ({@code ~tsl3-<ns>_*}) a client of
 * tenant A that is misconfigured with tenant B's namespace gets a permission error, never B's
 * bytes.
 */
@Tag("live")
class RedisTenantIsolationIT {

  private static final int SIZE = 8192;
  private static final int COUNT = 4;
  private static final byte SENTINEL = (byte) 0x5A;

  @TempDir static Path dir;
  private static RedisServer server;

  private final String nsA = StoreTesting.namespace("tenant-a");
  private final String nsB = StoreTesting.namespace("tenant-b");
  private Arena arena;
  private MemorySegment host;
  private final List<RedisStore> stores = new ArrayList<>();

  @BeforeAll
  static void startServer() {
    server = RedisServers.startStandalone(dir);
  }

  @AfterAll
  static void stopServer() {
    server.close();
  }

  @BeforeEach
  void prepare() {
    server.flushAll();
    server.createAclUser("tenant-a", "secret-a", nsA + "_*");
    server.createAclUser("tenant-b", "secret-b", nsB + "_*");
    arena = Arena.ofShared();
    host = arena.allocate(1 << 20, 64);
  }

  @AfterEach
  void close() {
    stores.forEach(RedisStore::close);
    arena.close();
  }

  @Test
  void shouldNotReadEachOthersObjectsWhenTwoDeploymentsShareOneServer() throws Exception {
    RedisStore a = open(null, null);
    RedisStore b = open(null, null);
    List<byte[]> aBytes = putAll(a, nsA, 1);

    // B derives its keys from the same pages, under its own namespace: none of A's objects
    List<String> bKeys = keys(nsB);
    assertEquals(
        List.of(RowResult.MISSING, RowResult.MISSING, RowResult.MISSING, RowResult.MISSING),
        b.exists(bKeys).rows());
    List<MemorySegment> destinations = destinations();
    assertEquals(
        List.of(RowResult.MISSING, RowResult.MISSING, RowResult.MISSING, RowResult.MISSING),
        b.get(bKeys, destinations).rows());
    destinations.forEach(RedisTenantIsolationIT::assertUntouched);

    // deleting B's namespace leaves A's objects; deleting A's removes exactly them
    assertEquals(0, b.deleteNamespace(nsB));
    assertEquals(
        COUNT,
        a.get(keys(nsA), destinations).rows().stream()
            .filter(RowResult.Ok.class::isInstance)
            .count());
    for (int i = 0; i < COUNT; i++) {
      assertArrayEquals(aBytes.get(i), destinations.get(i).toArray(ValueLayout.JAVA_BYTE));
    }
    assertEquals(COUNT, a.deleteNamespace(nsA));
    assertEquals(0L, server.command("DBSIZE"));
  }

  @Test
  void shouldGetAPermissionErrorNotTheOtherTenantsBytesWhenAClientUsesTheWrongNamespace()
      throws Exception {
    RedisStore b = open("tenant-b", "secret-b");
    List<byte[]> bBytes = putAll(b, nsB, 2);
    RedisStore a = open("tenant-a", "secret-a");
    putAll(a, nsA, 3); // tenant A's own namespace works

    // tenant A's client configured with B's namespace
    List<String> bKeys = keys(nsB);
    List<MemorySegment> destinations = destinations();
    IOException read = assertThrows(IOException.class, () -> a.get(bKeys, destinations));
    assertPermissionMessage(read);
    destinations.forEach(RedisTenantIsolationIT::assertUntouched);
    assertPermissionMessage(assertThrows(IOException.class, () -> a.exists(bKeys)));
    assertPermissionMessage(
        assertThrows(IOException.class, () -> a.put(bKeys, sources(bKeys.size()))));
    assertPermissionMessage(assertThrows(IOException.class, () -> a.deleteNamespace(nsB)));

    // B's objects are intact
    List<MemorySegment> check = destinations();
    assertEquals(
        COUNT, b.get(bKeys, check).rows().stream().filter(RowResult.Ok.class::isInstance).count());
    for (int i = 0; i < COUNT; i++) {
      assertArrayEquals(
          bBytes.get(i), check.get(i).toArray(ValueLayout.JAVA_BYTE), "B's object " + i);
    }
  }

  @Test
  void shouldReportFailedRetiredRowsWithoutBytesWhenTheExecutorOfAMisconfiguredTenantReads()
      throws Exception {
    Logger.getLogger("io.tokenspeed.l3").setLevel(Level.SEVERE); // the expected fault warning
    RedisStore b = open("tenant-b", "secret-b");
    putAll(b, nsB, 4);
    RedisStore a = open("tenant-a", "secret-a");
    L3Executor ex = L3Executor.start(a, L3ExecutorConfig.defaults(), host, System::nanoTime);
    ExecutorDriver driver = new ExecutorDriver(ex);
    List<JobRow> rows = new ArrayList<>();
    for (int i = 0; i < COUNT; i++) {
      long offset = (512 << 10) + (long) i * SIZE;
      host.asSlice(offset, SIZE).fill(SENTINEL);
      rows.add(JobRow.owned(keys(nsB).get(i), new HostRange(offset, SIZE)));
    }
    ex.submit(new StorageJob(1, StorageKind.GET, rows));
    StorageDone done = driver.await(1, Duration.ofSeconds(10));
    assertEquals(
        List.of(KeyOutcome.FAILED, KeyOutcome.FAILED, KeyOutcome.FAILED, KeyOutcome.FAILED),
        done.outcomes());
    assertTrue(done.retired());
    assertEquals(0, done.bytes());
    for (int i = 0; i < COUNT; i++) {
      assertUntouched(host.asSlice((512 << 10) + (long) i * SIZE, SIZE));
    }
    assertFalse(ex.metrics().quarantined());
    // an ACL refusal is a configuration failure: counted, never a fault or an outage
    assertEquals(1, ex.metrics().configurationFailures());
    assertEquals(0, ex.metrics().workerFaults());
    assertEquals(0, ex.metrics().outages());
    assertEquals("HEALTHY", ex.metrics().healthState());
    ex.close();
  }

  private RedisStore open(String user, String password) throws IOException {
    RedisStoreSettings settings = RedisStoreSettings.standalone(server.uri());
    if (user != null) {
      settings = settings.withCredentials(user, password);
    }
    RedisStore store = RedisStore.open(settings);
    stores.add(store);
    return store;
  }

  private List<byte[]> putAll(RedisStore store, String namespace, long seed) throws IOException {
    List<String> keys = keys(namespace);
    List<MemorySegment> sources = sources(keys.size());
    List<byte[]> bytes = new ArrayList<>();
    for (int i = 0; i < sources.size(); i++) {
      bytes.add(StoreTesting.fill(sources.get(i), seed * 100 + i));
    }
    List<RowResult> rows = store.put(keys, sources).rows();
    for (RowResult row : rows) {
      assertEquals(new RowResult.Ok(SIZE, false), row);
    }
    return bytes;
  }

  private List<String> keys(String namespace) {
    List<String> keys = new ArrayList<>();
    for (int i = 0; i < COUNT; i++) {
      keys.add(StoreTesting.key(namespace, i));
    }
    return keys;
  }

  private List<MemorySegment> sources(int n) {
    List<MemorySegment> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      out.add(host.asSlice(64 + (long) i * SIZE, SIZE));
    }
    return out;
  }

  private List<MemorySegment> destinations() {
    List<MemorySegment> out = new ArrayList<>();
    for (int i = 0; i < COUNT; i++) {
      MemorySegment d = host.asSlice((256 << 10) + (long) i * SIZE, SIZE);
      d.fill(SENTINEL);
      out.add(d);
    }
    return out;
  }

  private void assertPermissionMessage(IOException e) {
    String m = e.getMessage();
    assertTrue(m.contains("NOPERM"), m);
    assertTrue(m.contains("user=tenant-a"), m);
    assertTrue(m.contains("namespace " + nsB), m);
    assertTrue(m.contains("~" + nsB + "_*"), m);
  }

  private static void assertUntouched(MemorySegment destination) {
    for (long i = 0; i < destination.byteSize(); i++) {
      if (destination.get(ValueLayout.JAVA_BYTE, i) != SENTINEL) {
        throw new AssertionError("destination byte " + i + " was written");
      }
    }
  }
}

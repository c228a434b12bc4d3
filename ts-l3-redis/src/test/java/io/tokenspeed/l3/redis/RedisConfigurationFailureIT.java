package io.tokenspeed.l3.redis;

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
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.l3.SubmitResult;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreConfigurationException;
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
 * A real server's ACL refuses the store's commands: the refusal is a configuration failure, never
 * an outage. The error names the user and the refused command, the executor stays HEALTHY with an
 * unchanged health epoch however many jobs are refused in a row (each one reaches the server and is
 * refused there: no cooldown loop), and the executor counts the refusals.
 *
 * <p>The ACL rules used ({@code +@all -set}, no key pattern) mean the same on Redis 6.2 and 7.x;
 * the assertions read only the {@code NOPERM} prefix of the server's wording, which differs.
 */
@Tag("live")
class RedisConfigurationFailureIT {

  private static final int SIZE = 4096;
  private static final int JOBS = 25;
  private static final byte SENTINEL = (byte) 0x3C;
  private static final Duration WAIT = Duration.ofSeconds(60);

  @TempDir static Path dir;
  private static RedisServer server;

  private final String ns = StoreTesting.namespace("acl");
  private final List<RedisStore> stores = new ArrayList<>();
  private final List<L3Executor> executors = new ArrayList<>();
  private Arena arena;
  private MemorySegment host;

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
    // may read every key, may not write: SET is refused as a command
    server.command("ACL", "SETUSER", "reader", "reset", "on", ">pw-reader", "~*", "+@all", "-set");
    // may run every command, on no key at all
    server.command("ACL", "SETUSER", "keyless", "reset", "on", ">pw-keyless", "+@all");
    arena = Arena.ofShared();
    host = arena.allocate(1 << 20, 64);
    Logger.getLogger("io.tokenspeed.l3").setLevel(Level.OFF); // the expected refusal line
  }

  @AfterEach
  void close() {
    executors.forEach(L3Executor::close);
    stores.forEach(RedisStore::close);
    arena.close();
    Logger.getLogger("io.tokenspeed.l3").setLevel(null);
  }

  @Test
  void shouldNameTheUserAndTheRefusedCommandWhenTheAclForbidsSet() throws Exception {
    RedisStore store = open("reader", "pw-reader");
    List<String> keys = List.of(StoreTesting.key(ns, 0));
    StoreConfigurationException e =
        assertThrows(
            StoreConfigurationException.class,
            () -> store.put(keys, List.of(host.asSlice(0, SIZE))));
    String m = e.getMessage();
    assertTrue(m.contains("NOPERM"), m);
    assertTrue(m.contains("user=reader"), m);
    assertTrue(m.contains("command=SET"), m);
    assertEquals(0L, server.command("DBSIZE"), "nothing was written");
    // the same user's reads are allowed: only the refused command fails
    assertEquals(
        List.of(RowResult.MISSING), store.get(keys, List.of(host.asSlice(0, SIZE))).rows());
  }

  @Test
  void shouldStayHealthyAndCountEveryRefusalWhenJobAfterJobIsRefusedByTheAcl() throws Exception {
    RedisStore store = open("reader", "pw-reader");
    // a cooldown longer than the test: one outage would refuse every later job without a call
    L3Executor ex = start(store, 3_600_000);
    ExecutorDriver driver = new ExecutorDriver(ex);
    long id = 1;
    for (int i = 0; i < JOBS; i++) {
      List<JobRow> rows =
          List.of(
              JobRow.owned(StoreTesting.key(ns, 2 * i), new HostRange(0, SIZE)),
              JobRow.owned(StoreTesting.key(ns, 2 * i + 1), new HostRange(SIZE, SIZE)));
      long put = id++;
      assertEquals(
          SubmitResult.QUEUED,
          ex.submit(new StorageJob(put, StorageKind.PUT, rows)),
          "job " + i + " is admitted, never refused for health");
      StorageDone d = driver.await(put, WAIT);
      assertEquals(List.of(KeyOutcome.FAILED, KeyOutcome.FAILED), d.outcomes(), d.toString());
      assertTrue(d.retired(), d.toString());
      assertEquals(0, d.bytes());
      L3Metrics m = ex.metrics();
      assertEquals("HEALTHY", m.healthState(), "after job " + i + ": " + m);
      assertEquals(0, m.healthEpoch(), "after job " + i + ": " + m);
      assertEquals(i + 1, m.configurationFailures(), m.toString());
      assertEquals(i + 1, m.backendCalls(), "every job reached the server: " + m);
    }
    assertEquals(JOBS, store.counters().failedCalls(), "the server refused each call");
    L3Metrics m = ex.metrics();
    assertEquals(0, m.outages(), m.toString());
    assertEquals(0, m.workerFaults(), m.toString());
    assertEquals(0, m.unprovenRetirements(), m.toString());
    assertFalse(m.quarantined());
    assertTrue(m.lastConfigurationFailure().contains("user=reader"), m.lastConfigurationFailure());
    assertTrue(m.lastConfigurationFailure().contains("command=SET"), m.lastConfigurationFailure());
    assertEquals(0L, server.command("DBSIZE"), "nothing was written");

    // reads of the same user still reach the server and answer
    long get = id;
    ex.submit(
        new StorageJob(
            get,
            StorageKind.GET,
            List.of(JobRow.owned(StoreTesting.key(ns, 0), new HostRange(2 * SIZE, SIZE)))));
    assertEquals(List.of(KeyOutcome.MISSING), driver.await(get, WAIT).outcomes());
  }

  @Test
  void shouldFailRetiredWithoutTouchingTheDestinationWhenTheUserMayAccessNoKey() throws Exception {
    RedisStore store = open("keyless", "pw-keyless");
    List<String> keys = List.of(StoreTesting.key(ns, 0));
    StoreConfigurationException e =
        assertThrows(
            StoreConfigurationException.class,
            () -> store.get(keys, List.of(host.asSlice(0, SIZE))));
    assertTrue(e.getMessage().contains("user=keyless"), e.getMessage());
    assertTrue(e.getMessage().contains("command=GET"), e.getMessage());
    assertTrue(e.getMessage().contains("NOPERM"), e.getMessage());

    L3Executor ex = start(store, 3_600_000);
    ExecutorDriver driver = new ExecutorDriver(ex);
    MemorySegment destination = host.asSlice(8 * SIZE, SIZE);
    destination.fill(SENTINEL);
    for (long id = 1; id <= 5; id++) {
      ex.submit(
          new StorageJob(
              id,
              StorageKind.GET,
              List.of(JobRow.owned(keys.getFirst(), new HostRange(8 * SIZE, SIZE)))));
      StorageDone d = driver.await(id, WAIT);
      assertEquals(List.of(KeyOutcome.FAILED), d.outcomes(), "no object evidence: " + d);
      assertTrue(d.retired());
    }
    for (long i = 0; i < SIZE; i++) {
      assertEquals(SENTINEL, destination.get(ValueLayout.JAVA_BYTE, i), "byte " + i);
    }
    L3Metrics m = ex.metrics();
    assertEquals("HEALTHY", m.healthState(), m.toString());
    assertEquals(0, m.healthEpoch(), m.toString());
    assertEquals(5, m.configurationFailures(), m.toString());
    assertEquals(5, m.backendCalls(), m.toString());
  }

  private L3Executor start(RedisStore store, long cooldownMs) throws Exception {
    L3Executor ex =
        L3Executor.start(
            store,
            new L3ExecutorConfig(1, 1, 1, 8, 8, 8, 64, cooldownMs, 60_000),
            host,
            System::nanoTime);
    executors.add(ex);
    return ex;
  }

  private RedisStore open(String user, String password) throws IOException {
    RedisStore store =
        RedisStore.open(
            RedisStoreSettings.standalone(server.uri())
                .withCredentials(user, password)
                .withTimeouts(RedisStoreSettings.DEFAULT_CONNECT_TIMEOUT_MS, 30_000));
    stores.add(store);
    return store;
  }
}

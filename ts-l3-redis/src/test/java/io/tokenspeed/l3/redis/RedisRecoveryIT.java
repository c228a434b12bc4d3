package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.CloseReport;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.l3.SubmitResult;
import io.tokenspeed.l3.store.StoreTesting;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Recovery after a server restart, through the executor: a stream of GETs and PUTs runs against a
 * standalone server that is killed with SIGKILL mid-stream and restarted on the same port.
 *
 * <pre>
 *   phase      server   what the stream must see
 *   healthy    up       every GET and PUT OK, exact bytes
 *   outage     killed   failures (FAILED, retired, no bytes) or rejections while cooling down;
 *                       no read issued in this phase is ever OK; health goes to COOLDOWN
 *   restarted  up,      after the cooldown one probe is admitted and succeeds (HEALTHY again);
 *              empty    the objects are PUT again and read back exactly
 * </pre>
 *
 * No worker dies: the executor is never quarantined, every failure is counted as a worker fault
 * without an unproven retirement, and the workers that ran before the outage run after it.
 */
@Tag("live")
class RedisRecoveryIT {

  private static final long COOLDOWN_MS = 200;
  private static final int OBJECTS = 16;
  private static final int SIZE = 64 << 10;
  private static final Duration WAIT = Duration.ofSeconds(60);

  /**
   * Generous on purpose: a healthy server must never be reported failed because a loaded machine
   * delayed a reply. Outages are still seen at once, since a dead connection rejects commands
   * immediately instead of waiting for the timeout.
   */
  private static final long COMMAND_TIMEOUT_MS = 30_000;

  /** The longest the outage phase streams while waiting for the executor to record an outage. */
  private static final Duration OUTAGE_BOUND = Duration.ofSeconds(60);

  @TempDir Path dir;

  private record Sent(long id, StorageKind kind, String phase, SubmitResult submit) {}

  @Test
  void shouldCoolDownFailRetiredAndResumeWhenTheServerIsKilledAndRestartedMidStream()
      throws Exception {
    Logger.getLogger("io.tokenspeed.l3").setLevel(Level.SEVERE); // expected outage warnings
    try (RedisServer server = RedisServers.startStandalone(dir);
        Arena arena = Arena.ofShared()) {
      MemorySegment host = arena.allocate(2L * OBJECTS * SIZE + 4096, 64);
      RedisStore store =
          RedisStore.open(
              RedisStoreSettings.standalone(server.uri())
                  .withTimeouts(RedisStoreSettings.DEFAULT_CONNECT_TIMEOUT_MS, COMMAND_TIMEOUT_MS));
      L3ExecutorConfig config = new L3ExecutorConfig(1, 2, 1, 64, 64, 64, 256, COOLDOWN_MS, 5_000);
      L3Executor ex = L3Executor.start(store, config, host, System::nanoTime);
      ExecutorDriver driver = new ExecutorDriver(ex);
      Stream stream = new Stream(ex, driver);
      Set<String> workersBefore = workerThreads();

      // healthy: write every object, then stream
      byte[][] payloads = new byte[OBJECTS][];
      for (int i = 0; i < OBJECTS; i++) {
        payloads[i] = StoreTesting.fill(host.asSlice(source(i), SIZE), 0x5EED_0070L + i);
      }
      StorageDone first = driver.await(stream.putAll("healthy"), WAIT);
      assertEquals(OBJECTS, first.okCount(), first.toString());
      stream.run("healthy", Duration.ofMillis(300));
      // every healthy-phase job completes before the kill: a loaded machine may still hold some
      // in its queues, and those would otherwise meet the outage and count as healthy failures
      stream.drain();

      // outage: kill -9, keep streaming
      long killedPid = server.pid();
      server.kill();
      assertFalse(ProcessHandle.of(killedPid).map(ProcessHandle::isAlive).orElse(false));
      // stream for at least 800 ms and until the executor has recorded an outage (an observed
      // fact, not a wall-clock guess: a loaded machine may take longer to see the dead server)
      Set<String> healthSeen = stream.run("outage", Duration.ofMillis(800));
      long outageBoundNs = System.nanoTime() + OUTAGE_BOUND.toNanos();
      while (ex.metrics().outages() == 0 && System.nanoTime() - outageBoundNs < 0) {
        healthSeen.addAll(stream.run("outage", Duration.ofMillis(50)));
      }
      L3Metrics down = ex.metrics();

      // restarted (empty): wait for the outage's reads to finish before anything is rewritten
      server.restart();
      stream.drain();
      Set<String> afterRestart = stream.run("restarted", Duration.ofMillis(3 * COOLDOWN_MS));
      boolean healthy = awaitHealthy(ex, stream, Duration.ofSeconds(60));
      assertTrue(healthy, "health after restart: " + ex.metrics());
      StorageDone rewrite = driver.await(stream.putAll("restarted"), WAIT);
      assertEquals(OBJECTS, rewrite.okCount(), rewrite.toString());
      StorageDone reread = driver.await(stream.getAll("restarted"), WAIT);
      assertEquals(OBJECTS, reread.okCount(), reread.toString());
      for (int i = 0; i < OBJECTS; i++) {
        assertEquals(
            -1,
            MemorySegment.ofArray(payloads[i]).mismatch(host.asSlice(destination(i), SIZE)),
            "object " + i + " after recovery");
      }
      stream.drain();

      // what the stream saw
      Map<String, int[]> byPhase = stream.outcomes();
      String report =
          stream.summary()
              + "\nhealth seen while down="
              + healthSeen
              + " after restart="
              + afterRestart
              + "\nmetrics down="
              + down
              + "\nfinal="
              + ex.metrics();
      System.out.println("recovery observed:\n" + report);
      assertEquals(0, byPhase.get("healthy")[FAILED], report);
      assertTrue(byPhase.get("outage")[FAILED] > 0, "failures while down\n" + report);
      assertEquals(
          0, stream.okReadsIssuedIn("outage"), "reads issued while down came back OK\n" + report);
      assertEquals(0, stream.bytesOfFailedReads(), "failed reads reported bytes\n" + report);
      assertTrue(down.outages() > 0, report);
      assertTrue(
          healthSeen.contains("COOLDOWN") || stream.rejectedForHealthIn("outage") > 0,
          "the cooldown was seen, or refused work\n" + report);
      assertTrue(stream.probesAfter("restarted") > 0, "a probe after the restart\n" + report);
      assertTrue(byPhase.get("restarted")[OK] > 0, report);

      L3Metrics end = ex.metrics();
      assertFalse(end.quarantined(), report);
      assertEquals(0, end.unprovenRetirements(), report);
      assertTrue(end.workerFaults() > 0, report);
      assertEquals("HEALTHY", end.healthState(), report);
      assertEquals(workersBefore, workerThreads(), "worker threads before and after the outage");
      assertTrue(stream.allRetired(), "every record retired\n" + report);
      CloseReport closed = ex.close();
      assertTrue(closed.storeClosed(), closed.toString());
    }
  }

  private static final int OK = 0;
  private static final int FAILED = 1;
  private static final int MISSING = 2;

  /** The submitting side: GETs and PUTs of the objects, one job per tick, tagged by phase. */
  private static final class Stream {
    private final L3Executor ex;
    private final ExecutorDriver driver;
    private final List<Sent> sent = new ArrayList<>();
    private long nextId = 1;
    private int cursor;

    Stream(L3Executor ex, ExecutorDriver driver) {
      this.ex = ex;
      this.driver = driver;
    }

    long putAll(String phase) {
      List<JobRow> rows = new ArrayList<>();
      for (int i = 0; i < OBJECTS; i++) {
        rows.add(JobRow.owned(key(i), new HostRange(source(i), SIZE)));
      }
      return submit(StorageKind.PUT, rows, phase);
    }

    long getAll(String phase) {
      List<JobRow> rows = new ArrayList<>();
      for (int i = 0; i < OBJECTS; i++) {
        rows.add(JobRow.owned(key(i), new HostRange(destination(i), SIZE)));
      }
      return submit(StorageKind.GET, rows, phase);
    }

    /** Submits one GET (and every fourth tick one PUT) per millisecond; returns health states. */
    Set<String> run(String phase, Duration length) {
      Set<String> health = new LinkedHashSet<>();
      long endNs = System.nanoTime() + length.toNanos();
      while (System.nanoTime() - endNs < 0) {
        int i = cursor++ % OBJECTS;
        submit(
            StorageKind.GET,
            List.of(JobRow.owned(key(i), new HostRange(destination(i), SIZE))),
            phase);
        if (cursor % 4 == 0) {
          submit(
              StorageKind.PUT,
              List.of(JobRow.owned(key(i), new HostRange(source(i), SIZE))),
              phase);
        }
        health.add(ex.metrics().healthState());
        driver.poll();
        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(1));
      }
      return health;
    }

    long submit(StorageKind kind, List<JobRow> rows, String phase) {
      long id = nextId++;
      SubmitResult r = ex.submit(new StorageJob(id, kind, rows));
      sent.add(new Sent(id, kind, phase, r));
      return id;
    }

    /** Waits until every submitted job has its record. */
    void drain() {
      for (Sent s : sent) {
        driver.await(s.id(), WAIT);
      }
    }

    Map<String, int[]> outcomes() {
      Map<String, int[]> counts = new HashMap<>();
      for (String phase : List.of("healthy", "outage", "restarted")) {
        counts.put(phase, new int[3]);
      }
      for (Sent s : sent) {
        StorageDone d = driver.records().get(s.id());
        for (KeyOutcome o : d.outcomes()) {
          int slot =
              switch (o) {
                case OK -> OK;
                case FAILED, INVALID -> FAILED;
                case MISSING -> MISSING;
              };
          counts.get(s.phase())[slot]++;
        }
      }
      return counts;
    }

    long okReadsIssuedIn(String phase) {
      return sent.stream()
          .filter(s -> s.phase().equals(phase) && s.kind() == StorageKind.GET)
          .mapToLong(s -> driver.records().get(s.id()).okCount())
          .sum();
    }

    long bytesOfFailedReads() {
      return sent.stream()
          .filter(s -> s.kind() == StorageKind.GET)
          .map(s -> driver.records().get(s.id()))
          .filter(d -> d.okCount() == 0)
          .mapToLong(StorageDone::bytes)
          .sum();
    }

    long rejectedForHealthIn(String phase) {
      return sent.stream()
          .filter(s -> s.phase().equals(phase) && s.submit() == SubmitResult.REJECTED_UNHEALTHY)
          .count();
    }

    long probesAfter(String phase) {
      return sent.stream()
          .filter(s -> s.phase().equals(phase) && s.submit() == SubmitResult.QUEUED_AS_PROBE)
          .count();
    }

    boolean allRetired() {
      return sent.stream().allMatch(s -> driver.records().get(s.id()).retired());
    }

    String summary() {
      StringBuilder out = new StringBuilder();
      for (String phase : List.of("healthy", "outage", "restarted")) {
        Map<String, Integer> submits = new HashMap<>();
        for (Sent s : sent) {
          if (s.phase().equals(phase)) {
            submits.merge(s.kind() + ":" + s.submit(), 1, Integer::sum);
          }
        }
        int[] o = outcomes().get(phase);
        out.append(phase)
            .append(": submits=")
            .append(submits)
            .append(" rows ok=")
            .append(o[OK])
            .append(" failed=")
            .append(o[FAILED])
            .append(" missing=")
            .append(o[MISSING])
            .append('\n');
      }
      return out.toString();
    }
  }

  /** Keeps the stream going until a probe succeeded and the health is HEALTHY again. */
  private static boolean awaitHealthy(L3Executor ex, Stream stream, Duration timeout) {
    long deadlineNs = System.nanoTime() + timeout.toNanos();
    while (System.nanoTime() - deadlineNs < 0) {
      if (ex.metrics().healthState().equals("HEALTHY")) {
        return true;
      }
      stream.run("restarted", Duration.ofMillis(20));
    }
    return false;
  }

  private static String key(int i) {
    return StoreTesting.key(StoreTesting.namespace("recovery"), i);
  }

  private static long source(int i) {
    return 64 + (long) i * SIZE;
  }

  private static long destination(int i) {
    return 64 + (long) (OBJECTS + i) * SIZE;
  }

  private static Set<String> workerThreads() {
    Set<String> names = new TreeSet<>();
    for (Thread t : Thread.getAllStackTraces().keySet()) {
      if (t.getName().startsWith("ts-l3-") && t.isAlive()) {
        names.add(t.getName());
      }
    }
    return names;
  }
}

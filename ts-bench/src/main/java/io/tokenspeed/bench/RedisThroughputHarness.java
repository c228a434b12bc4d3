package io.tokenspeed.bench;

import com.sun.management.OperatingSystemMXBean;
import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.l3.redis.RedisCounters;
import io.tokenspeed.l3.redis.RedisStore;
import io.tokenspeed.l3.redis.RedisStoreSettings;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.testkit.RedisCluster;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.io.File;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import org.HdrHistogram.Histogram;

/**
 * Bytes per second of the {@code redis} store through the L3 executor, against {@code
 * redis-benchmark} on the same server(s) in the same run, and the scaling from one master to a
 * 3-master cluster.
 *
 * <p>For each topology (a standalone server; a Redis Cluster of 3 masters, no replicas, all started
 * on loopback by {@link RedisServers} and killed at the end), object size (64 KiB, 1 MiB),
 * concurrency C and kind it measures, in alternating blocks (the order flips every round so that
 * machine noise hits both sides alike):
 *
 * <ul>
 *   <li><b>redis-benchmark</b> (the baseline): {@code -t set} or {@code -t get}, {@code -d size},
 *       {@code -c C -P 1} (C connections, one request outstanding on each), {@code -r} over a
 *       keyspace of 10^9 keys for SET (practically every SET creates a key, as every TokenSpeed PUT
 *       does; the servers are flushed after each such block, outside the timing) and of the K
 *       objects filled beforehand for GET ({@code --cluster} against the first master for the
 *       cluster). Its rate is counted at the servers: the masters' {@code INFO commandstats} call
 *       counters are read once a tenth of the run is done and again once as many requests as a
 *       TokenSpeed block moves have been executed, and the calls between the two readings over the
 *       time between them, times the size, are its bytes per second. The run goes on past the
 *       second reading, so the window holds neither its start nor its end. Its own CSV figure is
 *       reported beside it: in cluster mode redis-benchmark runs one thread per master that notices
 *       the end of the run only on a 250 ms timer, which stretches the time it divides by.
 *   <li><b>TokenSpeed</b>: the L3 executor over a {@link RedisStore}, C jobs of one object each
 *       kept outstanding (C GET or PUT workers; a one-object job takes one connection from the
 *       store's pool, which holds up to C per master, as redis-benchmark opens C). A GET reads a
 *       random one of K preloaded objects into its own slice of one shared Host allocation ({@code
 *       Arena.ofShared()}); a PUT writes a fresh key from its own slice (create-only, never an
 *       existing key). Throughput is the block's bytes over the time from its first submission to
 *       its last completion record; the latency of one operation is submission to the poll that
 *       delivers its record, in HdrHistogram. The submitting thread waits for records as the
 *       engine's loop does: it parks, and the executor's completion listener ({@link
 *       L3Executor#onCompletion}) unparks it when a record is produced. It neither spins nor parks
 *       on a timer, so it holds no core away from the servers and the workers, and it wakes once
 *       per record (a timed park costs a timer per look on a virtual machine).
 * </ul>
 *
 * <p>CPU per operation, user plus system: for redis-benchmark, its process's CPU time over the
 * window; for TokenSpeed, this JVM's CPU time over the block (every thread: the submitting one, the
 * workers, the client's event loops, the garbage collector, the compiler); for the servers, the
 * masters' CPU time over the same window or block. Process CPU times come from {@code /proc} in 10
 * ms ticks.
 *
 * <p>Outside the timing: a warm-up of every size and kind before each topology's first row and
 * before every row, the PUT namespace's deletion after every PUT block (and the servers' background
 * frees), filling redis-benchmark's keyspace before the GET rows, and after every GET block a check
 * that each destination slice holds the bytes its object was written from.
 *
 * <pre>
 *   ./mvnw -q -pl ts-core,ts-cache,ts-l3,ts-scheduler,ts-testkit,ts-l3-redis,ts-bench package \
 *       -DskipTests
 *   java -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.RedisThroughputHarness \
 *       [concurrencies=4,1] [rounds=4] [MiB per block=256] [topologies=standalone,cluster]
 * </pre>
 *
 * <p>Needs {@code redis-server} and {@code redis-benchmark} on {@code PATH}.
 */
public final class RedisThroughputHarness {

  private static final String GET_NAMESPACE = "tsl3-redisbenchget";
  private static final String PUT_NAMESPACE = "tsl3-redisbenchput";
  private static final int KIB = 1024;
  private static final int MIB = 1024 * 1024;
  private static final int[] SIZES = {64 * KIB, MIB};

  /** Objects in the keyspace of both sides: 64 MiB per keyspace for either size. */
  private static final long KEYSPACE_BYTES = 64L * MIB;

  /** Bytes each size and kind moves through the executor before the first measured row. */
  private static final long WARM_UP_BYTES = 2048L * MIB;

  /** How often the masters' call counters are read while redis-benchmark runs. */
  private static final long SAMPLE_INTERVAL_MS = 10;

  /** A counter reading that takes longer than this is taken again. */
  private static final long SAMPLE_SPREAD_MAX_US = 2000;

  /** Readings taken at most, once the count is reached, looking for a quick one. */
  private static final int SAMPLE_TRIES = 5;

  /** Linux's USER_HZ: /proc reports CPU time in ticks of 10 ms. */
  private static final long CLOCK_TICK_NS = 10_000_000;

  private static final OperatingSystemMXBean OS =
      (OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();

  /**
   * redis-benchmark's keyspace for SET: so large that practically every SET creates a key, as every
   * TokenSpeed PUT does (overwriting a key costs the server less than creating one).
   */
  private static final int FRESH_KEYSPACE = 1_000_000_000;

  /** Bound on one redis-benchmark process. */
  private static final long BENCHMARK_TIMEOUT_S = 120;

  /** Bound on waiting for a server's background frees after a namespace deletion. */
  private static final long LAZYFREE_TIMEOUT_MS = 10_000;

  /** One topology under test: its seed node and every master. */
  private record Topology(String name, boolean cluster, List<RedisServer> masters) {
    RedisServer seed() {
      return masters.getFirst();
    }

    List<String> uris() {
      return masters.stream().map(RedisServer::uri).toList();
    }

    void flushAll() {
      for (RedisServer m : masters) {
        m.flushAll();
      }
    }
  }

  /** One measured row: both sides' totals over every round. */
  private record Row(
      String topology,
      StorageKind kind,
      int size,
      int concurrency,
      double baselineMibPerS,
      double baselineCsvMibPerS,
      double tokenSpeedMibPerS,
      double tokenSpeedP50Us,
      double tokenSpeedP99Us,
      double baselineP50Us,
      double baselineCpuUsPerOp,
      double tokenSpeedCpuUsPerOp,
      double baselineServerCpuUsPerOp,
      double tokenSpeedServerCpuUsPerOp) {

    double ratio() {
      return tokenSpeedMibPerS / baselineMibPerS;
    }
  }

  // ------------------------------------------------------------------ one store under test

  private final Topology topology;
  private final int size;
  private final int concurrency;
  private final int keyspace;
  private final Arena arena = Arena.ofShared();
  private final MemorySegment host;
  private final RedisStore store;
  private final L3Executor executor;
  private final SplittableRandom random = new SplittableRandom(42);
  private final Path redisBenchmark;
  private long nextOperationId = 1;
  private long nextPutKey;

  /** Per slot: the GET object last read into it (its index), or -1. */
  private final int[] lastGetObject;

  private RedisThroughputHarness(Topology topology, int size, int concurrency, Path redisBenchmark)
      throws Exception {
    this.topology = topology;
    this.size = size;
    this.concurrency = concurrency;
    this.keyspace = (int) (KEYSPACE_BYTES / size);
    this.redisBenchmark = redisBenchmark;
    this.lastGetObject = new int[concurrency];
    // Slots [0, C): GET destinations. Slots [C, 2C): PUT sources, random bytes.
    this.host = arena.allocate(2L * concurrency * size, 4096);
    SplittableRandom fill = new SplittableRandom(size);
    for (long i = 0; i < host.byteSize(); i += 8) {
      host.set(ValueLayout.JAVA_LONG_UNALIGNED, i, fill.nextLong());
    }
    RedisStoreSettings settings =
        (topology.cluster()
                ? RedisStoreSettings.cluster(topology.uris())
                : RedisStoreSettings.standalone(topology.seed().uri()))
            .withConnections(concurrency)
            .withTimeouts(10_000, 10_000);
    RedisStore opened = RedisStore.open(settings);
    this.store = opened;
    L3ExecutorConfig config =
        new L3ExecutorConfig(
            1,
            concurrency,
            concurrency,
            L3ExecutorConfig.DEFAULT_QUERY_QUEUE_CAPACITY,
            L3ExecutorConfig.DEFAULT_GET_QUEUE_CAPACITY,
            L3ExecutorConfig.DEFAULT_PUT_QUEUE_CAPACITY,
            L3ExecutorConfig.DEFAULT_MAX_OUTSTANDING_OPERATIONS,
            L3ExecutorConfig.DEFAULT_HEALTH_COOLDOWN_MS,
            L3ExecutorConfig.DEFAULT_CLOSE_JOIN_DEADLINE_MS);
    try {
      this.executor = L3Executor.start(opened, config, host, System::nanoTime);
      Thread waiter = Thread.currentThread(); // the thread that runs the blocks
      executor.onCompletion(() -> LockSupport.unpark(waiter));
    } catch (Exception | Error e) {
      opened.close();
      arena.close();
      throw e;
    }
    Arrays.fill(lastGetObject, -1);
  }

  private long slotOffset(int slot) {
    return (long) slot * size;
  }

  private long sourceOffset(int slot) {
    return (long) (concurrency + slot) * size;
  }

  private static String getKey(int object) {
    return GET_NAMESPACE + "_" + object;
  }

  /** Object {@code object} is written from PUT source slot {@code object % C}. */
  private int sourceOf(int object) {
    return object % concurrency;
  }

  /** Writes the K objects the TokenSpeed GETs read, directly on the store (untimed). */
  private void preloadGetObjects() throws IOException {
    int batch = Math.max(1, (int) (16L * MIB / size));
    for (int from = 0; from < keyspace; from += batch) {
      List<String> keys = new ArrayList<>();
      List<MemorySegment> sources = new ArrayList<>();
      for (int i = from; i < Math.min(keyspace, from + batch); i++) {
        keys.add(getKey(i));
        sources.add(host.asSlice(sourceOffset(sourceOf(i)), size));
      }
      StoreResult r = store.put(keys, sources);
      for (RowResult row : r.rows()) {
        if (!(row instanceof RowResult.Ok)) {
          throw new IllegalStateException("preloading the GET objects failed: " + r);
        }
      }
    }
  }

  private StorageJob job(StorageKind kind, int slot) {
    JobRow row;
    if (kind == StorageKind.GET) {
      int object = random.nextInt(keyspace);
      lastGetObject[slot] = object;
      row = JobRow.owned(getKey(object), new HostRange(slotOffset(slot), size));
    } else {
      row =
          JobRow.owned(PUT_NAMESPACE + "_" + nextPutKey++, new HostRange(sourceOffset(slot), size));
    }
    return new StorageJob(nextOperationId++, kind, List.of(row));
  }

  /**
   * {@code ops} one-object jobs with C outstanding; records each one's latency into {@code hist}
   * (when not null) and returns the elapsed time from the first submission to the last record.
   */
  private long tokenSpeedBlock(StorageKind kind, int ops, Histogram hist) {
    ArrayDeque<Integer> freeSlots = new ArrayDeque<>();
    for (int i = 0; i < concurrency; i++) {
      freeSlots.add(i);
    }
    Map<Long, Integer> slotOf = new HashMap<>();
    long[] submittedAt = new long[concurrency];
    int submitted = 0;
    int completed = 0;
    long seen = executor.recordsProduced();
    long t0 = System.nanoTime();
    while (completed < ops) {
      while (submitted < ops && !freeSlots.isEmpty()) {
        int slot = freeSlots.poll();
        StorageJob job = job(kind, slot);
        slotOf.put(job.operationId(), slot);
        submittedAt[slot] = System.nanoTime();
        if (!executor.submit(job).accepted()) {
          throw new IllegalStateException(
              "operation " + job.operationId() + " was rejected: " + executor.metrics());
        }
        submitted++;
      }
      seen = awaitRecords(seen);
      for (StorageDone d : executor.poll().completions()) {
        long now = System.nanoTime();
        if (d.okCount() != d.outcomes().size()) {
          throw new IllegalStateException(
              "operation failed: " + d + "; store counters " + store.counters());
        }
        int slot = slotOf.remove(d.operationId());
        if (hist != null) {
          hist.recordValue(now - submittedAt[slot]);
        }
        freeSlots.add(slot);
        completed++;
      }
    }
    return System.nanoTime() - t0;
  }

  /**
   * Waits until the executor has produced a record beyond {@code seen}: parks until the completion
   * listener unparks this thread (a spurious or early wake-up only looks again).
   */
  private long awaitRecords(long seen) {
    long now;
    while ((now = executor.recordsProduced()) == seen) {
      LockSupport.park(this);
    }
    return now;
  }

  /** Every GET slot holds the bytes of the object last read into it. */
  private void verifyGetSlots() {
    for (int slot = 0; slot < concurrency; slot++) {
      int object = lastGetObject[slot];
      if (object < 0) {
        continue;
      }
      MemorySegment got = host.asSlice(slotOffset(slot), size);
      MemorySegment want = host.asSlice(sourceOffset(sourceOf(object)), size);
      long at = got.mismatch(want);
      if (at >= 0) {
        throw new IllegalStateException(
            "GET of " + getKey(object) + " into slot " + slot + " differs at byte " + at);
      }
    }
  }

  /** Deletes the PUT namespace and waits for the servers' background frees (untimed). */
  private void deletePuts() throws IOException {
    store.deleteNamespace(PUT_NAMESPACE);
    awaitLazyFree(topology);
  }

  private void close() {
    executor.close();
    arena.close();
  }

  // ------------------------------------------------------------------ one row

  /** Both sides' accumulated measurements for one row. */
  private static final class Totals {
    long baselineOps;
    double baselineSeconds;
    long baselineCsvOps;
    double baselineCsvSeconds;
    final List<Double> baselineP50Us = new ArrayList<>();
    long baselineCpuNs;
    long baselineServerCpuNs;
    long tokenSpeedOps;
    long tokenSpeedNs;
    long tokenSpeedCpuNs;
    long tokenSpeedServerCpuNs;
    final Histogram latency = new Histogram(3);
  }

  private Row measure(StorageKind kind, int rounds, int opsPerBlock) throws Exception {
    String test = kind == StorageKind.GET ? "get" : "set";
    // Warm-up of both sides (JIT, connections, the servers' allocator), unrecorded.
    int warmOps = Math.max(concurrency * 8, opsPerBlock / 4);
    for (int i = 0; i < 2; i++) {
      tokenSpeedBlock(kind, warmOps, null);
      if (kind == StorageKind.PUT) {
        deletePuts();
      }
    }
    runRedisBenchmark(test, warmOps, concurrency, baselineKeyspace(kind), false);
    if (kind == StorageKind.PUT) {
      topology.flushAll();
    }
    Totals t = new Totals();
    for (int round = 0; round < rounds; round++) {
      boolean baselineFirst = round % 2 == 0;
      if (baselineFirst) {
        baselineBlock(t, test, opsPerBlock);
      }
      long cpu0 = OS.getProcessCpuTime();
      long serverCpu0 = serverCpuNanos();
      t.tokenSpeedNs += tokenSpeedBlock(kind, opsPerBlock, t.latency);
      t.tokenSpeedCpuNs += OS.getProcessCpuTime() - cpu0;
      t.tokenSpeedServerCpuNs += serverCpuNanos() - serverCpu0;
      t.tokenSpeedOps += opsPerBlock;
      if (kind == StorageKind.PUT) {
        deletePuts();
      } else {
        verifyGetSlots();
      }
      if (!baselineFirst) {
        baselineBlock(t, test, opsPerBlock);
      }
    }
    L3Metrics m = executor.metrics();
    if (m.putsAlreadyExisted() != 0 || m.quarantined() || m.workerFaults() != 0) {
      throw new IllegalStateException("the executor saw trouble: " + m);
    }
    RedisCounters c = store.counters();
    if (c.failedCalls() != 0 || c.getsMissing() != 0 || c.getsInvalid() != 0) {
      throw new IllegalStateException("the store saw trouble: " + c);
    }
    double mib = (double) size / MIB;
    List<Double> p50s = new ArrayList<>(t.baselineP50Us);
    p50s.sort(Comparator.naturalOrder());
    return new Row(
        topology.name(),
        kind,
        size,
        concurrency,
        t.baselineOps / t.baselineSeconds * mib,
        t.baselineCsvOps / t.baselineCsvSeconds * mib,
        t.tokenSpeedOps / (t.tokenSpeedNs / 1e9) * mib,
        t.latency.getValueAtPercentile(50) / 1e3,
        t.latency.getValueAtPercentile(99) / 1e3,
        p50s.get(p50s.size() / 2), // the upper median of the rounds' p50s
        t.baselineCpuNs / 1e3 / t.baselineOps,
        t.tokenSpeedCpuNs / 1e3 / t.tokenSpeedOps,
        t.baselineServerCpuNs / 1e3 / t.baselineOps,
        t.tokenSpeedServerCpuNs / 1e3 / t.tokenSpeedOps);
  }

  private void baselineBlock(Totals t, String test, int ops) throws Exception {
    StorageKind kind = test.equals("get") ? StorageKind.GET : StorageKind.PUT;
    BenchmarkResult r = runRedisBenchmark(test, ops, concurrency, baselineKeyspace(kind), true);
    if (kind == StorageKind.PUT) {
      topology.flushAll(); // untimed, like the TokenSpeed PUT namespace's deletion
    }
    t.baselineOps += r.windowCalls();
    t.baselineSeconds += r.windowNs() / 1e9;
    t.baselineCpuNs += r.windowCpuNs();
    t.baselineServerCpuNs += r.windowServerCpuNs();
    t.baselineCsvOps += r.requests();
    t.baselineCsvSeconds += r.requests() / r.requestsPerSecond();
    t.baselineP50Us.add(r.p50Us());
  }

  // ------------------------------------------------------------------ redis-benchmark

  /** SETs go to fresh keys; GETs read the K objects filled beforehand. */
  private int baselineKeyspace(StorageKind kind) {
    return kind == StorageKind.PUT ? FRESH_KEYSPACE : keyspace;
  }

  /**
   * One redis-benchmark run: what its CSV line says (requests, requests per second, median latency)
   * and, when a window was measured, the calls the masters executed in it and its length.
   */
  private record BenchmarkResult(
      long requests,
      double requestsPerSecond,
      double p50Us,
      long windowCalls,
      long windowNs,
      long windowCpuNs,
      long windowServerCpuNs) {}

  /** One reading while redis-benchmark runs: when, the masters' calls, CPU times so far. */
  private record Sample(long nanos, long calls, long clientCpuNs, long serverCpuNs) {}

  /**
   * Runs {@code redis-benchmark -t test}. With {@code window}, it is run for more than {@code ops}
   * requests and the masters' call counters ({@code INFO commandstats}) are read while it runs:
   * once after the first tenth of the requests, again once at least {@code ops} more have been
   * executed; the window between the two readings never includes the start or the end of the run.
   * The run goes on for twice {@code ops} requests past the window (at least 64), so that a reading
   * delayed on a busy machine still falls inside it.
   */
  private BenchmarkResult runRedisBenchmark(
      String test, int ops, int clients, int keys, boolean window) throws Exception {
    int skip = Math.max(2 * clients, ops / 10);
    int requests = window ? skip + ops + Math.max(Math.max(4 * clients, 64), 2 * ops) : ops;
    List<String> command = new ArrayList<>();
    command.add(redisBenchmark.toString());
    command.addAll(
        List.of("-h", "127.0.0.1", "-p", Integer.toString(topology.seed().port()), "-t", test));
    command.addAll(List.of("-d", Integer.toString(size), "-n", Integer.toString(requests)));
    command.addAll(List.of("-c", Integer.toString(clients), "-P", "1"));
    command.addAll(List.of("-r", Integer.toString(keys), "--csv"));
    if (topology.cluster()) {
      command.add("--cluster");
    }
    String counter = "cmdstat_" + test + ":calls=";
    Path out = Files.createTempFile("redis-benchmark-", ".out");
    try {
      long c0 = window ? calls(counter) : 0;
      Process p =
          new ProcessBuilder(command)
              .redirectErrorStream(true)
              .redirectOutput(out.toFile())
              .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
              .start();
      long windowCalls = 0;
      long windowNs = 0;
      long windowCpuNs = 0;
      long windowServerCpuNs = 0;
      try {
        if (window) {
          Sample first = sampleWhen(p, counter, c0 + skip, command);
          Sample second = sampleWhen(p, counter, first.calls() + ops, command);
          windowCalls = second.calls() - first.calls();
          windowNs = second.nanos() - first.nanos();
          windowCpuNs = second.clientCpuNs() - first.clientCpuNs();
          windowServerCpuNs = second.serverCpuNs() - first.serverCpuNs();
          if (second.calls() - c0 > requests - clients) {
            throw new IllegalStateException(
                "the measured window of " + String.join(" ", command) + " reached its end");
          }
        }
        if (!p.waitFor(BENCHMARK_TIMEOUT_S, TimeUnit.SECONDS)) {
          throw new IllegalStateException(
              String.join(" ", command) + " did not finish within " + BENCHMARK_TIMEOUT_S + " s");
        }
      } finally {
        if (p.isAlive()) {
          p.destroyForcibly();
          p.waitFor(5, TimeUnit.SECONDS);
        }
      }
      String text = Files.readString(out, StandardCharsets.UTF_8);
      if (p.exitValue() != 0) {
        throw new IllegalStateException(
            String.join(" ", command) + " exited with " + p.exitValue() + ":\n" + text);
      }
      String prefix = "\"" + test.toUpperCase(Locale.ROOT) + "\",";
      for (String line : text.split("\n")) {
        if (line.startsWith(prefix)) {
          String[] fields = line.trim().replace("\"", "").split(",");
          // test, rps, avg_latency_ms, min_latency_ms, p50_latency_ms, ...
          return new BenchmarkResult(
              requests,
              Double.parseDouble(fields[1]),
              Double.parseDouble(fields[4]) * 1e3,
              windowCalls,
              windowNs,
              windowCpuNs,
              windowServerCpuNs);
        }
      }
      throw new IllegalStateException(
          String.join(" ", command) + " printed no " + prefix + " line:\n" + text);
    } finally {
      Files.deleteIfExists(out);
    }
  }

  /** The calls of one command summed over every master ({@code cmdstat_<cmd>:calls=}). */
  private long calls(String counter) {
    long sum = 0;
    for (RedisServer m : topology.masters()) {
      String info = String.valueOf(m.command("INFO", "commandstats"));
      int at = info.indexOf(counter);
      if (at >= 0) {
        int from = at + counter.length();
        int to = info.indexOf(',', from);
        sum += Long.parseLong(info.substring(from, to));
      }
    }
    return sum;
  }

  /**
   * Reads the call counter every {@value #SAMPLE_INTERVAL_MS} ms until it reaches {@code atLeast};
   * returns the time of that reading (the middle of it), the count, and redis-benchmark's and the
   * masters' CPU times so far. A reading that took longer than {@value #SAMPLE_SPREAD_MAX_US} µs
   * (this thread was descheduled between the masters) is taken again, up to {@value #SAMPLE_TRIES}
   * times; the quickest one counts.
   */
  private Sample sampleWhen(Process p, String counter, long atLeast, List<String> command) {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(BENCHMARK_TIMEOUT_S);
    Sample best = null;
    long bestSpread = Long.MAX_VALUE;
    int tries = 0;
    while (true) {
      long before = System.nanoTime();
      long count = calls(counter);
      long cpu = cpuNanos(p.pid());
      long serverCpu = serverCpuNanos();
      long after = System.nanoTime();
      if (count >= atLeast) {
        if (after - before < bestSpread) {
          bestSpread = after - before;
          best = new Sample(before + (after - before) / 2, count, cpu, serverCpu);
        }
        if (bestSpread <= SAMPLE_SPREAD_MAX_US * 1000 || ++tries >= SAMPLE_TRIES) {
          return best;
        }
        continue;
      }
      if (!p.isAlive() || after - deadline > 0) {
        throw new IllegalStateException(
            String.join(" ", command)
                + " ended or stalled before the masters counted "
                + atLeast
                + " calls (at "
                + count
                + ")");
      }
      LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(SAMPLE_INTERVAL_MS));
    }
  }

  /**
   * A process's user + system CPU time from {@code /proc/<pid>/stat} (fields 14 and 15, in clock
   * ticks of 10 ms), or 0 once it has exited.
   */
  private static long cpuNanos(long pid) {
    try {
      String stat = Files.readString(Path.of("/proc", Long.toString(pid), "stat"));
      String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
      // fields[0] is field 3 (state): utime is field 14, stime field 15
      long ticks = Long.parseLong(fields[11]) + Long.parseLong(fields[12]);
      return ticks * CLOCK_TICK_NS;
    } catch (IOException | RuntimeException e) {
      return 0;
    }
  }

  /**
   * Fills redis-benchmark's keyspace (SET over {@code -r K}, 16 requests per key, one client per
   * master) so that its GETs find values rather than nils; returns how many keys the masters hold.
   */
  private long fillBaselineKeyspace() throws Exception {
    int masters = topology.masters().size();
    runRedisBenchmark("set", keyspace * 16 * masters, masters, keyspace, false);
    long keys = 0;
    for (RedisServer m : topology.masters()) {
      keys += (Long) m.command("DBSIZE");
    }
    return keys;
  }

  /** The masters' CPU time so far, summed. */
  private long serverCpuNanos() {
    long sum = 0;
    for (RedisServer m : topology.masters()) {
      sum += cpuNanos(m.pid());
    }
    return sum;
  }

  // ------------------------------------------------------------------ servers

  /** Waits until no master has background frees pending (after UNLINK). */
  private static void awaitLazyFree(Topology topology) {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(LAZYFREE_TIMEOUT_MS);
    for (RedisServer m : topology.masters()) {
      while (true) {
        String info = String.valueOf(m.command("INFO", "memory"));
        if (info.contains("lazyfree_pending_objects:0\r\n")) {
          break;
        }
        if (System.nanoTime() - deadline > 0) {
          throw new IllegalStateException(
              m + " still frees objects in the background after " + LAZYFREE_TIMEOUT_MS + " ms");
        }
        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(2));
      }
    }
  }

  private static Path requireOnPath(String name) {
    String path = System.getenv("PATH");
    if (path != null) {
      for (String dir : path.split(File.pathSeparator)) {
        Path candidate = Path.of(dir.isEmpty() ? "." : dir, name);
        if (Files.isRegularFile(candidate) && Files.isExecutable(candidate)) {
          return candidate;
        }
      }
    }
    throw new IllegalStateException(
        name + " is not on PATH=" + path + "; install it with " + RedisServers.INSTALL_HINT);
  }

  /**
   * Runs every size and kind through the executor for a while before anything is measured, so that
   * the JIT compiler has finished with the store's and the client's paths (it otherwise keeps a
   * core busy during the first rows).
   */
  private static void warmUp(Topology topology, int concurrency, Path redisBenchmark)
      throws Exception {
    for (int size : SIZES) {
      topology.flushAll();
      RedisThroughputHarness h =
          new RedisThroughputHarness(topology, size, concurrency, redisBenchmark);
      try {
        h.preloadGetObjects();
        int ops = (int) (WARM_UP_BYTES / size);
        for (int i = 0; i < 4; i++) {
          h.tokenSpeedBlock(StorageKind.PUT, ops / 4, null);
          h.deletePuts();
          h.tokenSpeedBlock(StorageKind.GET, ops / 4, null);
        }
      } finally {
        h.close();
      }
    }
  }

  private static void runTopology(
      Topology topology,
      int[] concurrencies,
      int rounds,
      long bytesPerBlock,
      Path redisBenchmark,
      List<Row> rows)
      throws Exception {
    progress("%s: warming up", topology.name());
    warmUp(topology, Arrays.stream(concurrencies).max().orElse(1), redisBenchmark);
    for (int size : SIZES) {
      int ops = (int) Math.max(1, bytesPerBlock / size);
      for (int c : concurrencies) {
        topology.flushAll();
        RedisThroughputHarness h = new RedisThroughputHarness(topology, size, c, redisBenchmark);
        try {
          progress("%s, %d KiB, C=%d: PUT", topology.name(), size / KIB, c);
          Row put = h.measure(StorageKind.PUT, rounds, ops);
          rows.add(put);
          progress("  %s", line(put));
          long keys = h.fillBaselineKeyspace();
          long expected = (long) h.keyspace * topology.masters().size();
          if (keys < expected) {
            progress("  note: redis-benchmark's keyspace holds %d of %d keys", keys, expected);
          }
          h.preloadGetObjects();
          progress("%s, %d KiB, C=%d: GET", topology.name(), size / KIB, c);
          Row get = h.measure(StorageKind.GET, rounds, ops);
          rows.add(get);
          progress("  %s", line(get));
        } finally {
          h.close();
        }
      }
    }
    topology.flushAll();
  }

  // ------------------------------------------------------------------ output

  private static void progress(String format, Object... args) {
    System.err.println(String.format(Locale.ROOT, format, args));
  }

  private static String loadAverage() {
    try {
      return Files.readString(Path.of("/proc/loadavg")).trim();
    } catch (IOException e) {
      return "unknown (" + e.getMessage() + ")";
    }
  }

  private static String sizeName(int size) {
    return size >= MIB ? (size / MIB) + " MiB" : (size / KIB) + " KiB";
  }

  private static String line(Row r) {
    return String.format(
        Locale.ROOT,
        "| %s | %s | %s | %d | %.0f | %.0f | %.0f | %.2f | %.0f | %.0f | %.0f |",
        r.topology(),
        r.kind(),
        sizeName(r.size()),
        r.concurrency(),
        r.baselineMibPerS(),
        r.baselineCsvMibPerS(),
        r.tokenSpeedMibPerS(),
        r.ratio(),
        r.tokenSpeedP50Us(),
        r.tokenSpeedP99Us(),
        r.baselineP50Us());
  }

  private static Row find(List<Row> rows, String topology, StorageKind kind, int size, int c) {
    for (Row r : rows) {
      if (r.topology().equals(topology)
          && r.kind() == kind
          && r.size() == size
          && r.concurrency() == c) {
        return r;
      }
    }
    return null;
  }

  public static void main(String[] args) throws Exception {
    int[] concurrencies =
        Arrays.stream((args.length > 0 ? args[0] : "4,1").split(","))
            .mapToInt(Integer::parseInt)
            .toArray();
    int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 4;
    long bytesPerBlock = (args.length > 2 ? Long.parseLong(args[2]) : 256) * MIB;
    List<String> topologies =
        Arrays.asList((args.length > 3 ? args[3] : "standalone,cluster").split(","));
    Path redisBenchmark = requireOnPath("redis-benchmark");
    progress("load average at start: %s", loadAverage());
    Path dir = Files.createTempDirectory("ts-bench-redis-");
    List<Row> rows = new ArrayList<>();
    long t0 = System.nanoTime();
    try {
      if (topologies.contains("standalone")) {
        try (RedisServer server = RedisServers.startStandalone(dir)) {
          Topology standalone = new Topology("standalone", false, List.of(server));
          runTopology(standalone, concurrencies, rounds, bytesPerBlock, redisBenchmark, rows);
        }
      }
      if (topologies.contains("cluster")) {
        try (RedisCluster cluster = RedisServers.startCluster(dir, 3)) {
          Topology clustered = new Topology("cluster-3", true, cluster.nodes());
          runTopology(clustered, concurrencies, rounds, bytesPerBlock, redisBenchmark, rows);
        }
      }
    } finally {
      try (var walk = Files.walk(dir)) {
        walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
    progress(
        "total %.0f s; load average at end: %s", (System.nanoTime() - t0) / 1e9, loadAverage());

    System.out.println(
        "| topology | kind | object | C | redis-benchmark MiB/s | (its CSV) | TokenSpeed MiB/s |"
            + " ratio | TokenSpeed p50 µs | TokenSpeed p99 µs | redis-benchmark p50 µs |");
    System.out.println("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (Row r : rows) {
      System.out.println(line(r));
    }
    System.out.println();
    System.out.println(
        "| topology | kind | object | C | client CPU µs/op: redis-benchmark | TokenSpeed JVM |"
            + " server CPU µs/op: under redis-benchmark | under TokenSpeed |");
    System.out.println("|---|---|---|---:|---:|---:|---:|---:|");
    for (Row r : rows) {
      System.out.println(
          String.format(
              Locale.ROOT,
              "| %s | %s | %s | %d | %.0f | %.0f | %.0f | %.0f |",
              r.topology(),
              r.kind(),
              sizeName(r.size()),
              r.concurrency(),
              r.baselineCpuUsPerOp(),
              r.tokenSpeedCpuUsPerOp(),
              r.baselineServerCpuUsPerOp(),
              r.tokenSpeedServerCpuUsPerOp()));
    }
    System.out.println();
    System.out.println(
        "| kind | object | C | TokenSpeed 1 master MiB/s | TokenSpeed 3 masters MiB/s | scaling |"
            + " redis-benchmark scaling |");
    System.out.println("|---|---|---:|---:|---:|---:|---:|");
    for (Row one : rows) {
      if (!one.topology().equals("standalone")) {
        continue;
      }
      Row three = find(rows, "cluster-3", one.kind(), one.size(), one.concurrency());
      if (three == null) {
        continue;
      }
      System.out.println(
          String.format(
              Locale.ROOT,
              "| %s | %s | %d | %.0f | %.0f | %.2f | %.2f |",
              one.kind(),
              sizeName(one.size()),
              one.concurrency(),
              one.tokenSpeedMibPerS(),
              three.tokenSpeedMibPerS(),
              three.tokenSpeedMibPerS() / one.tokenSpeedMibPerS(),
              three.baselineMibPerS() / one.baselineMibPerS()));
    }
  }
}

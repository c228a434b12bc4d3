package io.tokenspeed.bench;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.l3.store.memory.MemoryStore;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import org.HdrHistogram.Histogram;

/**
 * What the L3 executor adds to a store call, measured against direct store calls in the same run.
 *
 * <p>For each store (memory, file with its default fsync), object size (64 KiB, 1 MiB), kind (GET,
 * PUT) and number of objects per call or job (1, and 8 as a plan operation carries several pages)
 * it runs, in alternating blocks so that machine noise hits both alike:
 *
 * <ul>
 *   <li><b>direct</b>: one thread calls the store, one object per call (the baseline);
 *   <li><b>executor, one at a time</b>: submit one job, wait for its record (hand-off, worker
 *       wake-up, facts, poll) — the added latency per operation;
 *   <li><b>executor, pipelined</b>: keep as many jobs outstanding as the kind has workers, as the
 *       event loop does when several requests prefetch — the throughput the engine sees.
 * </ul>
 *
 * <p>Every PUT writes a fresh key; objects are deleted between blocks, outside the timed region.
 *
 * <pre>
 *   ./mvnw -q -pl ts-core,ts-cache,ts-l3,ts-bench -am package -DskipTests
 *   java -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.ExecutorOverheadHarness [ops]
 * </pre>
 */
public final class ExecutorOverheadHarness {

  private static final String GET_KEY = "tsl3-benchget_object";
  private static final String PUT_NAMESPACE = "tsl3-benchput";
  private static final int BLOCK = 50;

  private final String storeName;
  private final int size;
  private final StorageKind kind;
  private final int objectsPerJob;
  private final Arena arena = Arena.ofShared();
  private final MemorySegment host;
  private final Path dir;
  private final Store store;
  private final L3Executor executor;
  private long nextOperationId = 1;
  private long nextKey;

  private ExecutorOverheadHarness(String storeName, int size, StorageKind kind, int objectsPerJob)
      throws Exception {
    this.storeName = storeName;
    this.size = size;
    this.kind = kind;
    this.objectsPerJob = objectsPerJob;
    this.host = arena.allocate((long) (1 + 4) * objectsPerJob * size, 4096);
    SplittableRandom rnd = new SplittableRandom(size);
    for (long i = 0; i < host.byteSize(); i += 8) {
      host.set(ValueLayout.JAVA_LONG_UNALIGNED, i, rnd.nextLong());
    }
    if (storeName.equals("file")) {
      dir = Files.createTempDirectory("ts-bench-l3");
      store = new FileStore(FileStoreSettings.of(dir));
    } else {
      dir = null;
      store = new MemoryStore();
    }
    executor = L3Executor.start(store, L3ExecutorConfig.defaults(), host, System::nanoTime);
    for (int i = 0; i < objectsPerJob; i++) {
      check(store.put(List.of(getKey(i)), List.of(host.asSlice((long) i * size, size))), 1);
    }
  }

  private static String getKey(int i) {
    return GET_KEY + i;
  }

  private static void check(StoreResult r, int rows) {
    if (r.rows().size() != rows) {
      throw new IllegalStateException("store call failed: " + r);
    }
    for (RowResult row : r.rows()) {
      if (!(row instanceof RowResult.Ok)) {
        throw new IllegalStateException("store call failed: " + r);
      }
    }
  }

  private String nextPutKey() {
    return PUT_NAMESPACE + "_" + nextKey++;
  }

  /** Where slot {@code slot}'s object {@code i} lands (GET) or comes from (PUT). */
  private long offset(int slot, int i) {
    return kind == StorageKind.GET
        ? (long) objectsPerJob * size * (1 + slot) + (long) i * size
        : (long) i * size;
  }

  /** One direct call of {@code objectsPerJob} objects; returns its duration. */
  private long direct() throws Exception {
    List<String> keys = new java.util.ArrayList<>(objectsPerJob);
    List<MemorySegment> segments = new java.util.ArrayList<>(objectsPerJob);
    for (int i = 0; i < objectsPerJob; i++) {
      keys.add(kind == StorageKind.GET ? getKey(i) : nextPutKey());
      segments.add(host.asSlice(offset(0, i), size));
    }
    long t0 = System.nanoTime();
    StoreResult r = kind == StorageKind.GET ? store.get(keys, segments) : store.put(keys, segments);
    long t = System.nanoTime() - t0;
    check(r, objectsPerJob);
    return t;
  }

  private StorageJob job(int slot) {
    List<JobRow> rows = new java.util.ArrayList<>(objectsPerJob);
    for (int i = 0; i < objectsPerJob; i++) {
      String key = kind == StorageKind.GET ? getKey(i) : nextPutKey();
      rows.add(JobRow.owned(key, new HostRange(offset(slot, i), size)));
    }
    return new StorageJob(nextOperationId++, kind, rows);
  }

  /** One job through the executor, waited for; returns its duration. */
  private long viaExecutor() {
    StorageJob job = job(0);
    long seen = executor.recordsProduced();
    long t0 = System.nanoTime();
    submit(job);
    while (true) {
      while (executor.recordsProduced() == seen) {
        Thread.onSpinWait();
      }
      seen = executor.recordsProduced();
      for (StorageDone d : executor.poll().completions()) {
        verify(d);
        if (d.operationId() == job.operationId()) {
          return System.nanoTime() - t0;
        }
      }
    }
  }

  /** {@code ops} jobs with {@code window} outstanding; returns the elapsed time. */
  private long pipelined(int ops, int window) {
    ArrayDeque<Integer> freeSlots = new ArrayDeque<>();
    java.util.Map<Long, Integer> slotOf = new java.util.HashMap<>();
    for (int i = 0; i < window; i++) {
      freeSlots.add(i);
    }
    int submitted = 0;
    int completed = 0;
    long seen = executor.recordsProduced();
    long t0 = System.nanoTime();
    while (completed < ops) {
      while (submitted < ops && !freeSlots.isEmpty()) {
        int slot = freeSlots.poll();
        StorageJob job = job(slot);
        submit(job);
        slotOf.put(job.operationId(), slot);
        submitted++;
      }
      while (executor.recordsProduced() == seen) {
        Thread.onSpinWait();
      }
      seen = executor.recordsProduced();
      for (StorageDone d : executor.poll().completions()) {
        verify(d);
        freeSlots.add(slotOf.remove(d.operationId()));
        completed++;
      }
    }
    return System.nanoTime() - t0;
  }

  private void submit(StorageJob job) {
    if (!executor.submit(job).accepted()) {
      throw new IllegalStateException("operation " + job.operationId() + " was rejected");
    }
  }

  private static void verify(StorageDone d) {
    if (d.okCount() != d.outcomes().size()) {
      throw new IllegalStateException("operation failed: " + d);
    }
  }

  private void cleanPuts() throws Exception {
    if (kind == StorageKind.PUT) {
      store.deleteNamespace(PUT_NAMESPACE);
    }
  }

  private String run(int ops) throws Exception {
    int window =
        kind == StorageKind.GET
            ? L3ExecutorConfig.DEFAULT_GET_WORKERS
            : L3ExecutorConfig.DEFAULT_PUT_WORKERS;
    for (int i = 0; i < Math.max(200, ops / 5); i++) { // warm-up, both paths
      direct();
      viaExecutor();
      if (i % BLOCK == 0) {
        cleanPuts();
      }
    }
    cleanPuts();
    Histogram directHist = new Histogram(3);
    Histogram execHist = new Histogram(3);
    long directNs = 0;
    long execNs = 0;
    long pipelinedNs = 0;
    int pipelinedOps = 0;
    for (int done = 0; done < ops; done += BLOCK) {
      for (int i = 0; i < BLOCK; i++) {
        long t = direct();
        directHist.recordValue(t);
        directNs += t;
      }
      cleanPuts();
      for (int i = 0; i < BLOCK; i++) {
        long t = viaExecutor();
        execHist.recordValue(t);
        execNs += t;
      }
      cleanPuts();
      pipelinedNs += pipelined(BLOCK, window);
      pipelinedOps += BLOCK;
      cleanPuts();
    }
    double directOps = ops / (directNs / 1e9);
    double serialOps = ops / (execNs / 1e9);
    double pipeOps = pipelinedOps / (pipelinedNs / 1e9);
    double mib = (double) size * objectsPerJob / 1048576.0;
    return String.format(
        Locale.ROOT,
        "| %s | %s | %d KiB | %d | %.0f | %.0f | %.2f | %.0f (%d) | %.2f | %.1f | %.1f | %.1f |",
        storeName,
        kind,
        size / 1024,
        objectsPerJob,
        directOps * mib,
        serialOps * mib,
        serialOps / directOps,
        pipeOps * mib,
        window,
        pipeOps / directOps,
        directHist.getValueAtPercentile(50) / 1e3,
        execHist.getValueAtPercentile(50) / 1e3,
        (execHist.getValueAtPercentile(50) - directHist.getValueAtPercentile(50)) / 1e3);
  }

  private void close() throws Exception {
    executor.close();
    arena.close();
    if (dir != null) {
      try (var walk = Files.walk(dir)) {
        walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }

  public static void main(String[] args) throws Exception {
    int ops = args.length > 0 ? Integer.parseInt(args[0]) : 2000;
    System.out.println(
        "| store | kind | object | objects per call | direct MiB/s | executor 1-at-a-time MiB/s | ratio |"
            + " executor pipelined MiB/s (window) | ratio | direct p50 µs | executor p50 µs |"
            + " added p50 µs |");
    System.out.println("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (String store : List.of("memory", "file")) {
      for (int size : new int[] {64 * 1024, 1024 * 1024}) {
        for (StorageKind kind : List.of(StorageKind.GET, StorageKind.PUT)) {
          for (int objects : new int[] {1, 8}) {
            ExecutorOverheadHarness h = new ExecutorOverheadHarness(store, size, kind, objects);
            try {
              System.out.println(h.run(objects == 1 ? ops : ops / 4));
            } finally {
              h.close();
            }
          }
        }
      }
    }
  }
}

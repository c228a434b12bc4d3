package io.tokenspeed.bench;

import com.sun.management.OperatingSystemMXBean;
import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreCounters;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.l3.store.file.FileStoreSettings.DirectIo;
import java.io.File;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import java.util.zip.CRC32C;

/**
 * Cold reads of the {@code file} store against {@code dd} on the same files in the same run.
 *
 * <p>It writes N objects of S bytes (default 256 × 4 MiB = 1 GiB, the size of an 8B model's
 * 8,192-token prefix, one object per page group) through the store, then for R rounds measures each
 * variant below over all N objects, in an order that rotates every round so that drift of the
 * machine hits every variant alike. Before every cold variant the files are evicted from the page
 * cache and their residency is sampled (mincore through a mapping, 8 pages per file) to prove it.
 *
 * <ul>
 *   <li><b>dd, one file at a time</b>: {@code dd if=F of=/dev/null bs=4M iflag=direct} per file,
 *       one process after the other; reported by wall clock (process starts included) and by the
 *       sum of the times dd itself prints (the disk alone). The baseline of the ratios.
 *   <li><b>dd, J files at a time</b>: the same with J processes at once (the disk's parallel
 *       bandwidth).
 *   <li><b>store, direct / buffered</b>: one {@link FileStore#get} call with all N keys on this
 *       thread, {@code direct_io=on} or {@code off}, {@code read_threads} T.
 *   <li><b>executor, direct / buffered / buffered without a pool</b>: one GET job of N rows through
 *       the {@link L3Executor} (default workers: the job is split into shares over its GET
 *       workers), as the engine submits a restore; the last is the read path before O_DIRECT and
 *       the read pool ({@code direct_io=off}, {@code read_threads=0}).
 *   <li><b>warm, executor, auto / buffered</b>: the same job right after a read left every page in
 *       the page cache: {@code direct_io=auto} must then copy from the cache, not read the disk.
 * </ul>
 *
 * <p>Every read lands in one 4096-aligned Host allocation (zeroed before each, untimed) and is
 * checked afterwards against each object's CRC32C. The figures: GB/s (10^9 bytes of payload per
 * second), the ratio to dd one file at a time (dd's own time), and the CPU seconds this JVM spent
 * per GB read (every thread: CRC32C, copies, the bounce buffers). A single-thread CRC32C rate over
 * the same bytes, warm, says whether checksumming could be the bottleneck.
 *
 * <p>Eviction: {@code --cold fadvise} (default) runs {@code dd if=F iflag=nocache count=0} per
 * file, which is {@code posix_fadvise(POSIX_FADV_DONTNEED)} on that file only; {@code --cold drop}
 * writes 1 to {@code /proc/sys/vm/drop_caches} (root only; it empties the whole machine's page
 * cache). The objects are written with fsync, so their pages are clean and either method evicts
 * them. A virtual disk may still be cached by its host, below this machine; the report says what
 * the disk is.
 *
 * <pre>
 *   ./mvnw -B -o -q -pl ts-bench -am package -DskipTests
 *   java -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.FileStoreColdHarness \
 *       [--dir /path/on/the/disk] [--objects 256] [--object-mib 4] [--rounds 3] \
 *       [--read-threads 16] [--chunk-kib 1024] [--dd-jobs 8] [--cold fadvise|drop] [--keep true] \
 *       [--variants dd_serial,store_direct,...]
 * </pre>
 *
 * <p>Needs only {@code dd} (coreutils) on {@code PATH}; without it the dd rows are left out.
 */
public final class FileStoreColdHarness {

  private static final String NAMESPACE = "tsl3-coldbench";
  private static final int MIB = 1 << 20;
  private static final int SAMPLED_PAGES = 8;
  private static final int PAGE = 4096;
  private static final int SPINS = 200;
  private static final long PARK_NS = 20_000;
  private static final long DD_TIMEOUT_S = 600;
  private static final Pattern DD_SECONDS = Pattern.compile("copied, ([0-9.]+) s");

  private static final OperatingSystemMXBean OS =
      (OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();

  /** What is measured; the order of the constants is the first round's order. */
  enum Variant {
    DD_SERIAL("dd iflag=direct bs=4M, one file at a time", true),
    DD_PARALLEL("dd iflag=direct bs=4M, J files at a time", true),
    STORE_DIRECT("store get, direct_io=on", true),
    STORE_BUFFERED("store get, direct_io=off", true),
    EXECUTOR_DIRECT("executor GET job, direct_io=on", true),
    EXECUTOR_BUFFERED("executor GET job, direct_io=off", true),
    EXECUTOR_OLD_PATH("executor GET job, direct_io=off, read_threads=0 (the old path)", true),
    WARM_EXECUTOR_AUTO("warm: executor GET job, direct_io=auto", false),
    WARM_EXECUTOR_BUFFERED("warm: executor GET job, direct_io=off", false);

    final String label;
    final boolean cold;

    Variant(String label, boolean cold) {
      this.label = label;
      this.cold = cold;
    }
  }

  /** One measurement: payload bytes moved, wall time, dd's own time (dd rows), CPU time. */
  private record Sample(long bytes, long wallNs, long selfNs, long cpuNs, int residentPages) {}

  private final Path dir;
  private final int objects;
  private final long objectBytes;
  private final int ddJobs;
  private final String coldMethod;
  private final Arena arena = Arena.ofShared();
  private final MemorySegment host;
  private final int[] crcs;
  private final List<Path> files = new ArrayList<>();
  private final Map<Variant, FileStore> stores = new EnumMap<>(Variant.class);
  private final Map<Variant, L3Executor> executors = new EnumMap<>(Variant.class);
  private final boolean ddAvailable;
  private long nextOperationId = 1;

  private FileStoreColdHarness(
      Path dir,
      int objects,
      long objectBytes,
      int readThreads,
      int chunkBytes,
      int ddJobs,
      String coldMethod)
      throws Exception {
    this.dir = dir;
    this.objects = objects;
    this.objectBytes = objectBytes;
    this.ddJobs = ddJobs;
    this.coldMethod = coldMethod;
    this.host = arena.allocate(objects * objectBytes, PAGE);
    this.crcs = new int[objects];
    this.ddAvailable = run(List.of("dd", "--version")).exit() == 0;
    FileStoreSettings base = FileStoreSettings.of(dir);
    FileStoreSettings direct = base.withReads(DirectIo.ON, readThreads, chunkBytes);
    FileStoreSettings buffered = base.withReads(DirectIo.OFF, readThreads, chunkBytes);
    FileStoreSettings oldPath = base.withReads(DirectIo.OFF, 0, chunkBytes);
    FileStoreSettings auto = base.withReads(DirectIo.AUTO, readThreads, chunkBytes);
    FileStore directStore = new FileStore(direct);
    FileStore bufferedStore = new FileStore(buffered);
    stores.put(Variant.STORE_DIRECT, directStore);
    stores.put(Variant.STORE_BUFFERED, bufferedStore);
    stores.put(Variant.EXECUTOR_DIRECT, directStore);
    stores.put(Variant.EXECUTOR_BUFFERED, bufferedStore);
    stores.put(Variant.EXECUTOR_OLD_PATH, new FileStore(oldPath));
    stores.put(Variant.WARM_EXECUTOR_AUTO, new FileStore(auto));
    stores.put(Variant.WARM_EXECUTOR_BUFFERED, bufferedStore);
    for (Variant v :
        List.of(
            Variant.EXECUTOR_DIRECT,
            Variant.EXECUTOR_BUFFERED,
            Variant.EXECUTOR_OLD_PATH,
            Variant.WARM_EXECUTOR_AUTO,
            Variant.WARM_EXECUTOR_BUFFERED)) {
      executors.put(
          v, L3Executor.start(stores.get(v), L3ExecutorConfig.defaults(), host, System::nanoTime));
    }
  }

  private static String key(int i) {
    return NAMESPACE + "_" + i;
  }

  private MemorySegment slot(int i) {
    return host.asSlice(i * objectBytes, objectBytes);
  }

  /** Writes the N objects (random bytes, fsync on) and remembers each one's CRC32C. */
  private void writeObjects() throws IOException {
    FileStore writer = stores.get(Variant.STORE_BUFFERED);
    writer.deleteNamespace(NAMESPACE);
    SplittableRandom random = new SplittableRandom(42);
    for (long at = 0; at < host.byteSize(); at += 8) {
      host.set(ValueLayout.JAVA_LONG_UNALIGNED, at, random.nextLong());
    }
    for (int i = 0; i < objects; i++) {
      crcs[i] = crc32c(slot(i));
      StoreResult r = writer.put(List.of(key(i)), List.of(slot(i)));
      if (!(r.rows().getFirst() instanceof RowResult.Ok)) {
        throw new IllegalStateException("writing object " + i + " failed: " + r);
      }
      files.add(writer.objectPath(key(i)));
    }
  }

  private static int crc32c(MemorySegment segment) {
    CRC32C crc = new CRC32C();
    for (long at = 0; at < segment.byteSize(); at += 1L << 30) {
      crc.update(segment.asSlice(at, Math.min(1L << 30, segment.byteSize() - at)).asByteBuffer());
    }
    return (int) crc.getValue();
  }

  // ------------------------------------------------------------------ cold and warm

  /** Evicts every object file from the page cache; returns the sampled pages still resident. */
  private int makeCold() throws Exception {
    if (coldMethod.equals("drop")) {
      Files.writeString(Path.of("/proc/sys/vm/drop_caches"), "1");
    } else {
      forEachFile(f -> run(List.of("dd", "if=" + f, "iflag=nocache", "count=0", "status=none")));
    }
    return residentPages();
  }

  /** Reads every file through the page cache (untimed), so that all of it is cached. */
  private int makeWarm() throws Exception {
    FileStore buffered = stores.get(Variant.STORE_BUFFERED);
    check(
        buffered.get(
            Stream.iterate(0, i -> i + 1).limit(objects).map(FileStoreColdHarness::key).toList(),
            slots()));
    return residentPages();
  }

  /** Resident pages among {@value #SAMPLED_PAGES} evenly spaced pages of each file. */
  private int residentPages() throws IOException {
    int resident = 0;
    for (Path f : files) {
      try (FileChannel ch = FileChannel.open(f, StandardOpenOption.READ);
          Arena a = Arena.ofConfined()) {
        long size = ch.size();
        MemorySegment map = ch.map(FileChannel.MapMode.READ_ONLY, 0, size, a);
        long pages = (size + PAGE - 1) / PAGE;
        for (int s = 0; s < SAMPLED_PAGES; s++) {
          long page = pages * s / SAMPLED_PAGES;
          long at = page * PAGE;
          if (map.asSlice(at, Math.min(PAGE, size - at)).isLoaded()) {
            resident++;
          }
        }
      }
    }
    return resident;
  }

  // ------------------------------------------------------------------ the variants

  private Sample measure(Variant v) throws Exception {
    int resident = v.cold ? makeCold() : makeWarm();
    host.fill((byte) 0);
    long cpu0 = OS.getProcessCpuTime();
    long t0 = System.nanoTime();
    long selfNs =
        switch (v) {
          case DD_SERIAL -> dd(1);
          case DD_PARALLEL -> dd(ddJobs) * 0; // dd's own times overlap: only the wall clock says
          case STORE_DIRECT, STORE_BUFFERED -> storeGet(stores.get(v));
          case EXECUTOR_DIRECT,
              EXECUTOR_BUFFERED,
              EXECUTOR_OLD_PATH,
              WARM_EXECUTOR_AUTO,
              WARM_EXECUTOR_BUFFERED ->
              executorGet(executors.get(v));
        };
    long wallNs = System.nanoTime() - t0;
    long cpuNs = OS.getProcessCpuTime() - cpu0;
    if (v != Variant.DD_SERIAL && v != Variant.DD_PARALLEL) {
      verify(v);
    }
    return new Sample(objects * objectBytes, wallNs, selfNs, cpuNs, resident);
  }

  private List<MemorySegment> slots() {
    List<MemorySegment> out = new ArrayList<>(objects);
    for (int i = 0; i < objects; i++) {
      out.add(slot(i));
    }
    return out;
  }

  private long storeGet(FileStore store) throws IOException {
    List<String> keys = new ArrayList<>(objects);
    for (int i = 0; i < objects; i++) {
      keys.add(key(i));
    }
    check(store.get(keys, slots()));
    return 0;
  }

  private long executorGet(L3Executor executor) {
    List<JobRow> rows = new ArrayList<>(objects);
    for (int i = 0; i < objects; i++) {
      rows.add(JobRow.owned(key(i), new HostRange(i * objectBytes, objectBytes)));
    }
    long seen = executor.recordsProduced();
    StorageJob job = new StorageJob(nextOperationId++, StorageKind.GET, rows);
    if (!executor.submit(job).accepted()) {
      throw new IllegalStateException("the GET job was rejected: " + executor.metrics());
    }
    while (true) {
      seen = awaitRecords(executor, seen);
      for (StorageDone d : executor.poll().completions()) {
        if (d.operationId() == job.operationId()) {
          if (d.okCount() != objects) {
            throw new IllegalStateException("the GET job failed: " + d);
          }
          return 0;
        }
      }
    }
  }

  private static long awaitRecords(L3Executor executor, long seen) {
    long now;
    int spins = 0;
    while ((now = executor.recordsProduced()) == seen) {
      if (spins < SPINS) {
        spins++;
        Thread.onSpinWait();
      } else {
        LockSupport.parkNanos(PARK_NS);
      }
    }
    return now;
  }

  private static void check(StoreResult r) {
    for (RowResult row : r.rows()) {
      if (!(row instanceof RowResult.Ok)) {
        throw new IllegalStateException("a GET row failed: " + row);
      }
    }
  }

  private void verify(Variant v) {
    for (int i = 0; i < objects; i++) {
      if (crc32c(slot(i)) != crcs[i]) {
        throw new IllegalStateException(v + ": object " + i + " read back other bytes");
      }
    }
  }

  /** dd over every file, {@code jobs} processes at once; returns the sum of dd's own times. */
  private long dd(int jobs) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(jobs);
    try {
      List<Future<Long>> seconds = new ArrayList<>();
      for (Path f : files) {
        seconds.add(
            pool.submit(
                () -> {
                  Result r = run(List.of("dd", "if=" + f, "of=/dev/null", "bs=4M", "iflag=direct"));
                  Matcher m = DD_SECONDS.matcher(r.output());
                  if (r.exit() != 0 || !m.find()) {
                    throw new IllegalStateException("dd on " + f + " failed: " + r.output());
                  }
                  return Math.round(Double.parseDouble(m.group(1)) * 1e9);
                }));
      }
      long sum = 0;
      for (Future<Long> s : seconds) {
        sum += s.get();
      }
      return sum;
    } finally {
      pool.shutdownNow();
    }
  }

  private interface FileAction {
    Result apply(Path file) throws Exception;
  }

  private void forEachFile(FileAction action) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(ddJobs);
    try {
      List<Future<Result>> results = new ArrayList<>();
      for (Path f : files) {
        results.add(pool.submit(() -> action.apply(f)));
      }
      for (Future<Result> r : results) {
        if (r.get().exit() != 0) {
          throw new IllegalStateException("evicting a file failed: " + r.get().output());
        }
      }
    } finally {
      pool.shutdownNow();
    }
  }

  private record Result(int exit, String output) {}

  /** Runs a command in the C locale (dd's numbers then use a decimal point). */
  private static Result run(List<String> command) throws IOException, InterruptedException {
    ProcessBuilder pb =
        new ProcessBuilder(command)
            .redirectErrorStream(true)
            .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
    pb.environment().put("LC_ALL", "C");
    Process p;
    try {
      p = pb.start();
    } catch (IOException e) {
      return new Result(127, String.valueOf(e.getMessage()));
    }
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (!p.waitFor(DD_TIMEOUT_S, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      throw new IllegalStateException(String.join(" ", command) + " did not finish");
    }
    return new Result(p.exitValue(), out);
  }

  /** CRC32C of the whole Host allocation on one thread, warm: GB/s. */
  private double crcGbPerS() {
    crc32c(host);
    long t0 = System.nanoTime();
    for (int r = 0; r < 3; r++) {
      crc32c(host);
    }
    return 3.0 * host.byteSize() / (System.nanoTime() - t0);
  }

  private void close() throws Exception {
    for (L3Executor e : executors.values()) {
      e.close();
    }
    for (FileStore s : List.copyOf(new java.util.LinkedHashSet<>(stores.values()))) {
      s.close();
    }
    arena.close();
  }

  // ------------------------------------------------------------------ main

  /** Totals of one variant over the rounds. */
  private static final class Totals {
    long bytes;
    long wallNs;
    long selfNs;
    long cpuNs;
    int residentPages;
    int rounds;
    final List<Double> gbPerS = new ArrayList<>();

    void add(Sample s) {
      bytes += s.bytes();
      wallNs += s.wallNs();
      selfNs += s.selfNs();
      cpuNs += s.cpuNs();
      residentPages += s.residentPages();
      rounds++;
      gbPerS.add((double) s.bytes() / s.wallNs());
    }
  }

  public static void main(String[] args) throws Exception {
    Path dir = Path.of(System.getProperty("java.io.tmpdir"), "tokenspeed-cold-bench");
    int objects = 256;
    int objectMib = 4;
    int rounds = 3;
    int readThreads = FileStoreSettings.DEFAULT_READ_THREADS;
    int chunkKib = FileStoreSettings.DEFAULT_READ_CHUNK_BYTES >> 10;
    int ddJobs = 8;
    String cold = "fadvise";
    boolean keep = false;
    List<Variant> only = List.of(Variant.values());
    for (Map.Entry<String, String> flag : BenchFlags.of(args)) {
      String v = flag.getValue();
      switch (flag.getKey()) {
        case "--dir" -> dir = Path.of(v);
        case "--objects" -> objects = Integer.parseInt(v);
        case "--object-mib" -> objectMib = Integer.parseInt(v);
        case "--rounds" -> rounds = Integer.parseInt(v);
        case "--read-threads" -> readThreads = Integer.parseInt(v);
        case "--chunk-kib" -> chunkKib = Integer.parseInt(v);
        case "--dd-jobs" -> ddJobs = Integer.parseInt(v);
        case "--cold" -> cold = v;
        case "--keep" -> keep = Boolean.parseBoolean(v);
        case "--variants" ->
            only =
                Stream.of(v.split(","))
                    .map(n -> Variant.valueOf(n.toUpperCase(Locale.ROOT)))
                    .toList();
        default -> throw new IllegalArgumentException("unknown flag " + flag.getKey());
      }
    }
    if (!cold.equals("fadvise") && !cold.equals("drop")) {
      throw new IllegalArgumentException("--cold " + cold + ": expected fadvise or drop");
    }
    Files.createDirectories(dir);
    FileStoreColdHarness h =
        new FileStoreColdHarness(
            dir, objects, (long) objectMib * MIB, readThreads, chunkKib << 10, ddJobs, cold);
    try {
      System.out.printf(
          "file store cold reads: %d objects x %d MiB in %s (%s), read_threads=%d,"
              + " read_chunk_bytes=%d, dd jobs %d, eviction %s%n",
          objects,
          objectMib,
          dir,
          Files.getFileStore(dir).type(),
          readThreads,
          chunkKib << 10,
          ddJobs,
          cold);
      System.out.printf(
          "JDK %s, %d CPUs; direct store: %s%n",
          Runtime.version(),
          Runtime.getRuntime().availableProcessors(),
          h.stores.get(Variant.STORE_DIRECT).readMode());
      h.writeObjects();
      System.out.printf("CRC32C on one thread, warm: %.2f GB/s%n", h.crcGbPerS());
      List<Variant> variants = new ArrayList<>();
      for (Variant v : only) {
        if (h.ddAvailable || (v != Variant.DD_SERIAL && v != Variant.DD_PARALLEL)) {
          variants.add(v);
        }
      }
      Map<Variant, Totals> totals = new EnumMap<>(Variant.class);
      for (int round = 0; round < rounds; round++) {
        for (int k = 0; k < variants.size(); k++) {
          Variant v = variants.get((k + round) % variants.size());
          Sample s = h.measure(v);
          totals.computeIfAbsent(v, x -> new Totals()).add(s);
          System.out.printf(
              Locale.ROOT,
              "round %d %-70s %6.2f GB/s%s resident sampled pages %d%n",
              round,
              v.label,
              (double) s.bytes() / s.wallNs(),
              s.selfNs() > 0
                  ? String.format(
                      Locale.ROOT, " (dd's own %.2f GB/s)", (double) s.bytes() / s.selfNs())
                  : "",
              s.residentPages());
        }
      }
      print(totals, variants, h);
    } finally {
      h.close();
      if (!keep) {
        FileStore cleaner = new FileStore(FileStoreSettings.of(dir));
        cleaner.deleteNamespace(NAMESPACE);
        cleaner.close();
      }
    }
  }

  private static void print(
      Map<Variant, Totals> totals, List<Variant> variants, FileStoreColdHarness h) {
    Totals base = totals.get(Variant.DD_SERIAL);
    if (base == null) {
      base = totals.values().iterator().next();
    }
    double baseline = (double) base.bytes / (base.selfNs > 0 ? base.selfNs : base.wallNs);
    System.out.println();
    System.out.println(
        "| variant | GB/s (all rounds) | per round | / dd one at a time (dd's own time) |"
            + " CPU s per GB | resident sampled pages before |");
    System.out.println("| --- | --- | --- | --- | --- | --- |");
    for (Variant v : variants) {
      Totals t = totals.get(v);
      double gbs = (double) t.bytes / t.wallNs;
      StringBuilder per = new StringBuilder();
      for (double g : t.gbPerS) {
        per.append(per.isEmpty() ? "" : ", ").append(String.format(Locale.ROOT, "%.2f", g));
      }
      String rate =
          String.format(Locale.ROOT, "%.2f", gbs)
              + (t.selfNs > 0
                  ? String.format(Locale.ROOT, " (dd's own: %.2f)", (double) t.bytes / t.selfNs)
                  : "");
      System.out.printf(
          Locale.ROOT,
          "| %s | %s | %s | %.2f | %.2f | %d of %d |%n",
          v.label,
          rate,
          per,
          gbs / baseline,
          t.cpuNs / 1e9 / (t.bytes / 1e9),
          t.residentPages,
          t.rounds * SAMPLED_PAGES * h.objects);
    }
    FileStoreCounters c = h.stores.get(Variant.STORE_DIRECT).counters();
    System.out.println();
    System.out.println("direct store counters: " + c);
    System.out.println(
        "auto store counters: " + h.stores.get(Variant.WARM_EXECUTOR_AUTO).counters());
  }
}

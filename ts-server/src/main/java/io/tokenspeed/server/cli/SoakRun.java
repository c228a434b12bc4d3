package io.tokenspeed.server.cli;

import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.server.cli.StreamClient.Completion;
import java.io.IOException;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryPoolMXBean;
import java.lang.management.MemoryType;
import java.lang.management.MemoryUsage;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Consumer;

/**
 * The soak of {@code bench serve --mode soak}: one server with L3 on, driven past what it can serve
 * and back, with the process's memory and threads sampled every second.
 *
 * <pre>
 *   calibrate   closed loop, C clients: the sustainable rate R (completed requests/s)
 *   before      open loop at R/2: the baseline latency
 *   overload    open loop at K x R for the soak's duration: the intake refuses what it cannot queue
 *   recovery    open loop at R/2 again: how long until the latency is back near the baseline
 * </pre>
 *
 * Arrivals are open-loop (a request is sent at its time whether or not the earlier ones returned),
 * spaced by seeded exponential gaps; prompts share system prompts, so the Device, Host and store
 * tiers all work. Memory is measured as the heap after the last collection (the live set), the
 * process's resident set ({@code VmRSS}: the heap, the KV tiers' off-heap memory and everything
 * else), and direct buffers; a thread that dies of an uncaught exception is counted (and reported
 * as before: to the handler that was installed, or on standard error). A request that has not ended
 * within the client's timeout counts as an error.
 */
final class SoakRun {

  /**
   * One request sent: its phase, its send and end times in seconds from the soak's start, and how
   * it ended.
   */
  record Sent(String phase, double atS, double doneS, Completion completion) {}

  /** One sample of the process, each second. */
  record Sample(
      double atS,
      String phase,
      long heapAfterGc,
      long heapUsed,
      long rss,
      long direct,
      int threads,
      long gcs,
      int running,
      int waiting,
      boolean storagePending) {}

  /** What the run measured. */
  record Result(
      double sustainable,
      List<Sent> sent,
      List<Sample> samples,
      long uncaught,
      String firstUncaught,
      boolean engineFailed,
      double[] phaseStartS) {}

  private final Engine engine;
  private final URI completions;
  private final StreamClient client;
  private final int vocab;
  private final int[][] systems;
  private final int userTokens;
  private final int maxTokens;
  private final SplittableRandom random;
  private final Consumer<String> progress;
  private final List<Sent> sent = Collections.synchronizedList(new ArrayList<>());
  private final List<Sample> samples = Collections.synchronizedList(new ArrayList<>());
  private volatile String phase = "start";
  private long t0;

  SoakRun(
      Engine engine,
      URI completions,
      StreamClient client,
      int vocab,
      int systemPrompts,
      int systemTokens,
      int userTokens,
      int maxTokens,
      long seed,
      Consumer<String> progress) {
    this.engine = engine;
    this.completions = completions;
    this.client = client;
    this.vocab = vocab;
    this.userTokens = userTokens;
    this.maxTokens = maxTokens;
    this.random = new SplittableRandom(seed);
    this.progress = progress;
    this.systems = new int[systemPrompts][];
    for (int i = 0; i < systemPrompts; i++) {
      systems[i] = random.ints(systemTokens, 0, vocab).toArray();
    }
  }

  /** Runs the four phases and returns what it measured. */
  Result run(int clients, long calibrateS, long durationS, double overload, long recoveryS)
      throws Exception {
    AtomicLong uncaught = new AtomicLong();
    AtomicReference<String> firstUncaught = new AtomicReference<>();
    Thread.UncaughtExceptionHandler previous = Thread.getDefaultUncaughtExceptionHandler();
    Thread.setDefaultUncaughtExceptionHandler(
        (t, e) -> {
          uncaught.incrementAndGet();
          firstUncaught.compareAndSet(null, t.getName() + ": " + e);
          if (previous != null) {
            previous.uncaughtException(t, e);
          } else { // what the JVM does without a handler
            System.err.print("Exception in thread \"" + t.getName() + "\" ");
            e.printStackTrace(System.err);
          }
        });
    t0 = System.nanoTime();
    Thread sampler = Thread.ofPlatform().daemon().name("ts-soak-sampler").start(this::sample);
    double[] starts = new double[4];
    try (ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor()) {
      starts[0] = now();
      double sustainable = closedLoop(pool, clients, calibrateS);
      progress.accept(String.format(Locale.ROOT, "sustainable rate: %.2f requests/s", sustainable));
      List<Future<?>> all = new ArrayList<>();
      starts[1] = now();
      openLoop(pool, "before", sustainable / 2, Math.max(30, calibrateS), all);
      starts[2] = now();
      openLoop(pool, "overload", sustainable * overload, durationS, all);
      starts[3] = now();
      openLoop(pool, "recovery", sustainable / 2, recoveryS, all);
      for (Future<?> f : all) {
        f.get();
      }
      phase = "end";
      Thread.sleep(2_000); // the last samples: the process after the last request
      sampler.interrupt();
      sampler.join();
      boolean failed = engine.failure().isPresent() || engine.stopped();
      return new Result(
          sustainable,
          List.copyOf(sent),
          List.copyOf(samples),
          uncaught.get(),
          firstUncaught.get(),
          failed,
          starts);
    } finally {
      sampler.interrupt();
      Thread.setDefaultUncaughtExceptionHandler(previous);
    }
  }

  private double now() {
    return (System.nanoTime() - t0) / 1e9;
  }

  private int[] prompt() {
    int[] system = systems[random.nextInt(systems.length)];
    int[] p = Arrays.copyOf(system, system.length + userTokens);
    for (int i = system.length; i < p.length; i++) {
      p[i] = random.nextInt(vocab);
    }
    return p;
  }

  /** {@code clients} clients, each sending its next request when the last one returned. */
  private double closedLoop(ExecutorService pool, int clients, long seconds) throws Exception {
    phase = "calibrate";
    progress.accept("calibrate: " + clients + " clients for " + seconds + " s");
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
    AtomicLong done = new AtomicLong();
    List<Future<?>> all = new ArrayList<>();
    int[][] prompts = new int[clients * 64][];
    for (int i = 0; i < prompts.length; i++) {
      prompts[i] = prompt();
    }
    AtomicLong next = new AtomicLong();
    double start = now();
    for (int c = 0; c < clients; c++) {
      all.add(
          pool.submit(
              () -> {
                while (System.nanoTime() - end < 0) {
                  int[] p = prompts[(int) (next.getAndIncrement() % prompts.length)];
                  double at = now();
                  Completion r = client.complete(completions, p, maxTokens);
                  sent.add(new Sent("calibrate", at, now(), r));
                  if (r.ok()) {
                    done.incrementAndGet();
                  }
                }
                return null;
              }));
    }
    for (Future<?> f : all) {
      f.get();
    }
    return done.get() / (now() - start);
  }

  /** Sends requests at {@code rate} per second for {@code seconds}, without waiting for them. */
  private void openLoop(
      ExecutorService pool, String name, double rate, long seconds, List<Future<?>> all) {
    phase = name;
    progress.accept(
        String.format(Locale.ROOT, "%s: %.2f requests/s for %d s", name, rate, seconds));
    long start = System.nanoTime();
    long end = start + TimeUnit.SECONDS.toNanos(seconds);
    long at = start;
    while (true) {
      at += (long) (-Math.log(1 - random.nextDouble()) / rate * 1e9);
      if (at - end >= 0) {
        break;
      }
      long wait = at - System.nanoTime();
      if (wait > 0) {
        LockSupport.parkNanos(wait);
      }
      int[] p = prompt();
      double sentAt = now();
      all.add(
          pool.submit(
              () -> {
                Completion r = client.complete(completions, p, maxTokens);
                sent.add(new Sent(name, sentAt, now(), r));
                return null;
              }));
    }
  }

  private void sample() {
    List<MemoryPoolMXBean> heapPools =
        ManagementFactory.getMemoryPoolMXBeans().stream()
            .filter(p -> p.getType() == MemoryType.HEAP)
            .toList();
    List<GarbageCollectorMXBean> gcs = ManagementFactory.getGarbageCollectorMXBeans();
    var threads = ManagementFactory.getThreadMXBean();
    var memory = ManagementFactory.getMemoryMXBean();
    while (!Thread.currentThread().isInterrupted()) {
      long afterGc = 0;
      for (MemoryPoolMXBean p : heapPools) {
        MemoryUsage u = p.getCollectionUsage();
        afterGc += u == null ? 0 : u.getUsed();
      }
      long direct = 0;
      for (BufferPoolMXBean b : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
        direct += b.getMemoryUsed();
      }
      long collections = 0;
      for (GarbageCollectorMXBean g : gcs) {
        collections += Math.max(0, g.getCollectionCount());
      }
      EngineMetrics m = engine.metrics();
      samples.add(
          new Sample(
              now(),
              phase,
              afterGc,
              memory.getHeapMemoryUsage().getUsed(),
              rss(),
              direct,
              threads.getThreadCount(),
              collections,
              m.runningRequests(),
              m.waitingRequests(),
              m.storage().map(EngineMetrics.Storage::pending).orElse(false)));
      try {
        Thread.sleep(1_000);
      } catch (InterruptedException e) {
        return;
      }
    }
  }

  /** The process's resident set in bytes ({@code VmRSS}), or -1 where /proc is missing. */
  static long rss() {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/self/status"), StandardCharsets.UTF_8)) {
        if (line.startsWith("VmRSS:")) {
          String[] f = line.substring(6).trim().split("\\s+");
          return Long.parseLong(f[0]) * 1024;
        }
      }
    } catch (IOException | RuntimeException e) {
      return -1;
    }
    return -1;
  }
}

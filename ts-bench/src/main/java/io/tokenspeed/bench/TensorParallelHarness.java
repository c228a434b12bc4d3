package io.tokenspeed.bench;

import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.control.ReplicaSecret;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.SharedMemoryCollective;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.scheduler.StorageConfig;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;

/**
 * Tensor parallelism at TP = 2 against TP = 1 on one machine, in one run, ranks as threads of this
 * JVM joined as in production: the shared-memory collective over a file in /dev/shm and the
 * control-plane mesh over loopback TCP.
 *
 * <ol>
 *   <li><b>Agreement per step.</b> A greedy request of {@code --decode-prompt} tokens decodes
 *       {@code --decode-tokens} tokens on a TP = 1 engine ({@code --threads} compute threads) and
 *       on a TP = 2 replica ({@code --threads}/2 each), alternating {@code --repeats} times. Per
 *       round of the replica, each rank's time inside the relay exchange (the round's agreement:
 *       report out, every report in, the agreed round) with storage idle; a TP = 1 engine without
 *       L3 runs no exchange, so that time is what TP adds per step. TPOT of both for reference.
 *   <li><b>All-reduce per layer.</b> {@code SharedMemoryCollective.allReduceSum} of {@code T ×
 *       hidden} floats between two ranks (threads), T = 1, 16, 128, 512, against a memory-bandwidth
 *       bound: each rank writes its T × hidden floats and reads both ranks' (3 × 4 bytes a float),
 *       at the copy bandwidth {@code MemorySegment.copy} reaches on the same bytes in the same run.
 *       A layer runs two.
 *   <li><b>L3 TTFT at TP = 2.</b> A writer replica serves {@code --l3-prompts} prompts of a shared
 *       {@code --prefix}-token prefix and 64 tokens of their own into a memory store (each rank its
 *       own client); a fresh replica then serves them again, restoring the prefix, and a replica
 *       without L3 recomputes them. TTFT is the engine's (submission to the first token).
 * </ol>
 *
 * <pre>
 *   ./mvnw -q -B -pl ts-bench -am package -DskipTests
 *   java --add-modules jdk.incubator.vector --enable-native-access=ALL-UNNAMED \
 *     -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.TensorParallelHarness \
 *     [--model synthetic:llama-100m] [--threads 2] [--decode-prompt 128] [--decode-tokens 96] \
 *     [--repeats 3] [--prefix 8192] [--l3-prompts 3]
 * </pre>
 *
 * Output is Markdown on stdout.
 */
public final class TensorParallelHarness {
  private String model = "synthetic:llama-100m";
  private int threads = 2;
  private int decodePrompt = 128;
  private int decodeTokens = 96;
  private int repeats = 3;
  private int prefix = 8192;
  private int l3Prompts = 3;

  public static void main(String[] args) throws Exception {
    TensorParallelHarness h = new TensorParallelHarness();
    for (int i = 0; i < args.length; i += 2) {
      String v = args[i + 1];
      switch (args[i]) {
        case "--model" -> h.model = v;
        case "--threads" -> h.threads = Integer.parseInt(v);
        case "--decode-prompt" -> h.decodePrompt = Integer.parseInt(v);
        case "--decode-tokens" -> h.decodeTokens = Integer.parseInt(v);
        case "--repeats" -> h.repeats = Integer.parseInt(v);
        case "--prefix" -> h.prefix = Integer.parseInt(v);
        case "--l3-prompts" -> h.l3Prompts = Integer.parseInt(v);
        default -> throw new IllegalArgumentException("unknown option " + args[i]);
      }
    }
    h.run();
  }

  private Path folder;

  private void run() throws Exception {
    long start = System.nanoTime();
    folder = SyntheticCheckpoints.materialize(model, SyntheticCheckpoints.DEFAULT_SEED, DType.F32);
    System.out.printf(
        Locale.ROOT,
        "# Tensor parallelism: TP = 2 vs TP = 1 (%s)%n%n"
            + "Machine: %d cores, JDK %s; compute threads: TP = 1 %d, TP = 2 %d per rank.%n%n",
        model,
        Runtime.getRuntime().availableProcessors(),
        Runtime.version(),
        threads,
        Math.max(1, threads / 2));
    agreement();
    allReduce();
    l3Ttft();
    System.out.printf(Locale.ROOT, "%nWall time %.0f s.%n", (System.nanoTime() - start) / 1e9);
  }

  // ---------------------------------------------------------------- 1. agreement per step

  private void agreement() throws Exception {
    int[] prompt = new SplittableRandom(7).ints(decodePrompt, 0, vocab()).toArray();
    SamplingParams params = SamplingParams.greedy(decodeTokens).withIgnoreEos(true);
    List<Double> tpot1 = new ArrayList<>();
    List<Double> tpot2 = new ArrayList<>();
    List<Long> exchange0 = new ArrayList<>();
    List<Long> exchange1 = new ArrayList<>();
    List<Long> later = new ArrayList<>();
    List<Long> earlier = new ArrayList<>();
    int misaligned = 0;
    int[] ids1 = null;
    int[] ids2 = null;
    try (CausalLm lm = CausalLm.load(folder);
        Engine one =
            Engine.start(
                EngineSettings.of(lm, config(lm, decodePrompt + decodeTokens, threads))
                    .conclude());
        Replica two =
            Replica.start(
                folder, decodePrompt + decodeTokens, Math.max(1, threads / 2), r -> null)) {
      serve(one, prompt, SamplingParams.greedy(8)); // untimed: the compiler
      serve(two.leader(), prompt, SamplingParams.greedy(8));
      for (int i = 0; i < repeats; i++) {
        GenerationResult a = serve(one, prompt, params);
        tpot1.add(a.metrics().tpotNs() / 1e6);
        ids1 = a.tokens();
        two.engines.forEach(Engine::recentExchangeNanos); // drains the record
        GenerationResult b = serve(two.leader(), prompt, params);
        tpot2.add(b.metrics().tpotNs() / 1e6);
        ids2 = b.tokens();
        Thread.sleep(300); // the followers' last rounds
        long[] r0 = two.engines.get(0).recentExchangeNanos();
        long[] r1 = two.engines.get(1).recentExchangeNanos();
        for (long ns : r0) {
          exchange0.add(ns);
        }
        for (long ns : r1) {
          exchange1.add(ns);
        }
        // the same rounds on both ranks, in order: the later rank's wait is the exchange's own
        // cost, the earlier one's also the time it waited for the other (the ranks' skew)
        if (r0.length == r1.length) {
          for (int k = 0; k < r0.length; k++) {
            later.add(Math.min(r0[k], r1[k]));
            earlier.add(Math.max(r0[k], r1[k]));
          }
        } else {
          misaligned++;
        }
      }
    }
    System.out.printf(
        Locale.ROOT,
        "## 1. The round's agreement per step (storage idle)%n%n"
            + "One greedy request: %d prompt tokens, %d generated; %d repeats, alternating; the"
            + " exchange times are every round of the replica's timed runs (decode rounds and the"
            + " idle heartbeats between them).%n%n"
            + "| figure | p50 | p90 | samples |%n|---|---:|---:|---:|%n",
        decodePrompt,
        decodeTokens,
        repeats);
    row("time in the relay exchange per round, rank 0 (µs)", micros(exchange0));
    row("time in the relay exchange per round, rank 1 (µs)", micros(exchange1));
    row("per round, the rank that arrived last (the exchange's own cost, µs)", micros(later));
    row(
        "per round, the rank that arrived first (its cost and the wait for the other, µs)",
        micros(earlier));
    row("TPOT, TP = 1 (ms)", tpot1);
    row("TPOT, TP = 2 (ms)", tpot2);
    System.out.printf(
        Locale.ROOT,
        "%nSame ids at TP = 1 and TP = 2: %s. A TP = 1 engine without L3 runs no exchange: the"
            + " agreement TP adds per step is the exchange time above (target < 100 µs p50)."
            + " Rounds paired by index on the two ranks (%d repeats' records could not be"
            + " paired).%n%n",
        Arrays.equals(ids1, ids2) ? "yes" : "**no**",
        misaligned);
  }

  // ---------------------------------------------------------------- 2. all-reduce

  private void allReduce() throws Exception {
    int hidden;
    try (CausalLm lm = CausalLm.load(folder)) {
      hidden = lm.config().hiddenSize();
    }
    System.out.printf(
        Locale.ROOT,
        "## 2. All-reduce per layer (2 ranks, hidden %d)%n%n"
            + "| tokens | floats | all-reduce p50 µs | p90 µs | bound µs (3 × 4 B a float at the"
            + " copy bandwidth) | copy GB/s | all-reduce / bound | per layer (two) p50 µs |%n"
            + "|---:|---:|---:|---:|---:|---:|---:|---:|%n",
        hidden);
    Path file = shmFile("bench-allreduce");
    int[] tokens = {1, 16, 128, 512};
    int maxFloats = 512 * hidden;
    try {
      SharedMemoryCollective[] ranks = new SharedMemoryCollective[2];
      for (int r = 0; r < 2; r++) {
        ranks[r] = SharedMemoryCollective.open(file, r, 2, maxFloats, Duration.ofSeconds(30));
      }
      ExecutorService pool = Executors.newFixedThreadPool(2);
      try {
        for (int t : tokens) {
          int n = t * hidden;
          int iterations = Math.max(50, 20_000 / t);
          List<Future<long[]>> runs = new ArrayList<>();
          for (int r = 0; r < 2; r++) {
            SharedMemoryCollective c = ranks[r];
            runs.add(
                pool.submit(
                    () -> {
                      float[] data = new float[n];
                      long[] times = new long[iterations];
                      for (int i = 0; i < iterations + 50; i++) {
                        Arrays.fill(data, 1f);
                        long t0 = System.nanoTime();
                        c.allReduceSum(data, 0, n);
                        if (i >= 50) {
                          times[i - 50] = System.nanoTime() - t0;
                        }
                      }
                      return times;
                    }));
          }
          long[] times = runs.get(0).get(10, TimeUnit.MINUTES);
          runs.get(1).get(10, TimeUnit.MINUTES);
          double p50 = percentile(times, 0.5) / 1e3;
          double p90 = percentile(times, 0.9) / 1e3;
          double gbps = copyBandwidth(n);
          double bound = 3.0 * n * 4 / gbps / 1e3;
          System.out.printf(
              Locale.ROOT,
              "| %d | %d | %.1f | %.1f | %.1f | %.1f | %.2f× | %.1f |%n",
              t,
              n,
              p50,
              p90,
              bound,
              gbps,
              p50 / bound,
              2 * p50);
        }
      } finally {
        pool.shutdownNow();
        for (SharedMemoryCollective c : ranks) {
          c.close();
        }
      }
    } finally {
      SharedMemoryCollective.remove(file);
    }
    System.out.println();
  }

  /** GB/s of heap → segment → heap copies of {@code n} floats (best of several passes). */
  private static double copyBandwidth(int n) {
    float[] a = new float[n];
    float[] b = new float[n];
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment s = arena.allocate((long) n * 4, 64);
      long best = Long.MAX_VALUE;
      int passes = Math.max(20, 2_000_000 / Math.max(1, n));
      for (int i = 0; i < passes; i++) {
        long t0 = System.nanoTime();
        MemorySegment.copy(a, 0, s, ValueLayout.JAVA_FLOAT, 0, n);
        MemorySegment.copy(s, ValueLayout.JAVA_FLOAT, 0, b, 0, n);
        best = Math.min(best, System.nanoTime() - t0);
      }
      return 2.0 * n * 4 / best; // bytes per ns = GB/s
    }
  }

  // ---------------------------------------------------------------- 3. L3 TTFT

  private void l3Ttft() throws Exception {
    MemoryStore store = new MemoryStore();
    SplittableRandom random = new SplittableRandom(11);
    int[] shared = random.ints(prefix, 0, vocab()).toArray();
    List<int[]> prompts = new ArrayList<>();
    for (int i = 0; i < l3Prompts; i++) {
      int[] p = Arrays.copyOf(shared, prefix + 64);
      for (int j = prefix; j < p.length; j++) {
        p[j] = random.nextInt(vocab());
      }
      prompts.add(p);
    }
    int need = prefix + 64 + 8 + 128;
    int perRank = Math.max(1, threads / 2);
    List<Double> restored = new ArrayList<>();
    List<Double> recomputed = new ArrayList<>();
    List<Integer> reused = new ArrayList<>();
    boolean same = true;
    List<int[]> want = new ArrayList<>();
    try (Replica writer = Replica.start(folder, need, perRank, r -> l3(store))) {
      serve(writer.leader(), prompts.get(0), SamplingParams.greedy(4)); // writes the prefix
      writer.awaitStorageIdle();
    }
    try (Replica off = Replica.start(folder, need, perRank, r -> null)) {
      for (int[] p : prompts) {
        off.leader().clearCache().get();
        GenerationResult g = serve(off.leader(), p, SamplingParams.greedy(4));
        recomputed.add(g.metrics().ttftNs() / 1e6);
        want.add(g.tokens());
      }
    }
    try (Replica reader = Replica.start(folder, need, perRank, r -> l3(store))) {
      for (int i = 0; i < prompts.size(); i++) {
        reader.leader().clearCache().get();
        GenerationResult g = serve(reader.leader(), prompts.get(i), SamplingParams.greedy(4));
        restored.add(g.metrics().ttftNs() / 1e6);
        reused.add(g.metrics().reusedStorageTokens());
        same &= Arrays.equals(want.get(i), g.tokens());
      }
    }
    double r50 = median(restored);
    double c50 = median(recomputed);
    System.out.printf(
        Locale.ROOT,
        "## 3. L3 TTFT at TP = 2 (%d-token prefix)%n%n"
            + "%d prompts: the shared prefix and 64 tokens of their own, 4 generated; memory store,"
            + " each rank its own client; caches cleared before each request.%n%n"
            + "| cohort | TTFT p50 ms | TTFT per prompt ms | reused from L3 |%n|---|---:|---|---|%n"
            + "| restored (fresh replica) | %.1f | %s | %s |%n"
            + "| recomputed (no L3) | %.1f | %s | 0 |%n%n"
            + "Recompute / restored TTFT (p50): **%.1f×** (target ≥ 20×). Outputs equal: %s.%n",
        prefix,
        prompts.size(),
        r50,
        fmt(restored),
        reused,
        c50,
        fmt(recomputed),
        c50 / r50,
        same ? "yes" : "**no**");
  }

  /** L3 over {@code store} through a client the replica may close (the store stays). */
  private static L3Settings l3(Store store) {
    Store client =
        new ForwardingStore(store) {
          @Override
          public void close() {}
        };
    StorageConfig scheduling =
        StorageConfig.defaults().withMinExtensionTokens(64).withSoftDeadlineMs(2000);
    return new L3Settings(
        client,
        new StorageRuntimeConfig(scheduling, L3ExecutorConfig.defaults()),
        L3Settings.CPU_ATTENTION_BACKEND);
  }

  // ---------------------------------------------------------------- helpers

  /** Prompt ids are drawn below this: the vocabulary, at most 1000. */
  private int vocab() throws Exception {
    try (CausalLm lm = CausalLm.load(folder)) {
      return Math.min(1000, lm.vocabSize());
    }
  }

  private static EngineConfig config(CausalLm lm, int tokens, int computeThreads) {
    return EngineConfig.defaults(Engine.deviceParentsFor(lm, tokens + 64))
        .withComputeThreads(computeThreads);
  }

  private static GenerationResult serve(Engine e, int[] prompt, SamplingParams params)
      throws Exception {
    GenerationResult r = e.submit(prompt, params).result().get(30, TimeUnit.MINUTES);
    if (r.error() != null) {
      throw new IllegalStateException("request failed: " + r.error());
    }
    return r;
  }

  private static Path shmFile(String name) throws Exception {
    Path shm = Path.of("/dev/shm");
    Path dir = Files.isDirectory(shm) ? shm : Path.of(System.getProperty("java.io.tmpdir"));
    return dir.resolve(
        "tokenspeed-" + name + "-" + ProcessHandle.current().pid() + "-" + System.nanoTime());
  }

  /** A TP = 2 replica in this JVM: ranks as threads, the real collective and mesh. */
  private static final class Replica implements AutoCloseable {
    final List<CausalLm> models = new ArrayList<>();
    final List<Engine> engines = new ArrayList<>();
    final List<Collective> collectives = new ArrayList<>();
    Path file;

    static Replica start(Path folder, int tokens, int threadsPerRank, IntFunction<L3Settings> l3)
        throws Exception {
      Replica r = new Replica();
      r.file = shmFile("bench-tp");
      List<InetSocketAddress> addresses = new ArrayList<>();
      for (int i = 0; i < 2; i++) {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
          addresses.add(new InetSocketAddress(InetAddress.getLoopbackAddress(), s.getLocalPort()));
        }
      }
      ReplicaSecret secret = ReplicaSecret.generate();
      ExecutorService starts = Executors.newFixedThreadPool(2);
      try {
        for (int rank = 0; rank < 2; rank++) {
          Collective c =
              SharedMemoryCollective.open(r.file, rank, 2, 1 << 20, Duration.ofSeconds(60));
          r.collectives.add(c);
          r.models.add(CausalLm.load(folder, "bench", ModelIdentity.DEFAULT_WEIGHT_VERSION, c));
        }
        List<Future<Engine>> started = new ArrayList<>();
        for (int rank = 0; rank < 2; rank++) {
          int k = rank;
          CausalLm lm = r.models.get(k);
          started.add(
              starts.submit(
                  () ->
                      Engine.start(
                          EngineSettings.of(lm, config(lm, tokens, threadsPerRank))
                              .l3(l3.apply(k))
                              .control(
                                  ControlConfig.of(0, k, addresses, secret)
                                      .withTimeouts(60_000, 120_000))
                              .conclude())));
        }
        for (Future<Engine> f : started) {
          r.engines.add(f.get(5, TimeUnit.MINUTES));
        }
        return r;
      } catch (Exception | Error e) {
        r.close();
        throw e;
      } finally {
        starts.shutdownNow();
      }
    }

    Engine leader() {
      return engines.get(0);
    }

    void awaitStorageIdle() throws Exception {
      long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(2);
      for (Engine e : engines) {
        while (e.metrics().storage().map(s -> s.pending()).orElse(false)
            && System.nanoTime() < deadline) {
          Thread.sleep(20);
        }
      }
      Thread.sleep(1500); // a snapshot is at most a second old
    }

    @Override
    public void close() throws Exception {
      for (Engine e : engines) {
        e.close();
      }
      for (CausalLm m : models) {
        m.close();
      }
      for (Collective c : collectives) {
        c.close();
      }
      if (file != null) {
        SharedMemoryCollective.remove(file);
      }
    }
  }

  private static List<Double> micros(List<Long> ns) {
    List<Double> out = new ArrayList<>();
    for (long n : ns) {
      out.add(n / 1e3);
    }
    return out;
  }

  private static void row(String name, List<Double> values) {
    double[] v = values.stream().mapToDouble(Double::doubleValue).sorted().toArray();
    System.out.printf(
        Locale.ROOT,
        "| %s | %.1f | %.1f | %d |%n",
        name,
        v.length == 0 ? Double.NaN : v[(int) Math.min(v.length - 1, Math.floor(0.5 * v.length))],
        v.length == 0 ? Double.NaN : v[(int) Math.min(v.length - 1, Math.floor(0.9 * v.length))],
        v.length);
  }

  private static double percentile(long[] values, double q) {
    long[] v = values.clone();
    Arrays.sort(v);
    return v[(int) Math.min(v.length - 1, Math.floor(q * v.length))];
  }

  private static double median(List<Double> values) {
    double[] v = values.stream().mapToDouble(Double::doubleValue).sorted().toArray();
    return v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
  }

  private static String fmt(List<Double> values) {
    StringBuilder b = new StringBuilder();
    for (double d : values) {
      b.append(b.isEmpty() ? "" : ", ").append(String.format(Locale.ROOT, "%.0f", d));
    }
    return b.toString();
  }
}

package io.tokenspeed.bench;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.checkpoint.Checkpoint;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.TensorShape;
import io.tokenspeed.model.config.DecoderDims;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.MatMul;
import io.tokenspeed.model.kernel.PackedMatrix;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;
import org.HdrHistogram.Histogram;

/**
 * The CPU forward pass of {@code ts-model} against the machine's peak, in the same run.
 *
 * <p><b>Peak.</b> One platform thread per core runs a fixed number of iterations of 12 independent
 * {@code FloatVector.fma} chains of the preferred species (enough in flight to keep two FMA units
 * busy); GFLOP/s counts 2 flops per lane per FMA, best of {@code --peak-repeats} after one untimed
 * repeat. It is measured before and after the models and the higher of the two is the denominator
 * of every "% of peak".
 *
 * <p><b>Prefill.</b> For each model (synthetic, F32) and prompt length T: random token ids, a KV
 * cache of 16-token blocks, the prompt fed in chunks of {@code --chunk} tokens (logits for the last
 * token of each chunk only, as an engine asks), wall time of the whole prompt. One untimed warm-up
 * prompt of {@code --warmup} tokens runs first. Matmul FLOPs are {@code 2·T·W + 2·chunks·V·H},
 * where W is the sum of rows × cols of every layer's q/k/v/o/gate/up/down matrix, V·H the LM head
 * (only the chunk's last row gets logits). Attention FLOPs (QKᵀ and PV, causal) are {@code
 * 2·heads·headDim·layers·T·(T+1)} and are reported apart.
 *
 * <p><b>Prefill matmuls alone.</b> For each model, every 2-D weight of decoder layer 0 (q, k, v, o,
 * gate, up, down), packed as the model packs it, multiplied by {@code --chunk} random rows with
 * {@code MatMul.apply} on the same pool: two untimed calls, then {@code --matmul-repeats} timed
 * calls of the whole set. GFLOP/s = {@code 2·rows·Σ out·in} per set over the time of the set; every
 * layer of these models has the same shapes, so this is the rate of the prefill's matrix multiplies
 * without the attention, norms and activations between them.
 *
 * <p><b>Decode.</b> B requests (1 and 16 by default) each prefill {@code --decode-prompt} tokens,
 * take 4 untimed decode steps, then {@code --decode-steps} timed steps of one token per request per
 * step (greedy: the next token is the argmax of the step's logits), all B in one forward batch.
 *
 * <pre>
 *   ./mvnw -q -B -pl ts-bench -am package -DskipTests
 *   java --add-modules jdk.incubator.vector --enable-native-access=ALL-UNNAMED \
 *     -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.ModelCpuHarness \
 *     [--model synthetic:llama-100m=1024,8192,32768] [--model synthetic:qwen2-0.5b=1024,8192] \
 *     [--chunk 512] [--warmup 1024] [--decode-prompt 128] [--decode-steps 32] [--batches 1,16] \
 *     [--peak-iterations 40000000] [--peak-repeats 5] [--threads N] [--matmul-repeats 10]
 * </pre>
 *
 * Without {@code --model} it runs llama-100m and qwen2-0.5b at 1024 and 8192 tokens. Output is
 * Markdown on stdout.
 */
public final class ModelCpuHarness {

  private static final int BLOCK_TOKENS = 16;
  private static final int PREFIX_GRANULARITY = 64;
  private static final int DECODE_WARM_STEPS = 4;

  private ModelCpuHarness() {}

  // ---------------------------------------------------------------- peak

  private static final VectorSpecies<Float> S = FloatVector.SPECIES_PREFERRED;

  /** One thread's FMA chains; returns a value derived from every accumulator. */
  private static float fmaLoop(long iterations) {
    FloatVector b = FloatVector.broadcast(S, 0.999999f);
    FloatVector c = FloatVector.broadcast(S, 1e-6f);
    FloatVector a0 = FloatVector.broadcast(S, 0.1f);
    FloatVector a1 = FloatVector.broadcast(S, 0.2f);
    FloatVector a2 = FloatVector.broadcast(S, 0.3f);
    FloatVector a3 = FloatVector.broadcast(S, 0.4f);
    FloatVector a4 = FloatVector.broadcast(S, 0.5f);
    FloatVector a5 = FloatVector.broadcast(S, 0.6f);
    FloatVector a6 = FloatVector.broadcast(S, 0.7f);
    FloatVector a7 = FloatVector.broadcast(S, 0.8f);
    FloatVector a8 = FloatVector.broadcast(S, 0.9f);
    FloatVector a9 = FloatVector.broadcast(S, 1.1f);
    FloatVector a10 = FloatVector.broadcast(S, 1.2f);
    FloatVector a11 = FloatVector.broadcast(S, 1.3f);
    for (long i = 0; i < iterations; i++) {
      a0 = a0.fma(b, c);
      a1 = a1.fma(b, c);
      a2 = a2.fma(b, c);
      a3 = a3.fma(b, c);
      a4 = a4.fma(b, c);
      a5 = a5.fma(b, c);
      a6 = a6.fma(b, c);
      a7 = a7.fma(b, c);
      a8 = a8.fma(b, c);
      a9 = a9.fma(b, c);
      a10 = a10.fma(b, c);
      a11 = a11.fma(b, c);
    }
    FloatVector sum =
        a0.add(a1).add(a2).add(a3).add(a4).add(a5).add(a6).add(a7).add(a8).add(a9).add(a10);
    return sum.add(a11).lane(0);
  }

  private static final int FMA_CHAINS = 12;

  /** GFLOP/s of one repeat: {@code threads} threads start together; wall time until all end. */
  private static double peakOnce(int threads, long iterations) throws InterruptedException {
    CountDownLatch ready = new CountDownLatch(threads);
    CountDownLatch go = new CountDownLatch(1);
    CountDownLatch done = new CountDownLatch(threads);
    float[] sink = new float[threads];
    List<Thread> ts = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      int id = t;
      Thread th =
          Thread.ofPlatform()
              .name("peak-" + t)
              .start(
                  () -> {
                    ready.countDown();
                    try {
                      go.await();
                    } catch (InterruptedException e) {
                      Thread.currentThread().interrupt();
                      return;
                    }
                    sink[id] = fmaLoop(iterations);
                    done.countDown();
                  });
      ts.add(th);
    }
    ready.await();
    long t0 = System.nanoTime();
    go.countDown();
    done.await();
    long ns = System.nanoTime() - t0;
    for (Thread th : ts) {
      th.join();
    }
    float check = 0;
    for (float f : sink) {
      check += f;
    }
    if (!Float.isFinite(check)) {
      throw new IllegalStateException("peak loop diverged: " + check);
    }
    double flops = 2.0 * threads * iterations * FMA_CHAINS * S.length();
    return flops / ns;
  }

  private static double peak(int threads, long iterations, int repeats)
      throws InterruptedException {
    peakOnce(threads, iterations / 4); // compile the loop
    double best = 0;
    for (int r = 0; r < repeats; r++) {
      best = Math.max(best, peakOnce(threads, iterations));
    }
    return best;
  }

  // ---------------------------------------------------------------- FLOP counts

  /** Sum of rows × cols of the matrices one token multiplies in the decoder layers. */
  static long layerWeights(DecoderDims d) {
    long h = d.hiddenSize();
    long q = (long) d.numHeads() * d.headDim();
    long kv = (long) d.numKvHeads() * d.headDim();
    long perLayer = h * q + 2 * h * kv + q * h + 3 * h * d.intermediateSize();
    return perLayer * d.numLayers();
  }

  /** The same sum taken from the checkpoint's tensor list (2-D tensors inside the layers). */
  private static long layerWeightsFromTensors(CausalLm model) {
    long sum = 0;
    for (TensorShape t : CausalLm.expectedTensors(model.config())) {
      if (t.shape().length == 2 && t.name().contains("layers.")) {
        sum += (long) t.shape()[0] * t.shape()[1];
      }
    }
    return sum;
  }

  static double attentionFlops(DecoderDims d, long tokens) {
    return 2.0 * d.numHeads() * d.headDim() * d.numLayers() * tokens * (tokens + 1);
  }

  // ---------------------------------------------------------------- model runs

  private record MatmulRow(String model, int rows, long weights, double seconds, int repeats) {
    double gflops() {
      return 2.0 * rows * weights * repeats / seconds / 1e9;
    }
  }

  /** The layer-0 matrices of {@code folder}'s checkpoint times {@code rows} random rows. */
  private static MatmulRow matmuls(
      String name, Path folder, int rows, int repeats, ComputePool pool) {
    try (Checkpoint ckpt = Checkpoint.open(folder)) {
      List<PackedMatrix> ws = new ArrayList<>();
      for (var t : ckpt.tensors().entrySet()) {
        if (t.getKey().contains("layers.0.") && t.getValue().rank() == 2) {
          ws.add(PackedMatrix.of(t.getValue()));
        }
      }
      SplittableRandom rnd = new SplittableRandom(rows);
      long weights = 0;
      List<float[]> xs = new ArrayList<>();
      List<float[]> ys = new ArrayList<>();
      for (PackedMatrix w : ws) {
        weights += (long) w.dim(0) * w.dim(1);
        float[] x = new float[rows * w.dim(1)];
        for (int i = 0; i < x.length; i++) {
          x[i] = (float) rnd.nextDouble(-1, 1);
        }
        xs.add(x);
        ys.add(new float[rows * w.dim(0)]);
      }
      long start = 0;
      for (int rep = -2; rep < repeats; rep++) {
        if (rep == 0) {
          start = System.nanoTime();
        }
        for (int i = 0; i < ws.size(); i++) {
          MatMul.apply(pool, xs.get(i), rows, ws.get(i), null, ys.get(i));
        }
      }
      return new MatmulRow(name, rows, weights, (System.nanoTime() - start) / 1e9, repeats);
    }
  }

  private record PrefillRow(
      String model,
      int tokens,
      int chunks,
      double seconds,
      double matmulFlops,
      double attnFlops,
      double firstChunkMs,
      double lastChunkMs) {}

  private record DecodeRow(
      String model, int batch, int steps, double seconds, Histogram stepNs, double weightBytes) {}

  /** A KV cache with sequential block tables handed out from block 1. */
  static int[] randomTokens(int n, int vocab, long seed) {
    Random r = new Random(seed);
    int[] ids = new int[n];
    for (int i = 0; i < n; i++) {
      ids[i] = r.nextInt(vocab);
    }
    return ids;
  }

  /** Prefills {@code ids}; returns nanoseconds of each chunk. */
  static long[] prefill(
      CausalLm model, BenchKv kv, int[] ids, int[][] table, int chunk, ComputePool pool) {
    int chunks = Math.ceilDiv(ids.length, chunk);
    long[] ns = new long[chunks];
    for (int c = 0; c < chunks; c++) {
      int start = c * chunk;
      int end = Math.min(ids.length, start + chunk);
      long t0 = System.nanoTime();
      ForwardResult r =
          model.forward(
              ForwardBatch.of(
                  new ForwardRequest(Arrays.copyOfRange(ids, start, end), start, table, false)),
              kv.cache,
              pool);
      ns[c] = System.nanoTime() - t0;
      if (!Float.isFinite(r.last(0)[0])) {
        throw new IllegalStateException("non-finite logit at chunk " + c);
      }
    }
    return ns;
  }

  /** The first index of the largest value (greedy decoding in the harnesses). */
  static int argmax(float[] v) {
    int best = 0;
    for (int i = 1; i < v.length; i++) {
      if (v[i] > v[best]) {
        best = i;
      }
    }
    return best;
  }

  private static DecodeRow decode(
      String name, CausalLm model, BenchKv kv, int batch, int prompt, int steps, ComputePool pool) {
    kv.reset();
    int vocab = model.vocabSize();
    int total = prompt + DECODE_WARM_STEPS + steps;
    int[][][] tables = new int[batch][][];
    int[] next = new int[batch];
    for (int b = 0; b < batch; b++) {
      tables[b] = kv.table(total);
      int[] ids = randomTokens(prompt, vocab, 1_000 + b);
      ForwardResult r =
          model.forward(
              ForwardBatch.of(new ForwardRequest(ids, 0, tables[b], false)), kv.cache, pool);
      next[b] = argmax(r.last(0));
    }
    Histogram h = new Histogram(3);
    long timedNs = 0;
    for (int s = 0; s < DECODE_WARM_STEPS + steps; s++) {
      ForwardRequest[] reqs = new ForwardRequest[batch];
      for (int b = 0; b < batch; b++) {
        reqs[b] = new ForwardRequest(new int[] {next[b]}, prompt + s, tables[b], false);
      }
      long t0 = System.nanoTime();
      ForwardResult r = model.forward(ForwardBatch.of(reqs), kv.cache, pool);
      for (int b = 0; b < batch; b++) {
        next[b] = argmax(r.last(b));
      }
      long ns = System.nanoTime() - t0;
      if (s >= DECODE_WARM_STEPS) {
        h.recordValue(ns);
        timedNs += ns;
      }
    }
    DecoderDims d = model.config().dims();
    double weightBytes = 4.0 * (layerWeights(d) + (double) d.vocabSize() * d.hiddenSize());
    return new DecodeRow(name, batch, steps, timedNs / 1e9, h, weightBytes);
  }

  // ---------------------------------------------------------------- main

  static String cpuModel() {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"))) {
        if (line.startsWith("model name")) {
          return line.substring(line.indexOf(':') + 1).trim();
        }
      }
    } catch (IOException | RuntimeException e) {
      // not Linux: fall through
    }
    return System.getProperty("os.arch");
  }

  public static void main(String[] args) throws Exception {
    Map<String, int[]> models = new LinkedHashMap<>();
    int chunk = 512;
    int warmup = 1024;
    int decodePrompt = 128;
    int decodeSteps = 32;
    int[] batches = {1, 16};
    int matmulRepeats = 10;
    long peakIterations = 40_000_000L;
    int peakRepeats = 5;
    int threads = Runtime.getRuntime().availableProcessors();
    for (Map.Entry<String, String> flag : BenchFlags.of(args)) {
      String a = flag.getKey();
      String v = flag.getValue();
      switch (a) {
        case "--model" -> {
          int eq = v.lastIndexOf('=');
          if (eq < 0) {
            throw new IllegalArgumentException("--model " + v + ": expected NAME=T1,T2,...");
          }
          models.put(v.substring(0, eq), ints(v.substring(eq + 1)));
        }
        case "--chunk" -> chunk = Integer.parseInt(v);
        case "--warmup" -> warmup = Integer.parseInt(v);
        case "--decode-prompt" -> decodePrompt = Integer.parseInt(v);
        case "--decode-steps" -> decodeSteps = Integer.parseInt(v);
        case "--batches" -> batches = ints(v);
        case "--matmul-repeats" -> matmulRepeats = Integer.parseInt(v);
        case "--peak-iterations" -> peakIterations = Long.parseLong(v);
        case "--peak-repeats" -> peakRepeats = Integer.parseInt(v);
        case "--threads" -> threads = Integer.parseInt(v);
        default -> throw new IllegalArgumentException("unknown flag " + a);
      }
    }
    if (models.isEmpty()) {
      models.put("synthetic:llama-100m", new int[] {1024, 8192});
      models.put("synthetic:qwen2-0.5b", new int[] {1024, 8192});
    }

    System.out.printf(
        Locale.ROOT,
        "JDK %s (%s), CPU %s, %d cores visible, %d compute threads, species %s (%d lanes)%n",
        Runtime.version(),
        System.getProperty("java.vm.name"),
        cpuModel(),
        Runtime.getRuntime().availableProcessors(),
        threads,
        S,
        S.length());
    System.out.println("args: " + String.join(" ", args));
    System.out.printf(
        Locale.ROOT,
        "chunk %d tokens, blocks of %d tokens, warm-up prompt %d tokens%n%n",
        chunk,
        BLOCK_TOKENS,
        warmup);

    double peakBefore = peak(threads, peakIterations, peakRepeats);
    System.out.printf(Locale.ROOT, "peak before models: %.1f GFLOP/s%n", peakBefore);

    List<MatmulRow> matmuls = new ArrayList<>();
    List<PrefillRow> prefills = new ArrayList<>();
    List<DecodeRow> decodes = new ArrayList<>();
    Map<String, DecoderDims> dims = new LinkedHashMap<>();
    try (ComputePool pool = ComputePool.ofThreads(threads)) {
      for (var e : models.entrySet()) {
        String name = e.getKey();
        long t0 = System.nanoTime();
        Path folder =
            SyntheticCheckpoints.materialize(name, SyntheticCheckpoints.DEFAULT_SEED, DType.F32);
        try (CausalLm model = CausalLm.load(folder)) {
          DecoderDims d = model.config().dims();
          dims.put(name, d);
          long w = layerWeights(d);
          long wt = layerWeightsFromTensors(model);
          if (w != wt) {
            throw new IllegalStateException(
                name + ": layer matrices " + w + " from dims but " + wt + " from tensors");
          }
          System.out.printf(
              Locale.ROOT,
              "%s: materialized and loaded in %.1f s; layer matrices %,d weights, LM head %,d%n",
              name,
              (System.nanoTime() - t0) / 1e9,
              w,
              (long) d.vocabSize() * d.hiddenSize());
          MatmulRow mr = matmuls(name, folder, chunk, matmulRepeats, pool);
          matmuls.add(mr);
          System.out.printf(
              Locale.ROOT,
              "%s: layer-0 matmuls x %d rows, %d repeats in %.2f s: %.1f GFLOP/s%n",
              name,
              chunk,
              matmulRepeats,
              mr.seconds(),
              mr.gflops());
          int maxT = Math.max(warmup, Arrays.stream(e.getValue()).max().orElse(0));
          int decodeBlocks =
              Arrays.stream(batches).max().orElse(1)
                  * Math.ceilDiv(decodePrompt + DECODE_WARM_STEPS + decodeSteps, BLOCK_TOKENS);
          try (BenchKv kv =
              new BenchKv(
                  model.cacheLayout(PREFIX_GRANULARITY, BLOCK_TOKENS),
                  Math.max(Math.ceilDiv(maxT, BLOCK_TOKENS), decodeBlocks) + 1)) {
            kv.reset();
            long w0 = System.nanoTime();
            prefill(
                model, kv, randomTokens(warmup, d.vocabSize(), 7), kv.table(warmup), chunk, pool);
            System.out.printf(
                Locale.ROOT,
                "%s: warm-up prefill of %d tokens %.1f s%n",
                name,
                warmup,
                (System.nanoTime() - w0) / 1e9);
            for (int tokens : e.getValue()) {
              kv.reset();
              int[] ids = randomTokens(tokens, d.vocabSize(), tokens);
              int[][] table = kv.table(tokens);
              long[] ns = prefill(model, kv, ids, table, chunk, pool);
              long sum = Arrays.stream(ns).sum();
              int chunks = ns.length;
              double mm = 2.0 * tokens * w + 2.0 * chunks * d.vocabSize() * d.hiddenSize();
              PrefillRow row =
                  new PrefillRow(
                      name,
                      tokens,
                      chunks,
                      sum / 1e9,
                      mm,
                      attentionFlops(d, tokens),
                      ns[0] / 1e6,
                      ns[chunks - 1] / 1e6);
              prefills.add(row);
              System.out.printf(
                  Locale.ROOT,
                  "%s: prefill %d tokens in %.2f s (first chunk %.0f ms, last %.0f ms)%n",
                  name,
                  tokens,
                  row.seconds(),
                  row.firstChunkMs(),
                  row.lastChunkMs());
            }
            for (int b : batches) {
              DecodeRow r = decode(name, model, kv, b, decodePrompt, decodeSteps, pool);
              decodes.add(r);
              System.out.printf(
                  Locale.ROOT,
                  "%s: decode batch %d, %d steps in %.2f s%n",
                  name,
                  b,
                  decodeSteps,
                  r.seconds());
            }
          }
        }
      }
    }

    double peakAfter = peak(threads, peakIterations, peakRepeats);
    double peak = Math.max(peakBefore, peakAfter);
    System.out.printf(Locale.ROOT, "peak after models: %.1f GFLOP/s%n%n", peakAfter);

    System.out.printf(
        Locale.ROOT,
        "### Peak%n%n| | GFLOP/s |%n|---|---:|%n| before the models | %.1f |%n"
            + "| after the models | %.1f |%n| denominator (higher) | %.1f |%n%n",
        peakBefore,
        peakAfter,
        peak);

    System.out.println("### Prefill matmuls alone (F32, layer 0's matrices × " + chunk + " rows)");
    System.out.println();
    System.out.println("| model | rows | weights | repeats | s | GFLOP/s | % of peak |");
    System.out.println("|---|---:|---:|---:|---:|---:|---:|");
    for (MatmulRow r : matmuls) {
      System.out.printf(
          Locale.ROOT,
          "| %s | %d | %,d | %d | %.2f | %.1f | %.1f%% |%n",
          r.model().substring(SyntheticCheckpoints.PREFIX.length()),
          r.rows(),
          r.weights(),
          r.repeats(),
          r.seconds(),
          r.gflops(),
          100 * r.gflops() / peak);
    }
    System.out.println();
    System.out.println("### Prefill (F32, chunks of " + chunk + " tokens)");
    System.out.println();
    System.out.println(
        "| model | tokens | wall s | tokens/s | µs/token | matmul GFLOP | matmul GFLOP/s |"
            + " % of peak | attention GFLOP | attn / matmul FLOPs | first chunk ms |"
            + " last chunk ms | first-chunk matmul % of peak |");
    System.out.println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (PrefillRow r : prefills) {
      double gf = r.matmulFlops() / r.seconds() / 1e9;
      DecoderDims d = dims.get(r.model());
      int firstT = Math.min(chunk, r.tokens());
      double firstMm = 2.0 * firstT * layerWeights(d) + 2.0 * d.vocabSize() * d.hiddenSize();
      double firstGf = firstMm / (r.firstChunkMs() / 1e3) / 1e9;
      System.out.printf(
          Locale.ROOT,
          "| %s | %d | %.2f | %.1f | %.0f | %.1f | %.1f | %.1f%% | %.1f | %.2f | %.0f | %.0f |"
              + " %.1f%% |%n",
          r.model().substring(SyntheticCheckpoints.PREFIX.length()),
          r.tokens(),
          r.seconds(),
          r.tokens() / r.seconds(),
          r.seconds() * 1e6 / r.tokens(),
          r.matmulFlops() / 1e9,
          gf,
          100 * gf / peak,
          r.attnFlops() / 1e9,
          r.attnFlops() / r.matmulFlops(),
          r.firstChunkMs(),
          r.lastChunkMs(),
          100 * firstGf / peak);
    }
    System.out.println();
    System.out.println(
        "### Decode (F32, prompt "
            + decodePrompt
            + " tokens per request, "
            + decodeSteps
            + " timed steps)");
    System.out.println();
    System.out.println(
        "| model | batch | tokens/s | step p50 ms | step p99 ms | weight GB/s (F32, once per step)"
            + " | matmul GFLOP/s | % of peak |");
    System.out.println("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (DecodeRow r : decodes) {
      DecoderDims d = dims.get(r.model());
      double tokens = (double) r.batch() * r.steps();
      double mm = 2.0 * tokens * (layerWeights(d) + (double) d.vocabSize() * d.hiddenSize());
      double gf = mm / r.seconds() / 1e9;
      System.out.printf(
          Locale.ROOT,
          "| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f%% |%n",
          r.model().substring(SyntheticCheckpoints.PREFIX.length()),
          r.batch(),
          tokens / r.seconds(),
          r.stepNs().getValueAtPercentile(50) / 1e6,
          r.stepNs().getValueAtPercentile(99) / 1e6,
          r.weightBytes() * r.steps() / r.seconds() / 1e9,
          gf,
          100 * gf / peak);
    }
  }

  static int[] ints(String csv) {
    return Arrays.stream(csv.split(",")).map(String::trim).mapToInt(Integer::parseInt).toArray();
  }
}

package io.tokenspeed.bench;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.EngineStats;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.engine.RequestMetrics;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The engine's time to first token on a repeated long prompt (cold, full Host hit, full Device hit)
 * and its decode time per output token against the bare forward pass, in one run.
 *
 * <p><b>memcpy.</b> {@code MemorySegment.copy} between two off-heap segments of {@code --copy-mib}
 * MiB, in pieces of the layout's bytes per block at consecutive offsets (the copy thread's unit),
 * after one untimed pass; GB/s (10⁹ bytes) of the best of {@code --copy-repeats}.
 *
 * <p><b>TTFT.</b> Every engine has P = 64, 16-token blocks, a 512-token budget and one request of a
 * seeded random prompt of {@code --prompt} tokens with {@code max_tokens} 1; TTFT is the engine's
 * {@code RequestMetrics.ttftNs} (submission to the first token). The default prompt is 8193 tokens:
 * an 8192-token (128-page) prefix and one more token, so that a full hit reuses every page and
 * computes only the token whose logits give the first output token (a hit reuses at most {@code
 * ⌊(T−1)/P⌋·P} tokens: some token must be computed). A throwaway engine first serves a cold {@code
 * --warmup}-token request with 8 output tokens (JIT). Engine A never demotes and its Device holds
 * two such requests: the prompt cold, then again {@code --hit-repeats} times (full Device hits).
 * Engine B demotes every cached Device block ({@code demoteBelowFreeParents = deviceParents}): the
 * prompt cold, then {@code --hit-repeats} times again, each once {@code stats()} shows Host blocks,
 * no cached Device block and no active request after the previous request ended (full Host hits:
 * the reused tokens are loaded by H2D into fresh Device blocks). For each Host hit the copy
 * thread's bytes and copy time between the snapshots before and after it are reported ({@code
 * EngineStats.copiedBytes/copyNanos}); they must equal its H2D bytes. The uncomputed tail ({@code T
 * − hit} tokens) is timed apart through the bare {@code CausalLm.forward} on a {@code KvCache} of
 * the same shape (its KV contents are zeros: the work does not depend on them), one untimed call
 * then {@code --tail-repeats} timed. Hit figures are medians over the repeats.
 *
 * <p><b>Decode.</b> For each batch B: B seeded random prompts of {@code --decode-prompt} tokens,
 * greedy, {@code --decode-tokens} output tokens. Bare: each prompt prefilled alone on a {@code
 * KvCache}, then {@code decode-tokens − 1} steps of one token per request, all B in one forward
 * batch, argmax per request; ms per step over those steps. Engine: one engine whose budget takes
 * every prompt in one round and that never demotes; a cold 256-token request with one output token
 * is submitted first and the B requests 50 ms later, while the loop computes its prefill, so that
 * the next round admits all of them together (they then decode in lockstep: the output reports the
 * spread of their first-token times). The engine's time per output token is {@code
 * RequestMetrics.tpotNs} (first to last token over {@code decode-tokens − 1}), the median over the
 * B requests. The two alternate {@code --repeats} times per batch and their medians are compared
 * (engine / bare − 1: this includes the run-to-run noise of a shared machine). The loop's own
 * overhead is measured directly as well: from {@code EngineStats.roundNanos/forwardNanos} over the
 * decode rounds (those after the round that produced the first tokens), the rounds' time outside
 * the model's forward pass (scheduler, block tables, sampling, streaming, stats) divided by the
 * time inside it; the target (&lt; 5 %) applies to its median over the repeats.
 *
 * <pre>
 *   ./mvnw -q -B -pl ts-bench -am package -DskipTests
 *   java --add-modules jdk.incubator.vector --enable-native-access=ALL-UNNAMED \
 *     -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.EngineHarness \
 *     [--model synthetic:llama-100m] [--prompt 8193] [--warmup 1024] [--seed 42] \
 *     [--copy-mib 256] [--copy-repeats 5] [--hit-repeats 5] [--tail-repeats 5] \
 *     [--decode-prompt 128] [--decode-tokens 64] [--batches 1,16] [--repeats 5] [--threads N]
 * </pre>
 *
 * Output is Markdown on stdout.
 */
public final class EngineHarness {

  private static final int P = 64;
  private static final int BG = 16;
  private static final int TOKEN_BUDGET = 512;
  private static final int HEADROOM_TOKENS = 64;
  private static final int BLOCKER_TOKENS = 256;
  private static final long BLOCKER_LEAD_MS = 50;
  private static final long STATE_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(120);

  private EngineHarness() {}

  // ---------------------------------------------------------------- memcpy

  private record CopyRun(long pieceBytes, long pieces, double[] gbps) {
    double best() {
      return Arrays.stream(gbps).max().orElse(0);
    }
  }

  private static CopyRun memcpy(long totalBytes, long pieceBytes, int repeats) {
    long pieces = totalBytes / pieceBytes;
    long bytes = pieces * pieceBytes;
    double[] gbps = new double[repeats];
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment src = arena.allocate(bytes, 64);
      MemorySegment dst = arena.allocate(bytes, 64);
      src.fill((byte) 1);
      for (int r = -1; r < repeats; r++) {
        long t0 = System.nanoTime();
        for (long i = 0; i < pieces; i++) {
          MemorySegment.copy(src, i * pieceBytes, dst, i * pieceBytes, pieceBytes);
        }
        long ns = System.nanoTime() - t0;
        if (r >= 0) {
          gbps[r] = (double) bytes / ns;
        }
      }
      if (dst.get(ValueLayout.JAVA_BYTE, bytes - 1) != 1) {
        throw new IllegalStateException("memcpy check failed");
      }
    }
    return new CopyRun(pieceBytes, pieces, gbps);
  }

  // ---------------------------------------------------------------- engine requests

  private static EngineConfig config(
      int deviceParents, double hostRatio, int budget, int maxRunning, int demote, int threads) {
    return new EngineConfig(
        P, BG, deviceParents, hostRatio, budget, maxRunning, demote, threads, 1024);
  }

  private static RequestMetrics serve(Engine e, int[] prompt, int maxTokens, String what)
      throws Exception {
    GenerationResult r = e.submit(prompt, SamplingParams.greedy(maxTokens)).result().get();
    if (r.failure().isPresent()) {
      throw new IllegalStateException(what + " failed: " + r.error());
    }
    if (r.tokens().length != maxTokens) {
      throw new IllegalStateException(
          what + ": " + r.tokens().length + " tokens, expected " + maxTokens);
    }
    return r.metrics();
  }

  /**
   * Waits for the stats of a round after which {@code e} has ended {@code ended} requests, serves
   * none, and has moved every cached Device block to the Host. (A request's future completes inside
   * its last round, before that round publishes its stats: only the ended count tells a snapshot
   * that shows what the completion released from an earlier one.)
   */
  private static EngineStats awaitDemoted(Engine e, long ended) throws InterruptedException {
    long deadline = System.nanoTime() + STATE_TIMEOUT_NS;
    while (true) {
      EngineStats s = e.stats();
      if (s.endedRequests() >= ended
          && s.activeRequests() == 0
          && s.hostCachedBlocks() > 0
          && s.deviceCachedBlocks() == 0) {
        return s;
      }
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("the Device blocks were not demoted in time: " + s);
      }
      Thread.sleep(2);
    }
  }

  /** One full Host hit: its metrics and what the copy thread did between the two snapshots. */
  private record HostHit(RequestMetrics m, long copiedBytes, long copyNanos) {}

  private static double median(double[] xs) {
    double[] s = xs.clone();
    Arrays.sort(s);
    int n = s.length;
    return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  }

  private static String list(double[] xs) {
    StringBuilder b = new StringBuilder();
    for (double x : xs) {
      b.append(b.isEmpty() ? "" : ", ").append(String.format(Locale.ROOT, "%.1f", x));
    }
    return b.toString();
  }

  // ---------------------------------------------------------------- bare forward

  /**
   * ns of each timed forward of {@code prompt[from..]} over a cache holding {@code from} tokens.
   */
  private static long[] tailForward(
      CausalLm model, CacheLayout layout, int[] prompt, int from, int repeats, ComputePool pool) {
    try (BenchKv kv = new BenchKv(layout, Math.ceilDiv(prompt.length, BG) + 1)) {
      int[][] table = kv.table(prompt.length);
      int[] ids = Arrays.copyOfRange(prompt, from, prompt.length);
      long[] ns = new long[repeats];
      for (int r = -1; r < repeats; r++) {
        long t0 = System.nanoTime();
        ForwardResult out =
            model.forward(
                ForwardBatch.of(new ForwardRequest(ids, from, table, false)), kv.cache, pool);
        int token = ModelCpuHarness.argmax(out.last(0));
        long t = System.nanoTime() - t0;
        if (token < 0) {
          throw new IllegalStateException("no token");
        }
        if (r >= 0) {
          ns[r] = t;
        }
      }
      return ns;
    }
  }

  /** Bare decode: returns ms per step and fills {@code tokens[b]} with each request's output. */
  private static double bareDecode(
      CausalLm model,
      CacheLayout layout,
      int[][] prompts,
      int outTokens,
      int[][] tokens,
      ComputePool pool) {
    int batch = prompts.length;
    int perRequest = prompts[0].length + outTokens;
    try (BenchKv kv = new BenchKv(layout, batch * Math.ceilDiv(perRequest, BG) + 1)) {
      int[][][] tables = new int[batch][][];
      int[] next = new int[batch];
      for (int b = 0; b < batch; b++) {
        tables[b] = kv.table(perRequest);
        ForwardResult r =
            model.forward(
                ForwardBatch.of(new ForwardRequest(prompts[b], 0, tables[b], false)),
                kv.cache,
                pool);
        next[b] = ModelCpuHarness.argmax(r.last(0));
        tokens[b][0] = next[b];
      }
      int steps = outTokens - 1;
      long t0 = System.nanoTime();
      for (int s = 0; s < steps; s++) {
        ForwardRequest[] reqs = new ForwardRequest[batch];
        for (int b = 0; b < batch; b++) {
          reqs[b] =
              new ForwardRequest(new int[] {next[b]}, prompts[b].length + s, tables[b], false);
        }
        ForwardResult r = model.forward(ForwardBatch.of(reqs), kv.cache, pool);
        for (int b = 0; b < batch; b++) {
          next[b] = ModelCpuHarness.argmax(r.last(b));
          tokens[b][s + 1] = next[b];
        }
      }
      return (System.nanoTime() - t0) / 1e6 / steps;
    }
  }

  /**
   * One engine decode run: the median TPOT over the batch and its range, the first-token spread,
   * whether the tokens equal the bare ones, and from {@code stats()} over the decode rounds (after
   * the round that produced the first tokens): rounds, forward ms per round and the loop's own ms
   * per round (round time outside the forward).
   */
  private record EngineDecode(
      double medianMs,
      double minMs,
      double maxMs,
      double firstTokenSpreadMs,
      boolean matches,
      long rounds,
      double forwardMsPerRound,
      double ownMsPerRound) {
    double ownOverForward() {
      return ownMsPerRound / forwardMsPerRound;
    }
  }

  private static EngineDecode engineDecode(
      Engine e, int[][] prompts, int outTokens, int[][] bareTokens, int[] blocker)
      throws Exception {
    int batch = prompts.length;
    long[] submitted = new long[batch];
    List<RequestHandle> hs = new ArrayList<>();
    long endedBefore = e.stats().endedRequests();
    RequestHandle gate = e.submit(blocker, SamplingParams.greedy(1));
    Thread.sleep(BLOCKER_LEAD_MS); // the loop has taken the blocker into a round and is computing
    for (int b = 0; b < batch; b++) {
      submitted[b] = System.nanoTime();
      hs.add(e.submit(prompts[b], SamplingParams.greedy(outTokens)));
    }
    if (gate.result().get().failure().isPresent()) {
      throw new IllegalStateException("blocker request failed: " + gate.result().get().error());
    }
    for (RequestHandle h : hs) {
      if (h.nextToken(STATE_TIMEOUT_NS, TimeUnit.NANOSECONDS) == null) {
        throw new IllegalStateException("no first token in time");
      }
    }
    long firstRound = e.stats().rounds();
    EngineStats from;
    while ((from = e.stats()).rounds() <= firstRound) {
      Thread.onSpinWait(); // the stats of the round that produced the first tokens
    }
    double[] tpot = new double[batch];
    long firstMin = Long.MAX_VALUE;
    long firstMax = Long.MIN_VALUE;
    boolean matches = true;
    for (int b = 0; b < batch; b++) {
      GenerationResult r = hs.get(b).result().get();
      if (r.failure().isPresent() || r.tokens().length != outTokens) {
        throw new IllegalStateException(
            "decode request " + b + ": " + r.finishReason() + " " + r.error());
      }
      tpot[b] = r.metrics().tpotNs() / 1e6;
      long first = submitted[b] + r.metrics().ttftNs();
      firstMin = Math.min(firstMin, first);
      firstMax = Math.max(firstMax, first);
      matches &= Arrays.equals(r.tokens(), bareTokens[b]);
    }
    EngineStats to;
    while ((to = e.stats()).endedRequests() < endedBefore + batch + 1) {
      Thread.onSpinWait();
    }
    long rounds = to.rounds() - from.rounds();
    double forwardMs = (to.forwardNanos() - from.forwardNanos()) / 1e6 / rounds;
    double ownMs =
        ((to.roundNanos() - from.roundNanos()) - (to.forwardNanos() - from.forwardNanos()))
            / 1e6
            / rounds;
    double[] sorted = tpot.clone();
    Arrays.sort(sorted);
    return new EngineDecode(
        median(tpot),
        sorted[0],
        sorted[batch - 1],
        (firstMax - firstMin) / 1e6,
        matches,
        rounds,
        forwardMs,
        ownMs);
  }

  private record DecodeRow(int batch, double[] bareMs, EngineDecode[] engine) {
    double medianBare() {
      return median(bareMs);
    }

    double medianEngine() {
      return median(Arrays.stream(engine).mapToDouble(EngineDecode::medianMs).toArray());
    }

    double medianOwnShare() {
      return median(Arrays.stream(engine).mapToDouble(EngineDecode::ownOverForward).toArray());
    }
  }

  // ---------------------------------------------------------------- main

  private static String ms(long ns) {
    return String.format(Locale.ROOT, "%.1f", ns / 1e6);
  }

  private static String met(boolean ok) {
    return ok ? "met" : "**not met**";
  }

  public static void main(String[] args) throws Exception {
    String modelName = "synthetic:llama-100m";
    int promptTokens = 8193;
    int warmup = 1024;
    long seed = 42;
    int copyMib = 256;
    int copyRepeats = 5;
    int tailRepeats = 5;
    int hitRepeats = 5;
    int decodePrompt = 128;
    int decodeTokens = 64;
    int[] batches = {1, 16};
    int repeats = 5;
    int threads = Runtime.getRuntime().availableProcessors();
    for (Map.Entry<String, String> flag : BenchFlags.of(args)) {
      String a = flag.getKey();
      String v = flag.getValue();
      switch (a) {
        case "--model" -> modelName = v;
        case "--prompt" -> promptTokens = Integer.parseInt(v);
        case "--warmup" -> warmup = Integer.parseInt(v);
        case "--seed" -> seed = Long.parseLong(v);
        case "--copy-mib" -> copyMib = Integer.parseInt(v);
        case "--copy-repeats" -> copyRepeats = Integer.parseInt(v);
        case "--tail-repeats" -> tailRepeats = Integer.parseInt(v);
        case "--hit-repeats" -> hitRepeats = Integer.parseInt(v);
        case "--decode-prompt" -> decodePrompt = Integer.parseInt(v);
        case "--decode-tokens" -> decodeTokens = Integer.parseInt(v);
        case "--batches" -> batches = ModelCpuHarness.ints(v);
        case "--repeats" -> repeats = Integer.parseInt(v);
        case "--threads" -> threads = Integer.parseInt(v);
        default -> throw new IllegalArgumentException("unknown flag " + a);
      }
    }
    if (hitRepeats < 1 || tailRepeats < 1 || repeats < 1) {
      throw new IllegalArgumentException("--hit-repeats, --tail-repeats, --repeats must be >= 1");
    }
    if (decodeTokens < 2) {
      throw new IllegalArgumentException("--decode-tokens must be >= 2");
    }

    System.out.printf(
        Locale.ROOT,
        "JDK %s (%s), CPU %s, %d cores visible, %d compute threads%n",
        Runtime.version(),
        System.getProperty("java.vm.name"),
        ModelCpuHarness.cpuModel(),
        Runtime.getRuntime().availableProcessors(),
        threads);
    System.out.println("args: " + String.join(" ", args));

    long t0 = System.nanoTime();
    Path folder =
        SyntheticCheckpoints.materialize(modelName, SyntheticCheckpoints.DEFAULT_SEED, DType.F32);
    try (CausalLm model = CausalLm.load(folder);
        ComputePool pool = ComputePool.ofThreads(threads)) {
      CacheLayout layout = model.cacheLayout(P, BG);
      if (layout.numGroups() != 1) {
        throw new IllegalArgumentException("expected one cache group, got " + layout.numGroups());
      }
      long bpb = layout.group(0).bytesPerBlock();
      int vocab = model.vocabSize();
      System.out.printf(
          Locale.ROOT,
          "%s: materialized and loaded in %.1f s; P %d, blocks of %d tokens, %,d bytes per block%n",
          modelName,
          (System.nanoTime() - t0) / 1e9,
          P,
          BG,
          bpb);

      // (1) memcpy bandwidth
      CopyRun copy = memcpy((long) copyMib << 20, bpb, copyRepeats);
      System.out.printf(Locale.ROOT, "memcpy: best %.2f GB/s%n", copy.best());

      // JIT warm-up on a throwaway engine
      int[] prompt = ModelCpuHarness.randomTokens(promptTokens, vocab, seed);
      int requestBlocks = Math.ceilDiv(promptTokens + HEADROOM_TOKENS, BG);
      int deviceParents = 2 * requestBlocks;
      long w0 = System.nanoTime();
      try (Engine w =
          Engine.start(
              EngineSettings.of(model, config(deviceParents, 1.0, TOKEN_BUDGET, 16, 0, threads))
                  .conclude())) {
        serve(w, ModelCpuHarness.randomTokens(warmup, vocab, seed + 1), 8, "warm-up");
      }
      System.out.printf(
          Locale.ROOT,
          "warm-up: cold %d-token request, 8 tokens, %.1f s%n",
          warmup,
          (System.nanoTime() - w0) / 1e9);

      // (2) TTFT
      int expectedHit = ((promptTokens - 1) / P) * P;
      RequestMetrics coldA;
      RequestMetrics coldB;
      RequestMetrics[] deviceHits = new RequestMetrics[hitRepeats];
      HostHit[] hostHits = new HostHit[hitRepeats];
      int maxRequestTokens;
      try (Engine a =
          Engine.start(
              EngineSettings.of(model, config(deviceParents, 1.0, TOKEN_BUDGET, 16, 0, threads))
                  .conclude())) {
        maxRequestTokens = a.maxRequestTokens();
        coldA = serve(a, prompt, 1, "A cold");
        System.out.println("engine A: cold done");
        for (int k = 0; k < hitRepeats; k++) {
          deviceHits[k] = serve(a, prompt, 1, "A hit " + k);
        }
      }
      EngineStats demoted;
      long demoteWaitNs;
      try (Engine b =
          Engine.start(
              EngineSettings.of(
                      model, config(deviceParents, 1.0, TOKEN_BUDGET, 16, deviceParents, threads))
                  .conclude())) {
        coldB = serve(b, prompt, 1, "B cold");
        System.out.println("engine B: cold done");
        long d0 = System.nanoTime();
        demoted = awaitDemoted(b, 1);
        demoteWaitNs = System.nanoTime() - d0;
        EngineStats before = demoted;
        for (int k = 0; k < hitRepeats; k++) {
          RequestMetrics m = serve(b, prompt, 1, "B hit " + k);
          EngineStats after = awaitDemoted(b, k + 2);
          hostHits[k] =
              new HostHit(
                  m,
                  after.copiedBytes() - before.copiedBytes(),
                  after.copyNanos() - before.copyNanos());
          before = after;
        }
      }
      long[] tail = tailForward(model, layout, prompt, expectedHit, tailRepeats, pool);
      System.out.println("tail forward done");

      // (3) decode
      int maxBatch = Arrays.stream(batches).max().orElse(1);
      int decodeParents =
          maxBatch * Math.ceilDiv(decodePrompt + decodeTokens + HEADROOM_TOKENS, BG) * 2;
      List<DecodeRow> decodes = new ArrayList<>();
      try (Engine c =
          Engine.start(
              EngineSettings.of(
                      model,
                      config(
                          decodeParents,
                          1.0,
                          Math.max(TOKEN_BUDGET, maxBatch * decodePrompt + P),
                          maxBatch,
                          0,
                          threads))
                  .conclude())) {
        for (int batch : batches) {
          int[][] prompts = new int[batch][];
          for (int i = 0; i < batch; i++) {
            prompts[i] = ModelCpuHarness.randomTokens(decodePrompt, vocab, 1_000L + i);
          }
          double[] bare = new double[repeats];
          EngineDecode[] eng = new EngineDecode[repeats];
          for (int r = 0; r < repeats; r++) {
            int[][] tokens = new int[batch][decodeTokens];
            bare[r] = bareDecode(model, layout, prompts, decodeTokens, tokens, pool);
            int[] blocker =
                ModelCpuHarness.randomTokens(
                    BLOCKER_TOKENS, vocab, 5_000L + decodes.size() * 100 + r);
            eng[r] = engineDecode(c, prompts, decodeTokens, tokens, blocker);
            System.out.printf(
                Locale.ROOT,
                "decode batch %d repeat %d: bare %.2f ms/step, engine %.2f ms/token%n",
                batch,
                r,
                bare[r],
                eng[r].medianMs());
          }
          decodes.add(new DecodeRow(batch, bare, eng));
        }
      }

      // ---------------------------------------------------------------- tables
      System.out.println();
      System.out.printf(
          Locale.ROOT,
          "### memcpy (MemorySegment.copy, off-heap to off-heap, %d MiB in pieces of one block)%n%n",
          copyMib);
      System.out.println("| piece bytes | pieces | repeats GB/s | best GB/s |");
      System.out.println("|---:|---:|---|---:|");
      StringBuilder reps = new StringBuilder();
      for (double g : copy.gbps()) {
        reps.append(reps.isEmpty() ? "" : ", ").append(String.format(Locale.ROOT, "%.2f", g));
      }
      System.out.printf(
          Locale.ROOT,
          "| %,d | %,d | %s | %.2f |%n%n",
          copy.pieceBytes(),
          copy.pieces(),
          reps,
          copy.best());

      System.out.printf(
          Locale.ROOT,
          "### TTFT (%s, %d-token prompt, seed %d, max_tokens 1, budget %d, Device %d parents"
              + " = %,d bytes, single-request limit %d tokens)%n%n",
          modelName,
          promptTokens,
          seed,
          TOKEN_BUDGET,
          deviceParents,
          deviceParents * bpb,
          maxRequestTokens);
      System.out.println(
          "| engine | request | reused Device tokens | reused Host tokens | expected hit |"
              + " queue ms | TTFT ms | copy-thread bytes | copy-thread ms |");
      System.out.println("|---|---|---:|---:|---:|---:|---:|---:|---:|");
      ttftRow("A (demote 0)", "cold", coldA, 0, "", "");
      for (int k = 0; k < hitRepeats; k++) {
        ttftRow("A (demote 0)", "Device hit " + (k + 1), deviceHits[k], expectedHit, "", "");
      }
      ttftRow("B (demote all)", "cold", coldB, 0, "", "");
      for (int k = 0; k < hitRepeats; k++) {
        HostHit h = hostHits[k];
        ttftRow(
            "B (demote all)",
            "Host hit " + (k + 1),
            h.m(),
            expectedHit,
            String.format(Locale.ROOT, "%,d", h.copiedBytes()),
            ms(h.copyNanos()));
      }
      System.out.println();
      System.out.printf(
          Locale.ROOT,
          "Engine B before its first Host hit (after %.1f ms of waiting): %d Host blocks cached, %d"
              + " Device blocks cached, %,d bytes copied by the copy thread so far. Copy-thread"
              + " columns: the bytes and copy time between the snapshots before and after each hit."
              + "%n%n",
          demoteWaitNs / 1e6,
          demoted.hostCachedBlocks(),
          demoted.deviceCachedBlocks(),
          demoted.copiedBytes());

      double[] hostMs = new double[hitRepeats];
      double[] deviceMs = new double[hitRepeats];
      double[] copyMs = new double[hitRepeats];
      boolean copiedExactly = true;
      long h2dBytes = (long) expectedHit / BG * bpb;
      for (int k = 0; k < hitRepeats; k++) {
        hostMs[k] = hostHits[k].m().ttftNs() / 1e6;
        deviceMs[k] = deviceHits[k].ttftNs() / 1e6;
        copyMs[k] = hostHits[k].copyNanos() / 1e6;
        copiedExactly &=
            hostHits[k].copiedBytes() == h2dBytes
                && hostHits[k].m().reusedHostTokens() == expectedHit
                && deviceHits[k].reusedDeviceTokens() == expectedHit;
      }
      double h2dMs = h2dBytes / copy.best() / 1e6;
      double tailMs = Arrays.stream(tail).min().orElse(0) / 1e6;
      double hostMed = median(hostMs);
      double deviceMed = median(deviceMs);
      double copyMed = median(copyMs);
      double coldOverHost = coldB.ttftNs() / 1e6 / hostMed;
      double hostOverH2d = hostMed / h2dMs;
      double[] tailList = Arrays.stream(tail).mapToDouble(t -> t / 1e6).toArray();

      System.out.println("### Host hit and Device hit against the same-run baselines");
      System.out.println();
      System.out.printf(
          Locale.ROOT,
          "Medians of the %d hits of each kind. Every hit reused exactly %d tokens and every Host"
              + " hit's copy-thread bytes equal its H2D bytes: %s.%n%n",
          hitRepeats,
          expectedHit,
          copiedExactly ? "yes" : "**no**");
      System.out.println("| figure | value | target |");
      System.out.println("|---|---:|---|");
      System.out.printf(
          Locale.ROOT,
          "| cold TTFT, engine B / engine A (ms) | %s / %s | |%n",
          ms(coldB.ttftNs()),
          ms(coldA.ttftNs()));
      System.out.printf(
          Locale.ROOT, "| Host-hit TTFT, ms (%s) | %.1f | |%n", list(hostMs), hostMed);
      System.out.printf(
          Locale.ROOT, "| Device-hit TTFT, ms (%s) | %.1f | |%n", list(deviceMs), deviceMed);
      System.out.printf(
          Locale.ROOT,
          "| cold (B) / Host hit | %.1f× | ≥ 20×: %s |%n",
          coldOverHost,
          met(coldOverHost >= 20));
      System.out.printf(
          Locale.ROOT, "| cold (B) / Device hit | %.1f× | |%n", coldB.ttftNs() / 1e6 / deviceMed);
      System.out.printf(
          Locale.ROOT,
          "| H2D bytes (%d reused Host tokens / %d × %,d bytes per block) | %,d | |%n",
          expectedHit,
          BG,
          bpb,
          h2dBytes);
      System.out.printf(
          Locale.ROOT,
          "| their time at the measured memcpy bandwidth (%.2f GB/s), ms | %.1f | |%n",
          copy.best(),
          h2dMs);
      System.out.printf(
          Locale.ROOT,
          "| copy thread's own time for them, ms (%s) | %.1f | |%n",
          list(copyMs),
          copyMed);
      System.out.printf(
          Locale.ROOT,
          "| copy thread's time / H2D time at memcpy bandwidth | %.2f× | ≤ 1.5× |%n",
          copyMed / h2dMs);
      System.out.printf(
          Locale.ROOT, "| Host-hit TTFT − Device-hit TTFT, ms | %.1f | |%n", hostMed - deviceMed);
      System.out.printf(
          Locale.ROOT,
          "| Host-hit TTFT / H2D time | %.2f× | ≤ 1.5×: %s |%n",
          hostOverH2d,
          met(hostOverH2d <= 1.5));
      System.out.printf(
          Locale.ROOT,
          "| bare forward of the last %d prompt tokens over the %d cached, ms (%s) | %.1f"
              + " (best) | |%n",
          promptTokens - expectedHit,
          expectedHit,
          list(tailList),
          tailMs);
      System.out.printf(
          Locale.ROOT,
          "| Host-hit TTFT / (H2D time + that forward) | %.2f× | |%n",
          hostMed / (h2dMs + tailMs));
      System.out.printf(
          Locale.ROOT, "| Device-hit TTFT / that forward | %.2f× | |%n%n", deviceMed / tailMs);

      System.out.printf(
          Locale.ROOT,
          "### Decode (%s, prompt %d tokens per request, %d output tokens = %d steps, greedy)%n%n",
          modelName,
          decodePrompt,
          decodeTokens,
          decodeTokens - 1);
      System.out.println(
          "| batch | repeat | bare ms/step | engine TPOT ms (median of requests) | engine TPOT"
              + " min–max ms | first-token spread ms | tokens = bare | decode rounds | forward"
              + " ms/round | loop's own ms/round | own / forward |");
      System.out.println("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|");
      for (DecodeRow d : decodes) {
        for (int r = 0; r < d.bareMs().length; r++) {
          EngineDecode e = d.engine()[r];
          System.out.printf(
              Locale.ROOT,
              "| %d | %d | %.2f | %.2f | %.2f–%.2f | %.2f | %s | %d | %.2f | %.3f | %.2f%% |%n",
              d.batch(),
              r,
              d.bareMs()[r],
              e.medianMs(),
              e.minMs(),
              e.maxMs(),
              e.firstTokenSpreadMs(),
              e.matches() ? "yes" : "no",
              e.rounds(),
              e.forwardMsPerRound(),
              e.ownMsPerRound(),
              100 * e.ownOverForward());
        }
      }
      System.out.println();
      System.out.println(
          "| batch | median bare ms/step | median engine ms/token | engine / bare − 1 | loop's own"
              + " time / forward time (median) | target (< 5 %) |");
      System.out.println("|---:|---:|---:|---:|---:|---|");
      for (DecodeRow d : decodes) {
        double tpotOverhead = d.medianEngine() / d.medianBare() - 1;
        double own = d.medianOwnShare();
        System.out.printf(
            Locale.ROOT,
            "| %d | %.2f | %.2f | %+.1f%% | %.2f%% | %s |%n",
            d.batch(),
            d.medianBare(),
            d.medianEngine(),
            100 * tpotOverhead,
            100 * own,
            met(own < 0.05));
      }
    }
  }

  private static void ttftRow(
      String engine,
      String request,
      RequestMetrics m,
      int expectedHit,
      String copyBytes,
      String copyMs) {
    System.out.printf(
        Locale.ROOT,
        "| %s | %s | %d | %d | %d | %s | %s | %s | %s |%n",
        engine,
        request,
        m.reusedDeviceTokens(),
        m.reusedHostTokens(),
        expectedHit,
        ms(m.queueNs()),
        ms(m.ttftNs()),
        copyBytes,
        copyMs);
  }
}

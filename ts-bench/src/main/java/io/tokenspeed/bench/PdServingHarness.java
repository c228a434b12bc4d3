package io.tokenspeed.bench;

import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.PdOptions;
import io.tokenspeed.engine.PdTicket;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.pd.PdSecret;
import io.tokenspeed.pd.PdSettings;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Disaggregated serving against fused serving on the CPU, in one run (docs/pd.md): a prefill engine
 * and a decode engine in this JVM joined by the real KV transfer over loopback TCP (handshake,
 * frames, CRC32C, the decode side's Host staging and Host → Device copies), beside a fused engine
 * of the same configuration.
 *
 * <p><b>TTFT through the first delivered token.</b> A seeded prompt of {@code --prompt} tokens
 * (default 8193: an 8192-token prefix and one more) with {@code max_tokens} 2. Fused: submission to
 * the handle's first token. PD: both halves submitted at once, until the decode handle's first
 * token, so the figure holds the prefill, the copy of the prompt's KV to the prefill engine's Host,
 * the transfer, the decode side's Host → Device landing and its admission. Each kind twice:
 * recomputation (fresh engines, L3 off) and an L3 hit (fresh engines over an in-memory store that
 * an earlier engine filled with the prompt: the prefill engine, or the fused one, restores the
 * prefix). The four cases alternate {@code --repeats} times; medians are reported.
 *
 * <p><b>Decode TPOT under landings.</b> {@code --streams} requests of {@code --decode-prompt}
 * tokens and {@code --decode-tokens} output tokens at once: on a fused engine, and on a decode
 * engine receiving every one of them from a prefill engine; the median of the requests' time per
 * output token, alternating {@code --repeats} times.
 *
 * <pre>
 *   ./mvnw -q -B -pl ts-bench -am package -DskipTests
 *   java --add-modules jdk.incubator.vector --enable-native-access=ALL-UNNAMED \
 *     -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.PdServingHarness \
 *     [--model synthetic:llama-100m] [--prompt 8193] [--repeats 3] [--streams 8] \
 *     [--decode-prompt 256] [--decode-tokens 32] [--threads N]
 * </pre>
 */
public final class PdServingHarness {
  private static final int P = 64;
  private static final int BG = 16;
  private static final int TOKEN_BUDGET = 512;
  private static final PdSecret SECRET = PdSecret.generate();

  private PdServingHarness() {}

  /** A store the engines of the run share: an engine's close leaves it open. */
  private static final class SharedStore extends ForwardingStore {
    SharedStore() {
      super(new MemoryStore());
    }

    @Override
    public void close() {}
  }

  private static EngineConfig config(int deviceParents, int threads) {
    return new EngineConfig(P, BG, deviceParents, 1.0, TOKEN_BUDGET, 64, 0, threads, 256);
  }

  private static L3Settings l3(SharedStore store) {
    return new L3Settings(store, StorageRuntimeConfig.defaults(), L3Settings.CPU_ATTENTION_BACKEND);
  }

  public static void main(String[] args) throws Exception {
    String modelName = "synthetic:llama-100m";
    int promptTokens = 8193;
    int repeats = 3;
    int streams = 8;
    int decodePrompt = 256;
    int decodeTokens = 32;
    int threads = Runtime.getRuntime().availableProcessors();
    for (Map.Entry<String, String> flag : BenchFlags.of(args)) {
      String v = flag.getValue();
      switch (flag.getKey()) {
        case "--model" -> modelName = v;
        case "--prompt" -> promptTokens = Integer.parseInt(v);
        case "--repeats" -> repeats = Integer.parseInt(v);
        case "--streams" -> streams = Integer.parseInt(v);
        case "--decode-prompt" -> decodePrompt = Integer.parseInt(v);
        case "--decode-tokens" -> decodeTokens = Integer.parseInt(v);
        case "--threads" -> threads = Integer.parseInt(v);
        default -> throw new IllegalArgumentException("unknown flag " + flag.getKey());
      }
    }
    if (repeats < 1 || streams < 1 || decodeTokens < 2) {
      throw new IllegalArgumentException("--repeats, --streams >= 1 and --decode-tokens >= 2");
    }
    System.out.printf(
        Locale.ROOT,
        "JDK %s, CPU %s, %d cores visible, %d compute threads%nargs: %s%n",
        Runtime.version(),
        ModelCpuHarness.cpuModel(),
        Runtime.getRuntime().availableProcessors(),
        threads,
        String.join(" ", args));
    Path folder =
        SyntheticCheckpoints.materialize(modelName, SyntheticCheckpoints.DEFAULT_SEED, DType.F32);
    try (CausalLm model = CausalLm.load(folder)) {
      int vocab = model.vocabSize();
      int parents =
          Engine.deviceParentsFor(model, Math.max(2 * promptTokens, streams * (decodePrompt + 96)));
      int[] prompt = ModelCpuHarness.randomTokens(promptTokens, vocab, 42);
      // JIT warm-up: one PD request of a short prompt, one fused
      ttft(model, parents, threads, ModelCpuHarness.randomTokens(1024, vocab, 7), true, null);
      ttft(model, parents, threads, ModelCpuHarness.randomTokens(1024, vocab, 8), false, null);
      SharedStore store = new SharedStore();
      try (Engine fill =
          Engine.start(
              EngineSettings.of(model, config(parents, threads)).l3(l3(store)).conclude())) {
        fill.submit(prompt, SamplingParams.greedy(1)).result().get(30, TimeUnit.MINUTES);
      } // close drains the write-through
      String[] names = {"fused, recomputed", "PD, recomputed", "fused, L3 hit", "PD, L3 hit"};
      List<List<Long>> ttfts = new ArrayList<>();
      for (int k = 0; k < 4; k++) {
        ttfts.add(new ArrayList<>());
      }
      for (int r = 0; r < repeats; r++) {
        for (int k = 0; k < 4; k++) {
          long ns = ttft(model, parents, threads, prompt, k % 2 == 1, k >= 2 ? store : null);
          ttfts.get(k).add(ns);
          System.out.printf(Locale.ROOT, "repeat %d %-18s TTFT %8.1f ms%n", r, names[k], ns / 1e6);
        }
      }
      List<Long> fusedTpot = new ArrayList<>();
      List<Long> pdTpot = new ArrayList<>();
      for (int r = 0; r < repeats; r++) {
        fusedTpot.add(tpot(model, parents, threads, streams, decodePrompt, decodeTokens, false, r));
        pdTpot.add(tpot(model, parents, threads, streams, decodePrompt, decodeTokens, true, r));
        System.out.printf(
            Locale.ROOT,
            "repeat %d TPOT fused %.2f ms, PD decode %.2f ms%n",
            r,
            fusedTpot.getLast() / 1e6,
            pdTpot.getLast() / 1e6);
      }
      System.out.println();
      System.out.printf(
          Locale.ROOT,
          "| %s, %d-token prompt, max_tokens 2 | TTFT median (ms) | against fused recomputed |%n",
          modelName,
          promptTokens);
      System.out.println("|---|---:|---:|");
      long base = median(ttfts.get(0));
      for (int k = 0; k < 4; k++) {
        long m = median(ttfts.get(k));
        System.out.printf(
            Locale.ROOT, "| %s | %.1f | %.2fx |%n", names[k], m / 1e6, (double) m / base);
      }
      System.out.println();
      System.out.printf(
          Locale.ROOT,
          "decode TPOT, %d streams of %d prompt tokens and %d output tokens: fused %.2f ms, PD"
              + " decode engine %.2f ms (%.2fx)%n",
          streams,
          decodePrompt,
          decodeTokens,
          median(fusedTpot) / 1e6,
          median(pdTpot) / 1e6,
          (double) median(pdTpot) / median(fusedTpot));
    }
  }

  /**
   * TTFT of one request on fresh engines: fused (submission to the first token) or PD (both halves
   * submitted together, to the decode half's first token); over {@code store} when not null.
   */
  private static long ttft(
      CausalLm model, int parents, int threads, int[] prompt, boolean pd, SharedStore store)
      throws Exception {
    SamplingParams params = SamplingParams.greedy(2);
    if (!pd) {
      try (Engine e =
          Engine.start(
              EngineSettings.of(model, config(parents, threads))
                  .l3(store == null ? null : l3(store))
                  .conclude())) {
        long t0 = System.nanoTime();
        RequestHandle h = e.submit(prompt, params);
        first(h);
        long ns = System.nanoTime() - t0;
        check(h.result().get(30, TimeUnit.MINUTES));
        return ns;
      }
    }
    try (Engine d =
            Engine.start(
                EngineSettings.of(model, config(parents, threads)).pd(decodeOptions()).conclude());
        Engine p =
            Engine.start(
                EngineSettings.of(model, config(parents, threads))
                    .l3(store == null ? null : l3(store))
                    .pd(PdOptions.prefill(SECRET, PdSettings.defaults()))
                    .conclude())) {
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      long room = System.nanoTime() | 1;
      long t0 = System.nanoTime();
      RequestHandle dec = d.submit(prompt, params, -1, new PdTicket.Decode(room));
      RequestHandle pre = p.submit(prompt, params, -1, new PdTicket.Prefill(room, kv));
      first(dec);
      long ns = System.nanoTime() - t0;
      check(pre.result().get(30, TimeUnit.MINUTES));
      check(dec.result().get(30, TimeUnit.MINUTES));
      System.out.printf(
          Locale.ROOT,
          "  PD transfer: %,d bytes of KV landed%n",
          d.pdMetrics().orElseThrow().bytesReceived());
      return ns;
    }
  }

  private static PdOptions decodeOptions() {
    return PdOptions.decode(
        SECRET, PdSettings.defaults(), new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
  }

  /** The median time per output token of {@code streams} requests served at once. */
  private static long tpot(
      CausalLm model,
      int parents,
      int threads,
      int streams,
      int promptTokens,
      int outputTokens,
      boolean pd,
      int repeat)
      throws Exception {
    int vocab = model.vocabSize();
    SamplingParams params = SamplingParams.greedy(outputTokens);
    List<RequestHandle> handles = new ArrayList<>();
    List<RequestHandle> prefills = new ArrayList<>();
    Engine p = null;
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, config(parents, threads))
                .pd(pd ? decodeOptions() : PdOptions.FUSED)
                .conclude())) {
      if (pd) {
        p =
            Engine.start(
                EngineSettings.of(model, config(parents, threads))
                    .pd(PdOptions.prefill(SECRET, PdSettings.defaults()))
                    .conclude());
      }
      for (int i = 0; i < streams; i++) {
        int[] prompt = ModelCpuHarness.randomTokens(promptTokens, vocab, 1000L * repeat + i);
        if (pd) {
          long room = 0x7000_0000L + 1000L * repeat + i;
          handles.add(e.submit(prompt, params, -1, new PdTicket.Decode(room)));
          prefills.add(
              p.submit(
                  prompt, params, -1, new PdTicket.Prefill(room, e.pdEndpoint().orElseThrow())));
        } else {
          handles.add(e.submit(prompt, params));
        }
      }
      long[] tpots = new long[streams];
      for (int i = 0; i < streams; i++) {
        GenerationResult r = handles.get(i).result().get(30, TimeUnit.MINUTES);
        check(r);
        tpots[i] = r.metrics().tpotNs();
      }
      for (RequestHandle h : prefills) {
        check(h.result().get(30, TimeUnit.MINUTES));
      }
      Arrays.sort(tpots);
      return tpots[streams / 2];
    } finally {
      if (p != null) {
        p.close();
      }
    }
  }

  private static void first(RequestHandle h) throws InterruptedException {
    if (h.nextToken(30, TimeUnit.MINUTES).isEmpty()) {
      throw new IllegalStateException("no first token: " + h.result().getNow(null));
    }
  }

  private static void check(GenerationResult r) {
    if (r.error() != null) {
      throw new IllegalStateException("request " + r.requestId() + " failed: " + r.error());
    }
  }

  private static long median(List<Long> xs) {
    long[] a = xs.stream().mapToLong(Long::longValue).sorted().toArray();
    return a[a.length / 2];
  }
}

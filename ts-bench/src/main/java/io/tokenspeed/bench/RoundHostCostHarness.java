package io.tokenspeed.bench;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.EngineStats;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.device.DeviceBytes;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.model.device.SampledForward;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.sampling.RowSampling;
import io.tokenspeed.model.sampling.SampledRow;
import io.tokenspeed.model.sampling.SamplingParams;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The engine loop's own work per round, with a model that costs nothing: the host time a GPU engine
 * spends between two forward passes (head, plan, batch, commit, sample, streaming, figures) when
 * the device samples. A forward pass here only picks each sampled request's next token from its
 * last one, so the loop's rounds per second measure the loop alone.
 *
 * <p>The workload is that of {@code bench serve --mode throughput}: {@code clients} closed-loop
 * clients, each sending requests of a shared {@code prefix}-token prompt plus {@code suffix} tokens
 * of its own and {@code maxTokens} greedy output tokens, {@code requests} requests a client. The
 * engine runs every client together ({@code --max-running} = clients). Prints the rounds, the
 * microseconds of host work per round (wall ÷ rounds, with the model's own time subtracted) and per
 * output token.
 *
 * <pre>
 *   java --enable-native-access=ALL-UNNAMED -cp ts-bench/target/benchmarks.jar \
 *       io.tokenspeed.bench.RoundHostCostHarness [clients=64] [requests=8] [prefix=2048] \
 *       [suffix=16] [maxTokens=64]
 * </pre>
 */
public final class RoundHostCostHarness {

  private static final int P = 64;
  private static final int BG = 16;
  private static final int VOCAB = 128_256;

  private RoundHostCostHarness() {}

  public static void main(String[] args) throws Exception {
    int clients = arg(args, 0, 64);
    int requests = arg(args, 1, 8);
    int prefix = arg(args, 2, 2048);
    int suffix = arg(args, 3, 16);
    int maxTokens = arg(args, 4, 64);
    // a warm-up run for the JIT, then the measured one
    run(clients, Math.max(2, requests / 2), prefix, suffix, maxTokens, false);
    run(clients, requests, prefix, suffix, maxTokens, true);
  }

  private static int arg(String[] args, int i, int otherwise) {
    return args.length > i ? Integer.parseInt(args[i]) : otherwise;
  }

  private static void run(
      int clients, int requests, int prefix, int suffix, int maxTokens, boolean print)
      throws Exception {
    int tokensPerRequest = prefix + suffix + maxTokens;
    // room for every client's request twice over: a round never waits for Device memory
    int parents = 4 + 2 * (clients + 1) * Math.ceilDiv(tokensPerRequest, P);
    EngineConfig config = new EngineConfig(P, BG, parents, 1.0, 2048, clients, 0, 1, 4 * clients);
    NullModel model = new NullModel();
    int[] shared = new SplittableRandom(7).ints(prefix, 0, VOCAB).toArray();
    try (Engine engine = Engine.start(EngineSettings.of(model, config).conclude())) {
      EngineStats before = engine.stats();
      AtomicInteger failures = new AtomicInteger();
      long t0 = System.nanoTime();
      List<CompletableFuture<Void>> loops = new ArrayList<>();
      for (int c = 0; c < clients; c++) {
        int client = c;
        loops.add(
            CompletableFuture.runAsync(
                () -> {
                  SplittableRandom rnd = new SplittableRandom(client);
                  for (int r = 0; r < requests; r++) {
                    int[] prompt = new int[prefix + suffix];
                    System.arraycopy(shared, 0, prompt, 0, prefix);
                    for (int i = prefix; i < prompt.length; i++) {
                      prompt[i] = rnd.nextInt(VOCAB);
                    }
                    RequestHandle h = engine.submit(prompt, SamplingParams.greedy(maxTokens));
                    GenerationResult g = h.result().join();
                    if (g.failure().isPresent() || g.tokens().length != maxTokens) {
                      if (failures.incrementAndGet() == 1) {
                        System.err.println(
                            "first failure: "
                                + g.error()
                                + ", "
                                + g.tokens().length
                                + " of "
                                + maxTokens
                                + " tokens");
                      }
                    }
                  }
                },
                Thread::startVirtualThread));
      }
      CompletableFuture.allOf(loops.toArray(CompletableFuture[]::new)).join();
      long wall = System.nanoTime() - t0;
      EngineStats after = engine.stats();
      if (failures.get() > 0) {
        throw new IllegalStateException(failures.get() + " requests failed");
      }
      if (!print) {
        return;
      }
      long rounds = after.rounds() - before.rounds();
      long forward = after.forwardNanos() - before.forwardNanos();
      long roundNanos = after.roundNanos() - before.roundNanos();
      long tokens = (long) clients * requests * maxTokens;
      System.out.printf(
          Locale.ROOT,
          "clients=%d requests=%d prefix=%d suffix=%d max_tokens=%d: %d rounds in %.2f s,"
              + " round %.1f us (of which the model %.1f us), loop host work %.1f us a round,"
              + " %.2f us an output token, %.0f output tokens/s%n",
          clients,
          requests,
          prefix,
          suffix,
          maxTokens,
          rounds,
          wall / 1e9,
          roundNanos / 1e3 / rounds,
          forward / 1e3 / rounds,
          (roundNanos - forward) / 1e3 / rounds,
          (roundNanos - forward) / 1e3 / tokens,
          tokens / (wall / 1e9));
    }
  }

  /** A model whose forward pass costs nothing: each sampled row's token follows its last token. */
  private static final class NullModel implements DeviceModel {
    private final Collective collective = Collective.single();
    private final ModelIdentity identity =
        new ModelIdentity("null", "0".repeat(64), ModelIdentity.DEFAULT_WEIGHT_VERSION);

    @Override
    public String deviceName() {
      return "null";
    }

    @Override
    public boolean computesOnHost() {
      return true;
    }

    @Override
    public ModelIdentity identity() {
      return identity;
    }

    @Override
    public String attentionBackend() {
      return "null";
    }

    @Override
    public Collective collective() {
      return collective;
    }

    @Override
    public Shard shard() {
      return new Shard(0, 1);
    }

    @Override
    public int vocabSize() {
      return VOCAB;
    }

    @Override
    public CacheLayout cacheLayout(int prefixGranularity, int blockGranularity) {
      return new CacheLayout(
          prefixGranularity,
          "null",
          List.of(
              new CacheGroupSpec(
                  0,
                  new GroupKind.FullHistory(),
                  blockGranularity,
                  List.of(new CacheField("kv", 64L * blockGranularity)),
                  new Sharding.HeadPartitioned())));
    }

    @Override
    public DeviceBytes allocate(
        CacheLayout layout, long leadingPad, long tierBytes, int[] poolBlocks) {
      throw new UnsupportedOperationException("the engine allocates a host model's tier");
    }

    @Override
    public ForwardResult forward(ForwardBatch batch, DeviceBytes kv) {
      throw new UnsupportedOperationException("the null model only samples");
    }

    @Override
    public SampledForward forwardAndSample(
        ForwardBatch batch, DeviceBytes kv, List<RowSampling> rows, boolean keepLogits) {
      List<SampledRow> out = new ArrayList<>(rows.size());
      for (int i = 0; i < rows.size(); i++) {
        ForwardRequest r = batch.requests().get(i);
        int last = r.tokenIds()[r.tokenIds().length - 1];
        out.add(rows.get(i) == null ? null : new SampledRow((last * 31 + 7) % VOCAB, null));
      }
      return new SampledForward(out, null);
    }

    @Override
    public void close() {}
  }
}

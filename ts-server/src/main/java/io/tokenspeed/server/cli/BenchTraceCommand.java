package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageBackend;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.chat.ChatTemplate;
import io.tokenspeed.server.cli.StreamClient.Completion;
import io.tokenspeed.server.config.StorageExtraConfig;
import io.tokenspeed.server.http.HttpFrontend;
import io.tokenspeed.server.http.Serving;
import io.tokenspeed.server.http.ServingState;
import io.tokenspeed.server.trace.CacheBound;
import io.tokenspeed.server.trace.Trace;
import io.tokenspeed.server.trace.TracePrompts;
import io.tokenspeed.server.trace.TraceRequest;
import java.io.BufferedReader;
import java.io.PrintWriter;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed bench trace}: replays a request trace of the Mooncake FAST'25 format ({@link
 * Trace}) against running servers ({@code --targets}) or against replicas it starts itself over one
 * shared store ({@code --serve N} over a file store, Redis or a memory store of this process:
 * {@code --store}; then the same slice again with L3 off, as the baseline), and reports what the
 * workload got: the slice's infinite-cache hit rate ({@link CacheBound}) beside the share of input
 * tokens the servers reused from their Device, Host and L3 (the responses' {@code
 * cached_tokens_by_source}), TTFT and TPOT percentiles, output throughput and the requests within a
 * TTFT objective.
 *
 * <p>Each request's prompt is built from its hash ids ({@link TracePrompts}), so that requests
 * sharing ids share token prefixes on every replica; requests go out at their timestamps (divided
 * by {@code --speed}), at a Poisson {@code --rate} instead, or one after another ({@code
 * --sequential}, which measures the reuse the trace allows without concurrency getting in the way),
 * round robin over the targets.
 *
 * <p>The L3 figures of a run ({@link L3Figures}: bytes read and written, GETs, soft timeouts,
 * expired Ready holds, pressure bypasses and the fallbacks they add up to) come from the replicas'
 * engine metrics with {@code --serve}, and with {@code --targets} from the differences of the
 * targets' own {@code /metrics} counters ({@link TargetMetrics}), so that they add up with what the
 * servers export.
 */
@Command(
    name = "trace",
    mixinStandardHelpOptions = true,
    description =
        "Replays a request trace (Mooncake FAST'25 JSON lines: timestamp, input_length,"
            + " output_length, hash_ids) against servers, or against replicas it starts over one"
            + " shared store and then without L3; reports the trace's infinite-cache hit rate"
            + " beside the reuse achieved, TTFT, TPOT and throughput.")
final class BenchTraceCommand implements Callable<Integer> {
  private static final ObjectMapper JSON = new ObjectMapper();

  @Spec private CommandSpec spec;

  @Mixin private DeviceOptions deviceOptions;

  @Option(names = "--trace", paramLabel = "FILE", required = true, description = "The trace.")
  private Path trace;

  @Option(
      names = "--targets",
      paramLabel = "URL",
      split = ",",
      description =
          "Servers to replay against (http://HOST:PORT), round robin; their L3 figures come from"
              + " their /metrics, scraped before the replay and once they are quiet after it.")
  private List<String> targets;

  @Option(
      names = "--serve",
      paramLabel = "N",
      description =
          "Start N replicas of --model over one shared store (--store), replay, then replay"
              + " against N fresh replicas without L3.")
  private Integer serve;

  @Option(
      names = "--model",
      paramLabel = "DIR|synthetic:NAME",
      description = "The model --serve starts (default: synthetic:llama-100m).")
  private String model = "synthetic:llama-100m";

  @Option(
      names = "--dtype",
      paramLabel = "f32|bf16",
      description = "Weight type of a synthetic --model (default: f32).")
  private String dtype = "f32";

  @Option(
      names = "--redis-uri",
      paramLabel = "URI",
      description =
          "With --serve: the replicas' shared store is this Redis server (--store redis, which"
              + " it implies when --store is not given).")
  private String redisUri;

  /** The kinds of store {@code --store} names. */
  static final List<String> STORE_KINDS = List.of("file", "redis", "memory");

  /** The memory store's capacity unless {@code --memory-store-bytes} says: 16 GiB. */
  static final long DEFAULT_MEMORY_STORE_BYTES = 16L << 30;

  @Option(
      names = "--store",
      paramLabel = "file|redis|memory",
      description =
          "With --serve: the replicas' shared store. file (the default): a file store in a"
              + " temporary folder, deleted at the end; redis: the Redis server of --redis-uri"
              + " (--redis-uri alone selects it too), the run's objects deleted at its end;"
              + " memory: one in-process memory store that every replica of the L3 run uses,"
              + " of --memory-store-bytes.")
  private String storeKind;

  @Option(
      names = "--memory-store-bytes",
      paramLabel = "BYTES",
      description =
          "With --store memory: the store's capacity in payload bytes (default: 17179869184, 16"
              + " GiB); a new object that does not fit is refused and offered again later.")
  private Long memoryStoreBytes;

  @Option(
      names = "--store-config",
      paramLabel = "JSON",
      description =
          "With --serve: a JSON object of the store's settings added to those the command sets"
              + " (for the file store, e.g. {\"fsync\": false}; for the memory store,"
              + " capacity_bytes instead of --memory-store-bytes; docs/l3-configuration.md).")
  private String storeConfig;

  @Option(
      names = "--device-tokens",
      paramLabel = "N",
      description =
          "With --serve: each replica's Device capacity in tokens (default: 4 times the slice's"
              + " longest request).")
  private Integer deviceTokens;

  @Option(
      names = "--host-ratio",
      paramLabel = "R",
      description = "With --serve: Host capacity as a multiple of the Device's (default: 2).")
  private double hostRatio = 2.0;

  @Option(
      names = "--vocab-size",
      paramLabel = "V",
      description =
          "With --targets: the served model's vocabulary (prompt ids are drawn below it); with"
              + " --serve the model's own.")
  private Integer vocabSize;

  @Option(
      names = "--prompt-seed",
      paramLabel = "N",
      description = "Seed of the blocks hash ids stand for (default: 0).")
  private long promptSeed;

  @Option(
      names = "--speed",
      paramLabel = "X",
      description = "Send the trace X times faster than recorded (default: 1).")
  private double speed = 1.0;

  @Option(
      names = "--window",
      paramLabel = "START:END",
      description = "Replay only the requests whose timestamps lie in [START, END) seconds.")
  private String window;

  @Option(
      names = "--max-requests",
      paramLabel = "N",
      description = "Replay at most the first N requests of the slice.")
  private Integer maxRequests;

  @Option(
      names = "--rate",
      paramLabel = "R",
      description =
          "Send at a Poisson rate of R requests per second instead of the timestamps"
              + " (--rate-seed).")
  private Double rate;

  @Option(
      names = "--rate-seed",
      paramLabel = "N",
      description = "Seed of the Poisson arrivals (default: 0).")
  private long rateSeed;

  @Option(
      names = "--sequential",
      description =
          "Send each request once the previous one has ended (no timestamps): the reuse the"
              + " trace allows, without concurrency in the way.")
  private boolean sequential;

  @Option(
      names = "--max-output",
      paramLabel = "N",
      description = "Cap each request's max_tokens (its output_length; default: 256).")
  private int maxOutput = 256;

  @Option(
      names = "--slo-ttft-ms",
      paramLabel = "MS",
      description = "The TTFT objective requests are counted against (default: 2000).")
  private double sloTtftMs = 2000;

  @Option(
      names = "--baseline-first",
      description =
          "With --serve: replay the slice with L3 off first, then with L3 (default: L3 first),"
              + " so that two runs in opposite orders tell the order's effect from L3's.")
  private boolean baselineFirst;

  @Option(
      names = "--out",
      paramLabel = "FILE.md",
      description = "Also write the report here, and its figures as JSON beside it (FILE.json).")
  private Path out;

  /** The slice replayed: the requests, and their arrival offsets in nanoseconds. */
  record Slice(List<TraceRequest> requests, long[] arrivalNs) {}

  /**
   * One replay: its label, its completions in slice order, its wall time, and the L3 figures of the
   * replicas it started or of the targets' {@code /metrics} (empty when none has L3).
   */
  record Replay(String label, List<Completion> completions, long wallNs, Optional<L3Figures> l3) {

    Replay(String label, List<Completion> completions, long wallNs) {
      this(label, completions, wallNs, Optional.empty());
    }

    Replay with(Optional<L3Figures> figures) {
      return new Replay(label, completions, wallNs, figures);
    }
  }

  /**
   * What the replicas' L3 did during a replay, summed over them: payload bytes their GETs read and
   * their PUTs wrote (the executor's adapter bytes, not wire bytes), GETs issued, the waits that
   * ended at the soft deadline, the Ready holds that expired before admission, and the requests
   * that skipped L3 because its pressure gate was closed ({@code reason="pressure"}; not those the
   * cost model found faster to compute). With {@code --serve} they come from the replicas' engine
   * metrics, with {@code --targets} from the differences of the targets' {@code /metrics} counters
   * ({@link TargetMetrics}).
   */
  record L3Figures(
      long getBytes,
      long putBytes,
      long getsIssued,
      long softTimeouts,
      long readyExpirations,
      long pressureBypasses) {

    L3Figures {
      if (getBytes < 0
          || putBytes < 0
          || getsIssued < 0
          || softTimeouts < 0
          || readyExpirations < 0
          || pressureBypasses < 0) {
        throw new IllegalArgumentException(
            "L3 figures must not be negative: get_bytes="
                + getBytes
                + " put_bytes="
                + putBytes
                + " gets_issued="
                + getsIssued
                + " soft_timeouts="
                + softTimeouts
                + " ready_expirations="
                + readyExpirations
                + " pressure_bypasses="
                + pressureBypasses);
      }
    }

    /** These figures less {@code before}'s: what happened between two snapshots. */
    L3Figures minus(L3Figures before) {
      return new L3Figures(
          getBytes - before.getBytes,
          putBytes - before.putBytes,
          getsIssued - before.getsIssued,
          softTimeouts - before.softTimeouts,
          readyExpirations - before.readyExpirations,
          pressureBypasses - before.pressureBypasses);
    }

    /**
     * The L3 fallbacks, as {@code bench serve} counts them: waits for L3 ended by their soft
     * deadline, Ready holds that expired before admission used them, and pressure bypasses. Each is
     * a prefix the store was to give that the engine computed instead.
     */
    long fallbacks() {
      return softTimeouts + readyExpirations + pressureBypasses;
    }

    static Optional<L3Figures> of(List<Engine> engines) {
      long get = 0;
      long put = 0;
      long gets = 0;
      long soft = 0;
      long expired = 0;
      long bypassed = 0;
      boolean any = false;
      for (Engine e : engines) {
        var storage = e.metrics().storage();
        if (storage.isEmpty()) {
          continue;
        }
        any = true;
        get += storage.get().executor().get().payloadBytes();
        put += storage.get().executor().put().payloadBytes();
        gets += storage.get().transfers().getsIssued();
        soft += storage.get().transfers().softTimeouts();
        expired += storage.get().transfers().readyExpirations();
        bypassed += storage.get().transfers().pressureBypasses();
      }
      return any
          ? Optional.of(new L3Figures(get, put, gets, soft, expired, bypassed))
          : Optional.empty();
    }
  }

  @Override
  public Integer call() throws Exception {
    check();
    List<TraceRequest> all;
    try (BufferedReader in = Files.newBufferedReader(trace, StandardCharsets.UTF_8)) {
      all = Trace.parse(in, trace.toString());
    } catch (java.nio.file.NoSuchFileException e) {
      throw new IllegalArgumentException("--trace=" + trace + " does not exist", e);
    }
    Slice slice = slice(all);
    PrintWriter err = spec.commandLine().getErr();
    err.println(
        "replaying "
            + slice.requests().size()
            + " of the trace's "
            + all.size()
            + " requests"
            + (serve != null
                ? " against " + serve + " replica(s) started here (store: " + storeKind() + ")"
                : ""));
    err.flush();
    List<Replay> replays = new ArrayList<>();
    int vocab;
    try (StreamClient client = new StreamClient()) {
      if (targets != null) {
        vocab = vocabSize;
        replays.add(replayTargets(slice, new TracePrompts(promptSeed, vocab), client, err));
      } else {
        vocab = serveBoth(slice, client, replays, err);
      }
    }
    String report = report(slice, replays, vocab);
    PrintWriter o = spec.commandLine().getOut();
    o.print(report);
    o.flush();
    if (out != null) {
      Path parent = out.toAbsolutePath().getParent();
      if (parent != null) {
        Files.createDirectories(parent);
      }
      Path svg = out.resolveSibling(stem(out) + ".svg");
      Files.writeString(
          out,
          report + "![reuse and TTFT per run](" + svg.getFileName() + ")\n",
          StandardCharsets.UTF_8);
      Path json = out.resolveSibling(stem(out) + ".json");
      Files.writeString(json, json(slice, replays).toPrettyString(), StandardCharsets.UTF_8);
      Files.writeString(svg, chart(slice, replays), StandardCharsets.UTF_8);
      err.println("wrote " + out + ", " + json + " and " + svg);
      err.flush();
    }
    boolean failed =
        replays.stream().anyMatch(r -> r.completions().stream().anyMatch(c -> !c.ok()));
    return failed ? 1 : 0;
  }

  private void check() {
    if ((targets == null) == (serve == null)) {
      throw usage("give either --targets or --serve");
    }
    try {
      ModelOptions.weightType(dtype);
    } catch (IllegalArgumentException e) {
      throw usage(e.getMessage());
    }
    if (targets != null && (targets.isEmpty() || vocabSize == null || vocabSize < 2)) {
      throw usage("--targets needs at least one URL and --vocab-size (at least 2)");
    }
    if (serve != null && serve < 1) {
      throw usage("--serve=" + serve + " must be at least 1");
    }
    if (!(speed > 0) || Double.isInfinite(speed)) {
      throw usage("--speed=" + speed + " must be a positive number");
    }
    if (rate != null && (!(rate > 0) || rate.isInfinite())) {
      throw usage("--rate=" + rate + " must be a positive number");
    }
    if (rate != null && sequential) {
      throw usage("--rate and --sequential exclude each other");
    }
    if (maxRequests != null && maxRequests < 1) {
      throw usage("--max-requests=" + maxRequests + " must be at least 1");
    }
    if (maxOutput < 1) {
      throw usage("--max-output=" + maxOutput + " must be at least 1");
    }
    if (!(sloTtftMs > 0)) {
      throw usage("--slo-ttft-ms=" + sloTtftMs + " must be positive");
    }
    if (deviceTokens != null && deviceTokens < 1) {
      throw usage("--device-tokens=" + deviceTokens + " must be at least 1");
    }
    if (!(hostRatio > 0) || Double.isInfinite(hostRatio)) {
      throw usage("--host-ratio=" + hostRatio + " must be a positive number");
    }
    if (storeKind != null) {
      if (serve == null) {
        throw usage("--store is for the replicas --serve starts");
      }
      if (!STORE_KINDS.contains(storeKind)) {
        throw usage(
            "--store=" + storeKind + " is not a store; allowed: " + String.join(", ", STORE_KINDS));
      }
      if (storeKind.equals("redis") && redisUri == null) {
        throw usage("--store=redis needs --redis-uri");
      }
      if (!storeKind.equals("redis") && redisUri != null) {
        throw usage("--store=" + storeKind + " and --redis-uri exclude each other");
      }
    }
    if (memoryStoreBytes != null) {
      if (!storeKind().equals("memory") || serve == null) {
        throw usage("--memory-store-bytes is for --serve with --store memory");
      }
      if (memoryStoreBytes < 1) {
        throw usage("--memory-store-bytes=" + memoryStoreBytes + " must be positive");
      }
    }
    if (storeConfig != null) {
      if (serve == null) {
        throw usage("--store-config is for the replicas --serve starts");
      }
      try {
        store(Path.of("."));
      } catch (IllegalArgumentException e) {
        throw usage("--store-config: " + e.getMessage());
      }
    }
  }

  private ParameterException usage(String message) {
    return new ParameterException(spec.commandLine(), message);
  }

  /** The requests of the window, at most --max-requests, with their arrival offsets. */
  Slice slice(List<TraceRequest> all) {
    long from = Long.MIN_VALUE;
    long to = Long.MAX_VALUE;
    if (window != null) {
      String[] parts = window.split(":", -1);
      try {
        if (parts.length != 2) {
          throw new NumberFormatException();
        }
        from = Math.round(Double.parseDouble(parts[0]) * 1000);
        to = Math.round(Double.parseDouble(parts[1]) * 1000);
      } catch (NumberFormatException e) {
        throw usage("--window=" + window + " must be START:END in seconds");
      }
      if (from >= to) {
        throw usage("--window=" + window + " is empty: START must come before END");
      }
    }
    List<TraceRequest> chosen = new ArrayList<>();
    for (TraceRequest r : all) {
      if (r.timestampMs() >= from && r.timestampMs() < to) {
        chosen.add(r);
        if (maxRequests != null && chosen.size() == maxRequests) {
          break;
        }
      }
    }
    if (chosen.isEmpty()) {
      throw new IllegalArgumentException(
          "--trace=" + trace + ": no request in the slice" + (window != null ? " " + window : ""));
    }
    long[] at = new long[chosen.size()];
    if (rate != null) {
      SplittableRandom rnd = new SplittableRandom(rateSeed);
      double t = 0;
      for (int i = 0; i < at.length; i++) {
        at[i] = Math.round(t * 1e9);
        t += -Math.log(1 - rnd.nextDouble()) / rate;
      }
    } else {
      long t0 = chosen.getFirst().timestampMs();
      for (int i = 0; i < at.length; i++) {
        at[i] = Math.round((chosen.get(i).timestampMs() - t0) * 1e6 / speed);
      }
    }
    return new Slice(List.copyOf(chosen), at);
  }

  /**
   * --targets: the slice against the targets, their L3 figures the differences of their {@code
   * /metrics} counters between a scrape just before the replay and one once they are quiet after it
   * (a target's /metrics that cannot be read fails the command before any request is sent).
   */
  private Replay replayTargets(
      Slice slice, TracePrompts prompts, StreamClient client, PrintWriter err) throws Exception {
    List<URI> uris = targets.stream().map(t -> endpoint(t, "/v1/completions")).toList();
    List<URI> metrics =
        TargetMetrics.metricsOf(
            targets.stream().map(t -> endpoint(t, "/")).toList(), TargetMetrics.DEFAULT_TIMEOUT);
    try (TargetMetrics scraper = new TargetMetrics(metrics, TargetMetrics.DEFAULT_TIMEOUT)) {
      List<TargetMetrics.Reading> before = scraper.readAll();
      Replay done = replay("targets", slice, prompts, uris, client);
      List<TargetMetrics.Reading> after = scraper.awaitQuiet(TargetMetrics.DEFAULT_QUIET_WAIT, err);
      return done.with(TargetMetrics.difference(before, after));
    }
  }

  /** {@code path} on the server {@code target} names (http://HOST:PORT, trailing slashes too). */
  private static URI endpoint(String target, String path) {
    String base = target.strip();
    while (base.endsWith("/")) {
      base = base.substring(0, base.length() - 1);
    }
    try {
      URI uri = URI.create(base + path);
      if (uri.getScheme() == null || uri.getHost() == null) {
        throw new IllegalArgumentException("no scheme or host");
      }
      return uri;
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(
          "--targets: " + target + " is not a server's URL (http://HOST:PORT)", e);
    }
  }

  /** The request's max_tokens: its output length, capped, at least 1. */
  private int maxTokens(TraceRequest r) {
    return Math.max(1, Math.min(r.outputLength(), maxOutput));
  }

  /** Sends the slice to {@code endpoints} as the options say and waits for every request. */
  Replay replay(
      String label, Slice slice, TracePrompts prompts, List<URI> endpoints, StreamClient client)
      throws Exception {
    int n = slice.requests().size();
    List<Completion> done = new ArrayList<>(n);
    long start = System.nanoTime();
    if (sequential) {
      for (int i = 0; i < n; i++) {
        TraceRequest r = slice.requests().get(i);
        done.add(
            client.complete(endpoints.get(i % endpoints.size()), prompts.prompt(r), maxTokens(r)));
      }
      return new Replay(label, done, System.nanoTime() - start);
    }
    List<Future<Completion>> futures = new ArrayList<>(n);
    try (ExecutorService senders = Executors.newVirtualThreadPerTaskExecutor()) {
      for (int i = 0; i < n; i++) {
        TraceRequest r = slice.requests().get(i);
        int[] prompt = prompts.prompt(r); // built before its time comes
        long wait = start + slice.arrivalNs()[i] - System.nanoTime();
        if (wait > 0) {
          Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
        }
        URI to = endpoints.get(i % endpoints.size());
        int max = maxTokens(r);
        futures.add(senders.submit(() -> client.complete(to, prompt, max)));
      }
      for (Future<Completion> f : futures) {
        done.add(f.get());
      }
    }
    return new Replay(label, done, System.nanoTime() - start);
  }

  /** --serve: the slice against N replicas over one store, then against N without L3. */
  private int serveBoth(Slice slice, StreamClient client, List<Replay> replays, PrintWriter err)
      throws Exception {
    if (ModuleLayer.boot().findModule("jdk.incubator.vector").isEmpty()) {
      throw new IllegalArgumentException(
          "bench trace --serve needs the JVM option --add-modules jdk.incubator.vector"
              + " (bin/tokenspeed adds it)");
    }
    DType weights = ModelOptions.weightType(dtype);
    Path folder;
    if (SyntheticCheckpoints.isSynthetic(model)) {
      folder = SyntheticCheckpoints.materialize(model, SyntheticCheckpoints.DEFAULT_SEED, weights);
    } else {
      folder = Path.of(model);
      if (!Files.isDirectory(folder)) {
        throw new IllegalArgumentException("--model=" + model + " is not a directory");
      }
    }
    Tokenizer tokenizer = ModelOptions.tokenizerOf(folder);
    var chatPrompt = Serving.chatPrompt(ChatTemplate.load(folder), tokenizer);
    Path store = Files.createTempDirectory("tokenspeed-bench-trace");
    try (EngineModel lm = deviceOptions.load(folder, model, new TensorParallelOptions())) {
      int vocab = lm.vocabSize();
      int longest =
          slice.requests().stream().mapToInt(r -> r.inputLength() + maxTokens(r)).max().orElse(1);
      int tokens = deviceTokens != null ? deviceTokens : 4 * longest;
      EngineConfig base = EngineConfig.defaults(lm.deviceParentsFor(tokens));
      EngineConfig config =
          new EngineConfig(
              base.prefixGranularity(),
              base.blockGranularity(),
              base.deviceParents(),
              hostRatio,
              base.tokenBudget(),
              base.maxRunning(),
              base.demoteBelowFreeParents(),
              Runtime.getRuntime().availableProcessors(),
              base.maxQueued());
      TracePrompts prompts = new TracePrompts(promptSeed, vocab);
      // with Redis, a namespace of this run's own: what earlier runs wrote is not reused
      String namespace = "bench-trace-" + Long.toHexString(System.nanoTime());
      // a model on a GPU serves one engine (its forward's workspaces and streams are its own), so
      // each further replica on a GPU loads its own copy of the weights; on the CPU they share one
      List<EngineModel> models = new ArrayList<>(List.of(lm));
      try {
        for (int s = 1; s < serve; s++) {
          models.add(
              lm.gpu() ? deviceOptions.load(folder, model, new TensorParallelOptions()) : lm);
        }
        replayBoth(
            slice,
            prompts,
            models,
            config,
            tokenizer,
            chatPrompt,
            store,
            namespace,
            vocab,
            client,
            replays,
            err);
      } finally {
        for (EngineModel m : models) {
          if (m != lm) {
            m.close();
          }
        }
      }
      return vocab;
    } finally {
      DemoCommand.deleteTree(store);
    }
  }

  /**
   * The slice with L3 over {@code models}' engines (one a model), then without; the other way round
   * with {@code --baseline-first}. With {@code --store memory} the L3 run opens one memory store,
   * which every engine of the run uses through a {@link SharedStore} and which is closed once they
   * are.
   */
  private void replayBoth(
      Slice slice,
      TracePrompts prompts,
      List<EngineModel> models,
      EngineConfig config,
      Tokenizer tokenizer,
      java.util.function.Function<List<java.util.Map<String, Object>>, int[]> chatPrompt,
      Path store,
      String namespace,
      int vocab,
      StreamClient client,
      List<Replay> replays,
      PrintWriter err)
      throws Exception {
    for (boolean l3 : baselineFirst ? new boolean[] {false, true} : new boolean[] {true, false}) {
      List<Engine> engines = new ArrayList<>();
      List<Serving> servers = new ArrayList<>();
      Optional<StorageExtraConfig.Resolved> storage =
          l3 ? Optional.of(store(store)) : Optional.empty();
      // in one process, the memory store is shared by being one: opened once for the run's engines
      L3Settings shared =
          l3 && storeKind().equals("memory") ? StorageOptions.openL3(storage.get()) : null;
      try {
        for (int s = 0; s < serve; s++) {
          Engine e =
              shared != null
                  ? startEngine(
                      models.get(s),
                      config,
                      tokenizer.specialTokens().eosId(),
                      new L3Settings(
                          new SharedStore(shared.store()),
                          shared.runtime(),
                          shared.attentionBackend()))
                  : StorageOptions.startEngine(
                      models.get(s), config, tokenizer.specialTokens().eosId(), storage);
          engines.add(e);
          if (l3 && redisUri != null) {
            e.rotateNamespace(namespace);
          }
          servers.add(serving(e, vocab, tokenizer, chatPrompt));
        }
        List<URI> uris =
            servers.stream()
                .map(s -> URI.create("http://127.0.0.1:" + s.port() + "/v1/completions"))
                .toList();
        err.println((l3 ? "with L3" : "L3 off") + ": " + serve + " replica(s)");
        err.flush();
        warmUp(uris, vocab, warmUpLongTokens(slice, engines.getFirst().maxRequestTokens()), client);
        awaitQuiet(engines);
        Optional<L3Figures> before = L3Figures.of(engines);
        Replay done = replay(l3 ? "l3" : "off", slice, prompts, uris, client);
        awaitQuiet(engines);
        replays.add(
            done.with(L3Figures.of(engines).map(after -> after.minus(before.orElseThrow()))));
        if (l3 && redisUri != null) {
          engines
              .getFirst()
              .updateWeightVersion(namespace + "-deleted"); // deletes the run's objects
        }
      } finally {
        servers.forEach(Serving::close);
        engines.forEach(Engine::close);
        if (shared != null) {
          closeShared(shared.store(), err);
        }
      }
    }
  }

  /**
   * An engine over {@code model} with L3 over {@code l3}'s store, already open; one that cannot
   * start is invalid input naming the store, as {@link StorageOptions#startEngine} says it.
   */
  private static Engine startEngine(
      EngineModel model, EngineConfig config, OptionalInt eos, L3Settings l3) {
    try {
      return model.start(config, eos, l3);
    } catch (IllegalStateException e) {
      throw new IllegalArgumentException("--store=" + l3.store().name() + ": " + e.getMessage(), e);
    }
  }

  /** Closes the run's shared memory store, once its engines are closed, and says what it held. */
  private static void closeShared(Store store, PrintWriter err) throws Exception {
    long held = store instanceof MemoryStore m ? m.usedBytes() : -1;
    store.close();
    err.println(
        "with L3: the shared "
            + store.name()
            + " store, closed"
            + (held >= 0 ? String.format(Locale.ROOT, ", held %.1f MB", held / 1e6) : ""));
    err.flush();
  }

  /**
   * The store one engine of several in this process is given: every call goes to the shared store
   * but {@link #close()}, which leaves it open for the others (the engine closes the store it is
   * given when it closes; the shared one is closed once they all are).
   */
  static final class SharedStore extends ForwardingStore {
    SharedStore(Store shared) {
      super(shared);
    }

    @Override
    public void close() {}
  }

  /** Tokens of the short warm-up prompt each replica serves before a replay ({@link #warmUp}). */
  static final int WARM_UP_TOKENS = 256;

  /** The most tokens of the long warm-up prompt ({@link #warmUpLongTokens}). */
  static final int WARM_UP_LONG_CAP = 8192;

  /**
   * Tokens of the long warm-up prompt: the slice's median input length, at most {@link
   * #WARM_UP_LONG_CAP} and what a request may hold less the 2 tokens it asks for; 0 (none) when
   * that is not longer than the short one.
   */
  static int warmUpLongTokens(Slice slice, int maxRequestTokens) {
    int[] lengths =
        slice.requests().stream().mapToInt(TraceRequest::inputLength).sorted().toArray();
    if (lengths.length == 0) {
      return 0;
    }
    int n = Math.min(Math.min(lengths[lengths.length / 2], WARM_UP_LONG_CAP), maxRequestTokens - 2);
    return n > WARM_UP_TOKENS ? n : 0;
  }

  /**
   * Requests to each replica before the replay, outside its figures: a fresh process's first
   * requests pay for compiling the hot code and, on a GPU, for the kernels' first launches, which
   * would otherwise fall on whichever run goes first (measured on the CPU: a first replay up to 1.8
   * times slower at p50 than the same replay second). A prompt of {@link #WARM_UP_TOKENS} tokens,
   * then one of {@code longTokens} (none when 0), the length of the slice's median prompt, whose
   * long attention loops and chunked prefill a short prompt never runs; each of a generator of its
   * own, which no trace prompt (nor the other warm-up prompt) shares beyond chance, each asking for
   * 2 tokens. A replica that fails one fails the run.
   */
  private static void warmUp(List<URI> uris, int vocab, int longTokens, StreamClient client)
      throws InterruptedException {
    java.util.SplittableRandom rnd = new java.util.SplittableRandom(0x5741524dL);
    for (URI uri : uris) {
      for (int tokens :
          longTokens > 0 ? new int[] {WARM_UP_TOKENS, longTokens} : new int[] {WARM_UP_TOKENS}) {
        int[] prompt = new int[tokens];
        for (int i = 0; i < prompt.length; i++) {
          prompt[i] = rnd.nextInt(vocab);
        }
        StreamClient.Completion c = client.complete(uri, prompt, 2);
        if (c.error() != null) {
          throw new IllegalStateException(
              "the warm-up request to " + uri + " (" + tokens + " tokens) failed: " + c.error());
        }
      }
    }
  }

  /**
   * Waits (at most 30 s) until every replica's last metrics snapshot shows no request and no L3
   * work, so that the replay's figures include its write-through.
   */
  private static void awaitQuiet(List<Engine> engines) throws InterruptedException {
    long deadline = System.nanoTime() + 30_000_000_000L;
    for (Engine e : engines) {
      while (System.nanoTime() - deadline < 0
          && !(e.metrics().idle() && e.metrics().storage().map(st -> !st.pending()).orElse(true))) {
        Thread.sleep(20);
      }
    }
  }

  private Serving serving(
      Engine engine,
      int vocab,
      Tokenizer tokenizer,
      java.util.function.Function<List<java.util.Map<String, Object>>, int[]> chatPrompt) {
    ServingState state = new ServingState();
    Serving s =
        Serving.start(
            new Serving.Options(
                engine,
                vocab,
                tokenizer,
                chatPrompt,
                "trace",
                engine.maxRequestTokens(),
                "127.0.0.1",
                0,
                64L << 20,
                null,
                0,
                state,
                HttpFrontend.DEFAULT_HEADER_TIMEOUT_S * 1000L));
    state.ready();
    return s;
  }

  /** The kind of the replicas' store: {@code --store}, else redis with --redis-uri, else file. */
  String storeKind() {
    return storeKind != null ? storeKind : redisUri != null ? "redis" : "file";
  }

  /**
   * The memory store's capacity: --memory-store-bytes, capacity_bytes of --store-config, or 16 GiB.
   */
  private long memoryCapacity() {
    return ((StorageBackend.Memory) store(Path.of(".")).backend()).settings().capacityBytes();
  }

  /**
   * The replicas' shared store as {@link #storeKind()} says: the Redis server of --redis-uri, the
   * file store in {@code dir}, or a memory store of --memory-store-bytes; with the same
   * asynchronous settings whichever it is.
   */
  private StorageExtraConfig.Resolved store(Path dir) {
    ObjectNode json = JSON.createObjectNode();
    String backend = storeKind();
    switch (backend) {
      case "redis" -> json.put("uri", redisUri);
      case "memory" ->
          json.put(
              "capacity_bytes",
              memoryStoreBytes != null ? memoryStoreBytes : DEFAULT_MEMORY_STORE_BYTES);
      default -> json.put("path", dir.toString());
    }
    json.putObject("async").put("min_extension_tokens", 64);
    if (storeConfig != null) {
      com.fasterxml.jackson.databind.JsonNode extra;
      try {
        extra = JSON.readTree(storeConfig);
      } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
        throw new IllegalArgumentException("not JSON: " + e.getOriginalMessage());
      }
      if (extra == null || !extra.isObject()) {
        throw new IllegalArgumentException("a JSON object is needed, got " + storeConfig);
      }
      extra
          .properties()
          .forEach(
              e -> {
                if (!backend.equals("memory")
                    && (e.getKey().equals("path") || e.getKey().equals("uri"))) {
                  throw new IllegalArgumentException(
                      e.getKey() + " is set by the command itself (--redis-uri, or a new folder)");
                }
                if (e.getKey().equals("capacity_bytes") && memoryStoreBytes != null) {
                  throw new IllegalArgumentException(
                      "capacity_bytes and --memory-store-bytes exclude each other");
                }
                json.set(e.getKey(), e.getValue());
              });
    }
    return StorageExtraConfig.parse(backend, json.toString());
  }

  private static String stem(Path file) {
    String name = file.getFileName().toString();
    int dot = name.lastIndexOf('.');
    return dot > 0 ? name.substring(0, dot) : name;
  }

  /** Percentile {@code q} of sorted values (nearest rank); NaN when there are none. */
  static double percentile(double[] sorted, double q) {
    if (sorted.length == 0) {
      return Double.NaN;
    }
    int rank = (int) Math.ceil(q * sorted.length);
    return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
  }

  /** The figures of one replay. */
  record Figures(
      int requests,
      int failed,
      long inputTokens,
      long deviceTokens,
      long hostTokens,
      long storageTokens,
      long outputTokens,
      double wallS,
      double[] ttftMs,
      double[] tpotMs,
      int withinSlo) {

    double share(long tokens) {
      return inputTokens == 0 ? 0 : (double) tokens / inputTokens;
    }

    double reused() {
      return share(deviceTokens + hostTokens + storageTokens);
    }
  }

  Figures figures(Slice slice, Replay r) {
    long input = 0;
    long device = 0;
    long host = 0;
    long storage = 0;
    long output = 0;
    int failed = 0;
    int slo = 0;
    List<Double> ttft = new ArrayList<>();
    List<Double> tpot = new ArrayList<>();
    for (int i = 0; i < r.completions().size(); i++) {
      Completion c = r.completions().get(i);
      input += slice.requests().get(i).inputLength();
      if (!c.ok()) {
        failed++;
        continue;
      }
      device += c.deviceTokens();
      host += c.hostTokens();
      storage += c.storageTokens();
      output += c.tokens();
      ttft.add(c.ttftMs());
      if (c.ttftMs() <= sloTtftMs) {
        slo++;
      }
      if (!Double.isNaN(c.tpotMs())) {
        tpot.add(c.tpotMs());
      }
    }
    return new Figures(
        r.completions().size(),
        failed,
        input,
        device,
        host,
        storage,
        output,
        r.wallNs() / 1e9,
        ttft.stream().mapToDouble(Double::doubleValue).sorted().toArray(),
        tpot.stream().mapToDouble(Double::doubleValue).sorted().toArray(),
        slo);
  }

  private String report(Slice slice, List<Replay> replays, int vocab) {
    StringBuilder b = new StringBuilder();
    List<TraceRequest> rs = slice.requests();
    long input = rs.stream().mapToLong(TraceRequest::inputLength).sum();
    double bound = CacheBound.hitRate(rs);
    b.append("# Trace replay: ").append(trace.getFileName()).append("\n\n");
    b.append(
        String.format(
            Locale.ROOT,
            "%d requests (%s), %d input tokens, timestamps %d to %d ms; %s; prompts of vocabulary"
                + " %d, seed %d; max_tokens = output_length capped at %d.%n%n",
            rs.size(),
            window != null ? "window " + window + " s" : "from the start",
            input,
            rs.getFirst().timestampMs(),
            rs.getLast().timestampMs(),
            sequential
                ? "sent one after another"
                : rate != null
                    ? String.format(Locale.ROOT, "Poisson arrivals at %.3g/s", rate)
                    : String.format(Locale.ROOT, "sent at the timestamps ÷ %.3g", speed),
            vocab,
            promptSeed,
            maxOutput));
    if (serve != null) {
      b.append(
          String.format(
              Locale.ROOT,
              "%d replica(s) started here, with L3 over one shared store, **%s** (%s), and as many"
                  + " fresh ones without L3 (the baseline%s).%n%n",
              serve,
              storeKind(),
              switch (storeKind()) {
                case "memory" ->
                    String.format(
                        Locale.ROOT,
                        "one in-process memory store that the replicas use, capacity %d bytes",
                        memoryCapacity());
                case "redis" ->
                    "the Redis server of --redis-uri, under a namespace of the run's own";
                default -> "a file store in a temporary folder";
              },
              baselineFirst ? ", replayed first" : ""));
    }
    b.append(
        String.format(
            Locale.ROOT,
            "The slice's infinite-cache hit rate: **%.1f %%** of its input tokens began an earlier"
                + " request's prompt (an engine reuses whole pages and computes each prompt's last"
                + " token, so it can reach this only to within a page and a token per request).%n%n",
            100 * bound));
    b.append(
        "| run | requests | failed | reused: Device | Host | L3 | all | of the bound | TTFT p50"
            + " ms | p90 | p99 | TPOT p50 ms | p90 | p99 | output tokens/s | TTFT within "
            + String.format(Locale.ROOT, "%.0f", sloTtftMs)
            + " ms |\n");
    b.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (Replay r : replays) {
      Figures f = figures(slice, r);
      b.append(
          String.format(
              Locale.ROOT,
              "| %s | %d | %d | %.1f %% | %.1f %% | %.1f %% | %.1f %% | %.2f | %.1f | %.1f | %.1f |"
                  + " %.2f | %.2f | %.2f | %.1f | %.1f %% |%n",
              r.label(),
              f.requests(),
              f.failed(),
              100 * f.share(f.deviceTokens()),
              100 * f.share(f.hostTokens()),
              100 * f.share(f.storageTokens()),
              100 * f.reused(),
              bound > 0 ? f.reused() / bound : Double.NaN,
              percentile(f.ttftMs(), 0.5),
              percentile(f.ttftMs(), 0.9),
              percentile(f.ttftMs(), 0.99),
              percentile(f.tpotMs(), 0.5),
              percentile(f.tpotMs(), 0.9),
              percentile(f.tpotMs(), 0.99),
              f.outputTokens() / f.wallS(),
              100.0 * f.withinSlo() / Math.max(1, f.requests())));
    }
    b.append(
        "\nReused: the responses' `usage.cached_tokens_by_source` (device, host, storage) over the"
            + " slice's input tokens. Output tokens/s: tokens received over the replay's wall"
            + " time.\n");
    if (replays.stream().anyMatch(r -> r.l3().isPresent())) {
      b.append(
          "\n| run | L3 read MB | L3 written MB | GETs | soft timeouts | Ready holds expired |"
              + " pressure bypasses | fallbacks |\n");
      b.append("|---|---:|---:|---:|---:|---:|---:|---:|\n");
      for (Replay r : replays) {
        r.l3()
            .ifPresent(
                f ->
                    b.append(
                        String.format(
                            Locale.ROOT,
                            "| %s | %.1f | %.1f | %d | %d | %d | %d | %d |%n",
                            r.label(),
                            f.getBytes() / 1e6,
                            f.putBytes() / 1e6,
                            f.getsIssued(),
                            f.softTimeouts(),
                            f.readyExpirations(),
                            f.pressureBypasses(),
                            f.fallbacks())));
      }
      b.append(
          targets != null
              ? "\nFrom the targets' `/metrics` (a router's: its backends'): each counter's"
                  + " difference between a scrape just"
                  + " before the replay and one once the targets were quiet after it (no request"
                  + " running or waiting, no L3 work pending; at most "
                  + TargetMetrics.DEFAULT_QUIET_WAIT.toSeconds()
                  + " s), summed over the targets that have L3, so it includes whatever else they"
                  + " served meanwhile. L3 read and written: `tokenspeed:l3_payload_bytes_total`"
                  + " (`kind` get, put; the executor's payload bytes, every `tp_rank`); GETs:"
                  + " `tokenspeed:l3_operations_issued_total{kind=\"get\"}`."
              : "\nFrom the replicas' own metrics (the executor's payload bytes, summed over the"
                  + " replicas): the difference between a snapshot once they were quiet after their"
                  + " warm-up requests (each replica one of "
                  + WARM_UP_TOKENS
                  + " tokens and, where the slice's median prompt is longer, one of its length up"
                  + " to "
                  + WARM_UP_LONG_CAP
                  + ", prompts no trace prompt shares, before the replay and outside every figure)"
                  + " and one once they were quiet after the replay.");
      b.append(
          " Pressure bypasses: requests that skipped L3 because its pressure gate was closed"
              + " (`reason=\"pressure\"`). Fallbacks: soft timeouts + Ready holds expired +"
              + " pressure bypasses, each a prefix the store was to give that was computed"
              + " instead.\n");
    }
    for (Replay r : replays) {
      r.completions().stream()
          .filter(c -> !c.ok())
          .limit(3)
          .forEach(c -> b.append("\n- ").append(r.label()).append(" failed: ").append(c.error()));
    }
    return b.append('\n').toString();
  }

  /**
   * Two bar groups, linear scales: the share of input tokens each run reused beside the slice's
   * infinite-cache bound, and each run's TTFT p50 and p90.
   */
  private String chart(Slice slice, List<Replay> replays) {
    List<String> labels = new ArrayList<>();
    List<Double> shares = new ArrayList<>();
    labels.add("infinite-cache bound");
    shares.add(100 * CacheBound.hitRate(slice.requests()));
    List<String> ttftLabels = new ArrayList<>();
    List<Double> ttfts = new ArrayList<>();
    for (Replay r : replays) {
      Figures f = figures(slice, r);
      labels.add(r.label() + " reused");
      shares.add(100 * f.reused());
      ttftLabels.add(r.label() + " TTFT p50");
      ttfts.add(percentile(f.ttftMs(), 0.5));
      ttftLabels.add(r.label() + " TTFT p90");
      ttfts.add(percentile(f.ttftMs(), 0.9));
    }
    int rowH = 22;
    int left = 170;
    int width = 720;
    int rows = labels.size() + ttftLabels.size();
    int height = 60 + rowH * rows + 40;
    StringBuilder s = SvgBars.open(width, height);
    int y = bars(s, "input tokens reused, %", labels, shares, 100, left, width, 20, rowH);
    double most = ttfts.stream().mapToDouble(d -> Double.isNaN(d) ? 0 : d).max().orElse(1);
    bars(s, "TTFT, ms", ttftLabels, ttfts, Math.max(1, most), left, width, y + 20, rowH);
    return s.append("</svg>\n").toString();
  }

  /** One titled group of bars at {@code top}; returns where the next group may start. */
  private static int bars(
      StringBuilder s,
      String title,
      List<String> labels,
      List<Double> values,
      double full,
      int left,
      int width,
      int top,
      int rowH) {
    s.append(
        String.format(
            Locale.ROOT, "<text x=\"10\" y=\"%d\" font-size=\"14\">%s</text>%n", top, title));
    for (int i = 0; i < labels.size(); i++) {
      double v = Double.isNaN(values.get(i)) ? 0 : values.get(i);
      double w = (width - left - 80) * Math.min(1, v / full);
      int y = top + 8 + i * rowH;
      String color = labels.get(i).startsWith("infinite") ? "#8c8c8c" : "#2b7bb9";
      SvgBars.bar(s, labels.get(i), v, w, left, y, rowH, color);
    }
    return top + 8 + labels.size() * rowH + 10;
  }

  private ObjectNode json(Slice slice, List<Replay> replays) {
    ObjectNode root = JSON.createObjectNode();
    List<TraceRequest> rs = slice.requests();
    long[] bound = CacheBound.hitTokens(rs);
    root.put("trace", trace.toString());
    root.put("requests", rs.size());
    root.put("infinite_cache_hit_rate", CacheBound.hitRate(rs));
    if (serve != null) {
      root.put("replicas", serve);
      root.put("store", storeKind());
      if (storeKind().equals("memory")) {
        root.put("memory_store_bytes", memoryCapacity());
      }
    }
    ArrayNode runs = root.putArray("runs");
    for (Replay r : replays) {
      Figures f = figures(slice, r);
      ObjectNode run = runs.addObject();
      run.put("label", r.label());
      run.put("failed", f.failed());
      run.put("input_tokens", f.inputTokens());
      run.put("reused_device_tokens", f.deviceTokens());
      run.put("reused_host_tokens", f.hostTokens());
      run.put("reused_storage_tokens", f.storageTokens());
      run.put("output_tokens", f.outputTokens());
      run.put("wall_s", f.wallS());
      run.put("within_slo", f.withinSlo());
      r.l3()
          .ifPresent(
              l3 ->
                  run.putObject("l3")
                      .put("get_bytes", l3.getBytes())
                      .put("put_bytes", l3.putBytes())
                      .put("gets_issued", l3.getsIssued())
                      .put("soft_timeouts", l3.softTimeouts())
                      .put("ready_expirations", l3.readyExpirations())
                      .put("pressure_bypasses", l3.pressureBypasses())
                      .put("fallbacks", l3.fallbacks()));
      ArrayNode per = run.putArray("per_request");
      for (int i = 0; i < r.completions().size(); i++) {
        Completion c = r.completions().get(i);
        ObjectNode n = per.addObject();
        n.put("input_tokens", rs.get(i).inputLength());
        n.put("bound_tokens", bound[i]);
        n.put("ok", c.ok());
        n.put("reused_tokens", c.cachedTokens());
        n.put("ttft_ms", c.ok() ? c.ttftMs() : Double.NaN);
      }
    }
    return root;
  }

  @Override
  public String toString() {
    return "bench trace " + Arrays.asList(trace, targets, serve);
  }
}

package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.engine.EngineStats;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.chat.ChatTemplate;
import io.tokenspeed.server.cli.StreamClient.Completion;
import io.tokenspeed.server.config.StorageExtraConfig;
import io.tokenspeed.server.http.HttpFrontend;
import io.tokenspeed.server.http.Serving;
import io.tokenspeed.server.http.ServingState;
import io.tokenspeed.server.http.WarmUp;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.function.ToDoubleFunction;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed bench serve}: the serving path measured from the client's side, in one process
 * (engines, HTTP servers and the client of {@link StreamClient}), with a Markdown report.
 *
 * <ul>
 *   <li>{@code --mode overhead}: one warmed server over one engine; rounds of the same short prompt
 *       (under one page, so that a repeat reuses nothing), one side {@link Engine#submit} with its
 *       first {@link RequestHandle#nextToken()}, one a streamed completion through HTTP to its
 *       first event carrying a token, read by the lean keep-alive client of {@link
 *       KeepAliveClient}, and one the same through {@code java.net.http} ({@link StreamClient}),
 *       the order rotating round by round. Target: HTTP p50 ≤ 1.05 × direct p50 + 1 ms.
 *   <li>{@code --mode load}: closed-loop clients on virtual threads, each sending its requests one
 *       after the other, over a seeded shared-prefix workload (a random one of S system prompts of
 *       P tokens, then a random user suffix of U tokens); per configuration — one server with L3
 *       off, one server with L3 on, two servers behind one store with L3 on — and per number of
 *       clients: requests/s, TTFT and TPOT percentiles, the prefill saved and the share of it the
 *       store gave. Every configuration runs on fresh engines and a fresh store (a new file-store
 *       directory, or a new Redis namespace deleted afterwards); with two servers every client
 *       sends its even requests to the first and its odd ones to the second, so the first wave
 *       reaches the first server alone and each server can have the other's prefixes only through
 *       the store (usually the second restores the first's; when the second's own write-through
 *       lands first, the first restores the second's). A fourth configuration is a fresh server
 *       over a store that a first server (untimed, then closed) filled with every system prompt:
 *       every request that does not find its prefix on the server asks for one the store holds, and
 *       the report gives the share restored, the soft timeouts and the TTFT of restored and
 *       computed requests. With several {@code --soft-deadline-ms} every configuration with L3 runs
 *       once per deadline. The order of the configurations and of the deadlines is reversed on
 *       every other repeat.
 *   <li>{@code --mode throughput}: one warmed server over one engine, L3 off, and one shared prefix
 *       of seeded random tokens (one untimed request caches it first) followed by a random suffix
 *       of each request's own; per number of clients (closed loop, greedy, a fixed number of
 *       generated tokens) the output tokens/s, TTFT and TPOT, and from the engine's {@link
 *       EngineStats} over the level its rounds, forward and round time, so that the served
 *       throughput stands beside the raw one the forward pass alone would deliver at the same batch
 *       ({@link ServedThroughput}); with the process's CPU time and, on a GPU, its utilization
 *       ({@link GpuUtilization}).
 * </ul>
 *
 * <p>{@code --device cuda} runs every engine on the GPU (one set of weights, loaded once; the
 * engines of a configuration side by side over it).
 *
 * <p>The JIT warm-up ({@link WarmUp}, and in load mode an L3 round trip through two throwaway
 * servers) runs once, before any timed request.
 */
@Command(
    name = "serve",
    mixinStandardHelpOptions = true,
    sortOptions = false,
    description = {
      "The serving path from a client's side, in-process: --mode overhead (HTTP time to the first"
          + " streamed token vs Engine.submit) or --mode load (concurrent clients over a"
          + " shared-prefix workload: one server with L3 off and on, two servers behind one"
          + " store, a fresh server over a filled store; per soft deadline) or --mode throughput"
          + " (output tokens/s per number of clients beside the forward pass's own speed at the"
          + " same batch). Prints a Markdown report."
    })
final class BenchServeCommand implements Callable<Integer> {

  /** Helidon's own log, held so that its level stays (a logger nobody holds may be collected). */
  private static final Logger HELIDON_LOG = Logger.getLogger("io.helidon");

  private static final ObjectMapper JSON = new ObjectMapper();

  /** What {@code --mode} may name. */
  static final List<String> MODES = List.of("overhead", "load", "soak", "throughput");

  /** L3 extensions of one page or more are worth a read (the default is four pages). */
  static final int MIN_EXTENSION_TOKENS = 64;

  @Spec private CommandSpec spec;

  @Mixin private DeviceOptions deviceOptions;

  @Option(
      names = "--mode",
      required = true,
      paramLabel = "overhead|load|soak|throughput",
      description = "What to measure.")
  private String mode;

  @Option(
      names = "--model",
      paramLabel = "DIR|synthetic:NAME",
      description = "Model (default: ${DEFAULT-VALUE}).")
  private String model = "synthetic:llama-100m";

  @Option(
      names = "--dtype",
      paramLabel = "f32|bf16",
      description =
          "A synthetic model's weight type (default: ${DEFAULT-VALUE}; bf16 runs a GPU's tensor"
              + " cores).")
  private String dtype = "f32";

  @Option(
      names = "--threads",
      paramLabel = "N",
      description =
          "Compute threads of each engine (default: overhead every core; load the cores divided"
              + " among the configuration's servers).")
  private Integer threads;

  @Option(
      names = "--max-tokens",
      paramLabel = "M",
      description =
          "Tokens generated per request (default: "
              + DEFAULT_MAX_TOKENS
              + "; throughput: "
              + DEFAULT_THROUGHPUT_MAX_TOKENS
              + ").")
  private Integer maxTokensOption;

  /** Tokens generated per request unless {@code --max-tokens} says. */
  static final int DEFAULT_MAX_TOKENS = 16;

  /** Tokens generated per request of {@code --mode throughput} unless {@code --max-tokens} says. */
  static final int DEFAULT_THROUGHPUT_MAX_TOKENS = 64;

  /** {@code --max-tokens} or the mode's default, once {@link #check} has run. */
  private int maxTokens;

  @Option(
      names = "--workload-seed",
      paramLabel = "N",
      description =
          "Seed of the prompts and of each request's choices (default: ${DEFAULT-VALUE}).")
  private long workloadSeed = 7;

  @Option(
      names = "--warmup-rounds",
      paramLabel = "N",
      description =
          "Rounds of the serving warm-up before any timed request (default: ${DEFAULT-VALUE}).")
  private int warmupRounds = 3;

  @Option(
      names = "--pairs",
      paramLabel = "N",
      description =
          "overhead: rounds of direct / HTTP / java.net.http (default: ${DEFAULT-VALUE}).")
  private int pairs = 30;

  @Option(
      names = "--prompt-tokens",
      paramLabel = "N",
      description = "overhead: the prompt's tokens, under one page (default: ${DEFAULT-VALUE}).")
  private int promptTokens = 48;

  @Option(
      names = "--clients",
      split = ",",
      paramLabel = "N[,N...]",
      description =
          "load: concurrent clients, one run each; soak: the first value is the calibration's"
              + " clients (default: 16,64).")
  private List<Integer> clients = List.of(16, 64);

  @Option(
      names = "--requests",
      paramLabel = "R",
      description = "load: requests each client sends (default: ${DEFAULT-VALUE}).")
  private int requests = 8;

  @Option(
      names = "--system-prompts",
      paramLabel = "S",
      description = "load: distinct system prompts (default: ${DEFAULT-VALUE}).")
  private int systemPrompts = 4;

  @Option(
      names = "--system-tokens",
      paramLabel = "P",
      description = "load: tokens of each system prompt, whole pages (default: ${DEFAULT-VALUE}).")
  private int systemTokens = 256;

  @Option(
      names = "--user-tokens",
      paramLabel = "U",
      description = "load: tokens of each request's own suffix (default: ${DEFAULT-VALUE}).")
  private int userTokens = 32;

  @Option(
      names = "--repeats",
      paramLabel = "N",
      description =
          "load: runs of the whole matrix, the configurations' order reversed on every other"
              + " (default: ${DEFAULT-VALUE}).")
  private int repeats = 1;

  @Option(
      names = "--redis-uri",
      paramLabel = "URI",
      description =
          "load: the store is this Redis server (default: the file store in a new"
              + " temporary directory).")
  private String redisUri;

  @Option(
      names = "--file-fsync",
      description = "load: the file store forces every object to the disk (default: off).")
  private boolean fileFsync;

  @Option(
      names = "--soft-deadline-ms",
      split = ",",
      paramLabel = "MS[,MS...]",
      description =
          "load: how long a request waits for L3 (async.soft_deadline_ms); several values run"
              + " every L3 configuration once per value; soak: the first value (default: 2000:"
              + " several rounds of prefill under load).")
  private List<Integer> softDeadlinesMs = List.of(2000);

  @Option(
      names = "--setups",
      split = ",",
      paramLabel = "ID[,ID...]",
      description =
          "load: the configurations to run: off (one server, L3 off), on (one server, L3 on, its"
              + " store empty), two (two servers behind one store), filled (a fresh server over a"
              + " store that a first server filled with every system prompt) (default: all).")
  private List<String> setupIds = List.of("off", "on", "two", "filled");

  @Option(
      names = "--device-tokens",
      paramLabel = "TOKENS",
      description =
          "Device KV capacity of each engine, in tokens (default: "
              + DEFAULT_DEVICE_TOKENS
              + "; throughput: at least that, and enough for the shared prefix and every"
              + " client's own pages at the most clients).")
  private Integer deviceTokensOption;

  /** Device KV capacity of each engine unless {@code --device-tokens} says. */
  static final int DEFAULT_DEVICE_TOKENS = 8192;

  /** {@code --device-tokens} or the mode's default, once {@link #check} has run. */
  private int deviceTokens;

  @Option(
      names = "--host-ratio",
      paramLabel = "RATIO",
      description = "Host KV capacity as a multiple of the Device's (default: ${DEFAULT-VALUE}).")
  private double hostRatio = 0.125;

  @Option(
      names = "--max-running",
      paramLabel = "N",
      description =
          "Most requests each engine decodes together (default: "
              + DEFAULT_MAX_RUNNING
              + "; throughput: the most --concurrency, which it must not be below).")
  private Integer maxRunningOption;

  /** Most requests each engine decodes together unless {@code --max-running} says. */
  static final int DEFAULT_MAX_RUNNING = 32;

  /** {@code --max-running} or the mode's default, once {@link #check} has run. */
  private int maxRunning;

  @Option(
      names = "--token-budget",
      paramLabel = "TOKENS",
      description = "Most tokens one forward batch computes (default: ${DEFAULT-VALUE}).")
  private int tokenBudget = 512;

  @Option(names = "--out", paramLabel = "FILE", description = "Also write the report to this file.")
  private Path out;

  @Option(
      names = "--max-queued",
      paramLabel = "N",
      description =
          "Most requests waiting for admission in each engine; more are refused with 429"
              + " (default: the engine's, 1024).")
  private Integer maxQueued;

  @Option(
      names = "--concurrency",
      split = ",",
      paramLabel = "C[,C...]",
      description =
          "throughput: concurrent clients, one level each, in this order (default:"
              + " 1,8,16,32,64,128).")
  private List<Integer> concurrency = List.of(1, 8, 16, 32, 64, 128);

  @Option(
      names = "--requests-per-client",
      paramLabel = "R",
      description = "throughput: requests each client sends per level (default: ${DEFAULT-VALUE}).")
  private int requestsPerClient = 4;

  @Option(
      names = "--prefix-tokens",
      paramLabel = "P",
      description =
          "throughput: tokens of the one system prefix every request shares (seeded random; 0:"
              + " none) (default: ${DEFAULT-VALUE}).")
  private int prefixTokens = 2048;

  @Option(
      names = "--suffix-tokens",
      paramLabel = "U",
      description =
          "throughput: random tokens of each request's own after the prefix (default:"
              + " ${DEFAULT-VALUE}).")
  private int suffixTokens = 16;

  @Option(
      names = "--logprobs",
      paramLabel = "N",
      description =
          "throughput: logprobs with N alternatives per token in every request (the completions"
              + " API's logprobs: N), or -1 for none (default: ${DEFAULT-VALUE}).")
  private int logprobs = StreamClient.NO_LOGPROBS;

  /** The most alternatives per token a request may ask for (the server's bound). */
  static final int MAX_LOGPROBS = 20;

  @Option(
      names = "--duration-s",
      paramLabel = "S",
      description = "soak: seconds of overload (default: ${DEFAULT-VALUE}).")
  private long durationS = 600;

  @Option(
      names = "--overload",
      paramLabel = "K",
      description = "soak: the overload's rate as a multiple of the sustainable (default: 10).")
  private double overload = 10;

  @Option(
      names = "--calibrate-s",
      paramLabel = "S",
      description =
          "soak: seconds of the closed loop that measures the sustainable rate, and of the"
              + " baseline at half of it (at least 30 s) (default: ${DEFAULT-VALUE}).")
  private long calibrateS = 30;

  @Option(
      names = "--recovery-s",
      paramLabel = "S",
      description =
          "soak: seconds at half the sustainable rate after the overload (default:"
              + " ${DEFAULT-VALUE}).")
  private long recoveryS = 90;

  /** Where the model computes ({@code cpu} or {@code cuda:N}), once it is loaded. */
  private String deviceName = "cpu";

  /**
   * One load configuration: {@code servers} timed servers; with {@code filled} a first server
   * (untimed, then closed) has written every system prompt to the store before they start.
   */
  record Setup(String id, String name, int servers, boolean l3, boolean filled) {}

  static final List<Setup> SETUPS =
      List.of(
          new Setup("off", "one server, L3 off", 1, false, false),
          new Setup("on", "one server, L3 on", 1, true, false),
          new Setup("two", "two servers, one store, L3 on", 2, true, false),
          new Setup("filled", "second server, store filled first", 1, true, true));

  /** The configurations {@code --setups} names, in the order of {@link #SETUPS}. */
  private List<Setup> chosen() {
    return SETUPS.stream().filter(s -> setupIds.contains(s.id())).toList();
  }

  /** One engine behind its HTTP server. */
  private record Replica(Engine engine, Serving serving) implements AutoCloseable {
    URI completions() {
      return URI.create("http://127.0.0.1:" + serving.port() + "/v1/completions");
    }

    URI health() {
      return URI.create("http://127.0.0.1:" + serving.port() + "/health");
    }

    @Override
    public void close() {
      serving.close();
      engine.close();
    }
  }

  /** What every run of one invocation shares. */
  private record Env(
      EngineModel lm,
      Tokenizer tokenizer,
      Function<List<Map<String, Object>>, int[]> chatPrompt,
      StreamClient client,
      Path work,
      PrintWriter err) {}

  @Override
  public Integer call() throws Exception {
    check();
    if (ModuleLayer.boot().findModule("jdk.incubator.vector").isEmpty()) {
      throw new IllegalArgumentException(
          "bench serve needs the JVM option --add-modules jdk.incubator.vector (bin/tokenspeed"
              + " adds it)");
    }
    HELIDON_LOG.setLevel(Level.WARNING);
    PrintWriter err = spec.commandLine().getErr();
    Path folder = folder();
    Tokenizer tokenizer = ModelOptions.tokenizerOf(folder);
    var chatPrompt = Serving.chatPrompt(ChatTemplate.load(folder), tokenizer);
    Machine before = Machine.now();
    Path work = Files.createTempDirectory("tokenspeed-bench-serve");
    String body;
    try (EngineModel lm = deviceOptions.load(folder, model, new TensorParallelOptions());
        StreamClient client = new StreamClient()) {
      deviceName = lm.deviceName();
      Env env = new Env(lm, tokenizer, chatPrompt, client, work, err);
      body =
          switch (mode) {
            case "overhead" -> overhead(env);
            case "soak" -> soak(env);
            case "throughput" -> throughput(env);
            default -> load(env);
          };
    } finally {
      DemoCommand.deleteTree(work);
    }
    String report = header(before, Machine.now()) + body;
    PrintWriter o = spec.commandLine().getOut();
    o.print(report);
    o.flush();
    if (out != null) {
      Path parent = out.toAbsolutePath().getParent();
      if (parent != null) {
        Files.createDirectories(parent);
      }
      Files.writeString(out, report, StandardCharsets.UTF_8);
      err.println("wrote " + out);
      err.flush();
    }
    return 0;
  }

  private void check() {
    if (!MODES.contains(mode)) {
      throw usage("--mode=" + mode + " is not one of: " + String.join(", ", MODES));
    }
    checkThroughput();
    resolveDefaults();
    if (maxQueued != null) {
      positive("--max-queued", maxQueued);
    }
    if (durationS < 1 || calibrateS < 1 || recoveryS < 1) {
      throw usage("--duration-s, --calibrate-s and --recovery-s must be at least 1");
    }
    if (!(overload >= 1) || !Double.isFinite(overload)) {
      throw usage("--overload=" + overload + " must be a finite number >= 1");
    }
    int page = EngineConfig.defaults(2).prefixGranularity();
    positive("--max-tokens", maxTokens);
    positive("--pairs", pairs);
    positive("--requests", requests);
    positive("--system-prompts", systemPrompts);
    positive("--user-tokens", userTokens);
    positive("--repeats", repeats);
    positive("--max-running", maxRunning);
    positive("--token-budget", tokenBudget);
    if (softDeadlinesMs.isEmpty() || softDeadlinesMs.stream().anyMatch(d -> d < 1)) {
      throw usage("--soft-deadline-ms=" + softDeadlinesMs + " must list numbers of at least 1");
    }
    if (setupIds.isEmpty()
        || !SETUPS.stream().map(Setup::id).toList().containsAll(setupIds)
        || setupIds.stream().distinct().count() != setupIds.size()) {
      throw usage(
          "--setups="
              + String.join(",", setupIds)
              + " must list distinct ones of: "
              + String.join(", ", SETUPS.stream().map(Setup::id).toList()));
    }
    try {
      ModelOptions.weightType(dtype);
    } catch (IllegalArgumentException e) {
      throw usage(e.getMessage());
    }
    deviceOptions.checkAvailable(); // a malformed --device is a usage error, a missing GPU invalid
    if (warmupRounds < 0) {
      throw usage("--warmup-rounds=" + warmupRounds + " must be at least 0");
    }
    if (threads != null) {
      positive("--threads", threads);
    }
    if (promptTokens < 1 || promptTokens >= page) {
      throw usage(
          "--prompt-tokens="
              + promptTokens
              + " must be in [1, "
              + (page - 1)
              + "]: under one page, so that a repeated prompt reuses nothing");
    }
    if (systemTokens < page || systemTokens % page != 0) {
      throw usage(
          "--system-tokens="
              + systemTokens
              + " must be a positive multiple of the page ("
              + page
              + ")");
    }
    if (clients.isEmpty() || clients.stream().anyMatch(c -> c < 1)) {
      throw usage("--clients=" + clients + " must list numbers of at least 1");
    }
    if (!(hostRatio > 0) || !Double.isFinite(hostRatio)) {
      throw usage("--host-ratio=" + hostRatio + " must be a finite number > 0");
    }
    int perRequest =
        (throughput()
                ? prefixTokens + suffixTokens
                : Math.max(systemTokens + userTokens, promptTokens))
            + maxTokens;
    if (deviceTokens < perRequest) {
      throw usage(
          "--device-tokens="
              + deviceTokens
              + " must hold one request: at least "
              + perRequest
              + " (prompt and --max-tokens)");
    }
    if (redisUri != null) {
      try {
        store(Path.of("unused"), 1);
      } catch (IllegalArgumentException e) {
        throw usage("--redis-uri=" + redisUri + ": " + e.getMessage());
      }
    }
  }

  private boolean throughput() {
    return mode.equals("throughput");
  }

  /** The throughput mode's own flags (their defaults are valid in every mode). */
  private void checkThroughput() {
    if (concurrency.isEmpty() || concurrency.stream().anyMatch(c -> c < 1)) {
      throw usage("--concurrency=" + concurrency + " must list numbers of at least 1");
    }
    positive("--requests-per-client", requestsPerClient);
    if (prefixTokens < 0) {
      throw usage("--prefix-tokens=" + prefixTokens + " must be at least 0");
    }
    positive("--suffix-tokens", suffixTokens);
    if (logprobs < StreamClient.NO_LOGPROBS || logprobs > MAX_LOGPROBS) {
      throw usage(
          "--logprobs="
              + logprobs
              + " must be in ["
              + StreamClient.NO_LOGPROBS
              + ", "
              + MAX_LOGPROBS
              + "] (-1: none)");
    }
  }

  /**
   * The flags whose default depends on the mode: in throughput mode 64 generated tokens, an engine
   * that runs every client of the largest level together, and a Device that holds the shared prefix
   * and every one of those clients' own pages (so that the batch is the clients, not what memory
   * allows).
   */
  private void resolveDefaults() {
    int most = concurrency.stream().mapToInt(Integer::intValue).max().orElseThrow();
    if (throughput() && maxRunningOption != null && maxRunningOption < most) {
      throw usage(
          "--max-running="
              + maxRunningOption
              + " must be at least the largest --concurrency ("
              + most
              + "): a level's clients must all decode together");
    }
    maxTokens =
        maxTokensOption != null
            ? maxTokensOption
            : throughput() ? DEFAULT_THROUGHPUT_MAX_TOKENS : DEFAULT_MAX_TOKENS;
    maxRunning =
        maxRunningOption != null ? maxRunningOption : throughput() ? most : DEFAULT_MAX_RUNNING;
    int page = EngineConfig.defaults(2).prefixGranularity();
    int shared = prefixTokens / page;
    int own = Math.ceilDiv(prefixTokens % page + suffixTokens + Math.max(maxTokens, 1), page) + 1;
    deviceTokens =
        deviceTokensOption != null
            ? deviceTokensOption
            : throughput()
                ? Math.max(DEFAULT_DEVICE_TOKENS, page * (shared + most * own))
                : DEFAULT_DEVICE_TOKENS;
  }

  private void positive(String flag, int value) {
    if (value < 1) {
      throw usage(flag + "=" + value + " must be at least 1");
    }
  }

  private ParameterException usage(String message) {
    return new ParameterException(spec.commandLine(), message);
  }

  private Path folder() {
    if (SyntheticCheckpoints.isSynthetic(model)) {
      try {
        return SyntheticCheckpoints.materialize(
            model, SyntheticCheckpoints.DEFAULT_SEED, ModelOptions.weightType(dtype));
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("--model=" + model + ": " + e.getMessage(), e);
      }
    }
    Path dir = Path.of(model);
    if (!Files.isDirectory(dir)) {
      throw new IllegalArgumentException(
          "--model=" + model + " is not a directory (nor synthetic:NAME)");
    }
    return dir;
  }

  private EngineConfig engineConfig(EngineModel lm, int computeThreads) {
    int parents = lm.deviceParentsFor(deviceTokens);
    EngineConfig base = EngineConfig.defaults(parents);
    return new EngineConfig(
        base.prefixGranularity(),
        base.blockGranularity(),
        parents,
        hostRatio,
        tokenBudget,
        maxRunning,
        base.demoteBelowFreeParents(),
        computeThreads,
        maxQueued != null ? maxQueued : base.maxQueued());
  }

  private static int cores() {
    return Runtime.getRuntime().availableProcessors();
  }

  private Replica start(Env env, EngineConfig config, Optional<StorageExtraConfig.Resolved> l3) {
    OptionalInt eos = env.tokenizer().specialTokens().eosId();
    Engine engine = StorageOptions.startEngine(env.lm(), config, eos, l3);
    try {
      ServingState state = new ServingState();
      Serving serving =
          Serving.start(
              new Serving.Options(
                  engine,
                  env.lm().vocabSize(),
                  env.tokenizer(),
                  env.chatPrompt(),
                  model,
                  engine.maxRequestTokens(),
                  "127.0.0.1",
                  0,
                  4L << 20,
                  null,
                  0,
                  state,
                  HttpFrontend.DEFAULT_HEADER_TIMEOUT_S * 1000L));
      state.ready();
      return new Replica(engine, serving);
    } catch (RuntimeException | Error e) {
      engine.close();
      throw e;
    }
  }

  private void progress(Env env, String what) {
    env.err().println(what);
    env.err().flush();
  }

  // ---------------------------------------------------------------------------------------------
  // overhead

  private String overhead(Env env) throws Exception {
    int computeThreads = threads != null ? threads : cores();
    EngineConfig config = engineConfig(env.lm(), computeThreads);
    progress(env, "warming up (" + warmupRounds + " rounds)");
    long warmMs = warmUp(env, config);
    int[] prompt =
        new SplittableRandom(workloadSeed).ints(promptTokens, 0, env.lm().vocabSize()).toArray();
    SamplingParams params = SamplingParams.greedy(maxTokens).withIgnoreEos(true);
    Sides sides = new Sides(pairs);
    try (Replica r = start(env, config, Optional.empty());
        KeepAliveClient lean = new KeepAliveClient(r.completions())) {
      for (int i = 0; i < 3; i++) { // untimed: the clients' own paths and the connections
        direct(r.engine(), prompt, params);
        http(r, () -> lean.complete(r.completions().getPath(), prompt, maxTokens));
        http(r, () -> env.client().complete(r.completions(), prompt, maxTokens));
        lean.roundTripMs(r.health().getPath());
      }
      for (int i = 0; i < pairs; i++) {
        for (int k = 0; k < 3; k++) {
          Thread.sleep(20); // every side starts from an idle engine and server
          switch ((i + k) % 3) { // the order rotates from one round to the next
            case 0 -> {
              double[] d = direct(r.engine(), prompt, params);
              sides.direct[i] = d[0];
              sides.directEngine[i] = d[1];
            }
            case 1 -> {
              double[] h =
                  http(r, () -> lean.complete(r.completions().getPath(), prompt, maxTokens));
              sides.http[i] = h[0];
              sides.httpEngine[i] = h[1];
              sides.headers[i] = h[2];
            }
            default ->
                sides.jdk[i] =
                    http(r, () -> env.client().complete(r.completions(), prompt, maxTokens))[0];
          }
        }
        Thread.sleep(20);
        sides.health[i] = lean.roundTripMs(r.health().getPath());
        sides.jdkHealth[i] = env.client().roundTripMs(r.health());
        progress(
            env,
            String.format(
                Locale.ROOT,
                "round %d/%d: direct %.2f ms (engine %.2f), HTTP %.2f ms (engine %.2f),"
                    + " java.net.http %.2f ms, GET /health %.2f ms",
                i + 1,
                pairs,
                sides.direct[i],
                sides.directEngine[i],
                sides.http[i],
                sides.httpEngine[i],
                sides.jdk[i],
                sides.health[i]));
      }
    }
    return overheadReport(config, computeThreads, warmMs, sides);
  }

  /**
   * Per round: each side's TTFT as its caller saw it, and the engine's own TTFT of the same request
   * (submission to the first token, {@code RequestMetrics.ttftNs}), in milliseconds.
   */
  private record Sides(
      double[] direct,
      double[] directEngine,
      double[] http,
      double[] httpEngine,
      double[] headers,
      double[] health,
      double[] jdk,
      double[] jdkHealth) {
    Sides(int n) {
      this(
          new double[n],
          new double[n],
          new double[n],
          new double[n],
          new double[n],
          new double[n],
          new double[n],
          new double[n]);
    }
  }

  /**
   * Submission to the first token on the caller's thread, and the engine's own TTFT; the request
   * then runs to its end.
   */
  private static double[] direct(Engine engine, int[] prompt, SamplingParams params)
      throws Exception {
    long t0 = System.nanoTime();
    RequestHandle h = engine.submit(prompt, params, 0);
    OptionalInt first = h.nextToken();
    long t1 = System.nanoTime();
    GenerationResult r = h.result().get(10, TimeUnit.MINUTES);
    if (first.isEmpty() || r.failure().isPresent()) {
      throw new IllegalStateException("a direct request failed: " + r.error());
    }
    return new double[] {(t1 - t0) / 1e6, r.metrics().ttftNs() / 1e6};
  }

  /**
   * A streamed completion's TTFT as the client saw it, the engine's own TTFT of it (from the
   * server's TTFT histogram: the growth of its sum, once the request is recorded), and the time to
   * the response headers.
   */
  private static double[] http(Replica r, Exchange exchange) throws Exception {
    double[] before = ttftHistogram(r.serving());
    Completion c = exchange.complete();
    if (!c.ok()) {
      throw new IllegalStateException("an HTTP request failed: " + c.error());
    }
    double[] after = ttftHistogram(r.serving());
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (after[1] == before[1] && System.nanoTime() - deadline < 0) {
      Thread.sleep(1); // the server records a request after its last event
      after = ttftHistogram(r.serving());
    }
    if (after[1] != before[1] + 1) {
      throw new IllegalStateException(
          "the server recorded " + (after[1] - before[1]) + " first tokens for one request");
    }
    return new double[] {c.ttftMs(), (after[0] - before[0]) * 1e3, c.headersMs()};
  }

  /** One streamed completion through one of the clients. */
  @FunctionalInterface
  private interface Exchange {
    Completion complete() throws Exception;
  }

  private static final String TTFT_METRIC = "tokenspeed:time_to_first_token_seconds";

  /** The sum (seconds) and the count of the server's TTFT histogram. */
  private static double[] ttftHistogram(Serving serving) {
    double[] out = {Double.NaN, Double.NaN};
    for (String line : serving.metrics().scrape().split("\n")) {
      int k =
          line.startsWith(TTFT_METRIC + "_sum")
              ? 0
              : line.startsWith(TTFT_METRIC + "_count") ? 1 : -1;
      if (k >= 0) {
        out[k] = Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
      }
    }
    if (Double.isNaN(out[0]) || Double.isNaN(out[1])) {
      throw new IllegalStateException("the server's metrics have no " + TTFT_METRIC);
    }
    return out;
  }

  private String overheadReport(EngineConfig config, int computeThreads, long warmMs, Sides sides) {
    double[] diff = new double[pairs];
    double[] directOwn = new double[pairs];
    double[] httpOwn = new double[pairs];
    for (int i = 0; i < pairs; i++) {
      diff[i] = sides.http()[i] - sides.direct()[i];
      directOwn[i] = sides.direct()[i] - sides.directEngine()[i];
      httpOwn[i] = sides.http()[i] - sides.httpEngine()[i];
    }
    double[] d = sorted(sides.direct());
    double[] h = sorted(sides.http());
    double[] df = sorted(diff);
    double dp50 = pct(d, 0.5);
    double hp50 = pct(h, 0.5);
    double bound = 1.05 * dp50 + 1;
    StringBuilder b = new StringBuilder();
    b.append(
        String.format(
            Locale.ROOT,
            "Workload: one prompt of %d seeded random tokens (under one page: a repeat reuses"
                + " nothing), greedy, %d generated tokens, logprobs 0 on both sides (every token"
                + " its own event); %d rounds of direct, HTTP and java.net.http, the order rotating, each request"
                + " alone on an idle engine (20 ms apart). One engine (%d compute threads, token"
                + " budget %d, max running %d, L3 off) behind one HTTP server on loopback; warm-up"
                + " %d rounds (%d ms) and 3 untimed rounds before the first timed one. HTTP is read by"
                + " a lean client on one kept-alive connection (TCP_NODELAY; the request written in"
                + " one piece, the response read off the socket); java.net.http's client is shown"
                + " beside it.%n%n",
            promptTokens,
            maxTokens,
            pairs,
            computeThreads,
            config.tokenBudget(),
            config.maxRunning(),
            warmupRounds,
            warmMs));
    b.append("| figure, ms | requests | p50 | p90 | min | max |\n");
    b.append("|---|---:|---:|---:|---:|---:|\n");
    row(b, "direct TTFT: Engine.submit to the first nextToken()", d);
    row(b, "HTTP TTFT: request sent to the first data event with a token", h);
    row(b, "the same through java.net.http's HttpClient", sorted(sides.jdk()));
    row(b, "HTTP: request sent to the response headers", sorted(sides.headers()));
    row(b, "engine's own TTFT of the direct requests", sorted(sides.directEngine()));
    row(b, "engine's own TTFT of the HTTP requests", sorted(sides.httpEngine()));
    row(b, "direct TTFT − its engine's own TTFT", sorted(directOwn));
    row(b, "HTTP TTFT − its engine's own TTFT", sorted(httpOwn));
    row(b, "HTTP TTFT − direct TTFT, per round", df);
    row(b, "GET /health round trip, after each round (no engine)", sorted(sides.health()));
    row(b, "the same through java.net.http's HttpClient", sorted(sides.jdkHealth()));
    double outside = pct(sorted(httpOwn), 0.5) - pct(sorted(directOwn), 0.5);
    double allowed = 0.05 * dp50 + 1;
    b.append("\n| figure | value |\n|---|---:|\n");
    b.append(
        String.format(
            Locale.ROOT,
            "| HTTP / direct TTFT, ratio of the medians | %.3f× |%n"
                + "| HTTP − direct TTFT, difference of the medians | %+.2f ms |%n"
                + "| what HTTP adds: time outside the engine, HTTP − direct, difference of the"
                + " medians | %+.2f ms |%n"
                + "| target: HTTP ≤ 1.05 × direct + 1 ms, i.e. HTTP adds ≤ 0.05 × %.2f + 1 ="
                + " %.2f ms | by what HTTP adds: %s (%+.2f ms); by the raw medians: %s (%.2f ms"
                + " vs %.2f ms) |%n",
            hp50 / dp50,
            hp50 - dp50,
            outside,
            dp50,
            allowed,
            outside <= allowed ? "met" : "**not met**",
            outside,
            hp50 <= bound ? "met" : "**not met**",
            hp50,
            bound));
    b.append(
        "\nThe engine's own TTFT is submission to the first token on the engine's clock"
            + " (RequestMetrics.ttftNs; for HTTP read from the server's TTFT histogram, request"
            + " by request). What a side adds outside the engine is its TTFT minus that: for"
            + " HTTP the request's way in (connection, headers, body, parsing, submission) and"
            + " the first token's way out (JSON, the event, the socket, the client). That"
            + " difference is the serving overhead proper: the engine's own TTFT of identical"
            + " requests varies by several milliseconds from one request to the next on a shared"
            + " machine, which moves the raw medians of the two sides more than HTTP does. The"
            + " GET /health round trip through the same client and server is the machine's floor"
            + " for any HTTP exchange at the time.\n");
    return b.toString();
  }

  private static void row(StringBuilder b, String side, double[] sorted) {
    b.append(
        String.format(
            Locale.ROOT,
            "| %s | %d | %.2f | %.2f | %.2f | %.2f |%n",
            side,
            sorted.length,
            pct(sorted, 0.5),
            pct(sorted, 0.9),
            sorted[0],
            sorted[sorted.length - 1]));
  }

  // ---------------------------------------------------------------------------------------------
  // load

  /** The seeded shared-prefix workload: S system prompts, and per client its prompts in order. */
  record Workload(int[][] systems, int[][][] prompts, int[][] systemOf) {
    static Workload of(long seed, int vocab, int s, int p, int u, int clients, int requests) {
      SplittableRandom random = new SplittableRandom(seed);
      int[][] systems = new int[s][];
      for (int i = 0; i < s; i++) {
        systems[i] = random.ints(p, 0, vocab).toArray();
      }
      int[][][] prompts = new int[clients][requests][];
      int[][] systemOf = new int[clients][requests];
      for (int c = 0; c < clients; c++) {
        SplittableRandom own = random.split();
        for (int j = 0; j < requests; j++) {
          int k = own.nextInt(s);
          systemOf[c][j] = k;
          int[] prompt = Arrays.copyOf(systems[k], p + u);
          for (int t = p; t < p + u; t++) {
            prompt[t] = own.nextInt(vocab);
          }
          prompts[c][j] = prompt;
        }
      }
      return new Workload(systems, prompts, systemOf);
    }
  }

  /** One request as measured, with the server it went to. */
  record Sample(int server, Completion completion) {}

  /**
   * One server's engine-side figures over a run: the scheduler's L3 counters, the executor's jobs
   * (cumulative since the engine started; every run's engines are fresh) and the loop's rounds
   * while the clients were sending.
   */
  record ServerFigures(
      long softTimeouts,
      long readyExpirations,
      long pressureBypasses,
      String droppedBackupKeys,
      long queriesIssued,
      long getsIssued,
      long putsIssued,
      long publishedBlocks,
      int deviceParents,
      int hostParents,
      long queryJobs,
      long queryNanos,
      long getJobs,
      long getOkKeys,
      long getNanos,
      long putOkKeys,
      long rounds,
      long roundNanos) {

    long fallbacks() {
      return softTimeouts + readyExpirations + pressureBypasses;
    }

    /**
     * GET rows the store returned that no Host entry came of: the wait had ended before their fact
     * arrived (or another read had published the block first).
     */
    long lateRows() {
      return Math.max(0, getOkKeys - publishedBlocks);
    }

    /** A QUERY's time in the executor, queue and store call, per job; NaN without one. */
    double queryMs() {
      return queryJobs == 0 ? Double.NaN : queryNanos / 1e6 / queryJobs;
    }

    /** A GET's time in the executor, queue and store calls, per job; NaN without one. */
    double getMs() {
      return getJobs == 0 ? Double.NaN : getNanos / 1e6 / getJobs;
    }

    /** The loop's mean round while the clients were sending; NaN without rounds. */
    double roundMs() {
      return rounds == 0 ? Double.NaN : roundNanos / 1e6 / rounds;
    }
  }

  /**
   * One run of one configuration at one number of clients and one soft deadline ({@code 0} without
   * L3); {@code filledKeys}: the PUT rows the first server wrote, with {@code filled}.
   */
  record Run(
      Setup setup,
      int clients,
      int deadlineMs,
      int repeat,
      int computeThreads,
      double wallS,
      List<Sample> samples,
      List<ServerFigures> servers,
      long filledKeys) {

    List<Completion> ok() {
      return samples.stream().map(Sample::completion).filter(Completion::ok).toList();
    }

    long errors() {
      return samples.stream().filter(s -> !s.completion().ok()).count();
    }

    double requestsPerSecond() {
      return ok().size() / wallS;
    }

    double[] values(ToDoubleFunction<Completion> f) {
      return okValues(ok(), f);
    }

    double saved() {
      long prompt = ok().stream().mapToLong(Completion::promptTokens).sum();
      return prompt == 0
          ? 0
          : (double) ok().stream().mapToLong(Completion::cachedTokens).sum() / prompt;
    }

    /** The share of the cached prompt tokens the store gave. */
    double storageShare() {
      long cached = ok().stream().mapToLong(Completion::cachedTokens).sum();
      return cached == 0
          ? 0
          : (double) ok().stream().mapToLong(Completion::storageTokens).sum() / cached;
    }

    long fallbacks() {
      return servers.stream().mapToLong(ServerFigures::fallbacks).sum();
    }

    long sum(java.util.function.ToLongFunction<ServerFigures> f) {
      return servers.stream().mapToLong(f).sum();
    }

    /** Requests that reused prompt tokens the store gave. */
    List<Completion> restored() {
      return ok().stream().filter(c -> c.storageTokens() > 0).toList();
    }

    /** Requests that reused less than {@code systemTokens}, none of it from the store. */
    List<Completion> computed(int systemTokens) {
      return ok().stream()
          .filter(c -> c.storageTokens() == 0 && c.cachedTokens() < systemTokens)
          .toList();
    }

    /**
     * Of the requests that did not find their system prompt on this server (restored or computed),
     * the share restored; NaN without any.
     */
    double restoreRate(int systemTokens) {
      int asked = restored().size() + computed(systemTokens).size();
      return asked == 0 ? Double.NaN : (double) restored().size() / asked;
    }
  }

  /** {@code f} of every request of {@code ok}, sorted, NaN left out. */
  private static double[] okValues(List<Completion> ok, ToDoubleFunction<Completion> f) {
    return sorted(ok.stream().mapToDouble(f).filter(v -> !Double.isNaN(v)).toArray());
  }

  /** The TTFT percentile {@code q} of {@code requests}, ms; NaN without any. */
  private static double ttft(List<Completion> requests, double q) {
    return pct(sorted(requests.stream().mapToDouble(Completion::ttftMs).toArray()), q);
  }

  private String load(Env env) throws Exception {
    int vocab = env.lm().vocabSize();
    int maxClients = clients.stream().mapToInt(Integer::intValue).max().orElseThrow();
    Workload workload =
        Workload.of(
            workloadSeed, vocab, systemPrompts, systemTokens, userTokens, maxClients, requests);
    long warmMs = warmUpWithL3(env);
    List<Run> runs = new ArrayList<>();
    int index = 0;
    for (int r = 0; r < repeats; r++) {
      List<Setup> order = new ArrayList<>(chosen());
      List<Integer> deadlines = new ArrayList<>(softDeadlinesMs);
      if (r % 2 == 1) {
        java.util.Collections.reverse(order);
        java.util.Collections.reverse(deadlines);
      }
      for (int c : clients) {
        for (Setup setup : order) {
          for (int d : setup.l3() ? deadlines : List.of(0)) {
            progress(
                env,
                "repeat "
                    + (r + 1)
                    + "/"
                    + repeats
                    + ": "
                    + setup.name()
                    + ", "
                    + c
                    + " clients"
                    + (setup.l3() ? ", soft deadline " + d + " ms" : ""));
            Run run = runLoad(env, setup, c, d, r, workload, index++);
            runs.add(run);
            progress(
                env,
                String.format(
                    Locale.ROOT,
                    "  %.1f s, %.2f requests/s, TTFT p50 %.1f ms, prefill saved %.1f %% (%.1f %%"
                        + " of it from the store), restored %d of %d, soft timeouts %d, %d errors",
                    run.wallS(),
                    run.requestsPerSecond(),
                    pct(run.values(Completion::ttftMs), 0.5),
                    100 * run.saved(),
                    100 * run.storageShare(),
                    run.restored().size(),
                    run.restored().size() + run.computed(systemTokens).size(),
                    run.sum(ServerFigures::softTimeouts),
                    run.errors()));
          }
        }
      }
    }
    return loadReport(runs, warmMs);
  }

  /** The serving warm-up, then an L3 round trip through two throwaway servers; its wall ms. */
  private long warmUpWithL3(Env env) throws Exception {
    progress(env, "warming up (" + warmupRounds + " rounds, then an L3 round trip)");
    long warmMs = warmUp(env, engineConfig(env.lm(), cores()));
    return warmMs + warmL3(env, env.lm().vocabSize());
  }

  /** The serving warm-up ({@link WarmUp}, without L3) on a throwaway engine of {@code config}. */
  private long warmUp(Env env, EngineConfig config) throws Exception {
    return WarmUp.run(
        env.lm(),
        config,
        env.tokenizer().specialTokens().eosId(),
        env.tokenizer(),
        env.chatPrompt(),
        null,
        warmupRounds);
  }

  /** The longest soft deadline asked for: the warm-up's and the soak's wait. */
  private int longestDeadlineMs() {
    return softDeadlinesMs.stream().mapToInt(Integer::intValue).max().orElseThrow();
  }

  /** The store's settings for one configuration: a fresh directory, or Redis. */
  private Optional<StorageExtraConfig.Resolved> store(Path dir, int deadlineMs) {
    ObjectNode json = JSON.createObjectNode();
    String backend;
    if (redisUri != null) {
      backend = "redis";
      json.put("uri", redisUri);
    } else {
      backend = "file";
      json.put("path", dir.toString());
      json.put("fsync", fileFsync);
    }
    json.putObject("async")
        .put("min_extension_tokens", MIN_EXTENSION_TOKENS)
        .put("soft_deadline_ms", deadlineMs);
    return Optional.of(StorageExtraConfig.parse(backend, json.toString()));
  }

  /**
   * Starts {@code n} replicas, over one store when {@code l3} (under a namespace of their own with
   * Redis: {@code version}), each waiting at most {@code deadlineMs} for L3.
   */
  private List<Replica> replicas(
      Env env, EngineConfig config, int n, boolean l3, Path dir, String version, int deadlineMs)
      throws Exception {
    List<Replica> out = new ArrayList<>();
    try {
      for (int s = 0; s < n; s++) {
        Replica r = start(env, config, l3 ? store(dir, deadlineMs) : Optional.empty());
        out.add(r);
        if (l3 && redisUri != null) {
          r.engine().rotateNamespace(version);
        }
      }
      return out;
    } catch (Exception | Error e) {
      out.forEach(Replica::close);
      throw e;
    }
  }

  /** Deletes a Redis namespace's objects once every replica is quiet; the directory goes later. */
  private void dropNamespace(List<Replica> replicas, String version) throws Exception {
    if (redisUri != null) {
      replicas.getFirst().engine().updateWeightVersion(version + "-deleted");
    }
  }

  /**
   * Untimed: two throwaway servers over a throwaway store; a prompt of two pages on the first, the
   * same pages with another suffix on the second once the first's writes are done (a restore), and
   * a few concurrent requests, all through the benchmark's client.
   */
  private long warmL3(Env env, int vocab) throws Exception {
    long t0 = System.nanoTime();
    int page = EngineConfig.defaults(2).prefixGranularity();
    SplittableRandom random = new SplittableRandom(workloadSeed ^ 0x5eed);
    int[] prefix = random.ints(2 * page, 0, vocab).toArray();
    String version = "bench-serve-warm-up-" + System.nanoTime();
    EngineConfig config = engineConfig(env.lm(), Math.max(1, cores() / 2));
    List<Replica> pair =
        replicas(
            env,
            config,
            2,
            true,
            env.work().resolve("warm-up-store"),
            version,
            longestDeadlineMs());
    try {
      for (int i = 0; i < 2; i++) {
        int[] prompt = Arrays.copyOf(prefix, prefix.length + 8);
        for (int t = prefix.length; t < prompt.length; t++) {
          prompt[t] = random.nextInt(vocab);
        }
        Completion c = env.client().complete(pair.get(i).completions(), prompt, maxTokens);
        if (!c.ok()) {
          throw new IllegalStateException("a warm-up request failed: " + c.error());
        }
        awaitQuiet(pair.get(i).engine());
      }
      try (ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor()) {
        List<Future<Completion>> all = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
          int[] prompt = random.ints(page / 2, 0, vocab).toArray();
          URI uri = pair.get(i % 2).completions();
          all.add(pool.submit(() -> env.client().complete(uri, prompt, maxTokens)));
        }
        for (Future<Completion> f : all) {
          if (!f.get().ok()) {
            throw new IllegalStateException("a warm-up request failed: " + f.get().error());
          }
        }
      }
      for (Replica r : pair) {
        awaitQuiet(r.engine());
      }
      dropNamespace(pair, version);
    } finally {
      pair.forEach(Replica::close);
    }
    return (System.nanoTime() - t0) / 1_000_000;
  }

  private Run runLoad(
      Env env, Setup setup, int numClients, int deadlineMs, int repeat, Workload w, int index)
      throws Exception {
    int computeThreads = threads != null ? threads : Math.max(1, cores() / setup.servers());
    EngineConfig config = engineConfig(env.lm(), computeThreads);
    Path dir = env.work().resolve("store-" + index);
    String version = "bench-serve-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
    long filledKeys = setup.filled() ? fill(env, w, dir, version, deadlineMs) : 0;
    List<Replica> replicas =
        replicas(env, config, setup.servers(), setup.l3(), dir, version, deadlineMs);
    try {
      List<EngineStats> before = replicas.stream().map(r -> r.engine().stats()).toList();
      ClosedLoop<Sample> loop =
          closedLoop(
              numClients,
              requests,
              (client, j) -> {
                int server = j % replicas.size();
                Completion done =
                    env.client()
                        .complete(
                            replicas.get(server).completions(), w.prompts()[client][j], maxTokens);
                return new Sample(server, done);
              });
      List<EngineStats> after = replicas.stream().map(r -> r.engine().stats()).toList();
      List<ServerFigures> figures = new ArrayList<>();
      for (int s = 0; s < replicas.size(); s++) {
        awaitQuiet(replicas.get(s).engine());
        figures.add(figures(replicas.get(s).engine(), before.get(s), after.get(s)));
      }
      if (setup.l3()) {
        dropNamespace(replicas, version);
      }
      return new Run(
          setup,
          numClients,
          deadlineMs,
          repeat,
          computeThreads,
          loop.wallNs() / 1e9,
          loop.all(),
          figures,
          filledKeys);
    } finally {
      replicas.forEach(Replica::close);
      DemoCommand.deleteTree(dir);
    }
  }

  /** Client {@code client}'s request {@code j} of a closed loop, sent and read to its end. */
  @FunctionalInterface
  private interface ClientRequest<T> {
    T send(int client, int j) throws Exception;
  }

  /** What a closed loop returned: each client's results in order, and its start and end. */
  private record ClosedLoop<T>(List<List<T>> perClient, long startNs, long endNs) {
    long wallNs() {
      return endNs - startNs;
    }

    List<T> all() {
      return perClient.stream().flatMap(List::stream).toList();
    }
  }

  /**
   * {@code numClients} clients on virtual threads, released together, each sending {@code
   * requestsEach} requests one after the other; timed from the release to the last one's return.
   */
  private static <T> ClosedLoop<T> closedLoop(
      int numClients, int requestsEach, ClientRequest<T> request) throws Exception {
    List<List<T>> perClient = new ArrayList<>();
    CountDownLatch go = new CountDownLatch(1);
    long t0;
    long t1;
    try (ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor()) {
      List<Future<?>> all = new ArrayList<>();
      for (int c = 0; c < numClients; c++) {
        List<T> mine = new ArrayList<>();
        perClient.add(mine);
        int client = c;
        all.add(
            pool.submit(
                () -> {
                  go.await();
                  for (int j = 0; j < requestsEach; j++) {
                    mine.add(request.send(client, j));
                  }
                  return null;
                }));
      }
      t0 = System.nanoTime();
      go.countDown();
      for (Future<?> f : all) {
        f.get();
      }
      t1 = System.nanoTime();
    }
    return new ClosedLoop<>(perClient, t0, t1);
  }

  /**
   * Untimed: a first server over the store (every core) serves each system prompt once, with a
   * suffix of its own, one after the other, waits for its write-through and closes; the PUT rows it
   * wrote. The timed server then starts with every system prompt in the store and none in its own
   * caches.
   */
  private long fill(Env env, Workload w, Path dir, String version, int deadlineMs)
      throws Exception {
    EngineConfig config = engineConfig(env.lm(), threads != null ? threads : cores());
    List<Replica> writer = replicas(env, config, 1, true, dir, version, deadlineMs);
    try {
      Replica r = writer.getFirst();
      SplittableRandom random = new SplittableRandom(workloadSeed ^ 0xf111ed);
      for (int[] system : w.systems()) {
        int[] prompt = Arrays.copyOf(system, system.length + userTokens);
        for (int t = system.length; t < prompt.length; t++) {
          prompt[t] = random.nextInt(env.lm().vocabSize());
        }
        Completion c = env.client().complete(r.completions(), prompt, maxTokens);
        if (!c.ok()) {
          throw new IllegalStateException("a request filling the store failed: " + c.error());
        }
      }
      awaitQuiet(r.engine());
      return r.engine().storageExecutorMetrics().orElseThrow().put().okKeys();
    } finally {
      writer.forEach(Replica::close);
    }
  }

  /** Waits until the engine is idle and its storage work is done (at most a minute). */
  private static void awaitQuiet(Engine engine) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(1);
    while (System.nanoTime() - deadline < 0) {
      EngineMetrics m = engine.metrics();
      if (m.idle() && m.storage().map(s -> !s.pending()).orElse(true)) {
        return;
      }
      Thread.sleep(10);
    }
    throw new IllegalStateException("an engine was still busy a minute after its last request");
  }

  /** An engine's figures after a run; its rounds between {@code from} and {@code to}. */
  private static ServerFigures figures(Engine engine, EngineStats from, EngineStats to) {
    EngineMetrics m = engine.metrics();
    long rounds = to.rounds() - from.rounds();
    long roundNanos = to.roundNanos() - from.roundNanos();
    if (m.storage().isEmpty()) {
      return new ServerFigures(
          0,
          0,
          0,
          "–",
          0,
          0,
          0,
          0,
          m.device().totalParents(),
          m.host().totalParents(),
          0,
          0,
          0,
          0,
          0,
          0,
          rounds,
          roundNanos);
    }
    EngineMetrics.Transfers t = m.storage().get().transfers();
    L3Metrics x = engine.storageExecutorMetrics().orElseThrow();
    return new ServerFigures(
        t.softTimeouts(),
        t.readyExpirations(),
        t.pressureBypasses(),
        dropped(t.droppedBackupKeys()),
        t.queriesIssued(),
        t.getsIssued(),
        t.putsIssued(),
        t.publishedBlocks(),
        m.device().totalParents(),
        m.host().totalParents(),
        x.query().jobs(),
        x.query().queueNanos() + x.query().backendNanos(),
        x.get().jobs(),
        x.get().okKeys(),
        x.get().queueNanos() + x.get().backendNanos(),
        x.put().okKeys(),
        rounds,
        roundNanos);
  }

  /** The dropped backup keys by reason, e.g. {@code 16 (unavailable 16)}, or {@code 0}. */
  private static String dropped(Map<io.tokenspeed.scheduler.StorageCounters.DropReason, Long> m) {
    long total = m.values().stream().mapToLong(Long::longValue).sum();
    if (total == 0) {
      return "0";
    }
    List<String> parts = new ArrayList<>();
    for (var e : new java.util.TreeMap<>(m).entrySet()) {
      if (e.getValue() > 0) {
        parts.add(e.getKey().name().toLowerCase(Locale.ROOT) + " " + e.getValue());
      }
    }
    return total + " (" + String.join(", ", parts) + ")";
  }

  private String loadReport(List<Run> runs, long warmMs) {
    StringBuilder b = new StringBuilder();
    Run first = runs.getFirst();
    int reusable = systemTokens;
    List<Setup> setups = chosen();
    int perRepeat =
        clients.size() * setups.stream().mapToInt(s -> s.l3() ? softDeadlinesMs.size() : 1).sum();
    b.append(
        String.format(
            Locale.ROOT,
            "Workload (seed %d): %d system prompts of %d tokens; each request one of them at"
                + " random and %d random tokens of its own (%d prompt tokens, of which at most %d"
                + " — the system prompt's whole pages — can be reused: %.1f %%), greedy, %d"
                + " generated tokens, logprobs 0 (every token its own event), streamed with"
                + " usage. Each client sends %d requests one after the other (closed loop). Each"
                + " engine: %s, Device %d tokens (%d parents), Host %.3f× the Device (%d"
                + " parents), max running %d, token budget %d; compute threads per engine: %s."
                + " Store: %s; L3 extensions from %d tokens, soft deadline %s ms, other L3"
                + " settings at their defaults. Warm-up (untimed, once): %d serving rounds and an"
                + " L3 round trip, %d ms. Runs per repeat: %d (configurations and deadlines in"
                + " reverse order on every other repeat).%n%n",
            workloadSeed,
            systemPrompts,
            systemTokens,
            userTokens,
            systemTokens + userTokens,
            reusable,
            100.0 * reusable / (systemTokens + userTokens),
            maxTokens,
            requests,
            deviceName,
            deviceTokens,
            first.servers().getFirst().deviceParents(),
            hostRatio,
            first.servers().getFirst().hostParents(),
            maxRunning,
            tokenBudget,
            threads != null
                ? threads.toString()
                : "the " + cores() + " cores divided among the configuration's servers",
            redisUri != null
                ? "Redis at " + redisUri + ", a new namespace per configuration (deleted after)"
                : "the file store in a new temporary directory per configuration (fsync "
                    + (fileFsync ? "on" : "off")
                    + ")",
            MIN_EXTENSION_TOKENS,
            String.join(", ", softDeadlinesMs.stream().map(String::valueOf).toList()),
            warmupRounds,
            warmMs,
            perRepeat));
    String spread = repeats > 1 ? " (median of " + repeats + " repeats, min – max)" : "";
    b.append(
        "| configuration | clients | soft deadline ms | requests | errors | requests/s | TTFT p50"
            + " ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | prefill saved | of it from the"
            + " store | system prompt computed | L3 fallbacks |\n");
    b.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int c : clients) {
      for (Setup s : setups) {
        for (int d : deadlines(s)) {
          List<Run> rs = runs(runs, s, c, d);
          b.append(
              String.format(
                  Locale.ROOT,
                  "| %s | %d | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %d | %d |%n",
                  s.name(),
                  c,
                  s.l3() ? Integer.toString(d) : "–",
                  rs.stream().mapToInt(r -> r.samples().size()).sum(),
                  rs.stream().mapToLong(Run::errors).sum(),
                  figure(rs, Run::requestsPerSecond, "%.2f", 1),
                  figure(rs, r -> pct(r.values(Completion::ttftMs), 0.5), "%.1f", 1),
                  figure(rs, r -> pct(r.values(Completion::ttftMs), 0.99), "%.1f", 1),
                  figure(rs, r -> pct(r.values(Completion::tpotMs), 0.5), "%.2f", 1),
                  figure(rs, r -> pct(r.values(Completion::tpotMs), 0.99), "%.2f", 1),
                  figure(rs, Run::saved, "%.1f %%", 100),
                  figure(rs, Run::storageShare, "%.1f %%", 100),
                  rs.stream().mapToLong(r -> systemComputed(r)).sum(),
                  rs.stream().mapToLong(Run::fallbacks).sum()));
        }
      }
    }
    b.append(
        "\nFigures per configuration"
            + spread
            + ". TTFT: request sent to the first event carrying a token; TPOT: (last token's"
            + " event − first token's event) / (tokens − 1), per request; percentiles nearest-rank"
            + " over every request of the run. Prefill saved: the usage's cached_tokens over"
            + " prompt_tokens, summed over the run; of it from the store: the cached_tokens_by_source"
            + " storage share of that. System prompt computed: requests that reused less than their"
            + " system prompt (its pages computed again, or first computed). L3 fallbacks: waits"
            + " for L3 that ended by their soft deadline, Ready holds that expired and pressure"
            + " bypasses, summed over the servers.\n\n");
    Setup base = SETUPS.getFirst();
    if (setups.contains(base) && setups.size() > 1) {
      b.append(
          "Against the baseline of the same client count and repeat (one server, L3 off)"
              + spread
              + ":\n\n| configuration | clients | soft deadline ms | requests/s ratio | TTFT p50"
              + " ratio | TTFT p99 ratio | TPOT p50 ratio |\n"
              + "|---|---:|---:|---:|---:|---:|---:|\n");
      for (int c : clients) {
        for (Setup s : setups) {
          if (s == base) {
            continue;
          }
          for (int d : deadlines(s)) {
            List<double[]> ratios = new ArrayList<>();
            for (int r = 0; r < repeats; r++) {
              Run off = find(runs, base, c, 0, r);
              Run run = find(runs, s, c, d, r);
              ratios.add(
                  new double[] {
                    run.requestsPerSecond() / off.requestsPerSecond(),
                    pct(run.values(Completion::ttftMs), 0.5)
                        / pct(off.values(Completion::ttftMs), 0.5),
                    pct(run.values(Completion::ttftMs), 0.99)
                        / pct(off.values(Completion::ttftMs), 0.99),
                    pct(run.values(Completion::tpotMs), 0.5)
                        / pct(off.values(Completion::tpotMs), 0.5)
                  });
            }
            b.append("| ").append(s.name()).append(" | ").append(c).append(" | ").append(d);
            for (int k = 0; k < 4; k++) {
              int col = k;
              b.append(" | ")
                  .append(spreadOf(ratios.stream().mapToDouble(v -> v[col]).toArray(), "%.3f×", 1));
            }
            b.append(" |\n");
          }
        }
      }
      b.append('\n');
    }
    Setup filled = SETUPS.get(3);
    if (setups.contains(filled)) {
      b.append(
          "Restores of prefixes the store holds, by soft deadline: a fresh server over a store"
              + " that a first server filled with every system prompt"
              + spread
              + ".\n\n| clients | soft deadline ms | requests | asked the store | restored |"
              + " restore rate | soft timeouts | GET rows read too late | TTFT p50 / p90 ms,"
              + " restored | TTFT p50 / p90 ms, computed | requests/s | QUERY ms | GET ms | round"
              + " ms |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|\n");
      for (int c : clients) {
        for (int d : softDeadlinesMs) {
          List<Run> rs = runs(runs, filled, c, d);
          b.append(
              String.format(
                  Locale.ROOT,
                  "| %d | %d | %d | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s | %s | %s |"
                      + " %s |%n",
                  c,
                  d,
                  rs.stream().mapToInt(r -> r.samples().size()).sum(),
                  figure(rs, r -> r.restored().size() + r.computed(systemTokens).size(), "%.0f", 1),
                  figure(rs, r -> r.restored().size(), "%.0f", 1),
                  figure(rs, r -> r.restoreRate(systemTokens), "%.0f %%", 100),
                  figure(rs, r -> r.sum(ServerFigures::softTimeouts), "%.0f", 1),
                  figure(rs, r -> r.sum(ServerFigures::lateRows), "%.0f", 1),
                  figure(rs, r -> ttft(r.restored(), 0.5), "%.0f", 1),
                  figure(rs, r -> ttft(r.restored(), 0.9), "%.0f", 1),
                  figure(rs, r -> ttft(r.computed(systemTokens), 0.5), "%.0f", 1),
                  figure(rs, r -> ttft(r.computed(systemTokens), 0.9), "%.0f", 1),
                  figure(rs, Run::requestsPerSecond, "%.2f", 1),
                  figure(rs, r -> r.servers().getFirst().queryMs(), "%.1f", 1),
                  figure(rs, r -> r.servers().getFirst().getMs(), "%.1f", 1),
                  figure(rs, r -> r.servers().getFirst().roundMs(), "%.0f", 1)));
        }
      }
      b.append(
          "\nAsked the store: requests that did not find their system prompt on this server"
              + " (restored, or computed); restored: requests that reused tokens from the store;"
              + " computed: the others, which reused less than their system prompt. The first"
              + " server wrote "
              + range(runs(runs, filled).stream().mapToLong(Run::filledKeys).toArray())
              + " PUT rows per run (every system prompt's pages) and closed before the timed"
              + " server started. GET rows read too late: rows the store returned of which no"
              + " Host entry came (the wait had ended, or another read had published the block). QUERY ms /"
              + " GET ms: a job's time in the executor, queue and store calls, per job; round ms:"
              + " the loop's mean round while the clients were sending.\n\n");
    }
    Setup empty = SETUPS.get(1);
    if (setups.contains(empty)) {
      b.append(
          "Misses on an empty store, by soft deadline: one server, L3 on; its requests that"
              + " computed their system prompt asked the store and found nothing (the server's"
              + " own writes are of prefixes it holds)"
              + spread
              + ".\n\n| clients | soft deadline ms | misses | soft timeouts | TTFT p50 / p90 ms |"
              + " L3 off, same requests: TTFT p50 / p90 ms | QUERY ms | round ms |\n"
              + "|---:|---:|---:|---:|---|---|---:|---:|\n");
      for (int c : clients) {
        for (int d : softDeadlinesMs) {
          List<Run> rs = runs(runs, empty, c, d);
          List<Run> off = setups.contains(base) ? runs(runs, base, c, 0) : List.of();
          b.append(
              String.format(
                  Locale.ROOT,
                  "| %d | %d | %s | %s | %s / %s | %s | %s | %s |%n",
                  c,
                  d,
                  figure(rs, r -> r.computed(systemTokens).size(), "%.0f", 1),
                  figure(rs, r -> r.sum(ServerFigures::softTimeouts), "%.0f", 1),
                  figure(rs, r -> ttft(r.computed(systemTokens), 0.5), "%.0f", 1),
                  figure(rs, r -> ttft(r.computed(systemTokens), 0.9), "%.0f", 1),
                  off.isEmpty()
                      ? "–"
                      : figure(off, r -> ttft(r.computed(systemTokens), 0.5), "%.0f", 1)
                          + " / "
                          + figure(off, r -> ttft(r.computed(systemTokens), 0.9), "%.0f", 1),
                  figure(rs, r -> r.servers().getFirst().queryMs(), "%.1f", 1),
                  figure(rs, r -> r.servers().getFirst().roundMs(), "%.0f", 1)));
        }
      }
      b.append('\n');
    }
    b.append(
        "Per run and server: requests, prompt tokens, reused tokens by source, and the L3"
            + " counters.\n\n| repeat | configuration | clients | soft deadline ms | compute"
            + " threads | wall s | server | requests | prompt tokens | device | host | storage |"
            + " QUERYs | GETs | PUTs | soft timeouts | GET rows read too late | Ready expirations"
            + " | pressure bypasses | dropped backup keys | rounds | round ms |\n"
            + "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            + "---:|---:|---:|---:|---:|---:|\n");
    for (Run r : runs) {
      for (int s = 0; s < r.servers().size(); s++) {
        int server = s;
        List<Completion> mine =
            r.samples().stream()
                .filter(x -> x.server() == server && x.completion().ok())
                .map(Sample::completion)
                .toList();
        ServerFigures f = r.servers().get(s);
        b.append(
            String.format(
                Locale.ROOT,
                "| %d | %s | %d | %s | %d | %.1f | %s | %d | %d | %d | %d | %d | %s | %s | %s | %s"
                    + " | %s | %s | %s | %s | %d | %.1f |%n",
                r.repeat() + 1,
                r.setup().name(),
                r.clients(),
                r.setup().l3() ? Integer.toString(r.deadlineMs()) : "–",
                r.computeThreads(),
                r.wallS(),
                s == 0 ? "A" : "B",
                mine.size(),
                mine.stream().mapToLong(Completion::promptTokens).sum(),
                mine.stream().mapToLong(Completion::deviceTokens).sum(),
                mine.stream().mapToLong(Completion::hostTokens).sum(),
                mine.stream().mapToLong(Completion::storageTokens).sum(),
                l3(r, f.queriesIssued()),
                l3(r, f.getsIssued()),
                l3(r, f.putsIssued()),
                l3(r, f.softTimeouts()),
                l3(r, f.lateRows()),
                l3(r, f.readyExpirations()),
                l3(r, f.pressureBypasses()),
                f.droppedBackupKeys(),
                f.rounds(),
                f.roundMs()));
      }
    }
    appendErrors(b, runs.stream().flatMap(r -> r.samples().stream()).map(Sample::completion));
    return b.toString();
  }

  /** The distinct errors of {@code completions}, at most five, as a list after the tables. */
  private static void appendErrors(StringBuilder b, Stream<Completion> completions) {
    List<String> errors =
        completions.filter(c -> !c.ok()).map(Completion::error).distinct().limit(5).toList();
    if (!errors.isEmpty()) {
      b.append("\nErrors (distinct, at most five):\n\n");
      errors.forEach(e -> b.append("- ").append(e).append('\n'));
    }
  }

  /** The soft deadlines a configuration ran with: every one with L3, {@code 0} without. */
  private List<Integer> deadlines(Setup s) {
    return s.l3() ? softDeadlinesMs : List.of(0);
  }

  private static String l3(Run r, long value) {
    return r.setup().l3() ? Long.toString(value) : "–";
  }

  /** Requests that reused less than their whole system prompt. */
  private long systemComputed(Run r) {
    return r.ok().stream().filter(c -> c.cachedTokens() < systemTokens).count();
  }

  private static List<Run> runs(List<Run> runs, Setup s) {
    return runs.stream().filter(r -> r.setup() == s).toList();
  }

  private static List<Run> runs(List<Run> runs, Setup s, int clients, int deadlineMs) {
    return runs.stream()
        .filter(r -> r.setup() == s && r.clients() == clients && r.deadlineMs() == deadlineMs)
        .toList();
  }

  private static Run find(List<Run> runs, Setup s, int clients, int deadlineMs, int repeat) {
    return runs.stream()
        .filter(
            r ->
                r.setup() == s
                    && r.clients() == clients
                    && r.deadlineMs() == deadlineMs
                    && r.repeat() == repeat)
        .findFirst()
        .orElseThrow();
  }

  /** The median over runs of {@code f}, with the range when there are several runs. */
  private static String figure(List<Run> rs, ToDoubleFunction<Run> f, String format, double scale) {
    return spreadOf(rs.stream().mapToDouble(f).toArray(), format, scale);
  }

  /** {@code 256}, or {@code 250–256} when the values differ. */
  private static String range(long[] values) {
    long min = Arrays.stream(values).min().orElse(0);
    long max = Arrays.stream(values).max().orElse(0);
    return min == max ? Long.toString(min) : min + "–" + max;
  }

  private static String spreadOf(double[] values, String format, double scale) {
    double[] v = sorted(values);
    String median = String.format(Locale.ROOT, format, scale * pct(v, 0.5));
    if (v.length < 2) {
      return median;
    }
    return median
        + " ("
        + String.format(Locale.ROOT, format, scale * v[0])
        + " – "
        + String.format(Locale.ROOT, format, scale * v[v.length - 1])
        + ")";
  }

  // ---------------------------------------------------------------------------------------------
  // throughput

  /**
   * One level of the throughput mode: its clients, every request as measured, the served figures
   * against the forward pass's, and the GPU's utilization while it ran (empty: not sampled).
   */
  record ThroughputLevel(
      int clients,
      List<Completion> completions,
      ServedThroughput served,
      Optional<GpuUtilization.Figures> gpu) {

    List<Completion> ok() {
      return completions.stream().filter(Completion::ok).toList();
    }

    /** The share of the prompt tokens whose KV the server reused. */
    double cached() {
      long prompt = ok().stream().mapToLong(Completion::promptTokens).sum();
      return prompt == 0
          ? 0
          : (double) ok().stream().mapToLong(Completion::cachedTokens).sum() / prompt;
    }
  }

  private String throughput(Env env) throws Exception {
    int computeThreads = threads != null ? threads : cores();
    EngineConfig config = engineConfig(env.lm(), computeThreads);
    progress(env, "warming up (" + warmupRounds + " rounds)");
    long warmMs = warmUp(env, config);
    // one shared prefix; every request of every level a suffix of its own, and one more client
    // (the last) for the request that caches the prefix
    int clientsInAll = concurrency.stream().mapToInt(Integer::intValue).sum();
    Workload w =
        Workload.of(
            workloadSeed,
            env.lm().vocabSize(),
            1,
            prefixTokens,
            suffixTokens,
            clientsInAll + 1,
            requestsPerClient);
    List<ThroughputLevel> levels = new ArrayList<>();
    try (Replica r = start(env, config, Optional.empty())) {
      Completion first =
          env.client().complete(r.completions(), w.prompts()[clientsInAll][0], maxTokens, logprobs);
      if (!first.ok()) {
        throw new IllegalStateException(
            "the request that caches the shared prefix failed: " + first.error());
      }
      awaitQuiet(r.engine());
      int from = 0;
      for (int c : concurrency) {
        levels.add(level(env, r, Arrays.copyOfRange(w.prompts(), from, from + c)));
        from += c;
      }
    }
    return throughputReport(config, computeThreads, warmMs, levels);
  }

  /**
   * One level: a client per row of {@code prompts}, each sending its prompts one after the other;
   * the engine's stats before the first request and after the engine is quiet again.
   */
  private ThroughputLevel level(Env env, Replica r, int[][][] prompts) throws Exception {
    int numClients = prompts.length;
    progress(env, numClients + " clients, " + requestsPerClient + " requests each");
    EngineStats before = r.engine().stats();
    long cpuBefore = processCpuNanos();
    ClosedLoop<Completion> loop;
    long cpuAfter;
    Optional<GpuUtilization.Figures> gpu;
    try (GpuUtilization sampler = GpuUtilization.start(deviceName)) {
      loop =
          closedLoop(
              numClients,
              requestsPerClient,
              (client, j) ->
                  env.client().complete(r.completions(), prompts[client][j], maxTokens, logprobs));
      cpuAfter = processCpuNanos();
      gpu = sampler.stop();
    }
    awaitQuiet(r.engine());
    EngineStats after = r.engine().stats();
    List<Completion> done = loop.all();
    ServedThroughput served =
        new ServedThroughput(
            done.stream().filter(Completion::ok).mapToLong(Completion::tokens).sum(),
            loop.wallNs(),
            after.rounds() - before.rounds(),
            after.forwardNanos() - before.forwardNanos(),
            after.roundNanos() - before.roundNanos(),
            after.copyWaitNanos() - before.copyWaitNanos(),
            cpuBefore < 0 || cpuAfter < 0 ? -1 : cpuAfter - cpuBefore);
    ThroughputLevel level = new ThroughputLevel(numClients, done, served, gpu);
    progress(
        env,
        String.format(
            Locale.ROOT,
            "  %.2f s, %.1f output tokens/s, mean batch %.1f, forward %.2f ms per round,"
                + " served/raw %.3f, %d errors",
            loop.wallNs() / 1e9,
            served.servedTokensPerS(),
            served.meanBatch(),
            served.forwardMsPerRound(),
            served.servedOverRaw(),
            done.size() - level.ok().size()));
    return level;
  }

  /** The process's CPU time so far, ns; -1 where the JVM cannot say. */
  private static long processCpuNanos() {
    return ManagementFactory.getOperatingSystemMXBean()
            instanceof com.sun.management.OperatingSystemMXBean os
        ? os.getProcessCpuTime()
        : -1;
  }

  private String throughputReport(
      EngineConfig config, int computeThreads, long warmMs, List<ThroughputLevel> levels) {
    StringBuilder b = new StringBuilder();
    b.append(
        String.format(
            Locale.ROOT,
            "Settings: model %s (%s), device %s; one shared prefix of %d seeded random tokens, the"
                + " same for every request (an untimed request cached it before the first level),"
                + " then %d random tokens of each request's own; greedy, %d generated tokens per"
                + " request (ignore_eos), %s; streamed completions through HTTP with usage. At"
                + " each level its clients, on virtual threads, send %d requests each, one after"
                + " the other (closed loop). One engine (%d compute threads, Device %d tokens, max"
                + " running %d, token budget %d, L3 off) behind one HTTP server on loopback;"
                + " warm-up %d rounds (%d ms).%n%n",
            model,
            SyntheticCheckpoints.isSynthetic(model)
                ? dtype + " weights"
                : "its checkpoint's weights",
            deviceName,
            prefixTokens,
            suffixTokens,
            maxTokens,
            logprobs == StreamClient.NO_LOGPROBS
                ? "no logprobs"
                : "logprobs " + logprobs + " (alternatives per token)",
            requestsPerClient,
            computeThreads,
            deviceTokens,
            config.maxRunning(),
            config.tokenBudget(),
            warmupRounds,
            warmMs));
    b.append(
        "| clients | requests | errors | output tokens | wall s | output tokens/s | prompt cached |"
            + " TTFT p50 ms | TTFT p90 ms | TPOT p50 ms | TPOT p90 ms | rounds | forward ms per"
            + " round | round ms | copy wait ms per round | mean batch | raw tokens/s |"
            + " served/raw | host CPU % | GPU util mean / max % |\n");
    b.append("|" + "---:|".repeat(19) + "---|\n");
    for (ThroughputLevel l : levels) {
      ServedThroughput t = l.served();
      double[] ttft = okValues(l.ok(), Completion::ttftMs);
      double[] tpot = okValues(l.ok(), Completion::tpotMs);
      b.append(
          String.format(
              Locale.ROOT,
              "| %d | %d | %d | %d | %.2f | %.1f | %.1f %% | %.1f | %.1f | %.2f | %.2f | %d | %.3f |"
                  + " %.3f | %.3f | %.1f | %.1f | %.3f | %.0f %% | %s |%n",
              l.clients(),
              l.completions().size(),
              l.completions().size() - l.ok().size(),
              t.outputTokens(),
              t.wallNs() / 1e9,
              t.servedTokensPerS(),
              100 * l.cached(),
              pct(ttft, 0.5),
              pct(ttft, 0.9),
              pct(tpot, 0.5),
              pct(tpot, 0.9),
              t.rounds(),
              t.forwardMsPerRound(),
              t.roundMs(),
              t.copyWaitMsPerRound(),
              t.meanBatch(),
              t.rawTokensPerS(),
              t.servedOverRaw(),
              t.hostCpuPercent(),
              l.gpu()
                  .map(
                      g -> String.format(Locale.ROOT, "%.0f / %d", g.meanPercent(), g.maxPercent()))
                  .orElse("n/a")));
    }
    b.append(
        String.format(
            Locale.ROOT,
            "%nRaw tokens/s is what the forward pass alone would deliver at the level's batch:"
                + " the mean batch over the mean forward time per round; served/raw is the"
                + " output tokens/s over it, which comes to the share of the level's wall time"
                + " spent inside the forward pass (the rest: the loop's own work — intake,"
                + " scheduling, sampling, logprobs — HTTP and the clients).%n%n"
                + "Output tokens/s: every token the clients received over the level's wall time"
                + " (the first request sent to the last one's end). Prompt cached: the usage's"
                + " cached tokens over prompt tokens (the prefix's whole pages are reusable)."
                + " TTFT: request sent to the first event carrying a token; TPOT: (last token's"
                + " event − first token's event) / (tokens − 1), per request%s; percentiles"
                + " nearest-rank over the level's requests. Rounds, forward ms, round ms and copy"
                + " wait ms: the engine's EngineStats over the level (from before its first request"
                + " to the engine quiet after its last), per round; copy wait is the part of the"
                + " round outside the forward pass spent waiting for Device/Host copies. Mean batch: output tokens ÷ rounds, an"
                + " approximation of the decode batch (rounds that prefilled count, and a prompt's"
                + " first token is output). Host CPU: the process's CPU time over the level's wall"
                + " time (100 %% = one core of %d). GPU util: nvidia-smi's utilization.gpu every %d"
                + " ms during the level, mean / max (n/a on the CPU or without nvidia-smi).%n",
            logprobs == StreamClient.NO_LOGPROBS
                ? " (without logprobs an event carrying text stands for a token, and the tokens"
                    + " are the usage's completion_tokens)"
                : "",
            cores(),
            GpuUtilization.PERIOD_MS));
    appendErrors(b, levels.stream().flatMap(l -> l.completions().stream()));
    return b.toString();
  }

  // ---------------------------------------------------------------------------------------------
  // the report's header

  /** The machine's state at one moment. */
  record Machine(Instant time, double loadAverage) {
    static Machine now() {
      return new Machine(
          Instant.now().truncatedTo(ChronoUnit.SECONDS),
          ManagementFactory.getOperatingSystemMXBean().getSystemLoadAverage());
    }
  }

  private String header(Machine start, Machine end) {
    String title =
        switch (mode) {
          case "overhead" -> "Serving overhead: HTTP streaming vs Engine.submit";
          case "soak" -> "Soak: overload and recovery with L3 on";
          case "throughput" -> "Serving throughput: served vs the forward pass";
          default -> "Serving under load: shared prefixes, L3, one and two servers";
        };
    List<String> args = spec.commandLine().getParseResult().originalArgs();
    return String.format(
        Locale.ROOT,
        "# %s (%s, %s)%n%nCommand: `tokenspeed %s`%n%nBuild: tokenspeed %s, commit %s. Machine: %d"
            + " cores (%s), %s memory, JDK %s. Run %s – %s UTC, load average %.2f at the start"
            + " and %.2f at the end.%n%n",
        title,
        model,
        deviceName,
        String.join(" ", args),
        VersionProvider.buildVersion(),
        commit(),
        cores(),
        cpuModel(),
        memory(),
        Runtime.version(),
        start.time(),
        end.time(),
        start.loadAverage(),
        end.loadAverage());
  }

  /**
   * The commit of the checkout this code was built in: the system property {@code
   * tokenspeed.commit} when set (bin/test-gpu passes the one bin/gpu-bundle built, where no git
   * checkout exists), else {@code git rev-parse --short HEAD} beside the jar or class folder
   * (bin/tokenspeed rebuilds the jar whenever the sources changed), else {@code unknown}.
   */
  static String commit() {
    String given = System.getProperty("tokenspeed.commit");
    if (given != null && !given.isBlank()) {
      return given.strip();
    }
    Path where;
    try {
      where =
          Path.of(
                  BenchServeCommand.class
                      .getProtectionDomain()
                      .getCodeSource()
                      .getLocation()
                      .toURI())
              .getParent();
    } catch (java.net.URISyntaxException | RuntimeException e) {
      return "unknown";
    }
    try {
      Process p =
          new ProcessBuilder("git", "-C", where.toString(), "rev-parse", "--short", "HEAD")
              .redirectErrorStream(true)
              .start();
      p.getOutputStream().close();
      String text = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
      if (p.waitFor(10, TimeUnit.SECONDS) && p.exitValue() == 0 && !text.isEmpty()) {
        Process dirty =
            new ProcessBuilder(
                    "git", "-C", where.toString(), "status", "--porcelain", "--untracked-files=no")
                .redirectErrorStream(true)
                .start();
        dirty.getOutputStream().close();
        boolean changed = dirty.getInputStream().readAllBytes().length > 0;
        dirty.waitFor(10, TimeUnit.SECONDS);
        return text + (changed ? " (with uncommitted changes)" : "");
      }
    } catch (IOException e) {
      return "unknown";
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    return "unknown";
  }

  private static String cpuModel() {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"), StandardCharsets.UTF_8)) {
        if (line.startsWith("model name")) {
          return line.substring(line.indexOf(':') + 1).trim();
        }
      }
    } catch (IOException | RuntimeException e) {
      return "CPU unknown";
    }
    return "CPU unknown";
  }

  private static String memory() {
    if (ManagementFactory.getOperatingSystemMXBean()
        instanceof com.sun.management.OperatingSystemMXBean os) {
      return String.format(Locale.ROOT, "%.0f GiB", os.getTotalMemorySize() / (double) (1L << 30));
    }
    return "unknown";
  }

  // ---------------------------------------------------------------------------------------------
  // soak

  private String soak(Env env) throws Exception {
    int vocab = env.lm().vocabSize();
    warmUpWithL3(env);
    int computeThreads = threads != null ? threads : cores();
    EngineConfig config = engineConfig(env.lm(), computeThreads);
    Path dir = env.work().resolve("soak-store");
    String version = "bench-soak-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
    List<Replica> one = replicas(env, config, 1, true, dir, version, softDeadlinesMs.getFirst());
    Replica r = one.getFirst();
    SoakRun.Result result;
    try {
      SoakRun run =
          new SoakRun(
              r.engine(),
              r.completions(),
              env.client(),
              vocab,
              systemPrompts,
              systemTokens,
              userTokens,
              maxTokens,
              workloadSeed,
              what -> progress(env, what));
      result = run.run(clients.getFirst(), calibrateS, durationS, overload, recoveryS);
      awaitQuiet(r.engine());
      dropNamespace(one, version);
    } finally {
      one.forEach(Replica::close);
      DemoCommand.deleteTree(dir);
    }
    return soakReport(result, config);
  }

  private String soakReport(SoakRun.Result res, EngineConfig config) {
    StringBuilder b = new StringBuilder();
    b.append(
        String.format(
            Locale.ROOT,
            "One server with L3 on (the file store), %d compute threads, max_running %d,"
                + " token budget %d, intake of %d queued requests; prompts of %d system prompts of"
                + " %d tokens and %d tokens of their own, %d tokens generated. Sustainable rate"
                + " (closed loop, %d clients, %d s): **%.2f requests/s**; overload at %.0fx it for"
                + " %d s.%n%n",
            config.computeThreads(),
            config.maxRunning(),
            config.tokenBudget(),
            config.maxQueued(),
            systemPrompts,
            systemTokens,
            userTokens,
            maxTokens,
            clients.getFirst(),
            calibrateS,
            res.sustainable(),
            overload,
            durationS));
    b.append("## Phases\n\n");
    b.append(
        "| phase | requests sent | of them completed | refused (429) | other errors | completions"
            + " per s in the phase | TTFT p50 ms | TTFT p99 ms |\n"
            + "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    String[] phases = {"calibrate", "before", "overload", "recovery"};
    double[] ends = {
      res.phaseStartS()[1], res.phaseStartS()[2], res.phaseStartS()[3], Double.POSITIVE_INFINITY
    };
    for (int i = 0; i < phases.length; i++) {
      String ph = phases[i];
      List<SoakRun.Sent> in = res.sent().stream().filter(s -> s.phase().equals(ph)).toList();
      double from = res.phaseStartS()[i];
      double to = Math.min(ends[i], lastAt(res));
      double span = to - from;
      long ok = in.stream().filter(s -> s.completion().ok()).count();
      long finished =
          res.sent().stream()
              .filter(s -> s.completion().ok() && s.doneS() >= from && s.doneS() < to)
              .count();
      b.append(
          String.format(
              Locale.ROOT,
              "| %s | %d | %d | %d | %d | %.2f | %.1f | %.1f |%n",
              ph,
              in.size(),
              ok,
              in.stream().filter(s -> refused(s.completion())).count(),
              in.stream().filter(s -> !s.completion().ok() && !refused(s.completion())).count(),
              span > 0 ? finished / span : 0,
              pct(ttfts(in), 0.5),
              pct(ttfts(in), 0.99)));
    }
    double baseline = pct(ttfts(phase(res, "before")), 0.5);
    b.append("\n## Recovery: TTFT p50 of the requests sent in each 10 s after the overload\n\n");
    b.append("| seconds after the overload | requests | TTFT p50 ms | vs before |\n");
    b.append("|---|---:|---:|---:|\n");
    double recoveredAt = Double.NaN;
    double start = res.phaseStartS()[3];
    double lastSent =
        phase(res, "recovery").stream().mapToDouble(SoakRun.Sent::atS).max().orElse(start);
    for (double w = 0; start + w <= lastSent; w += 10) {
      double lo = start + w;
      List<SoakRun.Sent> in =
          phase(res, "recovery").stream().filter(s -> s.atS() >= lo && s.atS() < lo + 10).toList();
      double p50 = pct(ttfts(in), 0.5);
      if (Double.isNaN(recoveredAt) && p50 <= 1.5 * baseline) {
        recoveredAt = w;
      }
      b.append(
          String.format(
              Locale.ROOT,
              "| %.0f–%.0f | %d | %.1f | %.2fx |%n",
              w,
              w + 10,
              in.size(),
              p50,
              p50 / baseline));
    }
    b.append(
        String.format(
            Locale.ROOT,
            "%nThe latency is back within 1.5x of the baseline (p50 %.1f ms before the overload) %s.%n",
            baseline,
            Double.isNaN(recoveredAt)
                ? "in no 10-second window of the recovery"
                : "in the window starting " + (long) recoveredAt + " s after the overload"));
    b.append("\n## Memory and threads, per minute\n\n");
    b.append(
        "| minute | phases | heap after GC, max MiB | heap used, max MiB | resident set, max MiB |"
            + " direct buffers, max MiB | threads, max | running / waiting, max |\n");
    b.append("|---:|---|---:|---:|---:|---:|---:|---|\n");
    List<SoakRun.Sample> samples = res.samples();
    int minutes = samples.isEmpty() ? 0 : (int) (samples.getLast().atS() / 60) + 1;
    for (int m = 0; m < minutes; m++) {
      int minute = m;
      List<SoakRun.Sample> in =
          samples.stream().filter(s -> (int) (s.atS() / 60) == minute).toList();
      if (in.isEmpty()) {
        continue;
      }
      b.append(
          String.format(
              Locale.ROOT,
              "| %d | %s | %.0f | %.0f | %.0f | %.1f | %d | %d / %d |%n",
              m,
              String.join(", ", in.stream().map(SoakRun.Sample::phase).distinct().toList()),
              mib(in.stream().mapToLong(SoakRun.Sample::heapAfterGc).max().orElse(0)),
              mib(in.stream().mapToLong(SoakRun.Sample::heapUsed).max().orElse(0)),
              mib(in.stream().mapToLong(SoakRun.Sample::rss).max().orElse(0)),
              mib(in.stream().mapToLong(SoakRun.Sample::direct).max().orElse(0)),
              in.stream().mapToInt(SoakRun.Sample::threads).max().orElse(0),
              in.stream().mapToInt(SoakRun.Sample::running).max().orElse(0),
              in.stream().mapToInt(SoakRun.Sample::waiting).max().orElse(0)));
    }
    b.append(
        String.format(
            Locale.ROOT,
            "%nThreads that died of an uncaught exception: %d%s. Engine failed or stopped: %s."
                + " Collections: %d.%n",
            res.uncaught(),
            res.firstUncaught() == null ? "" : " (first: " + res.firstUncaught() + ")",
            res.engineFailed() ? "yes" : "no",
            samples.isEmpty() ? 0 : samples.getLast().gcs() - samples.getFirst().gcs()));
    return b.toString();
  }

  private static double lastAt(SoakRun.Result res) {
    return res.samples().isEmpty() ? 0 : res.samples().getLast().atS();
  }

  private static List<SoakRun.Sent> phase(SoakRun.Result res, String name) {
    return res.sent().stream().filter(s -> s.phase().equals(name)).toList();
  }

  private static boolean refused(Completion c) {
    return !c.ok() && c.error().startsWith("status 429");
  }

  private static double[] ttfts(List<SoakRun.Sent> in) {
    return sorted(
        in.stream()
            .map(SoakRun.Sent::completion)
            .filter(Completion::ok)
            .mapToDouble(Completion::ttftMs)
            .toArray());
  }

  private static double mib(long bytes) {
    return bytes / (double) (1L << 20);
  }

  // ---------------------------------------------------------------------------------------------

  private static double[] sorted(double[] values) {
    double[] v = values.clone();
    Arrays.sort(v);
    return v;
  }

  private static double pct(double[] sorted, double q) {
    return DemoCommand.percentile(sorted, q);
  }
}

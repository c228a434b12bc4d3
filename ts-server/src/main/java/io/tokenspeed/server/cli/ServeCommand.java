package io.tokenspeed.server.cli;

import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineRole;
import io.tokenspeed.engine.PdOptions;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.pd.PdSecret;
import io.tokenspeed.pd.PdSettings;
import io.tokenspeed.server.chat.ChatTemplate;
import io.tokenspeed.server.config.SettingsSources;
import io.tokenspeed.server.config.StorageExtraConfig;
import io.tokenspeed.server.http.PdServing;
import io.tokenspeed.server.http.Serving;
import io.tokenspeed.server.http.ServingState;
import io.tokenspeed.server.http.WarmUp;
import io.tokenspeed.server.kvevents.KvEventPublisher;
import io.tokenspeed.server.kvevents.ZmqEndpoint;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed serve}: one engine replica behind an OpenAI-compatible HTTP server, with
 * Prometheus metrics, health and readiness, and administration. It loads the model, starts the
 * engine (with L3 when a store is selected), starts listening (answering 503 until ready), warms
 * the compute path, and turns ready. On SIGTERM it stops intake (503), lets the requests in flight
 * finish until the shutdown deadline, cancels the rest, stops listening and closes the engine — its
 * loop, then the L3 executor (which lets pending backups finish within its own deadline), then the
 * copy thread and the tiers. With {@code --device cuda[:N]} the model computes on that GPU (one
 * rank); the weights and the device are freed after the engine.
 */
@Command(
    name = "serve",
    mixinStandardHelpOptions = true,
    versionProvider = VersionProvider.class,
    sortOptions = false,
    description = {
      "Serve a model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions,"
          + " /v1/models), with /metrics, /health, /ready and /admin/*.",
      "",
      "Every setting can also come from a configuration file (--config) or an environment"
          + " variable; a flag wins over the variable, which wins over the file"
          + " (docs/configuration.md)."
    })
final class ServeCommand implements Callable<Integer> {

  /** Helidon's own log, held so that its level stays (a logger nobody holds may be collected). */
  private static final Logger HELIDON_LOG = Logger.getLogger("io.helidon");

  @Spec private CommandSpec spec;

  @Mixin private ModelOptions modelOptions;

  @Mixin private StorageOptions storageOptions;

  @Mixin private TensorParallelOptions tp;

  @Mixin private DeviceOptions deviceOptions;

  @Option(names = "--host", paramLabel = "ADDRESS", description = "Address to listen on.")
  private String host = "127.0.0.1";

  @Option(names = "--port", paramLabel = "PORT", description = "Port to listen on (0: any free).")
  private int port = 8000;

  @Option(
      names = "--served-model-name",
      paramLabel = "NAME",
      description = "The model's name in the API (default: the --model value).")
  private String servedModelName;

  @Option(
      names = "--max-model-len",
      paramLabel = "TOKENS",
      description = "Most tokens of one request, prompt and completion together.")
  private int maxModelLen = 4096;

  @Option(
      names = "--device-tokens",
      paramLabel = "TOKENS",
      description = "Device KV capacity in tokens (default: 4 x --max-model-len).")
  private Integer deviceTokens;

  @Option(
      names = "--host-ratio",
      paramLabel = "RATIO",
      description = "Host KV capacity as a multiple of the Device's.")
  private double hostRatio = 2.0;

  @Option(
      names = "--max-running",
      paramLabel = "N",
      description = "Most requests decoding together.")
  private int maxRunning = 32;

  @Option(
      names = "--token-budget",
      paramLabel = "TOKENS",
      description = "Most tokens one forward batch computes (longer prefills are chunked).")
  private int tokenBudget = 512;

  @Option(
      names = "--max-queued",
      paramLabel = "N",
      description =
          "Most requests accepted and not running yet (queued, or held by the engine waiting for"
              + " admission); more are answered 429.")
  private int maxQueued = 1024;

  @Mixin private WebLimitsOptions web;

  @Option(
      names = "--admin-token",
      paramLabel = "TOKEN",
      description =
          "Token that /admin/* calls present as 'Authorization: Bearer TOKEN' (default: none,"
              + " administration off).")
  private String adminToken;

  @Option(
      names = "--shutdown-timeout",
      paramLabel = "SECONDS",
      description = "On SIGTERM, how long requests in flight may finish before they are cancelled.")
  private int shutdownTimeout = 30;

  @Option(
      names = "--warmup-rounds",
      paramLabel = "N",
      description = "Warm-up workloads run before the server turns ready (0: none).")
  private int warmupRounds = 3;

  @Option(
      names = "--engine-role",
      paramLabel = "ROLE",
      description =
          "What the engine does with a request: fused (all of it), or prefill or decode, the"
              + " halves of a disaggregated request behind 'tokenspeed router' (docs/pd.md; both"
              + " need the PD secret in TOKENSPEED_PD_SECRET or TOKENSPEED_PD_SECRET_FILE, and run"
              + " at any --tp with --tp-kv=heads). Also the metrics' engine_role label.")
  private String engineRole = "fused";

  @Option(
      names = "--pd-port",
      paramLabel = "PORT",
      description =
          "Decode role only: the port the KV transfer listens on for prefill engines; with --tp"
              + " N, rank r listens on PORT + r (default 0: every rank on any free port; GET /pd"
              + " names the ones bound).")
  private Integer pdPort;

  @Option(
      names = "--pd-host",
      paramLabel = "ADDRESS",
      description =
          "Decode role only: the address the KV transfer listens on, every rank's (default:"
              + " --host).")
  private String pdHost;

  @Option(
      names = "--dp-rank",
      paramLabel = "N",
      description = "The dp_rank label of the metrics (the replica's data-parallel rank).")
  private int dpRank = 0;

  @Option(
      names = "--kv-events-endpoint",
      paramLabel = "tcp://HOST:PORT",
      description =
          "Publish the engine's KV block events (stored, removed, cleared, with the tier) in"
              + " vLLM's format on a ZeroMQ PUB socket bound here; HOST * binds every interface,"
              + " PORT 0 any free port (default: none, events off; docs/kv-events.md).")
  private String kvEventsEndpoint;

  @Option(
      names = "--kv-events-replay-endpoint",
      paramLabel = "tcp://HOST:PORT",
      description =
          "With --kv-events-endpoint: a ZeroMQ ROUTER socket bound here answers a sequence number"
              + " with the batches retained since (default: none).")
  private String kvEventsReplayEndpoint;

  @Option(
      names = "--kv-events-topic",
      paramLabel = "TOPIC",
      description =
          "With --kv-events-endpoint: the topic, the first frame of every message (default: empty,"
              + " as vLLM's).")
  private String kvEventsTopic = "";

  @Option(
      names = "--kv-events-queue-size",
      paramLabel = "BATCHES",
      description =
          "With --kv-events-endpoint: the most batches waiting to be sent; a batch the full queue"
              + " refuses is not sent live and leaves a gap the replay can fill (default: "
              + KvEventPublisher.Settings.DEFAULT_QUEUE_SIZE
              + ").")
  private Integer kvEventsQueueSize;

  @Option(
      names = "--kv-events-buffer-steps",
      paramLabel = "BATCHES",
      description =
          "With --kv-events-endpoint: the newest batches the replay retains (default: "
              + KvEventPublisher.Settings.DEFAULT_BUFFER_STEPS
              + ").")
  private Integer kvEventsBufferSteps;

  @Override
  public Integer call() throws Exception {
    check();
    PdOptions pd = pdOptions();
    modelOptions.checkThreads();
    var weightType = modelOptions.weightType();
    Optional<StorageExtraConfig.Resolved> storage = storageOptions.resolve();
    modelOptions.requireVectorModule();
    PrintWriter err = spec.commandLine().getErr();
    HELIDON_LOG.setLevel(Level.WARNING);
    deviceOptions.checkTensorParallel(tp);
    Path folder = modelOptions.folder(weightType);
    if (tp.launcher()) {
      return tp.launch(); // rank 0 serves; the others compute with it
    }
    Tokenizer tokenizer = modelOptions.tokenizer(folder);
    String name = servedModelName != null ? servedModelName : modelOptions.model();
    ServingState state = new ServingState();
    CountDownLatch stopped = new CountDownLatch(1);
    var chatPrompt = Serving.chatPrompt(ChatTemplate.load(folder), tokenizer);
    try (EngineModel lm = deviceOptions.load(folder, modelOptions.model(), tp)) {
      EngineConfig config = engineConfig(lm);
      OptionalInt eos = tokenizer.specialTokens().eosId();
      // rank 0 publishes the replica's KV events: its tiers mirror every rank's decisions
      KvEventPublisher kvEvents = tp.follower() ? null : kvEvents(config);
      Engine engine;
      try {
        engine = startEngine(lm, config, eos, storage, pd, kvEvents);
      } catch (RuntimeException | Error e) {
        if (kvEvents != null) {
          kvEvents.close();
        }
        throw e;
      }
      if (tp.follower()) {
        try {
          return tp.follow(engine);
        } finally {
          engine.close();
        }
      }
      Serving frontend;
      try {
        frontend =
            Serving.start(
                new Serving.Options(
                    engine,
                    lm.vocabSize(),
                    tokenizer,
                    chatPrompt,
                    name,
                    maxModelLen,
                    host,
                    port,
                    web.maxBodyBytes,
                    adminToken,
                    dpRank,
                    state,
                    web.headerTimeoutMs()),
                kvEvents);
      } catch (RuntimeException | Error e) {
        engine.close();
        if (kvEvents != null) {
          kvEvents.close();
        }
        throw e;
      }
      Thread hook =
          new Thread(
              () -> shutdown(state, frontend, engine, kvEvents, err, stopped), "ts-serve-shutdown");
      Runtime.getRuntime().addShutdownHook(hook);
      err.println(
          "listening on http://" + host + ":" + frontend.port() + " (not ready: warming up)");
      err.flush();
      long warm =
          tp.ranked()
              ? WarmUp.onReplica(engine, lm.vocabSize(), config, warmupRounds)
              : WarmUp.run(
                  lm,
                  config,
                  eos,
                  tokenizer,
                  chatPrompt,
                  storage.isPresent() ? () -> StorageOptions.openL3(storage.get()) : null,
                  warmupRounds);
      List<InetSocketAddress> kvEndpoints = awaitKvEndpoints(engine, pd);
      // The line goes out before /ready turns 200, so whoever saw the server ready finds it logged.
      err.println(
          "ready: serving "
              + name
              + " on http://"
              + host
              + ":"
              + frontend.port()
              + " (warm-up "
              + warm
              + " ms; max_model_len "
              + Math.min(maxModelLen, engine.maxRequestTokens())
              + (storage.isPresent() ? "; L3 " + storage.get().backend().name() : "; L3 off")
              + (pd.role() == EngineRole.FUSED ? "" : "; " + pd.role().wireName())
              + kvTransferOn(kvEndpoints)
              + kvEventsOn(kvEvents)
              + (lm.gpu() ? "; on " + lm.deviceName() : "")
              + ")");
      err.flush();
      state.ready();
      stopped.await();
    }
    return 0;
  }

  /**
   * A decode replica's KV endpoints, every rank's by rank: the leader learns the other ranks'
   * through the rounds' exchange (idle rounds included), so they come shortly after the engine
   * started; the server turns ready only once it can name them all ({@code GET /pd}'s {@code
   * kv_endpoints}). Empty for the other roles. A replica whose ranks have not all reported theirs
   * within {@code --tp-timeout} fails to start.
   */
  private List<InetSocketAddress> awaitKvEndpoints(Engine engine, PdOptions pd)
      throws InterruptedException {
    if (pd.role() != EngineRole.DECODE) {
      return List.of();
    }
    long deadline = System.nanoTime() + tp.timeout().toNanos();
    while (true) {
      List<InetSocketAddress> all = engine.pdEndpoints();
      if (all.size() == tp.size()) {
        return all;
      }
      tp.failIfStopped(engine);
      if (engine.stopped() || System.nanoTime() > deadline) {
        throw new CliErrors.ReplicaFailedException(
            "the --tp="
                + tp.size()
                + " decode replica's ranks did not all report their KV endpoints within"
                + " --tp-timeout (known: "
                + all.size()
                + " of "
                + tp.size()
                + ")",
            null);
      }
      Thread.sleep(10);
    }
  }

  /**
   * The ready line's KV endpoints: {@code , KV transfer on A} or {@code A (rank 0), B (rank 1)}.
   */
  private static String kvTransferOn(List<InetSocketAddress> endpoints) {
    if (endpoints.isEmpty()) {
      return "";
    }
    if (endpoints.size() == 1) {
      return ", KV transfer on " + PdServing.hostPort(endpoints.getFirst());
    }
    StringBuilder sb = new StringBuilder(", KV transfer on ");
    for (int r = 0; r < endpoints.size(); r++) {
      sb.append(r == 0 ? "" : ", ")
          .append(PdServing.hostPort(endpoints.get(r)))
          .append(" (rank ")
          .append(r)
          .append(')');
    }
    return sb.toString();
  }

  /** The ready line's KV events: {@code ; KV events on tcp://... (replay tcp://...)}. */
  private static String kvEventsOn(KvEventPublisher kvEvents) {
    if (kvEvents == null) {
      return "";
    }
    return "; KV events on "
        + kvEvents.endpoint()
        + (kvEvents.replayEndpoint() == null ? "" : " (replay " + kvEvents.replayEndpoint() + ")");
  }

  /**
   * The KV events' publisher of {@code --kv-events-endpoint}, its sockets bound; null when KV
   * events are off. An endpoint that cannot be bound is invalid input naming its option.
   */
  private KvEventPublisher kvEvents(EngineConfig config) {
    if (kvEventsEndpoint == null) {
      return null;
    }
    return KvEventPublisher.start(
        new KvEventPublisher.Settings(
            endpoint("--kv-events-endpoint", kvEventsEndpoint),
            kvEventsReplayEndpoint == null
                ? null
                : endpoint("--kv-events-replay-endpoint", kvEventsReplayEndpoint),
            kvEventsTopic,
            dpRank,
            config.prefixGranularity(),
            kvEventsQueueSize == null
                ? KvEventPublisher.Settings.DEFAULT_QUEUE_SIZE
                : kvEventsQueueSize,
            kvEventsBufferSteps == null
                ? KvEventPublisher.Settings.DEFAULT_BUFFER_STEPS
                : kvEventsBufferSteps));
  }

  /** {@code value} parsed as {@code tcp://HOST:PORT}; another form is a usage error. */
  private ZmqEndpoint endpoint(String flag, String value) {
    try {
      return ZmqEndpoint.parse(value);
    } catch (IllegalArgumentException e) {
      throw usage(flag, value, flag + "=" + e.getMessage());
    }
  }

  /** The KV events' settings: each needs {@code --kv-events-endpoint}; endpoints parse. */
  private void checkKvEvents() {
    if (kvEventsEndpoint == null) {
      for (var given :
          List.of(
              Map.entry("--kv-events-replay-endpoint", Optional.ofNullable(kvEventsReplayEndpoint)),
              Map.entry(
                  "--kv-events-topic",
                  Optional.ofNullable(kvEventsTopic.isEmpty() ? null : kvEventsTopic)),
              Map.entry("--kv-events-queue-size", Optional.ofNullable(kvEventsQueueSize)),
              Map.entry("--kv-events-buffer-steps", Optional.ofNullable(kvEventsBufferSteps)))) {
        if (given.getValue().isPresent()) {
          throw usage(
              given.getKey(),
              given.getValue().get(),
              given.getKey()
                  + "="
                  + given.getValue().get()
                  + " is for KV events, which are off: give --kv-events-endpoint too");
        }
      }
      return;
    }
    endpoint("--kv-events-endpoint", kvEventsEndpoint);
    if (kvEventsReplayEndpoint != null) {
      endpoint("--kv-events-replay-endpoint", kvEventsReplayEndpoint);
    }
    if (kvEventsQueueSize != null) {
      range("--kv-events-queue-size", kvEventsQueueSize, 1, 1 << 20);
    }
    if (kvEventsBufferSteps != null) {
      range("--kv-events-buffer-steps", kvEventsBufferSteps, 1, 1 << 20);
    }
  }

  /** Range checks of the settings, each naming the setting. */
  private void check() {
    range("--port", port, 0, 65535);
    range("--max-model-len", maxModelLen, 2, Integer.MAX_VALUE / 4);
    if (deviceTokens != null) {
      range("--device-tokens", deviceTokens, maxModelLen, Integer.MAX_VALUE / 2);
    }
    if (!(hostRatio > 0) || !Double.isFinite(hostRatio)) {
      throw usage(
          "--host-ratio", hostRatio, "--host-ratio=" + hostRatio + " must be a finite number > 0");
    }
    range("--max-running", maxRunning, 1, 4096);
    range("--token-budget", tokenBudget, 1, 1 << 20);
    range("--max-queued", maxQueued, 1, 1 << 20);
    WebLimitsOptions.Invalid invalid = web.invalid();
    if (invalid != null) {
      throw usage(invalid.flag(), invalid.value(), invalid.message());
    }
    range("--shutdown-timeout", shutdownTimeout, 0, 86_400);
    range("--warmup-rounds", warmupRounds, 0, 100);
    range("--dp-rank", dpRank, 0, 1 << 16);
    EngineRole role = role();
    // the KV listener's settings: refused rather than ignored where no listener opens
    if (role != EngineRole.DECODE && pdPort != null) {
      throw decodeOnly("--pd-port", pdPort, role);
    }
    if (role != EngineRole.DECODE && pdHost != null) {
      throw decodeOnly("--pd-host", pdHost, role);
    }
    if (pdPort != null) {
      range("--pd-port", pdPort, 0, 65535);
    }
    if (pdHost != null && pdHost.isBlank()) {
      throw usage("--pd-host", pdHost, "--pd-host must not be blank (leave it out for --host)");
    }
    if (role != EngineRole.FUSED && tp.kvSplit() == Shard.KvSplit.PAGES) {
      throw usage(
          "--tp-kv",
          "pages",
          "--tp-kv=pages splits KV by pages, which a disaggregated request cannot move:"
              + " --engine-role="
              + engineRole
              + " runs with --tp-kv=heads only");
    }
    if (role != EngineRole.FUSED && tp.size() > PdServing.MAX_RANKS) {
      throw usage(
          "--tp",
          tp.size(),
          "--tp="
              + tp.size()
              + " with --engine-role="
              + engineRole
              + ": a replica serving a disaggregated role has at most "
              + PdServing.MAX_RANKS
              + " ranks");
    }
    if (pdPort != null && pdPort != 0 && tp.size() > 1 && pdPort + (tp.size() - 1) > 65535) {
      throw usage(
          "--pd-port",
          pdPort,
          "--pd-port="
              + pdPort
              + " with --tp="
              + tp.size()
              + ": rank r listens on --pd-port + r, and "
              + (pdPort + tp.size() - 1)
              + " is beyond 65535");
    }
    if (adminToken != null && adminToken.isBlank()) {
      throw usage(
          "--admin-token", "", "--admin-token must not be blank (leave it out to turn admin off)");
    }
    if (host.isBlank()) {
      throw usage("--host", host, "--host must not be blank");
    }
    checkKvEvents();
  }

  private ParameterException decodeOnly(String flag, Object value, EngineRole role) {
    return usage(
        flag,
        value,
        flag
            + "="
            + value
            + " is for --engine-role=decode only (the KV listener); this engine's role is "
            + role.wireName());
  }

  /** The {@code --engine-role} value; another name is a usage error listing the roles. */
  private EngineRole role() {
    try {
      return EngineRole.parse(engineRole);
    } catch (IllegalArgumentException e) {
      throw usage(
          "--engine-role",
          engineRole,
          "--engine-role=" + engineRole + " is not a role; allowed: fused, prefill, decode");
    }
  }

  /**
   * The engine's part in disaggregated serving: fused, or a prefill or decode role with the PD
   * secret from the environment (a role without it is a usage error naming both variables) and, for
   * decode, the KV listener's address. Read before the model loads, so that a deployment missing
   * its secret fails at once.
   */
  private PdOptions pdOptions() {
    EngineRole role = role();
    if (role == EngineRole.FUSED) {
      return PdOptions.FUSED;
    }
    PdSecret secret;
    try {
      secret = PdSecret.fromEnvironment(environment());
    } catch (IOException | IllegalArgumentException e) {
      throw usage(
          "--engine-role",
          engineRole,
          "--engine-role="
              + engineRole
              + " needs the PD secret every process of the deployment shares ("
              + PdSecret.ENV
              + " or "
              + PdSecret.FILE_ENV
              + "): "
              + e.getMessage());
    }
    if (role == EngineRole.PREFILL) {
      return PdOptions.prefill(secret, PdSettings.defaults());
    }
    String bind = pdHost != null ? pdHost : host;
    InetSocketAddress listen = new InetSocketAddress(bind, pdPort(tp.rank()));
    if (listen.isUnresolved()) {
      throw usage(
          pdHost != null ? "--pd-host" : "--host",
          bind,
          (pdHost != null ? "--pd-host=" : "--host=")
              + bind
              + " does not resolve to an address for the KV listener");
    }
    return PdOptions.decode(secret, PdSettings.defaults(), listen);
  }

  /**
   * The KV port of a decode replica's rank {@code r}: {@code --pd-port} + r, or 0 (any free port)
   * when {@code --pd-port} is 0 or absent.
   */
  private int pdPort(int r) {
    return pdPort == null || pdPort == 0 ? 0 : pdPort + r;
  }

  /** The environment the settings came from ({@link SettingsSources#environment}). */
  private Map<String, String> environment() {
    return spec.defaultValueProvider() instanceof SettingsSources s
        ? s.environment()
        : System.getenv();
  }

  /**
   * Starts the serving engine; a decode engine whose KV listener cannot bind is invalid input
   * naming {@code --pd-port}.
   */
  private Engine startEngine(
      EngineModel lm,
      EngineConfig config,
      OptionalInt eos,
      Optional<StorageExtraConfig.Resolved> storage,
      PdOptions pd,
      KvEventPublisher kvEvents) {
    try {
      return StorageOptions.startEngine(lm, config, eos, storage, pd, kvEvents);
    } catch (RuntimeException e) {
      BindException bind = bindFailure(e);
      if (pd.role() == EngineRole.DECODE && bind != null) {
        int r = tp.rank();
        throw new IllegalArgumentException(
            "--pd-port="
                + (pdPort == null ? 0 : pdPort)
                + ": the KV transfer"
                + (tp.size() > 1
                    ? " of rank " + r + (pdPort(r) == 0 ? "" : " (port --pd-port + " + r + ")")
                    : "")
                + " cannot listen on "
                + PdServing.hostPort(pd.listen())
                + ": "
                + bind.getMessage(),
            e);
      }
      throw e;
    }
  }

  /** The {@link BindException} among {@code e}'s causes, or null. */
  private static BindException bindFailure(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof BindException b) {
        return b;
      }
    }
    return null;
  }

  private void range(String flag, long value, long min, long max) {
    if (value < min || value > max) {
      throw usage(flag, value, flag + "=" + value + " must be in [" + min + ", " + max + "]");
    }
  }

  /**
   * A usage error about {@code flag}'s value; when a variable or the settings file gave it, the
   * error names that source first.
   */
  private ParameterException usage(String flag, Object value, String message) {
    return new ParameterException(
        spec.commandLine(), message, spec.findOption(flag), String.valueOf(value));
  }

  private EngineConfig engineConfig(EngineModel lm) {
    int capacity =
        deviceTokens != null
            ? deviceTokens
            : (int) Math.min(Integer.MAX_VALUE / 2, 4L * maxModelLen);
    int parents;
    try {
      parents = lm.deviceParentsFor(capacity);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(
          "--model=" + modelOptions.model() + ": " + e.getMessage(), e);
    }
    EngineConfig base = EngineConfig.defaults(parents);
    return new EngineConfig(
        base.prefixGranularity(),
        base.blockGranularity(),
        parents,
        hostRatio,
        tokenBudget,
        maxRunning,
        base.demoteBelowFreeParents(),
        modelOptions.computeThreads(),
        maxQueued);
  }

  /** SIGTERM: stop intake, wait for requests in flight, cancel the rest, stop, close. */
  private void shutdown(
      ServingState state,
      Serving frontend,
      Engine engine,
      KvEventPublisher kvEvents,
      PrintWriter err,
      CountDownLatch stopped) {
    state.drain();
    err.println(
        "shutting down: intake stopped; "
            + state.inFlight()
            + " requests in flight, up to "
            + shutdownTimeout
            + " s to finish");
    err.flush();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(shutdownTimeout);
    try {
      while (state.inFlight() > 0 && System.nanoTime() < deadline) {
        Thread.sleep(20);
      }
      int left = state.inFlight();
      if (left > 0) {
        err.println("shutting down: cancelling " + left + " requests still in flight");
        err.flush();
        state.cancelAll();
        long grace = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (state.inFlight() > 0 && System.nanoTime() < grace) {
          Thread.sleep(20);
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    frontend.close();
    try {
      engine.close();
      err.println(
          "stopped" + engine.storageCloseReport().map(r -> " (L3 executor: " + r + ")").orElse(""));
    } catch (IllegalStateException e) {
      err.println("stopped without freeing the engine: " + e.getMessage());
    } finally {
      if (kvEvents != null) {
        kvEvents.close(); // after the engine: its last rounds' batches go out first
      }
      err.flush();
      stopped.countDown();
    }
  }
}

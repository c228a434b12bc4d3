package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.server.cli.RouteWorkload.Prompt;
import io.tokenspeed.server.router.PromptReader;
import io.tokenspeed.server.router.Router;
import io.tokenspeed.server.router.RouterSettings;
import io.tokenspeed.server.router.Routing;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed bench route}: prefix-aware routing against round robin over the same fused
 * replicas (docs/serving.md "Data-parallel replicas"), in one run.
 *
 * <pre>
 *   redis-server ◀── L3 ── serve ×N (processes; KV events on; --dp-rank i)
 *                              ▲
 *   C clients ── completions ── router (in this process), --routing round-robin, then prefix
 *   afterwards: every request again on replica 0 alone: the outputs must be the same
 * </pre>
 *
 * <p>Each run sends the {@link RouteWorkload} (groups of prompts sharing long prefixes, in a random
 * order) through a fresh router of one routing, {@code --concurrency} requests at a time, after a
 * full cache clear of every replica; the runs send the same order with other token ids, so no run
 * reuses what another left. For each it reports the share of prompt tokens each tier gave (the
 * responses' {@code cached_tokens_by_source}: Device and Host are reuse in place; L3 is a restore;
 * the rest was recomputed), TTFT percentiles (request sent to the first streamed token), the
 * router's decisions by reason and the requests each replica got; then the ratios of prefix routing
 * against round robin; then whether every output equals the same request's on one replica alone.
 */
@Command(
    name = "route",
    mixinStandardHelpOptions = true,
    description =
        "Prefix-aware routing against round robin over N fused replicas sharing a Redis store:"
            + " groups of prompts sharing long prefixes, in random order; the share of prompt"
            + " tokens reused from Device and Host, TTFT, and outputs against one replica alone.")
final class BenchRouteCommand implements Callable<Integer> {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Pattern LISTENING = Pattern.compile("listening on http://[^:]+:(\\d+)");

  /** The model the bench writes when no {@code --model} is given: a small Llama. */
  static final String DEFAULT_MODEL_CONFIG =
      """
      {
        "architectures": ["LlamaForCausalLM"],
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 256,
        "intermediate_size": 768,
        "max_position_embeddings": 4096,
        "model_type": "llama",
        "num_attention_heads": 8,
        "num_hidden_layers": 4,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": false,
        "vocab_size": 1024
      }
      """;

  @Spec private CommandSpec spec;

  @Option(
      names = "--model",
      paramLabel = "DIR|synthetic:NAME",
      description =
          "The replicas' model (default: a Llama of 4 layers, 256 wide, 8 heads of 64 (8 KV"
              + " heads: 16 KiB of KV a token), vocabulary 1,024, written to the work folder;"
              + " synthetic f32 weights).")
  private String model;

  @Option(
      names = "--vocab-size",
      paramLabel = "V",
      description = "Prompt ids are drawn below V (default: 1024, the default model's).")
  private int vocab = 1024;

  @Option(names = "--replicas", paramLabel = "N", description = "Fused replicas (default: 3).")
  private int replicas = 3;

  @Option(names = "--groups", paramLabel = "G", description = "Prefix groups (default: 8).")
  private int groups = 8;

  @Option(names = "--per-group", paramLabel = "R", description = "Prompts per group (default: 16).")
  private int perGroup = 16;

  @Option(
      names = "--prefix-tokens",
      paramLabel = "N",
      description = "The shared prefix of a group (default: 1024).")
  private int prefixTokens = 1024;

  @Option(
      names = "--suffix-tokens",
      paramLabel = "N",
      description = "Each prompt's own tail (default: 64).")
  private int suffixTokens = 64;

  @Option(
      names = "--max-tokens",
      paramLabel = "N",
      description = "Tokens generated per request, greedy (default: 8).")
  private int maxTokens = 8;

  @Option(
      names = "--concurrency",
      paramLabel = "C",
      description = "Requests in flight at once, closed loop (default: 2).")
  private int concurrency = 2;

  @Option(
      names = "--device-tokens",
      paramLabel = "N",
      description = "Each replica's Device capacity in tokens (default: 3584).")
  private int deviceTokens = 3584;

  @Option(
      names = "--host-ratio",
      paramLabel = "R",
      description = "Each replica's Host capacity over its Device's (default: 1).")
  private double hostRatio = 1.0;

  @Option(
      names = "--max-model-len",
      paramLabel = "N",
      description = "The replicas' request limit (default: 2048).")
  private int maxModelLen = 2048;

  @Option(
      names = "--threads",
      paramLabel = "N",
      description = "Compute threads per replica (default: cores / replicas, at least 1).")
  private Integer threads;

  @Option(
      names = "--redis-uri",
      paramLabel = "URI",
      description = "The replicas' shared store (default: a redis-server this bench starts).")
  private String redisUri;

  @Option(
      names = "--routings",
      split = ",",
      paramLabel = "R",
      description = "The routings compared, run in this order (default: round-robin,prefix).")
  private List<String> routings = List.of("round-robin", "prefix");

  @Option(
      names = "--repeats",
      paramLabel = "K",
      description =
          "Runs of each routing; odd repeats run the routings in reverse order (default: 1).")
  private int repeats = 1;

  @Option(
      names = "--load-tokens",
      paramLabel = "N",
      description = "The router's --load-tokens (default: 256).")
  private int loadTokens = RouterSettings.DEFAULT_LOAD_TOKENS;

  @Option(names = "--seed", paramLabel = "N", description = "The workload's seed (default: 1).")
  private long seed = 1;

  @Option(
      names = "--out",
      paramLabel = "FILE.md",
      description = "Also write the report here, and its figures as JSON beside it (FILE.json).")
  private Path out;

  /** One request as the client saw it. */
  record Result(
      int group,
      int[] prompt,
      String error,
      double ttftMs,
      long promptTokens,
      long device,
      long host,
      long storage,
      String text) {}

  /** One run: its routing, its results in order, its wall time, the router's counts. */
  record Run(
      String routing,
      int index,
      List<Result> results,
      double wallS,
      Map<String, Double> decisions,
      Map<String, Double> perReplica) {}

  @Override
  public Integer call() throws Exception {
    check();
    PrintWriter err = spec.commandLine().getErr();
    Path work = Files.createTempDirectory("ts-bench-route");
    String modelSpec = model;
    if (modelSpec == null) {
      Path config = work.resolve("route-llama.json");
      Files.writeString(config, DEFAULT_MODEL_CONFIG);
      modelSpec = "synthetic:" + config;
    }
    int perReplica =
        threads != null
            ? threads
            : Math.max(1, Runtime.getRuntime().availableProcessors() / replicas);
    byte[] secret = new byte[16];
    new SecureRandom().nextBytes(secret);
    String adminToken = HexFormat.of().formatHex(secret);
    List<Process> processes = new ArrayList<>();
    HttpClient http =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(10))
            .build();
    try {
      String store = redisUri != null ? redisUri : startRedis(work, processes, err);
      List<String> urls = new ArrayList<>();
      List<Future<String>> starting = new ArrayList<>();
      try (ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor()) {
        for (int i = 0; i < replicas; i++) {
          List<String> args =
              List.of(
                  "serve",
                  "--model",
                  modelSpec,
                  "--threads",
                  Integer.toString(perReplica),
                  "--warmup-rounds",
                  "1",
                  "--served-model-name",
                  "bench",
                  "--port",
                  "0",
                  "--dp-rank",
                  Integer.toString(i),
                  "--max-model-len",
                  Integer.toString(maxModelLen),
                  "--device-tokens",
                  Integer.toString(deviceTokens),
                  "--host-ratio",
                  Double.toString(hostRatio),
                  "--admin-token",
                  adminToken,
                  "--kvstore-storage-backend",
                  "redis",
                  "--kvstore-storage-backend-extra-config",
                  "{\"uri\": \"" + store + "\"}",
                  "--kv-events-endpoint",
                  "tcp://127.0.0.1:0",
                  "--kv-events-replay-endpoint",
                  "tcp://127.0.0.1:0");
          Process p = startJvm(args, work.resolve("replica-" + i + ".err"));
          processes.add(p);
          Path log = work.resolve("replica-" + i + ".err");
          starting.add(pool.submit(() -> awaitServe(p, log, http)));
        }
        for (Future<String> f : starting) {
          urls.add(f.get(10, TimeUnit.MINUTES));
        }
      }
      err.println("replicas ready: " + String.join(", ", urls) + " (store " + store + ")");
      err.flush();
      RouteWorkload workload =
          new RouteWorkload(groups, perGroup, prefixTokens, suffixTokens, vocab, seed);
      List<Run> runs = new ArrayList<>();
      int index = 0;
      for (int rep = 0; rep < repeats; rep++) {
        List<String> order = new ArrayList<>(routings);
        if (rep % 2 == 1) {
          java.util.Collections.reverse(order);
        }
        for (String routing : order) {
          Run run = run(routing, index, workload, urls, adminToken, http, err);
          runs.add(run);
          index++;
        }
      }
      // every request again on replica 0 alone, one at a time: the output it gives alone
      int same = 0;
      int compared = 0;
      List<String> differ = new ArrayList<>();
      for (Run run : runs) {
        for (Result r : run.results()) {
          if (r.error() != null) {
            continue;
          }
          Result alone = complete(http, URI.create(urls.getFirst() + "/v1/completions"), r);
          compared++;
          if (alone.error() == null && alone.text().equals(r.text())) {
            same++;
          } else if (differ.size() < 5) {
            differ.add(run.routing() + " #" + run.results().indexOf(r));
          }
        }
      }
      String report = report(runs, same, compared, differ, perReplica, modelSpec, store);
      PrintWriter o = spec.commandLine().getOut();
      o.println(report);
      o.flush();
      if (out != null) {
        Files.writeString(out, report);
        Path json =
            out.resolveSibling(out.getFileName().toString().replaceFirst("\\.md$", "") + ".json");
        Files.writeString(
            json,
            JSON.writerWithDefaultPrettyPrinter()
                .writeValueAsString(figures(runs, same, compared)));
      }
      return same == compared ? 0 : 1;
    } finally {
      for (Process p : processes.reversed()) {
        p.destroy();
      }
      for (Process p : processes) {
        if (!p.waitFor(10, TimeUnit.SECONDS)) {
          p.destroyForcibly();
        }
      }
      http.shutdownNow();
    }
  }

  private void check() {
    if (replicas < 1
        || groups < 1
        || perGroup < 1
        || prefixTokens < 0
        || suffixTokens < 1
        || maxTokens < 1
        || concurrency < 1
        || repeats < 1
        || vocab < 2) {
      throw new ParameterException(
          spec.commandLine(),
          "--replicas, --groups, --per-group, --suffix-tokens, --max-tokens, --concurrency,"
              + " --repeats must be at least 1, --prefix-tokens at least 0, --vocab-size 2");
    }
    if (prefixTokens + suffixTokens + maxTokens > maxModelLen) {
      throw new ParameterException(
          spec.commandLine(),
          "--prefix-tokens + --suffix-tokens + --max-tokens="
              + (prefixTokens + suffixTokens + maxTokens)
              + " must fit --max-model-len="
              + maxModelLen);
    }
    for (String r : routings) {
      try {
        Routing.of(r);
      } catch (IllegalArgumentException e) {
        throw new ParameterException(spec.commandLine(), e.getMessage());
      }
    }
  }

  /** One run of {@code routing} over the replicas: a fresh router, the caches cleared first. */
  private Run run(
      String routing,
      int index,
      RouteWorkload workload,
      List<String> urls,
      String adminToken,
      HttpClient http,
      PrintWriter err)
      throws Exception {
    for (String url : urls) {
      HttpResponse<String> r =
          http.send(
              HttpRequest.newBuilder(URI.create(url + "/admin/clear_cache"))
                  .header("Authorization", "Bearer " + adminToken)
                  .POST(HttpRequest.BodyPublishers.noBody())
                  .build(),
              HttpResponse.BodyHandlers.ofString());
      if (r.statusCode() != 200) {
        throw new IllegalStateException(url + " refused the cache clear: " + r.body());
      }
    }
    RouterSettings settings =
        new RouterSettings(
            List.of(),
            List.of(),
            urls,
            "127.0.0.1",
            0,
            200,
            RouterSettings.DEFAULT_CONNECT_TIMEOUT_MS,
            RouterSettings.DEFAULT_UPSTREAM_TIMEOUT_MS,
            64L << 20,
            10_000,
            Routing.of(routing),
            RouterSettings.DEFAULT_KV_INDEX_BLOCKS,
            loadTokens);
    try (Router router = Router.start(settings, PromptReader.tokenIdsOnly())) {
      String base = "http://127.0.0.1:" + router.port();
      awaitRouter(http, base, routing.equals("prefix"), urls.size());
      List<Prompt> prompts = workload.prompts(seed * 1_000_003L + index);
      Result[] results = new Result[prompts.size()];
      AtomicInteger next = new AtomicInteger();
      URI endpoint = URI.create(base + "/v1/completions");
      long t0 = System.nanoTime();
      try (ExecutorService clients = Executors.newVirtualThreadPerTaskExecutor()) {
        List<Future<?>> done = new ArrayList<>();
        for (int c = 0; c < concurrency; c++) {
          done.add(
              clients.submit(
                  () -> {
                    for (int i; (i = next.getAndIncrement()) < prompts.size(); ) {
                      Prompt p = prompts.get(i);
                      results[i] =
                          complete(
                              http,
                              endpoint,
                              new Result(p.group(), p.ids(), null, 0, 0, 0, 0, 0, null));
                    }
                    return null;
                  }));
        }
        for (Future<?> f : done) {
          f.get();
        }
      }
      double wallS = (System.nanoTime() - t0) / 1e9;
      Map<String, PrometheusText.Family> m =
          PrometheusText.parse(get(http, URI.create(base + "/metrics")));
      Map<String, Double> decisions = new LinkedHashMap<>();
      for (String reason :
          List.of("device_prefix", "host_prefix", "l3_prefix", "load", "round_robin")) {
        decisions.put(
            reason,
            PrometheusText.value(
                m, "tokenspeed:router_routing_decisions_total", "role", "fused", "reason", reason));
      }
      Map<String, Double> perReplica = new LinkedHashMap<>();
      for (String url : urls) {
        perReplica.put(
            url,
            PrometheusText.value(
                m, "tokenspeed:router_routed_requests_total", "role", "fused", "backend", url));
      }
      Run run = new Run(routing, index, List.of(results), wallS, decisions, perReplica);
      err.printf(
          Locale.ROOT,
          "run %d (%s): %.1f s, Device+Host %.1f %% of prompt tokens, TTFT p50 %.1f ms%n",
          index,
          routing,
          wallS,
          100 * share(run, true, true, false),
          percentile(ttfts(run), 0.5));
      err.flush();
      return run;
    }
  }

  /** Waits until the router is ready and, routed by prefix, follows every replica's events. */
  private static void awaitRouter(HttpClient http, String base, boolean prefix, int n)
      throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (true) {
      boolean ok = false;
      try {
        HttpResponse<String> r =
            http.send(
                HttpRequest.newBuilder(URI.create(base + "/ready")).GET().build(),
                HttpResponse.BodyHandlers.ofString());
        JsonNode ready = JSON.readTree(r.body());
        ok = r.statusCode() == 200;
        if (ok && prefix) {
          int live = 0;
          for (JsonNode b : ready.path("fused")) {
            live += b.path("ready").asBoolean() && b.path("kv_events").has("endpoint") ? 1 : 0;
          }
          ok = live == n;
        } else if (ok) {
          int up = 0;
          for (JsonNode b : ready.path("fused")) {
            up += b.path("ready").asBoolean() ? 1 : 0;
          }
          ok = up == n;
        }
      } catch (IOException e) {
        // not listening yet
      }
      if (ok) {
        Thread.sleep(1000); // the subscriptions' first replays
        return;
      }
      if (System.nanoTime() - deadline > 0) {
        throw new IllegalStateException("the router did not turn ready with every replica");
      }
      Thread.sleep(100);
    }
  }

  /** Sends {@code r}'s prompt as a greedy streamed completion; its figures filled in. */
  private Result complete(HttpClient http, URI endpoint, Result r) {
    StringBuilder body = new StringBuilder("{\"prompt\":[");
    for (int i = 0; i < r.prompt().length; i++) {
      body.append(i == 0 ? "" : ",").append(r.prompt()[i]);
    }
    body.append("],\"max_tokens\":")
        .append(maxTokens)
        .append(
            ",\"temperature\":0,\"ignore_eos\":true,\"logprobs\":0,\"stream\":true,"
                + "\"stream_options\":{\"include_usage\":true}}");
    long sent = System.nanoTime();
    try {
      HttpResponse<Stream<String>> res =
          http.send(
              HttpRequest.newBuilder(endpoint)
                  .header("Content-Type", "application/json")
                  .timeout(Duration.ofMinutes(10))
                  .POST(HttpRequest.BodyPublishers.ofString(body.toString()))
                  .build(),
              HttpResponse.BodyHandlers.ofLines());
      if (res.statusCode() != 200) {
        return failed(r, "status " + res.statusCode());
      }
      StringBuilder text = new StringBuilder();
      double ttft = Double.NaN;
      JsonNode usage = null;
      String error = null;
      for (String line : (Iterable<String>) res.body()::iterator) {
        if (!line.startsWith("data: ") || line.equals("data: [DONE]")) {
          continue;
        }
        long now = System.nanoTime();
        JsonNode e = JSON.readTree(line.substring(6));
        if (e.has("error")) {
          error = e.get("error").toString();
        }
        for (JsonNode c : e.path("choices")) {
          if (Double.isNaN(ttft) && c.path("logprobs").path("tokens").size() > 0) {
            ttft = (now - sent) / 1e6;
          }
          text.append(c.path("text").asText());
        }
        if (e.hasNonNull("usage")) {
          usage = e.get("usage");
        }
      }
      if (error != null || usage == null || Double.isNaN(ttft)) {
        return failed(r, error != null ? error : "no usage or no token");
      }
      JsonNode by = usage.path("prompt_tokens_details").path("cached_tokens_by_source");
      return new Result(
          r.group(),
          r.prompt(),
          null,
          ttft,
          usage.path("prompt_tokens").asLong(),
          by.path("device").asLong(),
          by.path("host").asLong(),
          by.path("storage").asLong(),
          text.toString());
    } catch (IOException e) {
      return failed(r, e.toString());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return failed(r, "interrupted");
    }
  }

  private static Result failed(Result r, String why) {
    return new Result(r.group(), r.prompt(), why, Double.NaN, 0, 0, 0, 0, null);
  }

  private static String get(HttpClient http, URI uri) throws IOException, InterruptedException {
    return http.send(
            HttpRequest.newBuilder(uri).GET().build(), HttpResponse.BodyHandlers.ofString())
        .body();
  }

  // ---------------------------------------------------------------- processes

  /** A JVM of this process's java and classpath running {@code args}, stderr to {@code log}. */
  private static Process startJvm(List<String> args, Path log) throws IOException {
    return new ProcessBuilder(WorkerProcess.command(args))
        .redirectOutput(ProcessBuilder.Redirect.DISCARD)
        .redirectError(log.toFile())
        .start();
  }

  /** Waits until the {@code serve} process logging to {@code log} is ready; its base URL. */
  private static String awaitServe(Process p, Path log, HttpClient http) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(10);
    String url = null;
    while (true) {
      if (!p.isAlive()) {
        throw new IllegalStateException(
            "a replica exited with " + p.exitValue() + ": " + Files.readString(log));
      }
      if (System.nanoTime() - deadline > 0) {
        throw new IllegalStateException("a replica did not turn ready: " + Files.readString(log));
      }
      if (url == null) {
        Matcher m = LISTENING.matcher(Files.readString(log));
        if (m.find()) {
          url = "http://127.0.0.1:" + m.group(1);
        }
      } else {
        try {
          if (http.send(
                      HttpRequest.newBuilder(URI.create(url + "/ready")).GET().build(),
                      HttpResponse.BodyHandlers.discarding())
                  .statusCode()
              == 200) {
            return url;
          }
        } catch (IOException e) {
          // not yet
        }
      }
      Thread.sleep(100);
    }
  }

  /** Starts {@code redis-server} (from the {@code PATH}) on a free loopback port; its URI. */
  private static String startRedis(Path work, List<Process> processes, PrintWriter err)
      throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      port = s.getLocalPort();
    }
    Process p;
    try {
      p =
          new ProcessBuilder(
                  "redis-server",
                  "--port",
                  Integer.toString(port),
                  "--bind",
                  "127.0.0.1",
                  "--save",
                  "",
                  "--appendonly",
                  "no",
                  "--daemonize",
                  "no")
              .redirectOutput(work.resolve("redis.out").toFile())
              .redirectErrorStream(true)
              .start();
    } catch (IOException e) {
      throw new IllegalStateException(
          "bench route needs redis-server on the PATH (apt-get install -y redis-server), or"
              + " --redis-uri: "
              + e.getMessage(),
          e);
    }
    processes.add(p);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    while (true) {
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 500);
        OutputStream o = s.getOutputStream();
        o.write("PING\r\n".getBytes(StandardCharsets.US_ASCII));
        o.flush();
        InputStream in = s.getInputStream();
        byte[] answer = in.readNBytes(5);
        if (new String(answer, StandardCharsets.US_ASCII).equals("+PONG")) {
          break;
        }
      } catch (IOException e) {
        // not listening yet
      }
      if (!p.isAlive() || System.nanoTime() - deadline > 0) {
        throw new IllegalStateException(
            "redis-server did not start: " + Files.readString(work.resolve("redis.out")));
      }
      Thread.sleep(50);
    }
    err.println("redis-server on 127.0.0.1:" + port);
    return "redis://127.0.0.1:" + port;
  }

  // ---------------------------------------------------------------- figures

  /** The share of the run's prompt tokens reused from the tiers asked for. */
  static double share(Run run, boolean device, boolean host, boolean storage) {
    long prompt = 0;
    long reused = 0;
    for (Result r : run.results()) {
      if (r.error() != null) {
        continue;
      }
      prompt += r.promptTokens();
      reused += (device ? r.device() : 0) + (host ? r.host() : 0) + (storage ? r.storage() : 0);
    }
    return prompt == 0 ? Double.NaN : (double) reused / prompt;
  }

  static double[] ttfts(Run run) {
    return run.results().stream()
        .filter(r -> r.error() == null)
        .mapToDouble(Result::ttftMs)
        .sorted()
        .toArray();
  }

  static double percentile(double[] sorted, double q) {
    return BenchTraceCommand.percentile(sorted, q);
  }

  private static double mean(double[] values) {
    return Arrays.stream(values).average().orElse(Double.NaN);
  }

  /** The runs of {@code routing}, pooled: their results as one run. */
  private static Run pooled(List<Run> runs, String routing) {
    List<Result> all = new ArrayList<>();
    double wall = 0;
    for (Run r : runs) {
      if (r.routing().equals(routing)) {
        all.addAll(r.results());
        wall += r.wallS();
      }
    }
    return new Run(routing, -1, all, wall, Map.of(), Map.of());
  }

  private String report(
      List<Run> runs,
      int same,
      int compared,
      List<String> differ,
      int threadsEach,
      String modelSpec,
      String store) {
    StringBuilder b = new StringBuilder();
    b.append("# bench route: prefix-aware routing against round robin\n\n");
    b.append(
        String.format(
            Locale.ROOT,
            "%d fused replicas of %s (%d compute threads each; Device %d tokens, Host %.2fx;"
                + " --max-model-len %d), one Redis store (%s), KV events on. Workload: %d groups"
                + " x %d prompts of a %d-token shared prefix and a %d-token own suffix, random"
                + " order (seed %d), %d tokens generated greedily, %d requests in flight; every"
                + " replica's caches cleared before each run; each run's prompts are new ids in"
                + " the same order. Router --load-tokens %d.%n%n",
            replicas,
            modelSpec,
            threadsEach,
            deviceTokens,
            hostRatio,
            maxModelLen,
            store,
            groups,
            perGroup,
            prefixTokens,
            suffixTokens,
            seed,
            maxTokens,
            concurrency,
            loadTokens));
    b.append(
        "| run | routing | requests | failed | Device | Host | Device+Host | L3 | recomputed |"
            + " TTFT p50 ms | p90 | p99 | mean | wall s | decisions (device/host/l3/load/rr) |"
            + " requests per replica |\n");
    b.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    for (Run r : runs) {
      b.append(row(r, Integer.toString(r.index())));
    }
    List<String> distinct = routings.stream().distinct().toList();
    if (repeats > 1) {
      for (String routing : distinct) {
        b.append(row(pooled(runs, routing), "all"));
      }
    }
    b.append('\n');
    b.append(
        "TTFT by where each request's prefix came from (a request counts where most of its reused"
            + " tokens came from; none reused: recomputed): p50 ms (requests)\n\n");
    b.append("| run | routing | Device or Host | L3 | recomputed |\n|---|---|---:|---:|---:|\n");
    for (Run r : runs) {
      b.append(bySource(r, Integer.toString(r.index())));
    }
    if (repeats > 1) {
      for (String routing : distinct) {
        b.append(bySource(pooled(runs, routing), "all"));
      }
    }
    b.append('\n');
    if (distinct.contains("prefix") && distinct.contains("round-robin")) {
      Run p = pooled(runs, "prefix");
      Run rr = pooled(runs, "round-robin");
      double shareRatio = share(p, true, true, false) / share(rr, true, true, false);
      double p50 = percentile(ttfts(p), 0.5) / percentile(ttfts(rr), 0.5);
      double p90 = percentile(ttfts(p), 0.9) / percentile(ttfts(rr), 0.9);
      b.append(
          String.format(
              Locale.ROOT,
              "**Prefix routing against round robin** (same run): Device+Host share %.2fx;"
                  + " TTFT p50 %.2fx, p90 %.2fx, mean %.2fx.%n%n",
              shareRatio,
              p50,
              p90,
              mean(ttfts(p)) / mean(ttfts(rr))));
    }
    b.append(
        String.format(
            Locale.ROOT,
            "**Outputs**: %d of %d responses equal the same request's on replica 0 alone%s.%n",
            same,
            compared,
            differ.isEmpty() ? "" : " (differ: " + String.join(", ", differ) + ")"));
    return b.toString();
  }

  /** TTFT p50 of the requests whose prefix came from each source, and their counts. */
  private static String bySource(Run r, String label) {
    List<List<Double>> by = List.of(new ArrayList<>(), new ArrayList<>(), new ArrayList<>());
    for (Result x : r.results()) {
      if (x.error() != null) {
        continue;
      }
      long local = x.device() + x.host();
      int source = local == 0 && x.storage() == 0 ? 2 : local >= x.storage() ? 0 : 1;
      by.get(source).add(x.ttftMs());
    }
    StringBuilder b = new StringBuilder("| " + label + " | " + r.routing() + " |");
    for (List<Double> list : by) {
      double[] t = list.stream().mapToDouble(Double::doubleValue).sorted().toArray();
      b.append(
          t.length == 0
              ? " - |"
              : String.format(Locale.ROOT, " %.1f (%d) |", percentile(t, 0.5), t.length));
    }
    return b.append('\n').toString();
  }

  private static String row(Run r, String label) {
    long failed = r.results().stream().filter(x -> x.error() != null).count();
    double[] t = ttfts(r);
    String decisions =
        r.decisions().isEmpty()
            ? ""
            : String.join(
                "/",
                r.decisions().values().stream().map(v -> Long.toString(v.longValue())).toList());
    String spread =
        r.perReplica().isEmpty()
            ? ""
            : String.join(
                "/",
                r.perReplica().values().stream().map(v -> Long.toString(v.longValue())).toList());
    return String.format(
        Locale.ROOT,
        "| %s | %s | %d | %d | %.1f %% | %.1f %% | **%.1f %%** | %.1f %% | %.1f %% | %.1f | %.1f |"
            + " %.1f | %.1f | %.1f | %s | %s |%n",
        label,
        r.routing(),
        r.results().size(),
        failed,
        100 * share(r, true, false, false),
        100 * share(r, false, true, false),
        100 * share(r, true, true, false),
        100 * share(r, false, false, true),
        100 * (1 - share(r, true, true, true)),
        percentile(t, 0.5),
        percentile(t, 0.9),
        percentile(t, 0.99),
        mean(t),
        r.wallS(),
        decisions,
        spread);
  }

  private ObjectNode figures(List<Run> runs, int same, int compared) {
    ObjectNode o = JSON.createObjectNode();
    ArrayNode list = o.putArray("runs");
    for (Run r : runs) {
      ObjectNode n = list.addObject();
      n.put("index", r.index());
      n.put("routing", r.routing());
      n.put("requests", r.results().size());
      n.put("failed", r.results().stream().filter(x -> x.error() != null).count());
      n.put("device_share", share(r, true, false, false));
      n.put("host_share", share(r, false, true, false));
      n.put("l3_share", share(r, false, false, true));
      double[] t = ttfts(r);
      n.put("ttft_p50_ms", percentile(t, 0.5));
      n.put("ttft_p90_ms", percentile(t, 0.9));
      n.put("ttft_p99_ms", percentile(t, 0.99));
      n.put("ttft_mean_ms", mean(t));
      n.put("wall_s", r.wallS());
      ObjectNode d = n.putObject("decisions");
      r.decisions().forEach(d::put);
      ObjectNode s = n.putObject("requests_per_replica");
      r.perReplica().forEach(s::put);
    }
    o.put("outputs_equal", same);
    o.put("outputs_compared", compared);
    return o;
  }
}

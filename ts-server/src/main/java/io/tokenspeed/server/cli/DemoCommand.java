package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed demo}: a writer process serves prompts with long shared prefixes over an L3
 * store and exits; a fresh reader process with empty local caches serves prompts that extend those
 * prefixes and restores them from the store. Prints, per cohort — cache-off (recomputation in a
 * fresh engine), L2-only (the writer's own warm caches), L3 (the fresh process) — TTFT p50/p90, the
 * prefix admission used by source, the prefill left to compute and the fallbacks, and checks every
 * L2 and L3 output against the recomputation. With {@code --device cuda[:N]} both processes compute
 * on that GPU.
 */
@Command(
    name = "demo",
    mixinStandardHelpOptions = true,
    description = {
      "Shows L3 at work: a writer process fills a store with long prompt prefixes and exits; a"
          + " fresh reader process restores them instead of recomputing them.",
      "Runs on a synthetic model with seeded weights and the file store in a temporary directory:"
          + " nothing to download, no server. --device cuda runs both processes on the GPU."
    })
final class DemoCommand implements Callable<Integer> {
  private static final ObjectMapper JSON = new ObjectMapper();

  @Spec private CommandSpec spec;

  @Option(
      names = "--model",
      paramLabel = "DIR|synthetic:NAME",
      description = "Model (default: ${DEFAULT-VALUE}).")
  private String model = "synthetic:llama-100m";

  @picocli.CommandLine.Mixin private StorageOptions storageOptions;

  @picocli.CommandLine.Mixin private DeviceOptions deviceOptions;

  /** L3 extensions of one page (64 tokens) or more are worth a read in the demo. */
  static final int MIN_EXTENSION_TOKENS = 64;

  @Option(
      names = "--backend",
      paramLabel = "file|redis",
      description =
          "The L3 store (default: file); a shorthand for --kvstore-storage-backend with the"
              + " store's location.")
  private String backend;

  @Option(
      names = "--redis-uri",
      paramLabel = "URI",
      description = "The Redis server of --backend redis, e.g. redis://127.0.0.1:6379.")
  private String redisUri;

  @Option(
      names = "--store-dir",
      paramLabel = "DIR",
      description = "The file store's directory (default: a new temporary one, removed after).")
  private Path storeDir;

  @Option(
      names = "--prefixes",
      paramLabel = "N",
      description = "Shared prefixes, one request each per cohort (default: ${DEFAULT-VALUE}).")
  private int prefixes = 4;

  @Option(
      names = "--prefix-tokens",
      paramLabel = "N",
      description = "Tokens of each shared prefix (default: ${DEFAULT-VALUE}).")
  private int prefixTokens = 2048;

  @Option(
      names = "--suffix-tokens",
      paramLabel = "N",
      description = "Tokens each prompt adds after its prefix (default: ${DEFAULT-VALUE}).")
  private int suffixTokens = 64;

  @Option(
      names = "--max-tokens",
      paramLabel = "N",
      description = "Tokens generated per request (default: ${DEFAULT-VALUE}).")
  private int maxTokens = 8;

  @Option(
      names = "--prompt-seed",
      paramLabel = "N",
      description = "Seed of the prompts' token ids (default: ${DEFAULT-VALUE}).")
  private long promptSeed = 7;

  @Option(
      names = "--threads",
      paramLabel = "N",
      description = "Compute threads of each process (default: one per core).")
  private Integer threads;

  @Option(
      names = "--tp",
      paramLabel = "N",
      description =
          "Run the writer and the reader each as a tensor-parallel replica of N processes, every"
              + " rank with its own store client (default: ${DEFAULT-VALUE}).")
  private int tp = 1;

  /** One served request, as a worker reported it. */
  record Served(
      String cohort,
      int index,
      int promptTokens,
      double ttftMs,
      int device,
      int host,
      int storage,
      long computed,
      int[] tokens) {
    static Served of(JsonNode n) {
      int[] ids = new int[n.get("tokens").size()];
      for (int i = 0; i < ids.length; i++) {
        ids[i] = n.get("tokens").get(i).asInt();
      }
      return new Served(
          n.get("cohort").asText(),
          n.get("index").asInt(),
          n.get("prompt_tokens").asInt(),
          n.get("ttft_ms").asDouble(),
          n.get("reused_device_tokens").asInt(),
          n.get("reused_host_tokens").asInt(),
          n.get("reused_storage_tokens").asInt(),
          n.get("computed_tokens").asLong(),
          ids);
    }
  }

  @Override
  public Integer call() throws Exception {
    check();
    deviceOptions.checkAvailable(); // before any process starts
    PrintWriter out = spec.commandLine().getOut();
    PrintWriter err = spec.commandLine().getErr();
    Path work = Files.createTempDirectory("tokenspeed-demo");
    try {
      Path store = storeDir != null ? storeDir : work.resolve("l3");
      out.printf(
          Locale.ROOT,
          "TokenSpeed demo: %s%s, L3 on %s; %d prefixes of %d tokens, each prompt %d more, %d"
              + " tokens generated%n",
          model,
          deviceOptions.gpu()
              ? " on "
                  + deviceOptions.device()
                  + (deviceOptions.deterministic() ? " (deterministic)" : "")
              : "",
          storageOptions.backend() != null
              ? storageOptions.backend() + " (" + StorageOptions.BACKEND + ")"
              : backend.equals("file") ? "the file store in " + store : "Redis at " + redisUri,
          prefixes,
          prefixTokens,
          suffixTokens,
          maxTokens);
      out.flush();
      long t0 = System.nanoTime();
      List<Served> served = new ArrayList<>();
      List<String> closes = new ArrayList<>();
      err.println(
          "[1/2] writer process: serves the seed prompts, then their extensions warm, exits");
      err.flush();
      List<String> l3 = storageArgs(store);
      runWorker("writer", l3, served, closes, err);
      err.println(
          "[2/2] reader process (fresh, empty local caches): the extensions from L3, then"
              + " recomputed without L3");
      err.flush();
      runWorker("reader", l3, served, closes, err);
      int pageTokens = io.tokenspeed.engine.EngineConfig.defaults(2).prefixGranularity();
      int expected = prefixTokens / pageTokens * pageTokens;
      boolean ok = printTables(out, served, expected);
      out.printf(
          Locale.ROOT,
          "L3 executors closed cleanly: %s; total %.1f s%n",
          closes.stream().allMatch("true"::equals) ? "yes" : "no",
          (System.nanoTime() - t0) / 1e9);
      out.flush();
      return ok ? 0 : 1;
    } finally {
      deleteTree(work);
    }
  }

  /**
   * The L3 flags every worker gets: the ones given, or those the shorthands stand for (the file
   * store in {@code store}, or Redis at {@code --redis-uri}), with one-page L3 extensions.
   */
  private List<String> storageArgs(Path store) {
    if (storageOptions.backend() != null) {
      List<String> args =
          new ArrayList<>(List.of(StorageOptions.BACKEND, storageOptions.backend()));
      if (storageOptions.extraConfig() != null) {
        args.add(StorageOptions.EXTRA_CONFIG + "=" + storageOptions.extraConfig());
      }
      return args;
    }
    var config = JSON.createObjectNode();
    if (backend.equals("file")) {
      config.put("path", store.toString());
    } else {
      config.put("uri", redisUri);
    }
    config.putObject("async").put("min_extension_tokens", MIN_EXTENSION_TOKENS);
    return List.of(
        StorageOptions.BACKEND, backend, StorageOptions.EXTRA_CONFIG + "=" + config.toString());
  }

  private void check() {
    storageOptions.resolve(); // an extra configuration without a backend is refused here
    if (storageOptions.backend() != null) {
      if (backend != null || redisUri != null || storeDir != null) {
        throw usage(
            "--backend, --redis-uri and --store-dir are shorthands for "
                + StorageOptions.BACKEND
                + ": give one or the other");
      }
      var resolved = storageOptions.resolve().orElseThrow();
      if (resolved.backend().name().equals("memory")) {
        throw usage(
            StorageOptions.BACKEND
                + "=memory lives in one process: the demo's writer and reader are two");
      }
      backend = resolved.backend().name();
    } else if (backend == null) {
      backend = "file";
    }
    if (storageOptions.backend() != null) {
      checkSizes();
      return;
    }
    if (!backend.equals("file") && !backend.equals("redis")) {
      throw usage("--backend=" + backend + " is not one of: file, redis");
    }
    if (backend.equals("redis") && redisUri == null) {
      throw usage("--backend redis needs --redis-uri URI");
    }
    if (backend.equals("file") && redisUri != null) {
      throw usage("--redis-uri is for --backend redis");
    }
    checkSizes();
  }

  private void checkSizes() {
    deviceOptions.checkTensorParallel(tp);
    if (prefixes < 1) {
      throw usage("--prefixes=" + prefixes + " must be at least 1");
    }
    if (prefixTokens < 64) {
      throw usage("--prefix-tokens=" + prefixTokens + " must be at least one page (64)");
    }
    if (suffixTokens < 1) {
      throw usage("--suffix-tokens=" + suffixTokens + " must be at least 1");
    }
    if (maxTokens < 1) {
      throw usage("--max-tokens=" + maxTokens + " must be at least 1");
    }
    if (tp < 1 || tp > 64) {
      throw usage("--tp=" + tp + " must be in [1, 64]");
    }
    if (threads != null && threads < 1) {
      throw usage("--threads=" + threads + " must be at least 1");
    }
  }

  private picocli.CommandLine.ParameterException usage(String message) {
    return new picocli.CommandLine.ParameterException(spec.commandLine(), message);
  }

  /** Runs one worker process to its end, collecting its JSON lines and relaying its progress. */
  private void runWorker(
      String role, List<String> l3, List<Served> served, List<String> closes, PrintWriter err)
      throws IOException, InterruptedException {
    List<String> args =
        new ArrayList<>(
            List.of(
                "demo-worker",
                "--role",
                role,
                "--model",
                model,
                "--prefixes",
                Integer.toString(prefixes),
                "--prefix-tokens",
                Integer.toString(prefixTokens),
                "--suffix-tokens",
                Integer.toString(suffixTokens),
                "--max-tokens",
                Integer.toString(maxTokens),
                "--prompt-seed",
                Long.toString(promptSeed)));
    args.addAll(l3);
    if (threads != null) {
      args.addAll(List.of("--threads", threads.toString()));
    }
    if (tp > 1) {
      args.addAll(List.of("--tp", Integer.toString(tp)));
    }
    args.addAll(deviceOptions.workerArgs());
    WorkerProcess.run(
        role,
        args,
        n -> {
          if (n.has("store_closed")) {
            closes.add(Boolean.toString(n.get("store_closed").asBoolean()));
          } else {
            served.add(Served.of(n));
          }
        },
        err);
  }

  /** Prints the cohort table and the output check; returns whether every output matched. */
  private boolean printTables(PrintWriter out, List<Served> served, int expected) {
    out.println();
    out.println(
        "| cohort | process | requests | TTFT p50 ms | TTFT p90 ms | prefix used by admission"
            + " (device / host / of it L3), mean tokens | prefill left, mean tokens | fallbacks |");
    out.println("|---|---|---:|---:|---:|---|---:|---:|");
    row(out, served, "cache-off", "reader, fresh engine without L3", expected);
    row(out, served, "l2-only", "writer, same engine, warm", expected);
    row(out, served, "l3", "reader, fresh engine, empty caches", expected);
    out.println();
    out.printf(
        Locale.ROOT,
        "A fallback is a request whose reused prefix fell short of the %d tokens of its shared"
            + " prefix's full pages (for L3: that many restored from the store).%n",
        expected);
    List<Served> reference = cohort(served, "cache-off");
    int matched = 0;
    int compared = 0;
    List<String> mismatches = new ArrayList<>();
    for (String c : List.of("l2-only", "l3")) {
      for (Served s : cohort(served, c)) {
        compared++;
        int[] want = reference.get(s.index()).tokens();
        if (Arrays.equals(want, s.tokens())) {
          matched++;
        } else {
          mismatches.add(c + " request " + s.index());
        }
      }
    }
    int l3 = cohort(served, "l3").size();
    if (mismatches.isEmpty()) {
      out.printf(
          Locale.ROOT,
          "outputs match recomputation: %d of %d L3 requests and %d of %d L2-only requests%n",
          l3,
          l3,
          compared - l3,
          compared - l3);
    } else {
      out.printf(
          Locale.ROOT,
          "OUTPUTS DIFFER FROM RECOMPUTATION: %d of %d match; differing: %s%n",
          matched,
          compared,
          String.join(", ", mismatches));
    }
    return mismatches.isEmpty();
  }

  private static List<Served> cohort(List<Served> served, String cohort) {
    return served.stream()
        .filter(s -> s.cohort().equals(cohort))
        .sorted(Comparator.comparingInt(Served::index))
        .toList();
  }

  private static void row(
      PrintWriter out, List<Served> served, String cohort, String where, int expected) {
    List<Served> rows = cohort(served, cohort);
    double[] ttft = rows.stream().mapToDouble(Served::ttftMs).sorted().toArray();
    int n = rows.size();
    double device = rows.stream().mapToInt(Served::device).average().orElse(0);
    double host = rows.stream().mapToInt(Served::host).average().orElse(0);
    double storage = rows.stream().mapToInt(Served::storage).average().orElse(0);
    double left =
        rows.stream()
            .mapToDouble(s -> s.promptTokens() - s.device() - s.host())
            .average()
            .orElse(0);
    long fallbacks =
        switch (cohort) {
          case "l3" -> rows.stream().filter(s -> s.storage() < expected).count();
          case "l2-only" -> rows.stream().filter(s -> s.device() + s.host() < expected).count();
          default -> 0;
        };
    out.printf(
        Locale.ROOT,
        "| %s | %s | %d | %.1f | %.1f | %.0f / %.0f / %.0f | %.0f | %d |%n",
        cohort,
        where,
        n,
        percentile(ttft, 0.5),
        percentile(ttft, 0.9),
        device,
        host,
        storage,
        left,
        fallbacks);
  }

  /** The nearest-rank percentile of sorted values. */
  static double percentile(double[] sorted, double q) {
    if (sorted.length == 0) {
      return Double.NaN;
    }
    int rank = (int) Math.ceil(q * sorted.length);
    return sorted[Math.max(0, Math.min(sorted.length - 1, rank - 1))];
  }

  /** Deletes {@code root} and everything under it (nothing when it does not exist). */
  static void deleteTree(Path root) throws IOException {
    if (!Files.exists(root)) {
      return;
    }
    try (Stream<Path> walk = Files.walk(root)) {
      for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) {
        Files.deleteIfExists(p);
      }
    }
  }
}

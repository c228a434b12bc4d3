package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.l3.RestoreEstimate;
import io.tokenspeed.l3.store.mooncake.MooncakeStoreSettings;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.OptionalInt;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed bench ttft}: time to first token with L3 against recomputation, following the
 * specification's validation method. Per store (memory; file with a warm and a cold page cache;
 * Redis; Mooncake, through a running master and storage owner): a writer process serves prompts
 * with long shared prefixes and exits; then a fresh reader process with empty local caches runs,
 * each on a fresh engine of the same configuration (equal Device capacity, the same wait budget,
 * warm code paths), the cohorts {@code l3}, {@code partial} (half the prefix stored), {@code
 * recompute}, then pairs of {@code miss-l3} / {@code miss-off} requests (prefixes no one wrote,
 * with and without L3) and of decode TPOT with L3 idle / without, the two sides of a pair back to
 * back. Resets (the page-cache drop, the warm-up, the raw bandwidth read) happen only outside timed
 * cohorts. With {@code --tp N} every writer and reader is a tensor-parallel replica of N rank
 * processes (see {@link BenchWorkerCommand}); with {@code --device cuda[:N]} every process computes
 * on that GPU, and the report adds the Host→Device copy time of the restored blocks. Writes a
 * Markdown report and an SVG chart. With {@code --throttle-mbps} every store reads at that rate
 * (below what recomputing costs, the cost model bypasses it): each timed cohort's engine first
 * learns the store's rate on an untimed prompt, and pairs {@code slow-l3} / {@code slow-off} on two
 * engines alive side by side compare the bypassed requests' TTFT with cache-off. The report gives,
 * per store and L3 cohort, the bypasses by reason and the cost model's figures.
 */
@Command(
    name = "ttft",
    mixinStandardHelpOptions = true,
    description =
        "TTFT with L3 vs recomputation per store (fresh reader processes, equal Device capacity),"
            + " with partial hits, misses, decode TPOT and the Host->Device copy time of the"
            + " restored blocks, on the CPU or a GPU (--device); writes a Markdown report and an"
            + " SVG chart.")
final class BenchTtftCommand implements Callable<Integer> {

  @Spec private CommandSpec spec;

  @Mixin private DeviceOptions deviceOptions;

  @Option(names = "--model", description = "Model (default: ${DEFAULT-VALUE}).")
  private String model = "synthetic:llama-100m";

  @Option(
      names = "--dtype",
      paramLabel = "f32|bf16",
      description =
          "Weight type of a synthetic model (default: ${DEFAULT-VALUE}; on a GPU bf16 runs the"
              + " tensor cores).")
  private String dtype = "f32";

  @Option(
      names = "--stores",
      split = ",",
      description = "memory, file, redis, mooncake (default: file).")
  private List<String> stores = List.of("file");

  @Option(names = "--redis-uri", description = "The Redis server of the redis store.")
  private String redisUri;

  @Option(
      names = "--redis-cluster",
      split = ",",
      description =
          "Seed nodes (host:port, comma-separated) of a Redis Cluster for the redis store, in place"
              + " of --redis-uri.")
  private List<String> redisCluster;

  @Option(
      names = "--get-workers",
      description =
          "The executor's GET workers (async.get_workers; default: the executor's default): a"
              + " large restore runs as that many store calls at once.")
  private Integer getWorkers;

  @Option(
      names = "--redis-command-timeout-ms",
      description =
          "The redis store's command_timeout_ms, the bound of one store call (default: the"
              + " store's, 2000): a call reading gigabytes over one connection needs more.")
  private Integer redisCommandTimeoutMs;

  @Option(
      names = "--mooncake-master",
      description =
          "The Mooncake master (host:port) of the mooncake store; a storage owner must be"
              + " mounted on it (the bench processes are pure clients).")
  private String mooncakeMaster;

  @Option(
      names = "--mooncake-lib",
      description = "The shared library implementing store_c.h (libmooncake_store.so).")
  private Path mooncakeLib;

  @Option(
      names = "--mooncake-local-hostname",
      description =
          "This machine's address as Mooncake nodes reach it (default: ${DEFAULT-VALUE}).")
  private String mooncakeLocalHostname = "127.0.0.1";

  @Option(names = "--prompts", description = "Prompts per cohort (default: ${DEFAULT-VALUE}).")
  private int prompts = 3;

  @Option(names = "--prefix-tokens", description = "Shared prefix (default: ${DEFAULT-VALUE}).")
  private int prefixTokens = 8192;

  @Option(names = "--suffix-tokens", description = "Tokens after it (default: ${DEFAULT-VALUE}).")
  private int suffixTokens = 64;

  @Option(
      names = "--max-tokens",
      description = "Generated per request (default: ${DEFAULT-VALUE}).")
  private int maxTokens = 4;

  @Option(
      names = "--decode-tokens",
      description = "TPOT request length (default: ${DEFAULT-VALUE}).")
  private int decodeTokens = 64;

  @Option(names = "--prompt-seed", description = "Prompt seed (default: ${DEFAULT-VALUE}).")
  private long promptSeed = 7;

  @Option(
      names = "--pairs",
      description = "L3-on / L3-off pairs of all-miss requests (default: ${DEFAULT-VALUE}).")
  private int pairs = 5;

  @Option(
      names = "--decode-pairs",
      description = "L3-idle / L3-off pairs of decode runs (default: ${DEFAULT-VALUE}).")
  private int decodePairs = 10;

  @Option(names = "--threads", description = "Compute threads per process (default: all cores).")
  private Integer threads;

  @Option(
      names = "--tp",
      paramLabel = "N",
      description =
          "Run every writer and reader as a tensor-parallel replica of N processes, every rank"
              + " with its own store client (default: ${DEFAULT-VALUE}).")
  private int tp = 1;

  @Option(
      names = "--soft-deadline-ms",
      paramLabel = "MS",
      description =
          "How long an L3 cohort's request waits for its restore before it recomputes instead"
              + " (default: ${DEFAULT-VALUE}).")
  private int softDeadlineMs = SOFT_DEADLINE_MS;

  @Option(
      names = "--throttle-mbps",
      paramLabel = "MBPS",
      description =
          "Read every store at this fixed rate (10^6 bytes per second; writes are not slowed):"
              + " a store slower than recomputation, to show the cost model bypassing it. The"
              + " writer then also writes a learning prefix that every timed cohort's engine"
              + " serves first, untimed, so that the model has measured the store.")
  private Double throttleMbps;

  @Option(
      names = "--cost-model",
      paramLabel = "on|off",
      description =
          "async.cost_model of every engine with L3 (default: ${DEFAULT-VALUE}, to measure it;"
              + " the engine's own default is off).")
  private String costModel = "on";

  @Option(
      names = "--early-h2d",
      paramLabel = "on|off",
      description =
          "async.early_h2d of every engine with L3: restored rows copied to the Device as they"
              + " land (default: ${DEFAULT-VALUE}, the engine's default).")
  private String earlyH2d = "on";

  @Option(names = "--out", description = "Report directory (default: ${DEFAULT-VALUE}).")
  private Path out = Path.of("docs", "benchmarks");

  @Option(
      names = "--name",
      description = "Report name (default: DATE-l3-ttft, then -tpN at --tp N, -cuda on a GPU).")
  private String name;

  /** One reader's measurements. */
  private record Reader(String label, List<JsonNode> lines) {
    List<JsonNode> requests(String cohort) {
      return lines.stream()
          .filter(n -> n.get("kind").asText().equals("request"))
          .filter(n -> n.get("cohort").asText().equals(cohort))
          .sorted(Comparator.comparingInt(n -> n.get("index").asInt()))
          .toList();
    }

    JsonNode first(String kind) {
      return lines.stream()
          .filter(n -> n.get("kind").asText().equals(kind))
          .findFirst()
          .orElse(null);
    }

    /** TPOT with L3 idle over TPOT without L3, per pair, sorted. */
    double[] tpotRatios() {
      java.util.Map<Integer, double[]> byPair = new java.util.TreeMap<>();
      for (JsonNode n : lines) {
        if (n.get("kind").asText().equals("tpot")) {
          byPair
                  .computeIfAbsent(n.get("pair").asInt(), k -> new double[2])[
                  n.get("l3").asBoolean() ? 0 : 1] =
              n.get("tpot_ms").asDouble();
        }
      }
      return byPair.values().stream().mapToDouble(v -> v[0] / v[1]).sorted().toArray();
    }

    /** {@code field} of the decode runs with L3 idle ({@code l3}) or off, sorted. */
    double[] decode(boolean l3, String field) {
      return lines.stream()
          .filter(n -> n.get("kind").asText().equals("tpot") && n.get("l3").asBoolean() == l3)
          .mapToDouble(n -> n.get(field).asDouble())
          .sorted()
          .toArray();
    }

    /**
     * Per request of {@code cohort}, sorted: the time outside the model's forward that a request
     * spends in the engine, its wait before admission plus the loop's own time over its rounds.
     */
    double[] ownTime(String cohort) {
      return requests(cohort).stream()
          .mapToDouble(n -> n.get("queue_ms").asDouble() + n.get("loop_ms").asDouble())
          .sorted()
          .toArray();
    }

    /** All-miss TTFT with L3 over without, per pair, sorted. */
    double[] missRatios() {
      return pairRatios("miss-l3", "miss-off");
    }

    /** TTFT of cohort {@code on} over cohort {@code off}, per pair (by index), sorted. */
    double[] pairRatios(String onCohort, String offCohort) {
      List<JsonNode> on = requests(onCohort);
      List<JsonNode> off = requests(offCohort);
      double[] r = new double[Math.min(on.size(), off.size())];
      for (int i = 0; i < r.length; i++) {
        r[i] = on.get(i).get("ttft_ms").asDouble() / off.get(i).get("ttft_ms").asDouble();
      }
      java.util.Arrays.sort(r);
      return r;
    }
  }

  /**
   * The wait budget of every L3 cohort: long enough for a cold-page-cache read of an 8k-token
   * prefix (about 200 MB), short against its recomputation (about 20 s on two cores).
   */
  static final int SOFT_DEADLINE_MS = 2000;

  private static final String[] COHORTS = {
    "l3", "partial", "recompute", "miss-l3", "miss-off", "slow-l3", "slow-off"
  };

  private static final List<String> STORES = List.of("memory", "file", "redis", "mooncake");

  @Override
  public Integer call() throws Exception {
    for (String s : stores) {
      if (!STORES.contains(s)) {
        throw new ParameterException(
            spec.commandLine(), "--stores: " + s + " is not one of: " + String.join(", ", STORES));
      }
    }
    try {
      ModelOptions.weightType(dtype);
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage());
    }
    if (stores.contains("redis") && (redisUri == null) == (redisCluster == null)) {
      throw new ParameterException(
          spec.commandLine(),
          "--stores redis needs --redis-uri URI or --redis-cluster HOST:PORT[,...], one of them");
    }
    if (getWorkers != null && (getWorkers < 1 || getWorkers > 256)) {
      // the executor's range for get_workers (L3ExecutorConfig)
      throw new ParameterException(
          spec.commandLine(), "--get-workers=" + getWorkers + " must be in [1, 256]");
    }
    if (redisCommandTimeoutMs != null) {
      if (!stores.contains("redis")) {
        throw new ParameterException(
            spec.commandLine(), "--redis-command-timeout-ms is for --stores redis");
      }
      // the redis store's range for command_timeout_ms (RedisStoreSettings)
      if (redisCommandTimeoutMs < 10 || redisCommandTimeoutMs > 600_000) {
        throw new ParameterException(
            spec.commandLine(),
            "--redis-command-timeout-ms=" + redisCommandTimeoutMs + " must be in [10, 600000]");
      }
    }
    if (stores.contains("mooncake")) {
      checkMooncake();
    } else if (mooncakeMaster != null || mooncakeLib != null) {
      throw new ParameterException(
          spec.commandLine(), "--mooncake-master and --mooncake-lib are for --stores mooncake");
    }
    if (prompts < 1
        || prefixTokens < 128
        || suffixTokens < 1
        || maxTokens < 1
        || decodeTokens < 2
        || pairs < 1
        || decodePairs < 1) {
      throw new ParameterException(
          spec.commandLine(),
          "--prompts >= 1, --prefix-tokens >= 128, --suffix-tokens >= 1, --max-tokens >= 1,"
              + " --decode-tokens >= 2, --pairs >= 1 and --decode-pairs >= 1 are required");
    }
    long longest = (long) prefixTokens + suffixTokens + maxTokens;
    OptionalInt positions = ModelOptions.maxPositions(model);
    if (positions.isPresent() && longest > positions.getAsInt()) {
      throw new ParameterException(
          spec.commandLine(),
          "--prefix-tokens="
              + prefixTokens
              + " + --suffix-tokens="
              + suffixTokens
              + " + --max-tokens="
              + maxTokens
              + " = "
              + longest
              + " exceeds the max_position_embeddings of "
              + model
              + " ("
              + positions.getAsInt()
              + ")");
    }
    if (threads != null && threads < 1) {
      throw new ParameterException(
          spec.commandLine(), "--threads=" + threads + " must be at least 1");
    }
    if (tp < 1 || tp > 64) {
      throw new ParameterException(spec.commandLine(), "--tp=" + tp + " must be in [1, 64]");
    }
    if (throttleMbps != null && !(throttleMbps > 0 && throttleMbps < 1e9)) {
      throw new ParameterException(
          spec.commandLine(), "--throttle-mbps=" + throttleMbps + " must be in (0, 1e9)");
    }
    if (!List.of("on", "off").contains(costModel)) {
      throw new ParameterException(
          spec.commandLine(), "--cost-model=" + costModel + " must be on or off");
    }
    if (!List.of("on", "off").contains(earlyH2d)) {
      throw new ParameterException(
          spec.commandLine(), "--early-h2d=" + earlyH2d + " must be on or off");
    }
    if (softDeadlineMs < 1) {
      throw new ParameterException(
          spec.commandLine(), "--soft-deadline-ms=" + softDeadlineMs + " must be at least 1");
    }
    deviceOptions.checkTensorParallel(tp);
    deviceOptions.checkAvailable(); // before any process starts
    PrintWriter err = spec.commandLine().getErr();
    long runSeed = System.nanoTime();
    List<Reader> readers = new ArrayList<>();
    List<Reader> writers = new ArrayList<>(); // the memory role writes and reads in one process
    Path work = Files.createTempDirectory("tokenspeed-bench");
    long t0 = System.nanoTime();
    String base =
        name != null
            ? name
            : LocalDate.now(ZoneOffset.UTC)
                + "-l3-ttft"
                + (tp > 1 ? "-tp" + tp : "")
                + (deviceOptions.gpu() ? "-cuda" : "");
    // each reader's figures are written as it finishes, so that a run cut short (a device's time
    // limit, say) leaves the stores it completed
    java.util.function.Consumer<Reader> addReader =
        r -> {
          readers.add(r);
          String partial =
              "**Partial report:** the cohorts of "
                  + readers.size()
                  + " reader(s) so far; the run goes on (this file is replaced when it ends).\n\n";
          try {
            writeReport(
                partial + report(readers, writers, runSeed, (System.nanoTime() - t0) / 1e9),
                readers,
                base);
          } catch (IOException | RuntimeException e) {
            err.println("the partial report could not be written: " + e);
            err.flush();
          }
        };
    try {
      for (String store : stores) {
        switch (store) {
          case "memory" -> {
            String config = config("memory", "\"capacity_bytes\": 17179869184");
            addReader.accept(run("memory", "memory", config, null, runSeed, err));
          }
          case "file" -> {
            Path dir = work.resolve("file-store");
            String config = config("file", "\"path\": " + quote(dir.toString()));
            writers.add(run("writer", "file-writer", config, null, runSeed, err));
            addReader.accept(run("reader", "file-warm", config, null, runSeed + 1, err));
            addReader.accept(run("reader", "file-cold", config, dir, runSeed + 2, err));
          }
          case "redis" -> {
            String config =
                config(
                    "redis",
                    redisTarget()
                        + (redisCommandTimeoutMs == null
                            ? ""
                            : ", \"command_timeout_ms\": " + redisCommandTimeoutMs));
            writers.add(run("writer", "redis-writer", config, null, runSeed, err));
            addReader.accept(run("reader", "redis", config, null, runSeed + 3, err));
          }
          default -> {
            String config =
                config(
                    "mooncake",
                    "\"library_path\": "
                        + quote(mooncakeLib.toAbsolutePath().toString())
                        + ", \"local_hostname\": "
                        + quote(mooncakeLocalHostname)
                        + ", \"master_server_address\": "
                        + quote(mooncakeMaster));
            writers.add(run("writer", "mooncake-writer", config, null, runSeed, err));
            addReader.accept(run("reader", "mooncake", config, null, runSeed + 4, err));
          }
        }
      }
    } finally {
      DemoCommand.deleteTree(work);
    }
    String report = report(readers, writers, runSeed, (System.nanoTime() - t0) / 1e9);
    writeReport(report, readers, base);
    PrintWriter o = spec.commandLine().getOut();
    o.print(report.replace("CHART", base + ".svg"));
    o.printf("wrote %s and %s%n", out.resolve(base + ".md"), out.resolve(base + ".svg"));
    o.flush();
    return 0;
  }

  /** Writes {@code report} (its chart's name for CHART) and the chart of {@code readers}. */
  private void writeReport(String report, List<Reader> readers, String base) throws IOException {
    Files.createDirectories(out); // not before a reader finished: a run that fails leaves none
    Files.writeString(
        out.resolve(base + ".md"), report.replace("CHART", base + ".svg"), StandardCharsets.UTF_8);
    Files.writeString(out.resolve(base + ".svg"), chart(readers), StandardCharsets.UTF_8);
  }

  /**
   * {@code --stores mooncake}: the master and the library are given, the library is a file, and the
   * three make valid {@link MooncakeStoreSettings} (checked before any process starts).
   */
  private void checkMooncake() {
    if (mooncakeMaster == null || mooncakeLib == null) {
      throw new ParameterException(
          spec.commandLine(),
          "--stores mooncake needs --mooncake-master HOST:PORT and --mooncake-lib"
              + " PATH/libmooncake_store.so");
    }
    if (!Files.isRegularFile(mooncakeLib)) {
      throw new ParameterException(
          spec.commandLine(),
          "--mooncake-lib="
              + mooncakeLib
              + " is not a file (the shared library implementing store_c.h)");
    }
    try {
      MooncakeStoreSettings.pureClient(mooncakeLib, mooncakeLocalHostname, mooncakeMaster);
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage());
    }
  }

  private String config(String backend, String fields) {
    return "{"
        + fields
        + ", \"async\": {\"min_extension_tokens\": 64, \"soft_deadline_ms\": "
        + softDeadlineMs
        + (getWorkers == null ? "" : ", \"get_workers\": " + getWorkers)
        + ", \"cost_model\": \""
        + costModel
        + "\", \"early_h2d\": \""
        + earlyH2d
        + "\"}}\u0000"
        + backend;
  }

  /** The redis store's target: {@code "uri": ...} or {@code "cluster": [...]}. */
  private String redisTarget() {
    if (redisCluster == null) {
      return "\"uri\": " + quote(redisUri);
    }
    List<String> seeds = new ArrayList<>();
    for (String seed : redisCluster) {
      seeds.add(quote(seed.strip()));
    }
    return "\"cluster\": [" + String.join(", ", seeds) + "]";
  }

  private static String quote(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  private Reader run(
      String role, String label, String backendConfig, Path dropPages, long seed, PrintWriter err)
      throws Exception {
    String[] parts = backendConfig.split("\u0000");
    List<String> args =
        new ArrayList<>(
            List.of(
                "bench-worker",
                "--role",
                role,
                "--label",
                label,
                "--model",
                model,
                "--dtype",
                dtype,
                "--prompts",
                Integer.toString(prompts),
                "--prefix-tokens",
                Integer.toString(prefixTokens),
                "--suffix-tokens",
                Integer.toString(suffixTokens),
                "--max-tokens",
                Integer.toString(maxTokens),
                "--decode-tokens",
                Integer.toString(decodeTokens),
                "--prompt-seed",
                Long.toString(promptSeed),
                "--run-seed",
                Long.toString(seed),
                "--pairs",
                Integer.toString(pairs),
                "--decode-pairs",
                Integer.toString(decodePairs),
                StorageOptions.BACKEND,
                parts[1],
                StorageOptions.EXTRA_CONFIG + "=" + parts[0]));
    if (dropPages != null) {
      args.addAll(List.of("--drop-page-cache", dropPages.toString()));
    }
    if (threads != null) {
      args.addAll(List.of("--threads", threads.toString()));
    }
    if (throttleMbps != null) {
      args.addAll(List.of("--throttle-mbps", throttleMbps.toString()));
    }
    if (tp > 1) {
      args.addAll(List.of("--tp", Integer.toString(tp)));
    }
    args.addAll(deviceOptions.workerArgs());
    err.println(
        "["
            + label
            + "] "
            + role
            + " process"
            + (tp > 1 ? " (a TP=" + tp + " replica: " + tp + " rank processes)" : ""));
    err.flush();
    List<JsonNode> lines = new ArrayList<>();
    WorkerProcess.run(label, args, lines::add, err);
    return new Reader(label, lines);
  }

  /**
   * The writers' figures: what each put into the store, and the backup keys its engine dropped (a
   * reader falls back where a prefix's keys were dropped). Each writer served its prompts one at a
   * time and waited for each one's write-through.
   */
  private static void writers(StringBuilder b, List<Reader> readers, List<Reader> writers) {
    List<JsonNode> lines = new ArrayList<>();
    for (Reader r : readers) {
      JsonNode n = r.first("writer-closed"); // the memory role's own writer
      if (n != null) {
        lines.add(n);
      }
    }
    for (Reader w : writers) {
      JsonNode n = w.first("writer-closed");
      if (n != null) {
        lines.add(n);
      }
    }
    if (lines.isEmpty()) {
      return;
    }
    b.append(
        "| writer | PUT rows written / issued | PUT GB | write-through wait s | backup keys dropped"
            + " by the engine |\n|---|---:|---:|---:|---|\n");
    for (JsonNode n : lines) {
      StringBuilder dropped = new StringBuilder();
      n.get("dropped_backup_keys")
          .properties()
          .forEach(
              e ->
                  dropped
                      .append(dropped.isEmpty() ? "" : ", ")
                      .append(e.getValue().asLong())
                      .append(" (")
                      .append(e.getKey())
                      .append(')'));
      b.append(
          String.format(
              Locale.ROOT,
              "| %s | %d / %d | %.2f | %.1f | %s |%n",
              n.get("label").asText(),
              n.get("put_ok_keys").asLong(),
              n.get("put_keys").asLong(),
              n.get("put_bytes").asLong() / 1e9,
              n.get("write_through_wait_ms").asDouble() / 1e3,
              dropped.isEmpty() ? "none" : dropped.toString()));
    }
    b.append(
        "\nEach writer served its prompts one at a time and waited for each one's write-through"
            + " before the next: the engine sheds backups while the store's queue is over its"
            + " pressure bounds (async.high_queued_bytes, high_oldest_age_ms), so a store slower"
            + " than the prefill would otherwise lose the next prompt's pages.\n\n");
  }

  private static double pct(double[] sorted, double q) {
    return DemoCommand.percentile(sorted, q);
  }

  private static double[] ttft(List<JsonNode> rows) {
    return rows.stream().mapToDouble(n -> n.get("ttft_ms").asDouble()).sorted().toArray();
  }

  private static double median(double[] sorted) {
    return pct(sorted, 0.5);
  }

  private String report(List<Reader> readers, List<Reader> writers, long runSeed, double seconds) {
    StringBuilder b = new StringBuilder();
    int page = 64;
    int full = prefixTokens / page * page;
    b.append(
        String.format(
            Locale.ROOT,
            "# L3 TTFT vs recomputation (%s, %s, TP=%d)%n%n%s on %s, %s; %d prompts per cohort: a"
                + " %d-token shared prefix and %d more tokens, %d generated; decode TPOT over %d"
                + " tokens. Prompt seed %d, run seed %d. Wall time %.0f s.%n%n",
            model,
            deviceOptions.gpu() ? deviceOptions.device() : "CPU",
            tp,
            model,
            deviceName(readers),
            tp == 1
                ? "TP=1 (each writer and reader one process)"
                : "TP="
                    + tp
                    + " (each writer and reader a tensor-parallel replica of "
                    + tp
                    + " rank processes joined by shared memory and the control-plane mesh, every"
                    + " rank reading and writing its own objects)",
            prompts,
            prefixTokens,
            suffixTokens,
            maxTokens,
            decodeTokens,
            promptSeed,
            runSeed,
            seconds));
    b.append(
        "| store | cohort | requests | TTFT p50 ms | TTFT p90 ms | reused from L3, mean tokens |"
            + " prefill left, mean tokens | fallbacks | wait before admission p50 ms |\n");
    b.append("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (Reader r : readers) {
      for (String c : COHORTS) {
        List<JsonNode> rows = r.requests(c);
        if (rows.isEmpty()) {
          continue;
        }
        double[] t = ttft(rows);
        int expect =
            switch (c) {
              case "l3" -> full;
              case "partial" -> prefixTokens / 2 / page * page;
              default -> 0;
            };
        long fallbacks =
            rows.stream().filter(n -> n.get("reused_storage_tokens").asInt() < expect).count();
        b.append(
            String.format(
                Locale.ROOT,
                "| %s | %s | %d | %.1f | %.1f | %.0f | %.0f | %d | %.1f |%n",
                r.label(),
                c,
                rows.size(),
                pct(t, 0.5),
                pct(t, 0.9),
                rows.stream()
                    .mapToInt(n -> n.get("reused_storage_tokens").asInt())
                    .average()
                    .orElse(0),
                rows.stream()
                    .mapToInt(
                        n ->
                            n.get("prompt_tokens").asInt()
                                - n.get("reused_device_tokens").asInt()
                                - n.get("reused_host_tokens").asInt())
                    .average()
                    .orElse(0),
                fallbacks,
                median(
                    rows.stream()
                        .mapToDouble(n -> n.get("queue_ms").asDouble())
                        .sorted()
                        .toArray())));
      }
    }
    b.append(
        "\nA fallback is a request that reused less from L3 than its cohort stores (the prefix's"
            + " full pages for l3, half of them for partial, nothing for the others).\n\n");
    writers(b, readers, writers);
    costs(b, readers);
    b.append(
        "| store | recompute / L3 TTFT (p50) | L3 wait / raw read time of its bytes: one GET |"
            + " the same: parallel GETs | all-miss TTFT, L3 on / off: median of pairs (range) |"
            + " decode TPOT, L3 idle / off: median of pairs (range) | decode loop time outside the"
            + " forward per round, L3 idle / off (share of TPOT) | L3 outputs = recompute |\n");
    b.append("|---|---:|---:|---:|---:|---:|---:|---|\n");
    for (Reader r : readers) {
      double l3 = median(ttft(r.requests("l3")));
      double rec = median(ttft(r.requests("recompute")));
      JsonNode raw = r.first("raw-get");
      String restoreOne = "n/a";
      String restoreParallel = "n/a";
      if (raw != null) {
        restoreOne = restore(r, raw, raw.get("ms").asDouble(), full, "");
        restoreParallel =
            restore(
                r,
                raw,
                raw.get("parallel_ms").asDouble(),
                full,
                raw.get("threads").asInt() + " GETs, ");
      }
      double[] miss = r.missRatios();
      double missOwn =
          (median(r.ownTime("miss-l3")) - median(r.ownTime("miss-off")))
              / median(ttft(r.requests("miss-off")));
      double[] tpot = r.tpotRatios();
      double loopOn = median(r.decode(true, "loop_us_per_round"));
      double loopOff = median(r.decode(false, "loop_us_per_round"));
      double tpotOff = median(r.decode(false, "tpot_ms"));
      List<JsonNode> l3rows = r.requests("l3");
      List<JsonNode> recRows = r.requests("recompute");
      boolean same = l3rows.size() == recRows.size();
      for (int i = 0; same && i < l3rows.size(); i++) {
        same = l3rows.get(i).get("tokens").equals(recRows.get(i).get("tokens"));
      }
      b.append(
          String.format(
              Locale.ROOT,
              "| %s | %.1f× | %s | %s | %.3f× (%.3f–%.3f; L3's own time %+.2f%%) | %.3f× (%.3f–%.3f) |"
                  + " %.0f / %.0f µs (%+.2f%%) | %s |%n",
              r.label(),
              rec / l3,
              restoreOne,
              restoreParallel,
              median(miss),
              miss[0],
              miss[miss.length - 1],
              100 * missOwn,
              median(tpot),
              tpot[0],
              tpot[tpot.length - 1],
              loopOn,
              loopOff,
              100 * (loopOn - loopOff) / 1e3 / tpotOff,
              same ? "yes" : "**no**"));
    }
    b.append(
        "\nTargets (issue 14): recompute / L3 ≥ 20× (file and Redis); L3 wait ≤ 1.5× the raw read"
            + " time of the same bytes; all-miss L3 on / off ≤ 1.02×; decode TPOT L3 idle / off ≤"
            + " 1.02×. The wait is submission to admission: the query, the GET and the rounds"
            + " around them. The raw read time is that of one prefix's objects"
            + (tp > 1 ? " (rank 0's: its 1/" + tp + " of the bytes; every rank reads its own)" : "")
            + " read straight from other clients of the store before any timed cohort, best of 3:"
            + " in one GET, and in as many concurrent GETs of a share each as the executor has GET"
            + " workers (for file-cold the pages were dropped before every raw read). All-miss is "
            + pairs
            + " pairs of requests with L3 on and off, back to back in alternating order, each on a"
            + " fresh engine; decode is "
            + decodePairs
            + (tp > 1
                ? " such pairs of runs, each on a fresh engine (a replica's ranks run one engine at"
                    + " a time) that served the prompt and wrote it through untimed first"
                : " such pairs of runs on two engines alive side by side")
            + "; the ratios are per pair. The"
            + " all-miss column also gives L3's own time: the difference, L3 on minus off, of the"
            + " medians of a miss's time in the engine outside the forward (its wait before"
            + " admission, which holds the query, plus the loop's own time over its rounds: the L3"
            + " poll and exchange, scheduling, sampling) as a share of the L3-off TTFT; the decode"
            + " loop column the difference of the loop's own time per round as a share of the"
            + " L3-off TPOT. Those are the parts of each difference L3 itself adds. Before the"
            + " cohorts, each reader warmed its code paths on throwaway engines: a request without"
            + " L3, a miss with L3, and a restore of the first quarter of each stored prefix ("
            + warmUps(readers)
            + "). Every L3 cohort has a soft deadline of "
            + softDeadlineMs
            + " ms.\n\n");
    hostToDevice(b, readers);
    b.append("\n![TTFT p50 per store and cohort](CHART)\n");
    return b.toString();
  }

  /**
   * The cost model per store and L3 cohort: why requests skipped L3 (every reason that happened),
   * the partial restores, the figures the model decided with and the break-even bandwidth; with
   * {@code --throttle-mbps}, each cohort's TTFT against the cache-off cohort's.
   */
  private void costs(StringBuilder b, List<Reader> readers) {
    List<JsonNode> lines = new ArrayList<>();
    for (Reader r : readers) {
      r.lines().stream().filter(n -> n.get("kind").asText().equals("costs")).forEach(lines::add);
    }
    if (lines.isEmpty()) {
      return;
    }
    b.append(
        "| store | cohort | cost model | bypasses by reason | partial restores | restore bandwidth"
            + " MB/s (latency ms) | break-even MB/s at "
            + lines.getFirst().get("reference_tokens").asInt()
            + " tokens (their recompute s) | blocks copied to the Device as they landed (GETs"
            + " without room) |"
            + (throttleMbps != null ? " TTFT p50 / cache-off |" : "")
            + "\n|---|---|---|---|---:|---:|---:|---:|"
            + (throttleMbps != null ? "---:|" : "")
            + "\n");
    for (Reader r : readers) {
      for (JsonNode n : r.lines()) {
        if (!n.get("kind").asText().equals("costs")) {
          continue;
        }
        StringBuilder reasons = new StringBuilder();
        n.get("bypasses")
            .properties()
            .forEach(
                e -> {
                  if (e.getValue().asLong() > 0) {
                    reasons
                        .append(reasons.isEmpty() ? "" : ", ")
                        .append(e.getValue().asLong())
                        .append(' ')
                        .append(e.getKey());
                  }
                });
        long abandoned = n.path("restores_abandoned").asLong();
        if (abandoned > 0) {
          reasons
              .append(reasons.isEmpty() ? "" : ", ")
              .append(abandoned)
              .append(" abandoned while reading");
        }
        String cohort = n.get("cohort").asText();
        String ratio = "";
        if (throttleMbps != null && cohort.equals("slow-l3")) {
          double[] pairs = r.pairRatios("slow-l3", "slow-off");
          ratio =
              String.format(
                  Locale.ROOT,
                  " %.3f× (%.3f–%.3f, pairs) |",
                  median(pairs),
                  pairs[0],
                  pairs[pairs.length - 1]);
        } else if (throttleMbps != null) {
          double off = median(ttft(r.requests("recompute")));
          ratio = String.format(Locale.ROOT, " %.3f× |", median(ttft(r.requests(cohort))) / off);
        }
        b.append(
            String.format(
                Locale.ROOT,
                "| %s | %s | %s | %s | %d | %s (%.2f) | %s | %d (%d) |%s%n",
                r.label(),
                cohort,
                n.get("cost_model").asBoolean() ? "on" : "off",
                reasons.isEmpty() ? "none" : reasons.toString(),
                n.get("partial_restores").asLong(),
                restoreMbps(n.get("restore_bytes_per_second").asDouble()),
                n.get("restore_latency_ms").asDouble(),
                breakEven(
                    n.get("break_even_bytes_per_second").asDouble(),
                    n.get("reference_prefill_s").asDouble()),
                n.path("early_h2d_blocks").asLong(),
                n.path("early_h2d_skipped").asLong(),
                ratio));
      }
    }
    b.append(
        "\nBypasses count each request once, by the reason its preparation sent it to ordinary"
            + " admission without asking L3 (slower_than_compute: the cost model expected"
            + " recomputing to beat any restore; local_hit, short_extension, nothing_to_ask: the"
            + " fixed rules); abandoned while reading: restores whose request stopped waiting on"
            + " its GET and computed instead, the store reading slower than when they were"
            + " chosen. The restore bandwidth and latency are the figures the model decided"
            + " with at the cohort's end (the TP leader's moving averages over its GETs and"
            + " QUERYs); the break-even is the bandwidth at which restoring the reference prefix"
            + " takes as long as recomputing it at the measured prefill rate. Blocks copied to"
            + " the Device as they landed: restored blocks that async.early_h2d published on the"
            + " Device when their GET ended, so admission loaded nothing for them; GETs without"
            + " room: GETs that read into the Host only because early destinations would have"
            + " held more of the Device than allowed. A bandwidth of \"within latency\": the"
            + " GETs took no longer than the latency estimate (a QUERY's time, which grows with"
            + " the keys it checks), so the model costs the restore at its latency alone."
            + (throttleMbps != null
                ? String.format(
                    Locale.ROOT,
                    " Every store was read at %.1f MB/s (--throttle-mbps); each timed cohort's"
                        + " engine first served, untimed, a prompt whose prefix's first quarter"
                        + " the writer stored and no cohort shares, and waited for its restore:"
                        + " the model had measured the store before the first timed request."
                        + " slow-l3 / slow-off are pairs of requests on two engines alive side by"
                        + " side, one with L3 over the throttled store (after that learning"
                        + " prompt), one without, each stored prefix with a new suffix on both,"
                        + " the two sides of a pair back to back in alternating order: its ratio"
                        + " is the median (range) of the pairs' TTFT ratios; the other rows' ratio"
                        + " is the cohort's TTFT p50 over the recompute cohort's.",
                    throttleMbps)
                : "")
            + "\n\n");
  }

  /**
   * The break-even cell: MB/s (the reference prefix's recompute s); "prefill not measured" before
   * the engine fitted its prefill rate (the model then decides nothing against recomputation), and
   * "none" where the store's latency alone exceeds recomputing.
   */
  static String breakEven(double bytesPerSecond, double prefillSeconds) {
    if (Double.isNaN(bytesPerSecond)) {
      return "prefill not measured";
    }
    String rate =
        Double.isInfinite(bytesPerSecond)
            ? "none"
            : String.format(Locale.ROOT, "%.1f", bytesPerSecond / 1e6);
    return String.format(Locale.ROOT, "%s (%.2f)", rate, prefillSeconds);
  }

  /** A restore bandwidth in MB/s, or "within latency" where the estimator found no transfer. */
  static String restoreMbps(double bytesPerSecond) {
    return bytesPerSecond >= RestoreEstimate.UNBOUNDED_BYTES_PER_SECOND
        ? "within latency"
        : String.format(Locale.ROOT, "%.1f", bytesPerSecond / 1e6);
  }

  /** The Host→Device bandwidth the restored blocks are compared with: one PCIe 5.0 x16 link. */
  static final double H2D_TARGET_GB_PER_S = 55;

  /** Where the readers' models computed, as their first reader reported it. */
  private String deviceName(List<Reader> readers) {
    JsonNode d = readers.isEmpty() ? null : readers.getFirst().first("device");
    String name = d != null ? d.get("device").asText() : deviceOptions.gpu() ? "cuda" : "cpu";
    if (name.equals("cpu")) {
      return "the CPU";
    }
    return "GPU "
        + name
        + ", "
        + dtype
        + " weights"
        + (deviceOptions.deterministic()
            ? " (deterministic: fixed-order GEMMs)"
            : " (cuBLAS GEMMs, not batch-invariant)");
  }

  /**
   * The Host→Device copies of the {@code l3} cohort: per request, the bytes of the blocks that went
   * up from the Host tier to the Device tier (those restored from L3) and the copy thread's time
   * moving them, from the engine's own counters; the median bandwidth against {@link
   * #H2D_TARGET_GB_PER_S}.
   */
  private void hostToDevice(StringBuilder b, List<Reader> readers) {
    b.append(
        "| store | restored from L3 and copied up, median MB per request | Host→Device copy time,"
            + " median ms | Host→Device GB/s (median of requests) | of "
            + String.format(Locale.ROOT, "%.0f", H2D_TARGET_GB_PER_S)
            + " GB/s | copied while the forward ran |\n");
    b.append("|---|---:|---:|---:|---:|---:|\n");
    for (Reader r : readers) {
      List<JsonNode> rows = r.requests("l3").stream().filter(n -> n.has("h2d_bytes")).toList();
      if (rows.isEmpty()) {
        continue;
      }
      double[] mb =
          rows.stream().mapToDouble(n -> n.get("h2d_bytes").asDouble() / 1e6).sorted().toArray();
      double[] ms = rows.stream().mapToDouble(n -> n.get("h2d_ms").asDouble()).sorted().toArray();
      double[] gbs =
          rows.stream()
              .filter(n -> n.get("h2d_ms").asDouble() > 0)
              .mapToDouble(n -> n.get("h2d_bytes").asDouble() / 1e6 / n.get("h2d_ms").asDouble())
              .sorted()
              .toArray();
      double bw = gbs.length == 0 ? Double.NaN : median(gbs);
      double bytes = rows.stream().mapToDouble(n -> n.get("h2d_bytes").asDouble()).sum();
      double staged = rows.stream().mapToDouble(n -> n.path("h2d_staged_bytes").asDouble()).sum();
      b.append(
          String.format(
              Locale.ROOT,
              "| %s | %.1f | %.2f | %.1f | %.2f× | %s |%n",
              r.label(),
              median(mb),
              median(ms),
              bw,
              bw / H2D_TARGET_GB_PER_S,
              bytes > 0 ? String.format(Locale.ROOT, "%.0f %%", 100 * staged / bytes) : "-"));
    }
    b.append(
        "\nHost→Device is the copy thread's time for the l3 cohort's loads, from the engine's"
            + " counters (EngineStats.loadedBytes and loadNanos); the last column is the share of"
            + " those bytes copied in stages of layers while the forward computed (--load-stages),"
            + " each layer starting once its stage was in, rather than before the forward: "
            + (deviceOptions.gpu()
                ? "cudaMemcpyAsync of each block from the pinned Host tier to GPU memory on the copy"
                    + " stream, then the stream waited for"
                : "on the CPU the Device tier is host memory, so these are memory copies")
            + "."
            + (deviceOptions.gpu()
                ? " Targets on a GPU: recompute / L3 at 8k and 32k-token prefixes; the L3 wait ≤"
                    + " 1.25× the raw read time of its bytes; Host→Device of the restored blocks"
                    + " against "
                    + String.format(Locale.ROOT, "%.0f", H2D_TARGET_GB_PER_S)
                    + " GB/s."
                : "")
            + "\n");
  }

  /** The tokens each reader's warm-up restores reused from L3, e.g. {@code memory 2048, 2048}. */
  private static String warmUps(List<Reader> readers) {
    List<String> parts = new ArrayList<>();
    for (Reader r : readers) {
      parts.add(
          r.label()
              + " "
              + r.requests("warm-up").stream()
                  .map(n -> n.get("reused_storage_tokens").asText())
                  .collect(java.util.stream.Collectors.joining(", ")));
    }
    return "tokens reused from L3: " + String.join("; ", parts);
  }

  /**
   * The median over the {@code l3} cohort of its wait over the time its restored bytes take at the
   * bandwidth of a raw read of {@code rawMs}, with that bandwidth.
   */
  private static String restore(Reader r, JsonNode raw, double rawMs, int full, String how) {
    double msPerByte = rawMs / raw.get("bytes").asDouble();
    double[] ratios =
        r.requests("l3").stream()
            .mapToDouble(
                n -> {
                  double bytes =
                      raw.get("bytes").asDouble()
                          * n.get("reused_storage_tokens").asDouble()
                          / full;
                  return n.get("queue_ms").asDouble() / (bytes * msPerByte);
                })
            .sorted()
            .toArray();
    return String.format(
        Locale.ROOT,
        "%.2f× (%sraw %.0f MB/s)",
        median(ratios),
        how,
        raw.get("bytes").asDouble() / rawMs / 1e3);
  }

  /** A bar chart of TTFT p50 per store and cohort, log scale. */
  private static String chart(List<Reader> readers) {
    List<String> labels = new ArrayList<>();
    List<Double> values = new ArrayList<>();
    for (Reader r : readers) {
      for (String c : COHORTS) {
        List<JsonNode> rows = r.requests(c);
        if (!rows.isEmpty()) {
          labels.add(r.label() + " · " + c);
          values.add(median(ttft(rows)));
        }
      }
    }
    double max = values.stream().mapToDouble(Double::doubleValue).max().orElse(1);
    double min = values.stream().mapToDouble(Double::doubleValue).min().orElse(1) / 2;
    int rowH = 22;
    int left = 190;
    int width = 760;
    int height = 40 + rowH * labels.size() + 30;
    double span = Math.log10(max * 1.2) - Math.log10(min);
    StringBuilder s = SvgBars.open(width, height);
    s.append("<text x=\"10\" y=\"20\" font-size=\"14\">TTFT p50, ms (log scale)</text>\n");
    for (int i = 0; i < labels.size(); i++) {
      double v = values.get(i);
      double w = (width - left - 80) * (Math.log10(v) - Math.log10(min)) / span;
      int y = 35 + i * rowH;
      String color =
          labels.get(i).endsWith("l3")
              ? "#2b7bb9"
              : labels.get(i).contains("recompute") ? "#c0504d" : "#8c8c8c";
      SvgBars.bar(s, labels.get(i), v, w, left, y, rowH, color);
    }
    s.append("</svg>\n");
    return s.toString();
  }
}

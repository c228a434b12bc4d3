package io.tokenspeed.server.metrics;

import io.prometheus.metrics.config.EscapingScheme;
import io.prometheus.metrics.core.metrics.Counter;
import io.prometheus.metrics.core.metrics.CounterWithCallback;
import io.prometheus.metrics.core.metrics.GaugeWithCallback;
import io.prometheus.metrics.core.metrics.Histogram;
import io.prometheus.metrics.expositionformats.PrometheusTextFormatWriter;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import io.prometheus.metrics.model.snapshots.Labels;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.engine.RequestMetrics;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.pd.PdMetrics;
import io.tokenspeed.scheduler.Bypass;
import io.tokenspeed.scheduler.StorageCounters.DropReason;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.function.Consumer;
import java.util.function.LongSupplier;
import java.util.function.Supplier;
import java.util.function.ToDoubleFunction;

/**
 * The Prometheus exporter of one engine replica (rank): the request metrics the server records
 * ({@link #onRequestFinished}) and the engine's and L3's figures, read from the engine's latest
 * {@link EngineMetrics} snapshot when scraped. docs/metrics.md lists every metric.
 *
 * <p>What it guarantees:
 *
 * <ul>
 *   <li><b>One registry of its own</b>, never the process-wide default: two exporters in one JVM
 *       (tests, several replicas) do not collide.
 *   <li><b>Every series carries the identity labels</b> {@code model_name}, {@code engine_role},
 *       {@code dp_rank} and {@code tp_rank}; no label carries a request id or an object key.
 *   <li><b>The L3 executor's series come once per rank.</b> Its I/O is rank-local: on the leader
 *       (rank 0) of a tensor-parallel replica the executor's series are present for every rank,
 *       each under its own {@code tp_rank}, the other ranks' figures as they last sent them through
 *       the replica's exchange (at most a couple of seconds old). The scheduler's L3 series are
 *       mirrored on every rank and appear once, under the exporter's own rank.
 *   <li><b>Names keep the prefix {@code tokenspeed:}</b>; client_java writes them as given (colons
 *       are legal in the text format) and appends {@code _total} to every counter.
 *   <li><b>The L3 metrics are always present</b>: without a storage backend every L3 series reads 0
 *       and {@code tokenspeed:l3_health_state} reads 1 for {@code state="disabled"}, so dashboards
 *       and alerts keep their series whether or not L3 is configured.
 *   <li><b>One snapshot per scrape</b>: a scrape reads the engine's snapshot once, so every
 *       engine-side value of one exposition comes from the same moment.
 *   <li><b>Metrics never feed a decision</b>: nothing here is read by the engine or the server.
 * </ul>
 *
 * <p>Cached prompt tokens are counted by {@code source}, three disjoint parts: {@code device}
 * (already on the Device at admission), {@code host} (loaded from the Host and not restored from L3
 * by this engine) and {@code storage} (loaded from Host blocks this engine restored from L3). Their
 * sum is {@code usage.prompt_tokens_details.cached_tokens} (Device plus Host, storage included).
 *
 * <p>Thread-safe: requests finish on any thread; scrapes are serialized.
 */
public final class ServerMetrics {

  /** The content type of {@link #scrape}: Prometheus text format 0.0.4. */
  public static final String CONTENT_TYPE = PrometheusTextFormatWriter.CONTENT_TYPE;

  /**
   * Upper bounds, in seconds, of the latency histograms' buckets: 1 ms to 60 s, for a CPU engine
   * whose first token may take from milliseconds (a cached prompt) to a minute (a long prefill).
   */
  static final double[] LATENCY_BUCKETS_SECONDS = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60
  };

  /** The engine's finish reasons, present at 0 before any request finishes with them. */
  public static final List<String> FINISH_REASONS = List.of("stop", "length", "cancelled", "error");

  private static final List<String> KINDS = List.of("query", "get", "put");
  private static final List<String> HEALTH_STATES =
      List.of("healthy", "cooldown", "probing", "disabled");

  private static final double NANOS_PER_SECOND = 1e9;

  private static final L3Metrics.Kind NO_JOBS =
      new L3Metrics.Kind(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);

  private final PrometheusRegistry registry = new PrometheusRegistry();
  private final PrometheusTextFormatWriter writer = PrometheusTextFormatWriter.create();
  private final Labels identity;

  /** The identity without {@code tp_rank}: the executor's series carry each rank's own. */
  private final Labels rankless;

  /** This exporter's own {@code tp_rank}. */
  private final String tpRank;

  private final Supplier<EngineMetrics> engine;

  /** The KV transfer's counters of an engine with a PD role; null for a fused engine. */
  private final Supplier<Optional<PdMetrics>> pd;

  private final Counter promptTokens;
  private final Counter generationTokens;
  private final Counter cachedPromptTokens;
  private final Counter requestsFinished;
  private final Histogram timeToFirstToken;
  private final Histogram timePerOutputToken;
  private final Histogram queueTime;
  private final Histogram e2eLatency;

  /** The KV events' batches sent live and dropped by the full queue (zeros while off). */
  private volatile LongSupplier kvEventsPublished = () -> 0;

  private volatile LongSupplier kvEventsDropped = () -> 0;

  /** The engine snapshot of the scrape in progress (guarded by this; null outside a scrape). */
  private EngineMetrics scraping;

  /** The KV transfer's counters of the scrape in progress (guarded by this). */
  private PdMetrics scrapingPd;

  /**
   * An exporter for one replica.
   *
   * @param modelName the served model's name ({@code model_name})
   * @param engineRole the engine's role, e.g. {@code fused} ({@code engine_role})
   * @param dpRank the data-parallel rank ({@code dp_rank}), >= 0
   * @param tpRank the tensor-parallel rank ({@code tp_rank}), >= 0
   * @param engine the engine's latest snapshot ({@code Engine::metrics}), read at each scrape
   */
  public ServerMetrics(
      String modelName, String engineRole, int dpRank, int tpRank, Supplier<EngineMetrics> engine) {
    this(modelName, engineRole, dpRank, tpRank, engine, null);
  }

  /**
   * An exporter for one replica whose engine has a prefill or decode role: the {@code
   * tokenspeed:pd_*} series of its KV transfer are exported too.
   *
   * @param pd the KV transfer's counters ({@code Engine::pdMetrics}), read at each scrape; null for
   *     a fused engine (no {@code tokenspeed:pd_*} series)
   */
  public ServerMetrics(
      String modelName,
      String engineRole,
      int dpRank,
      int tpRank,
      Supplier<EngineMetrics> engine,
      Supplier<Optional<PdMetrics>> pd) {
    if (modelName == null || modelName.isBlank()) {
      throw new IllegalArgumentException("model_name must be a non-empty string");
    }
    if (engineRole == null || engineRole.isBlank()) {
      throw new IllegalArgumentException("engine_role must be a non-empty string");
    }
    if (dpRank < 0 || tpRank < 0) {
      throw new IllegalArgumentException(
          "dp_rank=" + dpRank + " and tp_rank=" + tpRank + " must be >= 0");
    }
    this.engine = Objects.requireNonNull(engine, "engine");
    this.pd = pd;
    this.tpRank = Integer.toString(tpRank);
    this.rankless =
        Labels.of(
            "model_name",
            modelName,
            "engine_role",
            engineRole,
            "dp_rank",
            Integer.toString(dpRank));
    this.identity =
        Labels.of(
            "model_name",
            modelName,
            "engine_role",
            engineRole,
            "dp_rank",
            Integer.toString(dpRank),
            "tp_rank",
            Integer.toString(tpRank));

    promptTokens =
        counter("tokenspeed:prompt_tokens", "Prompt tokens of finished requests.")
            .register(registry);
    generationTokens =
        counter("tokenspeed:generation_tokens", "Tokens generated for finished requests.")
            .register(registry);
    cachedPromptTokens =
        counter(
                "tokenspeed:cached_prompt_tokens",
                "Prompt tokens of finished requests whose KV was reused, by source: device, host"
                    + " (loaded from the Host, not restored from L3) or storage (loaded from Host"
                    + " blocks restored from L3). Their sum is the usage's cached_tokens.")
            .labelNames("source")
            .register(registry);
    for (String source : List.of("device", "host", "storage")) {
      cachedPromptTokens.initLabelValues(source);
    }
    requestsFinished =
        counter("tokenspeed:requests_finished", "Requests finished, by finish_reason.")
            .labelNames("finish_reason")
            .register(registry);
    for (String reason : FINISH_REASONS) {
      requestsFinished.initLabelValues(reason);
    }
    timeToFirstToken =
        histogram(
            "tokenspeed:time_to_first_token_seconds",
            "Submission to the first generated token, of requests that generated one.");
    timePerOutputToken =
        histogram(
            "tokenspeed:time_per_output_token_seconds",
            "Mean time between generated tokens after the first, of requests that generated two"
                + " or more (one observation per request).");
    queueTime =
        histogram(
            "tokenspeed:request_queue_time_seconds",
            "Submission to the round that first admitted the request, of admitted requests.");
    e2eLatency =
        histogram(
            "tokenspeed:e2e_request_latency_seconds",
            "Arrival at the server to the end of the response, of every finished request.");

    registerEngineGauges();
    registerExecutorMetrics();
    registerTransferMetrics();
    registerKvEventMetrics();
    if (pd != null) {
      registerPdMetrics();
    }
  }

  // ---------------------------------------------------------------- requests

  /**
   * Records a finished request.
   *
   * @param m the engine's figures of the request; null for one rejected before the engine took it
   *     (then only the finish reason, the generated tokens and the latency are recorded)
   * @param generatedTokens tokens generated for it
   * @param e2eNanos arrival at the server to the end of the response
   * @param finishReason how it ended ({@link #FINISH_REASONS}; other values get their own series)
   */
  public void onRequestFinished(
      RequestMetrics m, int generatedTokens, long e2eNanos, String finishReason) {
    if (generatedTokens < 0 || e2eNanos < 0) {
      throw new IllegalArgumentException(
          "generated_tokens=" + generatedTokens + " and e2e_nanos=" + e2eNanos + " must be >= 0");
    }
    if (finishReason == null || finishReason.isBlank()) {
      throw new IllegalArgumentException("finish_reason must be a non-empty string");
    }
    requestsFinished.labelValues(finishReason).inc();
    generationTokens.inc(generatedTokens);
    e2eLatency.observe(e2eNanos / NANOS_PER_SECOND);
    if (m == null) {
      return;
    }
    promptTokens.inc(m.promptTokens());
    int storage = m.reusedStorageTokens();
    cachedPromptTokens.labelValues("device").inc(m.reusedDeviceTokens());
    cachedPromptTokens.labelValues("host").inc(Math.max(0, m.reusedHostTokens() - storage));
    cachedPromptTokens.labelValues("storage").inc(storage);
    if (m.queueNs() > 0) {
      queueTime.observe(m.queueNs() / NANOS_PER_SECOND);
    }
    if (generatedTokens >= 1 && m.ttftNs() > 0) {
      timeToFirstToken.observe(m.ttftNs() / NANOS_PER_SECOND);
    }
    if (generatedTokens >= 2 && m.tpotNs() > 0) {
      timePerOutputToken.observe(m.tpotNs() / NANOS_PER_SECOND);
    }
  }

  // ---------------------------------------------------------------- scraping

  /** The exposition of every metric now, in the Prometheus text format ({@link #CONTENT_TYPE}). */
  public String scrape() {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try {
      scrape(out);
    } catch (IOException e) {
      throw new UncheckedIOException(e); // a byte array does not fail
    }
    return out.toString(StandardCharsets.UTF_8);
  }

  /** Writes the exposition of every metric now to {@code out} ({@link #CONTENT_TYPE}). */
  public synchronized void scrape(OutputStream out) throws IOException {
    EngineMetrics m = engine.get();
    scraping = m == null ? EMPTY : m;
    scrapingPd = pd == null ? NO_PD : pd.get().orElse(NO_PD);
    try {
      writer.write(out, registry.scrape(), EscapingScheme.UNDERSCORE_ESCAPING);
    } finally {
      scraping = null;
      scrapingPd = null;
    }
  }

  /** The content type to send with {@link #scrape}. */
  public String contentType() {
    return CONTENT_TYPE;
  }

  /** What a scrape shows before the engine published anything: no request, no storage. */
  private static final EngineMetrics EMPTY =
      new EngineMetrics(
          0,
          0,
          0,
          new EngineMetrics.TierUsage(0, 0, 0),
          new EngineMetrics.TierUsage(0, 0, 0),
          Optional.empty());

  // ---------------------------------------------------------------- the engine's gauges

  private void registerEngineGauges() {
    gauge(
        "tokenspeed:num_requests_running",
        "Requests admitted by the scheduler (holding Device blocks).",
        cb -> cb.call(snapshot().runningRequests()));
    gauge(
        "tokenspeed:num_requests_waiting",
        "Requests the engine holds that are not running: in its intake queue, waiting for"
            + " admission, for L3 or after a retraction.",
        cb -> cb.call(snapshot().waitingRequests()));
    gauge(
        "tokenspeed:kv_parents",
        "KV cache parents (the unit of free space) by tier and state: used (a block referenced),"
            + " cached (only cached blocks, reclaimable) and free; their sum is the tier's size.",
        cb -> {
          EngineMetrics m = snapshot();
          for (var tier : List.of(Map.entry("device", m.device()), Map.entry("host", m.host()))) {
            EngineMetrics.TierUsage u = tier.getValue();
            cb.call(u.usedParents(), tier.getKey(), "used");
            cb.call(u.cachedParents(), tier.getKey(), "cached");
            cb.call(u.freeParents(), tier.getKey(), "free");
          }
        },
        "tier",
        "state");
    gauge(
        "tokenspeed:kv_usage_ratio",
        "Used parents over the tier's parents, by tier (cached parents count as unused).",
        cb -> {
          cb.call(snapshot().device().usedFraction(), "device");
          cb.call(snapshot().host().usedFraction(), "host");
        },
        "tier");
    gauge(
        "tokenspeed:engine_snapshot_age_seconds",
        "Age of the engine snapshot the engine-side values of this scrape come from.",
        cb -> {
          EngineMetrics m = snapshot();
          cb.call(m == EMPTY ? 0 : Math.max(0, System.nanoTime() - m.timeNs()) / NANOS_PER_SECOND);
        });
  }

  // ---------------------------------------------------------------- L3: the executor (rank-local)

  private void registerExecutorMetrics() {
    kindCounter("tokenspeed:l3_jobs", "L3 jobs that finished, by kind.", L3Metrics.Kind::jobs);
    kindCounter("tokenspeed:l3_keys", "Keys of finished L3 jobs, by kind.", L3Metrics.Kind::keys);
    kindCounter(
        "tokenspeed:l3_ok_keys",
        "Keys of finished L3 jobs with outcome OK.",
        L3Metrics.Kind::okKeys);
    kindCounter(
        "tokenspeed:l3_payload_bytes",
        "Successful payload bytes of finished L3 jobs (adapter bytes, not network traffic; PUTs"
            + " of existing objects and detached GETs included).",
        L3Metrics.Kind::payloadBytes);
    kindCounter(
        "tokenspeed:l3_queue_seconds",
        "Cumulative time L3 jobs waited for a worker.",
        k -> k.queueNanos() / NANOS_PER_SECOND);
    kindCounter(
        "tokenspeed:l3_backend_seconds",
        "Cumulative time inside store calls.",
        k -> k.backendNanos() / NANOS_PER_SECOND);
    rankGauge(
        "tokenspeed:l3_outstanding_jobs",
        "L3 jobs by kind and phase: queued, running, or completed and not yet polled (still"
            + " charged).",
        (cb, rank, e) -> {
          for (int i = 0; i < KINDS.size(); i++) {
            L3Metrics.Kind k = kind(e, i);
            cb.call(k.queuedJobs(), rank, KINDS.get(i), "queued");
            cb.call(k.runningJobs(), rank, KINDS.get(i), "running");
            cb.call(k.completedJobs(), rank, KINDS.get(i), "completed");
          }
        },
        "kind",
        "phase");
    rankGauge(
        "tokenspeed:l3_outstanding_payload_bytes",
        "Payload bytes of the outstanding L3 jobs, by kind and phase.",
        (cb, rank, e) -> {
          for (int i = 0; i < KINDS.size(); i++) {
            L3Metrics.Kind k = kind(e, i);
            cb.call(k.queuedBytes(), rank, KINDS.get(i), "queued");
            cb.call(k.runningBytes(), rank, KINDS.get(i), "running");
            cb.call(k.completedBytes(), rank, KINDS.get(i), "completed");
          }
        },
        "kind",
        "phase");
    rankGauge(
        "tokenspeed:l3_health_state",
        "The L3 executor's health: 1 for the current state (healthy, cooldown, probing; disabled"
            + " without a storage backend), 0 for the others. Reading it consumes no probe.",
        (cb, rank, e) -> {
          String current = e.map(x -> x.healthState().toLowerCase(Locale.ROOT)).orElse("disabled");
          for (String s : HEALTH_STATES) {
            cb.call(s.equals(current) ? 1 : 0, rank, s);
          }
        },
        "state");
    rankGauge(
        "tokenspeed:l3_health_epoch",
        "The L3 health epoch: advances on every outage signal.",
        (cb, rank, e) -> cb.call(e.map(L3Metrics::healthEpoch).orElse(0L), rank));
    rankGauge(
        "tokenspeed:l3_unproven_retirements",
        "L3 jobs whose retirement was never proven (they quarantine the executor).",
        (cb, rank, e) -> cb.call(e.map(L3Metrics::unprovenRetirements).orElse(0L), rank));
    rankCounter(
        "tokenspeed:l3_backend_calls",
        "Store calls (adapter invocations; a create-only PUT may end after its existence check).",
        (cb, rank, e) -> cb.call(e.map(L3Metrics::backendCalls).orElse(0L), rank));
    rankCounter(
        "tokenspeed:l3_put_written_keys",
        "PUT keys the store newly wrote.",
        (cb, rank, e) -> cb.call(e.map(L3Metrics::putsNewlyWritten).orElse(0L), rank));
    rankCounter(
        "tokenspeed:l3_put_existing_keys",
        "PUT keys that found the object already there (an idempotent success, no new write).",
        (cb, rank, e) -> cb.call(e.map(L3Metrics::putsAlreadyExisted).orElse(0L), rank));
    rankGauge(
        "tokenspeed:l3_writes_refused",
        "1 while the store refuses writes for capacity (no space, a full Redis's OOM): its latest"
            + " PUT that refused or wrote a page refused one. Not an outage: health stays as it"
            + " is, and backups are held back and probed.",
        (cb, rank, e) -> cb.call(e.map(x -> x.writesRefused() ? 1 : 0).orElse(0), rank));
    rankCounter(
        "tokenspeed:l3_refused_put_keys",
        "PUT keys the store refused for capacity (retired, offered again later).",
        (cb, rank, e) -> cb.call(e.map(L3Metrics::refusedPutKeys).orElse(0L), rank));
    rankCounter(
        "tokenspeed:l3_configuration_failures",
        "Store calls the backend refused because of how the deployment is configured (a"
            + " permission, credentials, a read-only store): their rows failed, never an outage.",
        (cb, rank, e) -> cb.call(e.map(L3Metrics::configurationFailures).orElse(0L), rank));
  }

  /**
   * Every rank's executor figures this exporter shows, by {@code tp_rank} label: its own rank's
   * (empty without L3), then, on the leader of a tensor-parallel replica, every other rank's as it
   * last sent them.
   */
  private Map<String, Optional<L3Metrics>> executors() {
    Map<String, Optional<L3Metrics>> out = new LinkedHashMap<>();
    out.put(tpRank, executor());
    storage()
        .ifPresent(
            s -> s.otherRanks().forEach((r, m) -> out.put(Integer.toString(r), Optional.of(m))));
    return out;
  }

  /** A callback over one rank's executor figures (empty without L3). */
  @FunctionalInterface
  private interface RankValues<C> {
    void call(C callback, String rank, Optional<L3Metrics> executor);
  }

  // ---------------------------------------------------------------- L3: the scheduler (mirrored)

  private void registerTransferMetrics() {
    transferGauge(
        "tokenspeed:l3_ready_holds",
        "Ready holds alive: restored prefixes held for admission.",
        EngineMetrics.Transfers::readyHolds);
    transferGauge(
        "tokenspeed:l3_quarantined_refs",
        "Host references held by quarantined L3 operations.",
        EngineMetrics.Transfers::quarantinedRefs);
    transferGauge(
        "tokenspeed:l3_gate_closed",
        "1 while the pressure (admission) gate is closed: new requests bypass L3.",
        t -> t.gateClosed() ? 1 : 0);
    transferGauge(
        "tokenspeed:l3_quarantined",
        "1 once an unproven retirement stopped new L3 work until restart.",
        t -> t.quarantined() ? 1 : 0);
    transferGauge(
        "tokenspeed:l3_operation_credits_in_use",
        "L3 operation credits in use.",
        EngineMetrics.Transfers::operationsInUse);
    transferGauge(
        "tokenspeed:l3_host_credits_in_use",
        "Host credits in use by L3 operations, each one LCM parent of the Host tier.",
        EngineMetrics.Transfers::hostCreditsInUse);
    gauge(
        "tokenspeed:l3_backup_candidates",
        "Backup candidates by state: queued (a permitted round dispatches them), deferred (held"
            + " back after the store refused a PUT, waiting for the probe) or held (held back while"
            + " the store refuses persistently: probed, but no pending work).",
        cb -> {
          Optional<EngineMetrics.Transfers> t = transfers();
          cb.call(t.map(EngineMetrics.Transfers::queuedCandidates).orElse(0), "queued");
          cb.call(t.map(EngineMetrics.Transfers::deferredCandidates).orElse(0), "deferred");
          cb.call(t.map(EngineMetrics.Transfers::heldCandidates).orElse(0), "held");
        },
        "state");
    transferGauge(
        "tokenspeed:l3_backup_backoff_seconds",
        "How long backups are held back after the store's consecutive refusals before the next"
            + " probe; 0 while its latest answers were successes.",
        t -> t.backupBackoffMs() / 1000.0);
    gauge(
        "tokenspeed:l3_storage_pending",
        "1 while L3 work is pending: operations without an agreed completion, backups not yet"
            + " written, or backups held back after a refusal (not those of a store that refuses"
            + " persistently).",
        cb -> cb.call(storage().map(s -> s.pending() ? 1 : 0).orElse(0)));
    callbackCounter(
        "tokenspeed:l3_late_completion_reports",
        "Completion reports of L3 operations that were already agreed, dropped by the replica's"
            + " agreement (an owner's second report, arriving late); the same on every rank.",
        cb -> cb.call(storage().map(EngineMetrics.Storage::lateCompletionReports).orElse(0L)));
    transferCounter(
        "tokenspeed:l3_soft_timeouts",
        "Waits for L3 ended by their soft deadline (client detachment counts neither here nor in"
            + " Ready expirations).",
        EngineMetrics.Transfers::softTimeouts);
    transferCounter(
        "tokenspeed:l3_ready_expirations",
        "Ready holds that expired before admission used them.",
        EngineMetrics.Transfers::readyExpirations);
    callbackCounter(
        "tokenspeed:l3_pressure_bypasses",
        "Requests that skipped L3, by reason: pressure (the pressure gate was closed) or"
            + " slower_than_compute (the cost model expected recomputing the prefix to be faster"
            + " than restoring any of it).",
        cb -> {
          Optional<EngineMetrics.Transfers> t = transfers();
          cb.call(t.map(EngineMetrics.Transfers::pressureBypasses).orElse(0L), "pressure");
          cb.call(
              t.map(x -> x.costs().bypasses().get(Bypass.SLOWER_THAN_COMPUTE)).orElse(0L),
              "slower_than_compute");
        },
        "reason");
    transferCounter(
        "tokenspeed:l3_partial_restores",
        "Queries the cost model shortened to a partial restore: the first blocks from L3, the"
            + " rest computed.",
        t -> t.costs().partialRestores());
    transferCounter(
        "tokenspeed:l3_cost_explorations",
        "Restores issued although the cost model expected recomputing to be faster, because none"
            + " was issued for async.cost_model_explore_ms: the store is measured again.",
        t -> t.costs().explorations());
    transferCounter(
        "tokenspeed:l3_restores_abandoned",
        "Restores whose requests stopped waiting on their GET and computed the prefix instead:"
            + " the store read slower than when the restore was chosen, and the cost model's new"
            + " figures made recomputing faster than the rest of the read.",
        t -> t.costs().abandoned());
    costGauge(
        "tokenspeed:l3_break_even_bandwidth_bytes_per_second",
        "The restore bandwidth (bytes per second of one owner's bytes) at which restoring a"
            + " prefix of async.cost_model_reference_tokens tokens takes as long as recomputing"
            + " it; +Inf when the store's latency alone exceeds the recomputation, NaN until the"
            + " prefill rate is measured.",
        EngineMetrics.Costs::breakEvenBytesPerSecond);
    costGauge(
        "tokenspeed:l3_restore_bandwidth_bytes_per_second",
        "The restore bandwidth the cost model decides with: the leader's moving average over its"
            + " GETs, or the rate of a GET still running where that is lower (or"
            + " async.cost_model_prior_mbps before the first); NaN until known.",
        c -> c.figures().storeKnown() ? c.figures().storeBytesPerSecond() : Double.NaN);
    costGauge(
        "tokenspeed:l3_restore_latency_seconds",
        "The fixed cost of one store call the cost model decides with: the leader's moving"
            + " average over its QUERY calls; NaN until measured.",
        c -> c.figures().storeLatencyNs() > 0 ? c.figures().storeLatencyNs() / 1e9 : Double.NaN);
    costGauge(
        "tokenspeed:l3_reference_prefill_seconds",
        "The expected recomputation of async.cost_model_reference_tokens tokens at the measured"
            + " prefill rate; NaN until measured.",
        EngineMetrics.Costs::referencePrefillSeconds);
    transferCounter(
        "tokenspeed:l3_published_blocks",
        "Host blocks published from completed GETs.",
        EngineMetrics.Transfers::publishedBlocks);
    transferCounter(
        "tokenspeed:l3_early_h2d_blocks",
        "Device blocks published from completed GETs through their early Host-to-Device copies"
            + " (async.early_h2d): restored blocks that admission did not load.",
        EngineMetrics.Transfers::earlyH2dBlocks);
    transferCounter(
        "tokenspeed:l3_early_h2d_skipped",
        "GETs issued without early Device destinations because the Device had no room for them.",
        EngineMetrics.Transfers::earlyH2dSkipped);
    callbackCounter(
        "tokenspeed:l3_operations_issued",
        "L3 operations the scheduler issued, by kind.",
        cb -> {
          Optional<EngineMetrics.Transfers> t = transfers();
          cb.call(t.map(EngineMetrics.Transfers::queriesIssued).orElse(0L), "query");
          cb.call(t.map(EngineMetrics.Transfers::getsIssued).orElse(0L), "get");
          cb.call(t.map(EngineMetrics.Transfers::putsIssued).orElse(0L), "put");
        },
        "kind");
    callbackCounter(
        "tokenspeed:l3_dropped_backup_keys",
        "Backup candidate keys dropped, by reason.",
        cb -> {
          Optional<EngineMetrics.Transfers> t = transfers();
          for (DropReason r : DropReason.values()) {
            long keys = t.map(x -> x.droppedBackupKeys().get(r)).orElse(0L);
            cb.call(keys, r.name().toLowerCase(Locale.ROOT));
          }
        },
        "reason");
  }

  // ---------------------------------------------------------------- KV events

  /**
   * Where the KV events' counters come from ({@code --kv-events-endpoint}): the batches the PUB
   * socket sent, and those the full queue dropped. Without it both read 0.
   */
  public void kvEvents(LongSupplier published, LongSupplier dropped) {
    this.kvEventsPublished = Objects.requireNonNull(published, "published");
    this.kvEventsDropped = Objects.requireNonNull(dropped, "dropped");
  }

  private void registerKvEventMetrics() {
    callbackCounter(
        "tokenspeed:kv_events_published",
        "KV event batches (messages, one sequence number each) sent on the PUB socket; 0 while"
            + " KV events are off.",
        cb -> cb.call(kvEventsPublished.getAsLong()));
    callbackCounter(
        "tokenspeed:kv_events_dropped",
        "KV event batches the full queue refused: never sent live (subscribers see a gap in the"
            + " sequence numbers), replayable while the replay buffer retains them.",
        cb -> cb.call(kvEventsDropped.getAsLong()));
  }

  // ---------------------------------------------------------------- the KV transfer (PD roles)

  /** What a scrape shows of an endpoint that reported nothing: zeros. */
  private static final PdMetrics NO_PD = new PdMetrics(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);

  /** The room outcomes of {@code tokenspeed:pd_rooms_ended}, in {@link PdMetrics} order. */
  static final List<String> ROOM_OUTCOMES = List.of("landed", "refused", "cancelled", "failed");

  /**
   * The series of the KV transfer endpoint of a prefill or decode engine (ts-pd's {@link
   * PdMetrics}): a prefill engine's are those of its sender, a decode engine's those of its
   * receiver. A room is one request's KV on one connection.
   */
  private void registerPdMetrics() {
    pdCounter(
        "tokenspeed:pd_connections_opened",
        "KV transfer connections that completed their handshake (both sides proved the PD"
            + " secret).",
        PdMetrics::connectionsOpened);
    pdGauge(
        "tokenspeed:pd_connections_open",
        "KV transfer connections open now.",
        PdMetrics::connectionsOpen);
    pdCounter(
        "tokenspeed:pd_handshake_failures",
        "KV transfer connections dropped before their handshake completed: a wrong secret,"
            + " garbage, a timeout, a connect failure.",
        PdMetrics::handshakeFailures);
    pdCounter(
        "tokenspeed:pd_connections_refused",
        "Decode engine: KV transfer connections closed unread because the receiver held its most"
            + " connections already (0 on a prefill engine).",
        PdMetrics::connectionsRefused);
    pdCounter(
        "tokenspeed:pd_connection_failures",
        "Open KV transfer connections that failed: closed, broken, silent, or a protocol error.",
        PdMetrics::connectionFailures);
    pdCounter(
        "tokenspeed:pd_rooms_opened",
        "Rooms opened: one per disaggregated request on a connection (its BOOTSTRAP).",
        PdMetrics::roomsOpened);
    callbackCounter(
        "tokenspeed:pd_rooms_ended",
        "Rooms that ended, by outcome: landed (RECEIVED), refused (REFUSE), cancelled (the"
            + " CANCEL exchange) or failed (the connection failed, a checksum mismatched, the"
            + " endpoint closed).",
        cb -> {
          PdMetrics m = pdSnapshot();
          cb.call(m.roomsLanded(), ROOM_OUTCOMES.get(0));
          cb.call(m.roomsRefused(), ROOM_OUTCOMES.get(1));
          cb.call(m.roomsCancelled(), ROOM_OUTCOMES.get(2));
          cb.call(m.roomsFailed(), ROOM_OUTCOMES.get(3));
        },
        "outcome");
    pdGauge("tokenspeed:pd_rooms_open", "Rooms open now.", PdMetrics::roomsOpen);
    pdGauge(
        "tokenspeed:pd_registrations_waiting",
        "Decode engine: requests waiting for their prefill engine's BOOTSTRAP (0 on a prefill"
            + " engine).",
        PdMetrics::registrationsWaiting);
    pdCounter(
        "tokenspeed:pd_registrations_expired",
        "Decode engine: requests whose BOOTSTRAP did not come within the bootstrap deadline.",
        PdMetrics::registrationsExpired);
    pdCounter(
        "tokenspeed:pd_block_bytes_sent",
        "Prefill engine: KV block bytes written in DATA frames.",
        PdMetrics::bytesSent);
    pdCounter(
        "tokenspeed:pd_block_bytes_received",
        "Decode engine: KV block bytes read from DATA frames.",
        PdMetrics::bytesReceived);
  }

  private PdMetrics pdSnapshot() {
    PdMetrics m = scrapingPd;
    return m == null ? NO_PD : m;
  }

  private void pdCounter(String name, String help, ToDoubleFunction<PdMetrics> value) {
    callbackCounter(name, help, cb -> cb.call(value.applyAsDouble(pdSnapshot())));
  }

  private void pdGauge(String name, String help, ToDoubleFunction<PdMetrics> value) {
    gauge(name, help, cb -> cb.call(value.applyAsDouble(pdSnapshot())));
  }

  // ---------------------------------------------------------------- the snapshot being scraped

  private EngineMetrics snapshot() {
    EngineMetrics m = scraping;
    return m == null ? EMPTY : m; // a collection outside scrape() (none happens) reads nothing
  }

  private Optional<EngineMetrics.Storage> storage() {
    return snapshot().storage();
  }

  private Optional<L3Metrics> executor() {
    return storage().map(EngineMetrics.Storage::executor);
  }

  private Optional<EngineMetrics.Transfers> transfers() {
    return storage().map(EngineMetrics.Storage::transfers);
  }

  /** The figures of {@code KINDS.get(i)} in {@code executor}; zeros without L3. */
  private static L3Metrics.Kind kind(Optional<L3Metrics> executor, int i) {
    return executor
        .map(
            e ->
                switch (i) {
                  case 0 -> e.query();
                  case 1 -> e.get();
                  default -> e.put();
                })
        .orElse(NO_JOBS);
  }

  // ---------------------------------------------------------------- registration

  private Counter.Builder counter(String name, String help) {
    return Counter.builder().name(name).help(help).constLabels(identity).withoutExemplars();
  }

  private Histogram histogram(String name, String help) {
    return Histogram.builder()
        .name(name)
        .help(help)
        .constLabels(identity)
        .classicOnly()
        .classicUpperBounds(LATENCY_BUCKETS_SECONDS)
        .withoutExemplars()
        .register(registry);
  }

  private void gauge(
      String name, String help, Consumer<GaugeWithCallback.Callback> cb, String... labelNames) {
    GaugeWithCallback.builder()
        .name(name)
        .help(help)
        .constLabels(identity)
        .labelNames(labelNames)
        .callback(cb)
        .register(registry);
  }

  private void callbackCounter(
      String name, String help, Consumer<CounterWithCallback.Callback> cb, String... labelNames) {
    CounterWithCallback.builder()
        .name(name)
        .help(help)
        .constLabels(identity)
        .labelNames(labelNames)
        .callback(cb)
        .register(registry);
  }

  private void kindCounter(String name, String help, ToDoubleFunction<L3Metrics.Kind> value) {
    rankCounter(
        name,
        help,
        (cb, rank, e) -> {
          for (int i = 0; i < KINDS.size(); i++) {
            cb.call(value.applyAsDouble(kind(e, i)), rank, KINDS.get(i));
          }
        },
        "kind");
  }

  /** A gauge of every rank's executor figures, labelled {@code tp_rank} first. */
  private void rankGauge(
      String name,
      String help,
      RankValues<GaugeWithCallback.Callback> values,
      String... labelNames) {
    GaugeWithCallback.builder()
        .name(name)
        .help(help)
        .constLabels(rankless)
        .labelNames(withRank(labelNames))
        .callback(cb -> executors().forEach((rank, e) -> values.call(cb, rank, e)))
        .register(registry);
  }

  /** A counter of every rank's executor figures, labelled {@code tp_rank} first. */
  private void rankCounter(
      String name,
      String help,
      RankValues<CounterWithCallback.Callback> values,
      String... labelNames) {
    CounterWithCallback.builder()
        .name(name)
        .help(help)
        .constLabels(rankless)
        .labelNames(withRank(labelNames))
        .callback(cb -> executors().forEach((rank, e) -> values.call(cb, rank, e)))
        .register(registry);
  }

  private static String[] withRank(String... labelNames) {
    String[] out = new String[labelNames.length + 1];
    out[0] = "tp_rank";
    System.arraycopy(labelNames, 0, out, 1, labelNames.length);
    return out;
  }

  private void transferGauge(
      String name, String help, ToDoubleFunction<EngineMetrics.Transfers> value) {
    gauge(name, help, cb -> cb.call(transfers().map(value::applyAsDouble).orElse(0.0)));
  }

  /** A gauge of the cost model's figures: NaN while unknown, 0 without L3. */
  private void costGauge(String name, String help, ToDoubleFunction<EngineMetrics.Costs> value) {
    transferGauge(name, help, t -> value.applyAsDouble(t.costs()));
  }

  private void transferCounter(
      String name, String help, ToDoubleFunction<EngineMetrics.Transfers> value) {
    callbackCounter(name, help, cb -> cb.call(transfers().map(value::applyAsDouble).orElse(0.0)));
  }
}

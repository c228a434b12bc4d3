package io.tokenspeed.server.metrics;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.core.metrics.PrometheusText.Family;
import io.tokenspeed.core.metrics.PrometheusText.Sample;
import io.tokenspeed.core.metrics.PrometheusText.Type;
import io.tokenspeed.core.storage.CostFigures;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.engine.EngineMetrics.Transfers;
import io.tokenspeed.engine.RequestMetrics;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.scheduler.Bypass;
import io.tokenspeed.scheduler.StorageCounters.DropReason;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The exporter, read back through the strict text parser (never by matching strings): every metric
 * of docs/metrics.md is exposed under its exact name and type with the four identity labels; the
 * engine-side values equal the fields of the snapshot a scrape read (seeded random snapshots, with
 * and without L3); without L3 every L3 series reads 0 and health reads disabled; finished requests
 * move the counters and histograms as a brute-force recount of seeded random requests predicts.
 */
class ServerMetricsTest {

  /** A model name that needs every label-value escape. */
  private static final String MODEL = "org/model \"q4\" \\ v1\nb";

  private static final String ROLE = "fused";

  private static final String[] IDENTITY = {
    "model_name", MODEL, "engine_role", ROLE, "dp_rank", "2", "tp_rank", "1"
  };

  /** Every family the exporter exposes, with its type: the list docs/metrics.md documents. */
  private static final Map<String, Type> FAMILIES = new LinkedHashMap<>();

  static {
    for (String c :
        List.of(
            "tokenspeed:prompt_tokens_total",
            "tokenspeed:generation_tokens_total",
            "tokenspeed:cached_prompt_tokens_total",
            "tokenspeed:requests_finished_total",
            "tokenspeed:l3_jobs_total",
            "tokenspeed:l3_keys_total",
            "tokenspeed:l3_ok_keys_total",
            "tokenspeed:l3_payload_bytes_total",
            "tokenspeed:l3_queue_seconds_total",
            "tokenspeed:l3_backend_seconds_total",
            "tokenspeed:l3_backend_calls_total",
            "tokenspeed:l3_put_written_keys_total",
            "tokenspeed:l3_put_existing_keys_total",
            "tokenspeed:l3_configuration_failures_total",
            "tokenspeed:l3_soft_timeouts_total",
            "tokenspeed:l3_late_completion_reports_total",
            "tokenspeed:l3_ready_expirations_total",
            "tokenspeed:l3_pressure_bypasses_total",
            "tokenspeed:l3_published_blocks_total",
            "tokenspeed:l3_early_h2d_blocks_total",
            "tokenspeed:l3_early_h2d_skipped_total",
            "tokenspeed:l3_operations_issued_total",
            "tokenspeed:l3_dropped_backup_keys_total",
            "tokenspeed:l3_refused_put_keys_total",
            "tokenspeed:l3_partial_restores_total",
            "tokenspeed:l3_cost_explorations_total",
            "tokenspeed:l3_restores_abandoned_total",
            "tokenspeed:kv_events_published_total",
            "tokenspeed:kv_events_dropped_total")) {
      FAMILIES.put(c, Type.COUNTER);
    }
    for (String g :
        List.of(
            "tokenspeed:num_requests_running",
            "tokenspeed:num_requests_waiting",
            "tokenspeed:kv_parents",
            "tokenspeed:kv_usage_ratio",
            "tokenspeed:engine_snapshot_age_seconds",
            "tokenspeed:l3_outstanding_jobs",
            "tokenspeed:l3_outstanding_payload_bytes",
            "tokenspeed:l3_health_state",
            "tokenspeed:l3_health_epoch",
            "tokenspeed:l3_unproven_retirements",
            "tokenspeed:l3_ready_holds",
            "tokenspeed:l3_quarantined_refs",
            "tokenspeed:l3_gate_closed",
            "tokenspeed:l3_quarantined",
            "tokenspeed:l3_operation_credits_in_use",
            "tokenspeed:l3_host_credits_in_use",
            "tokenspeed:l3_backup_candidates",
            "tokenspeed:l3_backup_backoff_seconds",
            "tokenspeed:l3_writes_refused",
            "tokenspeed:l3_storage_pending",
            "tokenspeed:l3_break_even_bandwidth_bytes_per_second",
            "tokenspeed:l3_restore_bandwidth_bytes_per_second",
            "tokenspeed:l3_restore_latency_seconds",
            "tokenspeed:l3_reference_prefill_seconds")) {
      FAMILIES.put(g, Type.GAUGE);
    }
    for (String h :
        List.of(
            "tokenspeed:time_to_first_token_seconds",
            "tokenspeed:time_per_output_token_seconds",
            "tokenspeed:request_queue_time_seconds",
            "tokenspeed:e2e_request_latency_seconds")) {
      FAMILIES.put(h, Type.HISTOGRAM);
    }
  }

  private static final String[] KINDS = {"query", "get", "put"};

  private static ServerMetrics exporter(Supplier<EngineMetrics> engine) {
    return new ServerMetrics(MODEL, ROLE, 2, 1, engine);
  }

  private static Map<String, Family> scrape(ServerMetrics m) {
    return PrometheusText.parse(m.scrape());
  }

  /** The value of the one sample {@code name} with the identity labels and {@code labels}. */
  private static double value(Map<String, Family> f, String name, String... labels) {
    String[] all = Arrays.copyOf(IDENTITY, IDENTITY.length + labels.length);
    System.arraycopy(labels, 0, all, IDENTITY.length, labels.length);
    return PrometheusText.value(f, name, all);
  }

  // ---------------------------------------------------------------- random snapshots

  private static long n(SplittableRandom rnd) {
    return rnd.nextLong(1L << 40); // exact as a double
  }

  private static int i(SplittableRandom rnd) {
    return rnd.nextInt(100_000);
  }

  private static EngineMetrics.TierUsage usage(SplittableRandom rnd) {
    int total = 1 + rnd.nextInt(10_000);
    int used = rnd.nextInt(total + 1);
    return new EngineMetrics.TierUsage(total, used, rnd.nextInt(total - used + 1));
  }

  private static L3Metrics.Kind kind(SplittableRandom rnd) {
    return new L3Metrics.Kind(
        n(rnd), n(rnd), n(rnd), n(rnd), n(rnd), n(rnd), i(rnd), n(rnd), i(rnd), n(rnd), i(rnd),
        n(rnd));
  }

  static L3Metrics executor(SplittableRandom rnd) {
    return new L3Metrics(
        kind(rnd),
        kind(rnd),
        kind(rnd),
        List.of("HEALTHY", "COOLDOWN", "PROBING").get(rnd.nextInt(3)),
        n(rnd),
        n(rnd),
        n(rnd),
        rnd.nextBoolean(),
        n(rnd),
        n(rnd),
        n(rnd),
        Map.of("QUEUE_FULL", n(rnd)),
        n(rnd),
        n(rnd),
        "",
        n(rnd),
        rnd.nextBoolean(),
        n(rnd),
        "OOM command not allowed when used memory > 'maxmemory'.");
  }

  static EngineMetrics snapshot(SplittableRandom rnd, boolean withStorage, long timeNs) {
    Optional<EngineMetrics.Storage> storage = Optional.empty();
    if (withStorage) {
      L3Metrics executor = executor(rnd);
      Map<DropReason, Long> drops = new EnumMap<>(DropReason.class);
      for (DropReason r : DropReason.values()) {
        drops.put(r, n(rnd));
      }
      Transfers t =
          new Transfers(
              n(rnd),
              n(rnd),
              n(rnd),
              n(rnd),
              n(rnd),
              n(rnd),
              n(rnd),
              n(rnd),
              n(rnd),
              drops,
              i(rnd),
              i(rnd),
              rnd.nextBoolean(),
              rnd.nextBoolean(),
              i(rnd),
              i(rnd),
              i(rnd),
              i(rnd),
              i(rnd),
              n(rnd),
              costs(rnd));
      storage =
          Optional.of(new EngineMetrics.Storage(rnd.nextBoolean(), executor, t, Map.of(), n(rnd)));
    }
    return new EngineMetrics(timeNs, i(rnd), i(rnd), usage(rnd), usage(rnd), storage);
  }

  /** Random cost model figures: known or not, the break-even finite, infinite or unknown. */
  static EngineMetrics.Costs costs(SplittableRandom rnd) {
    Map<Bypass, Long> bypasses = EngineMetrics.Costs.noBypasses();
    bypasses.replaceAll((b, v) -> n(rnd));
    CostFigures figures =
        rnd.nextBoolean()
            ? CostFigures.UNKNOWN
            : new CostFigures(
                rnd.nextDouble() * 1e6,
                rnd.nextDouble() * 1e9,
                rnd.nextDouble() * 1e6,
                rnd.nextDouble() * 1e4,
                rnd.nextDouble());
    double breakEven =
        switch (rnd.nextInt(3)) {
          case 0 -> Double.NaN;
          case 1 -> Double.POSITIVE_INFINITY;
          default -> rnd.nextDouble() * 1e10;
        };
    return new EngineMetrics.Costs(
        rnd.nextBoolean(),
        bypasses,
        n(rnd),
        n(rnd),
        n(rnd),
        figures,
        8192,
        breakEven,
        figures.prefillKnown() ? rnd.nextDouble() * 10 : Double.NaN);
  }

  private static final L3Metrics.Kind ZERO_KIND =
      new L3Metrics.Kind(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);

  /** Checks every engine-side value of {@code f} against {@code m}, field by field. */
  private static void eq(Number want, double got) {
    assertEquals(want.doubleValue(), got);
  }

  private static void eq(Number want, double got, String what) {
    assertEquals(want.doubleValue(), got, what);
  }

  private static void eq(Number want, double got, double delta) {
    assertEquals(want.doubleValue(), got, delta);
  }

  private static void assertShows(EngineMetrics m, Map<String, Family> f) {
    eq(m.runningRequests(), value(f, "tokenspeed:num_requests_running"));
    eq(m.waitingRequests(), value(f, "tokenspeed:num_requests_waiting"));
    for (var tier : Map.of("device", m.device(), "host", m.host()).entrySet()) {
      EngineMetrics.TierUsage u = tier.getValue();
      String t = tier.getKey();
      eq(u.usedParents(), value(f, "tokenspeed:kv_parents", "tier", t, "state", "used"));
      eq(
          u.totalParents() - u.usedParents() - u.freeParents(),
          value(f, "tokenspeed:kv_parents", "tier", t, "state", "cached"));
      eq(u.freeParents(), value(f, "tokenspeed:kv_parents", "tier", t, "state", "free"));
      eq(
          (double) u.usedParents() / u.totalParents(),
          value(f, "tokenspeed:kv_usage_ratio", "tier", t),
          1e-12);
    }

    Optional<L3Metrics> e = m.storage().map(EngineMetrics.Storage::executor);
    List<L3Metrics.Kind> kinds =
        e.map(x -> List.of(x.query(), x.get(), x.put()))
            .orElse(List.of(ZERO_KIND, ZERO_KIND, ZERO_KIND));
    for (int k = 0; k < 3; k++) {
      L3Metrics.Kind want = kinds.get(k);
      String kind = KINDS[k];
      eq(want.jobs(), value(f, "tokenspeed:l3_jobs_total", "kind", kind));
      eq(want.keys(), value(f, "tokenspeed:l3_keys_total", "kind", kind));
      eq(want.okKeys(), value(f, "tokenspeed:l3_ok_keys_total", "kind", kind));
      eq(want.payloadBytes(), value(f, "tokenspeed:l3_payload_bytes_total", "kind", kind));
      eq(
          want.queueNanos() / 1e9,
          value(f, "tokenspeed:l3_queue_seconds_total", "kind", kind),
          1e-9);
      eq(
          want.backendNanos() / 1e9,
          value(f, "tokenspeed:l3_backend_seconds_total", "kind", kind),
          1e-9);
      String jobs = "tokenspeed:l3_outstanding_jobs";
      String bytes = "tokenspeed:l3_outstanding_payload_bytes";
      eq(want.queuedJobs(), value(f, jobs, "kind", kind, "phase", "queued"));
      eq(want.runningJobs(), value(f, jobs, "kind", kind, "phase", "running"));
      eq(want.completedJobs(), value(f, jobs, "kind", kind, "phase", "completed"));
      eq(want.queuedBytes(), value(f, bytes, "kind", kind, "phase", "queued"));
      eq(want.runningBytes(), value(f, bytes, "kind", kind, "phase", "running"));
      eq(want.completedBytes(), value(f, bytes, "kind", kind, "phase", "completed"));
    }
    String health =
        e.map(x -> x.healthState().toLowerCase(java.util.Locale.ROOT)).orElse("disabled");
    for (String s : List.of("healthy", "cooldown", "probing", "disabled")) {
      eq(s.equals(health) ? 1 : 0, value(f, "tokenspeed:l3_health_state", "state", s), s);
    }
    eq(e.map(L3Metrics::healthEpoch).orElse(0L), value(f, "tokenspeed:l3_health_epoch"));
    eq(
        e.map(L3Metrics::unprovenRetirements).orElse(0L),
        value(f, "tokenspeed:l3_unproven_retirements"));
    eq(e.map(L3Metrics::backendCalls).orElse(0L), value(f, "tokenspeed:l3_backend_calls_total"));
    eq(
        e.map(L3Metrics::putsNewlyWritten).orElse(0L),
        value(f, "tokenspeed:l3_put_written_keys_total"));
    eq(
        e.map(L3Metrics::putsAlreadyExisted).orElse(0L),
        value(f, "tokenspeed:l3_put_existing_keys_total"));
    eq(
        e.map(L3Metrics::configurationFailures).orElse(0L),
        value(f, "tokenspeed:l3_configuration_failures_total"));
    eq(e.map(x -> x.writesRefused() ? 1 : 0).orElse(0), value(f, "tokenspeed:l3_writes_refused"));
    eq(
        e.map(L3Metrics::refusedPutKeys).orElse(0L),
        value(f, "tokenspeed:l3_refused_put_keys_total"));

    Optional<Transfers> t = m.storage().map(EngineMetrics.Storage::transfers);
    eq(t.map(Transfers::readyHolds).orElse(0), value(f, "tokenspeed:l3_ready_holds"));
    eq(t.map(Transfers::quarantinedRefs).orElse(0), value(f, "tokenspeed:l3_quarantined_refs"));
    eq(t.map(x -> x.gateClosed() ? 1 : 0).orElse(0), value(f, "tokenspeed:l3_gate_closed"));
    eq(t.map(x -> x.quarantined() ? 1 : 0).orElse(0), value(f, "tokenspeed:l3_quarantined"));
    eq(
        t.map(Transfers::operationsInUse).orElse(0),
        value(f, "tokenspeed:l3_operation_credits_in_use"));
    eq(t.map(Transfers::hostCreditsInUse).orElse(0), value(f, "tokenspeed:l3_host_credits_in_use"));
    eq(
        t.map(Transfers::queuedCandidates).orElse(0),
        value(f, "tokenspeed:l3_backup_candidates", "state", "queued"));
    eq(
        t.map(Transfers::deferredCandidates).orElse(0),
        value(f, "tokenspeed:l3_backup_candidates", "state", "deferred"));
    eq(
        t.map(Transfers::heldCandidates).orElse(0),
        value(f, "tokenspeed:l3_backup_candidates", "state", "held"));
    eq(
        t.map(Transfers::backupBackoffMs).orElse(0L) / 1000.0,
        value(f, "tokenspeed:l3_backup_backoff_seconds"));
    eq(
        m.storage().map(s -> s.pending() ? 1 : 0).orElse(0),
        value(f, "tokenspeed:l3_storage_pending"));
    eq(t.map(Transfers::softTimeouts).orElse(0L), value(f, "tokenspeed:l3_soft_timeouts_total"));
    eq(
        m.storage().map(EngineMetrics.Storage::lateCompletionReports).orElse(0L),
        value(f, "tokenspeed:l3_late_completion_reports_total"));
    eq(
        t.map(Transfers::readyExpirations).orElse(0L),
        value(f, "tokenspeed:l3_ready_expirations_total"));
    eq(
        t.map(Transfers::pressureBypasses).orElse(0L),
        value(f, "tokenspeed:l3_pressure_bypasses_total", "reason", "pressure"));
    eq(
        t.map(x -> x.costs().bypasses().get(Bypass.SLOWER_THAN_COMPUTE)).orElse(0L),
        value(f, "tokenspeed:l3_pressure_bypasses_total", "reason", "slower_than_compute"));
    eq(
        2,
        PrometheusText.samples(f, "tokenspeed:l3_pressure_bypasses_total").size(),
        "one series per bypass reason");
    eq(
        t.map(x -> x.costs().partialRestores()).orElse(0L),
        value(f, "tokenspeed:l3_partial_restores_total"));
    eq(
        t.map(x -> x.costs().explorations()).orElse(0L),
        value(f, "tokenspeed:l3_cost_explorations_total"));
    eq(
        t.map(x -> x.costs().abandoned()).orElse(0L),
        value(f, "tokenspeed:l3_restores_abandoned_total"));
    Optional<EngineMetrics.Costs> c = t.map(Transfers::costs);
    assertEquals(
        c.map(EngineMetrics.Costs::breakEvenBytesPerSecond).orElse(0.0),
        value(f, "tokenspeed:l3_break_even_bandwidth_bytes_per_second"));
    assertEquals(
        c.map(x -> x.figures().storeKnown() ? x.figures().storeBytesPerSecond() : Double.NaN)
            .orElse(0.0),
        value(f, "tokenspeed:l3_restore_bandwidth_bytes_per_second"));
    assertEquals(
        c.map(
                x ->
                    x.figures().storeLatencyNs() > 0
                        ? x.figures().storeLatencyNs() / 1e9
                        : Double.NaN)
            .orElse(0.0),
        value(f, "tokenspeed:l3_restore_latency_seconds"));
    assertEquals(
        c.map(EngineMetrics.Costs::referencePrefillSeconds).orElse(0.0),
        value(f, "tokenspeed:l3_reference_prefill_seconds"));
    eq(
        t.map(Transfers::publishedBlocks).orElse(0L),
        value(f, "tokenspeed:l3_published_blocks_total"));
    eq(
        t.map(Transfers::earlyH2dBlocks).orElse(0L),
        value(f, "tokenspeed:l3_early_h2d_blocks_total"));
    eq(
        t.map(Transfers::earlyH2dSkipped).orElse(0L),
        value(f, "tokenspeed:l3_early_h2d_skipped_total"));
    String issued = "tokenspeed:l3_operations_issued_total";
    eq(t.map(Transfers::queriesIssued).orElse(0L), value(f, issued, "kind", "query"));
    eq(t.map(Transfers::getsIssued).orElse(0L), value(f, issued, "kind", "get"));
    eq(t.map(Transfers::putsIssued).orElse(0L), value(f, issued, "kind", "put"));
    for (var r :
        Map.of(
                "pressure", DropReason.PRESSURE,
                "overflow", DropReason.OVERFLOW,
                "unavailable", DropReason.UNAVAILABLE,
                "disabled", DropReason.DISABLED,
                "cleanup", DropReason.CLEANUP,
                "refused", DropReason.REFUSED)
            .entrySet()) {
      eq(
          t.map(x -> x.droppedBackupKeys().get(r.getValue())).orElse(0L),
          value(f, "tokenspeed:l3_dropped_backup_keys_total", "reason", r.getKey()),
          r.getKey());
    }
    eq(
        DropReason.values().length,
        PrometheusText.samples(f, "tokenspeed:l3_dropped_backup_keys_total").size(),
        "one series per drop reason");
  }

  @org.junit.jupiter.api.Test
  void shouldCountTheKvEventBatchesOfThePublisherAndZeroWithoutOne() {
    ServerMetrics exporter =
        exporter(() -> snapshot(new SplittableRandom(3), false, System.nanoTime()));
    Map<String, Family> off = scrape(exporter);
    assertEquals(0, value(off, "tokenspeed:kv_events_published_total"));
    assertEquals(0, value(off, "tokenspeed:kv_events_dropped_total"));
    long[] published = {41};
    exporter.kvEvents(() -> published[0], () -> 3);
    Map<String, Family> on = scrape(exporter);
    assertEquals(41, value(on, "tokenspeed:kv_events_published_total"));
    assertEquals(3, value(on, "tokenspeed:kv_events_dropped_total"));
    published[0] = 42;
    assertEquals(42, value(scrape(exporter), "tokenspeed:kv_events_published_total"), "live");
  }

  // ---------------------------------------------------------------- the exposition

  @ParameterizedTest(name = "with L3: {0}")
  @ValueSource(booleans = {true, false})
  void shouldExposeEveryMetricUnderItsNameAndTypeWithTheIdentityLabels(boolean withStorage) {
    EngineMetrics m = snapshot(new SplittableRandom(1), withStorage, System.nanoTime());
    ServerMetrics exporter = exporter(() -> m);
    Map<String, Family> f = scrape(exporter);
    assertEquals(FAMILIES.keySet(), f.keySet(), "exactly the documented families");
    for (Family family : f.values()) {
      assertTrue(family.name().startsWith("tokenspeed:"), family.name());
      assertEquals(FAMILIES.get(family.name()), family.type(), family.name());
      assertFalse(family.help().isBlank(), family.name() + " has a help text");
      if (family.type() != Type.HISTOGRAM) {
        assertFalse(family.samples().isEmpty(), family.name() + " has series before any event");
      }
      for (Sample s : family.samples()) {
        for (int k = 0; k < IDENTITY.length; k += 2) {
          assertEquals(IDENTITY[k + 1], s.labels().get(IDENTITY[k]), s + ": " + IDENTITY[k]);
        }
      }
    }
    assertEquals("text/plain; version=0.0.4; charset=utf-8", ServerMetrics.CONTENT_TYPE);
    assertEquals(ServerMetrics.CONTENT_TYPE, exporter.contentType());
  }

  /**
   * The leader of a replica of {@code ranks} ranks: every executor series is present once per rank,
   * under that rank's {@code tp_rank}, with that rank's figures; the scheduler's series (mirrored
   * on every rank) once, under the leader's.
   */
  @ParameterizedTest(name = "ranks={0}")
  @ValueSource(ints = {2, 4})
  void shouldExportEveryRanksExecutorFiguresUnderItsRankOnTheLeader(int ranks) {
    SplittableRandom rnd = new SplittableRandom(31L * ranks);
    EngineMetrics own = snapshot(rnd, true, System.nanoTime());
    Map<Integer, L3Metrics> others = new java.util.TreeMap<>();
    for (int r = 1; r < ranks; r++) {
      others.put(r, executor(rnd));
    }
    EngineMetrics.Storage s = own.storage().orElseThrow();
    EngineMetrics m =
        new EngineMetrics(
            own.timeNs(),
            own.runningRequests(),
            own.waitingRequests(),
            own.device(),
            own.host(),
            Optional.of(
                new EngineMetrics.Storage(s.pending(), s.executor(), s.transfers(), others)));
    Map<String, Family> f =
        PrometheusText.parse(new ServerMetrics(MODEL, ROLE, 2, 0, () -> m).scrape());
    for (int r = 0; r < ranks; r++) {
      L3Metrics want = r == 0 ? s.executor() : others.get(r);
      String[] rank = {"model_name", MODEL, "engine_role", ROLE, "dp_rank", "2", "tp_rank", "" + r};
      List<L3Metrics.Kind> kinds = List.of(want.query(), want.get(), want.put());
      for (int k = 0; k < 3; k++) {
        eq(
            kinds.get(k).jobs(),
            PrometheusText.value(f, "tokenspeed:l3_jobs_total", with(rank, "kind", KINDS[k])),
            "rank " + r + " " + KINDS[k] + " jobs");
        eq(
            kinds.get(k).runningJobs(),
            PrometheusText.value(
                f,
                "tokenspeed:l3_outstanding_jobs",
                with(rank, "kind", KINDS[k], "phase", "running")),
            "rank " + r + " running " + KINDS[k]);
      }
      eq(
          want.backendCalls(),
          PrometheusText.value(f, "tokenspeed:l3_backend_calls_total", rank),
          "rank " + r + " backend calls");
      eq(
          want.healthEpoch(),
          PrometheusText.value(f, "tokenspeed:l3_health_epoch", rank),
          "rank " + r + " health epoch");
      eq(
          want.configurationFailures(),
          PrometheusText.value(f, "tokenspeed:l3_configuration_failures_total", rank),
          "rank " + r + " configuration failures");
      eq(
          want.writesRefused() ? 1 : 0,
          PrometheusText.value(f, "tokenspeed:l3_writes_refused", rank),
          "rank " + r + " writes refused");
      eq(
          1,
          PrometheusText.value(
              f,
              "tokenspeed:l3_health_state",
              with(rank, "state", want.healthState().toLowerCase(java.util.Locale.ROOT))),
          "rank " + r + " health");
    }
    for (String family : FAMILIES.keySet()) {
      boolean executorFamily =
          family.startsWith("tokenspeed:l3_")
              && List.of(
                      "jobs",
                      "keys",
                      "ok_keys",
                      "payload_bytes",
                      "queue_seconds",
                      "backend_seconds",
                      "outstanding_jobs",
                      "outstanding_payload_bytes",
                      "health_state",
                      "health_epoch",
                      "unproven_retirements",
                      "backend_calls",
                      "put_written_keys",
                      "put_existing_keys",
                      "writes_refused",
                      "refused_put_keys",
                      "configuration_failures")
                  .contains(family.substring("tokenspeed:l3_".length()).replace("_total", ""));
      java.util.Set<String> seen = new java.util.TreeSet<>();
      for (Sample sample : f.get(family).samples()) {
        seen.add(sample.labels().get("tp_rank"));
      }
      java.util.Set<String> want = new java.util.TreeSet<>();
      for (int r = 0; r < (executorFamily ? ranks : 1); r++) {
        want.add("" + r);
      }
      if (f.get(family).type() != Type.HISTOGRAM) {
        assertEquals(want, seen, family + ": the ranks of its series");
      }
    }
  }

  private static String[] with(String[] labels, String... more) {
    String[] all = Arrays.copyOf(labels, labels.length + more.length);
    System.arraycopy(more, 0, all, labels.length, more.length);
    return all;
  }

  @Test
  void shouldReadZeroL3SeriesAndDisabledHealthWithoutABackend() {
    EngineMetrics m = snapshot(new SplittableRandom(2), false, System.nanoTime());
    Map<String, Family> f = scrape(exporter(() -> m));
    assertShows(m, f);
    assertEquals(1, value(f, "tokenspeed:l3_health_state", "state", "disabled"));
    for (Family family : f.values()) {
      if (family.name().startsWith("tokenspeed:l3_") && !family.name().endsWith("health_state")) {
        for (Sample s : family.samples()) {
          assertEquals(0, s.value(), s.toString());
        }
      }
    }
  }

  /**
   * Seeded random snapshots, with and without L3, one after the other through the same exporter:
   * every engine-side value equals the field of the snapshot the scrape read.
   */
  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8})
  void shouldShowTheFieldsOfTheSnapshotEachScrapeReads(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    AtomicReference<EngineMetrics> current = new AtomicReference<>();
    ServerMetrics exporter = exporter(current::get);
    for (int round = 0; round < 12; round++) {
      EngineMetrics m = snapshot(rnd, rnd.nextInt(4) != 0, System.nanoTime());
      current.set(m);
      assertShows(m, scrape(exporter));
    }
  }

  @Test
  void shouldReadTheEngineOncePerScrapeAndShowTheSnapshotAge() {
    AtomicInteger reads = new AtomicInteger();
    long ageNs = 3_000_000_000L;
    long taken = System.nanoTime() - ageNs;
    EngineMetrics m = snapshot(new SplittableRandom(3), true, taken);
    ServerMetrics exporter =
        exporter(
            () -> {
              reads.incrementAndGet();
              return m;
            });
    Map<String, Family> f = scrape(exporter);
    double maxAge = (System.nanoTime() - taken) / 1e9; // the age can be no more than this now
    assertEquals(1, reads.get(), "one snapshot per scrape");
    double age = value(f, "tokenspeed:engine_snapshot_age_seconds");
    assertTrue(age >= 3.0 && age <= maxAge, "age " + age + " in [3, " + maxAge + "]");
    scrape(exporter);
    assertEquals(2, reads.get());
  }

  @Test
  void shouldScrapeAnEngineThatPublishedNothingAsEmpty() {
    Map<String, Family> f = scrape(exporter(() -> null));
    assertEquals(0, value(f, "tokenspeed:num_requests_running"));
    assertEquals(0, value(f, "tokenspeed:kv_usage_ratio", "tier", "device"));
    assertEquals(0, value(f, "tokenspeed:engine_snapshot_age_seconds"));
    assertEquals(1, value(f, "tokenspeed:l3_health_state", "state", "disabled"));
  }

  @Test
  void shouldKeepTwoExportersApart() {
    EngineMetrics a = snapshot(new SplittableRandom(4), true, System.nanoTime());
    EngineMetrics b = snapshot(new SplittableRandom(5), false, System.nanoTime());
    ServerMetrics first = exporter(() -> a);
    ServerMetrics second = new ServerMetrics("other", "prefill", 0, 0, () -> b);
    first.onRequestFinished(null, 3, 1_000_000, "stop");
    Map<String, Family> f1 = scrape(first);
    Map<String, Family> f2 = scrape(second);
    assertShows(a, f1);
    assertEquals(1, value(f1, "tokenspeed:requests_finished_total", "finish_reason", "stop"));
    assertEquals(
        0,
        PrometheusText.value(
            f2,
            "tokenspeed:requests_finished_total",
            "finish_reason",
            "stop",
            "model_name",
            "other"));
    assertEquals(
        b.runningRequests(),
        PrometheusText.value(f2, "tokenspeed:num_requests_running", "engine_role", "prefill"));
  }

  // ---------------------------------------------------------------- finished requests

  @Test
  void shouldCountAFinishedRequestInEveryRequestMetric() {
    ServerMetrics exporter = exporter(() -> null);
    Map<String, Family> before = scrape(exporter);
    for (String reason : ServerMetrics.FINISH_REASONS) {
      assertEquals(
          0, value(before, "tokenspeed:requests_finished_total", "finish_reason", reason), reason);
    }
    for (String source : List.of("device", "host", "storage")) {
      assertEquals(0, value(before, "tokenspeed:cached_prompt_tokens_total", "source", source));
    }
    assertEquals(0, value(before, "tokenspeed:time_to_first_token_seconds_count"));

    // 100 prompt tokens: 16 on the Device, 48 from the Host of which 32 restored from L3
    RequestMetrics m = new RequestMetrics(20_000_000, 300_000_000, 40_000_000, 100, 16, 48, 32, 60);
    exporter.onRequestFinished(m, 24, 1_250_000_000L, "length");
    Map<String, Family> f = scrape(exporter);
    assertEquals(1, value(f, "tokenspeed:requests_finished_total", "finish_reason", "length"));
    assertEquals(0, value(f, "tokenspeed:requests_finished_total", "finish_reason", "stop"));
    assertEquals(100, value(f, "tokenspeed:prompt_tokens_total"));
    assertEquals(24, value(f, "tokenspeed:generation_tokens_total"));
    assertEquals(16, value(f, "tokenspeed:cached_prompt_tokens_total", "source", "device"));
    assertEquals(16, value(f, "tokenspeed:cached_prompt_tokens_total", "source", "host"));
    assertEquals(32, value(f, "tokenspeed:cached_prompt_tokens_total", "source", "storage"));

    String ttft = "tokenspeed:time_to_first_token_seconds";
    assertEquals(1, value(f, ttft + "_count"));
    assertEquals(0.3, value(f, ttft + "_sum"), 1e-12);
    assertEquals(0, value(f, ttft + "_bucket", "le", "0.25"));
    assertEquals(1, value(f, ttft + "_bucket", "le", "0.5"));
    assertEquals(1, value(f, ttft + "_bucket", "le", "+Inf"));
    assertEquals(0.04, value(f, "tokenspeed:time_per_output_token_seconds_sum"), 1e-12);
    assertEquals(0.02, value(f, "tokenspeed:request_queue_time_seconds_sum"), 1e-12);
    assertEquals(1.25, value(f, "tokenspeed:e2e_request_latency_seconds_sum"), 1e-12);
    assertEquals(1, value(f, "tokenspeed:e2e_request_latency_seconds_bucket", "le", "2.5"));
    assertEquals(0, value(f, "tokenspeed:e2e_request_latency_seconds_bucket", "le", "1.0"));

    // rejected before the engine took it: no engine figures, no queue time, no first token
    exporter.onRequestFinished(null, 0, 5_000_000, "error");
    // never admitted (cancelled while waiting) and one token only: neither queue time nor TPOT
    exporter.onRequestFinished(
        new RequestMetrics(0, 0, 0, 7, 0, 0, 0, 0), 0, 9_000_000, "cancelled");
    exporter.onRequestFinished(
        new RequestMetrics(1_000_000, 2_000_000, 0, 5, 0, 0, 0, 6), 1, 3_000_000, "stop");
    Map<String, Family> g = scrape(exporter);
    assertEquals(1, value(g, "tokenspeed:requests_finished_total", "finish_reason", "error"));
    assertEquals(1, value(g, "tokenspeed:requests_finished_total", "finish_reason", "cancelled"));
    assertEquals(112, value(g, "tokenspeed:prompt_tokens_total"));
    assertEquals(25, value(g, "tokenspeed:generation_tokens_total"));
    assertEquals(4, value(g, "tokenspeed:e2e_request_latency_seconds_count"));
    assertEquals(2, value(g, "tokenspeed:request_queue_time_seconds_count"));
    assertEquals(2, value(g, ttft + "_count"));
    assertEquals(1, value(g, "tokenspeed:time_per_output_token_seconds_count"));
  }

  @Test
  void shouldUseLatencyBucketsFromAMillisecondToAMinute() {
    Map<String, Family> f = scrape(exporter(() -> null));
    for (String h :
        List.of(
            "tokenspeed:time_to_first_token_seconds",
            "tokenspeed:time_per_output_token_seconds",
            "tokenspeed:request_queue_time_seconds",
            "tokenspeed:e2e_request_latency_seconds")) {
      List<Double> bounds = new ArrayList<>();
      for (Sample s : f.get(h).samples(h + "_bucket")) {
        bounds.add(Double.parseDouble(s.labels().get("le").replace("+Inf", "Infinity")));
      }
      assertEquals(0.001, bounds.getFirst(), h);
      assertEquals(60.0, bounds.get(bounds.size() - 2), h);
      assertEquals(Double.POSITIVE_INFINITY, bounds.getLast(), h);
      assertEquals(ServerMetrics.LATENCY_BUCKETS_SECONDS.length + 1, bounds.size(), h);
    }
  }

  /**
   * Seeded random finished requests: every counter equals the brute-force sum, and every bucket of
   * every histogram equals a count of the observations at or under its bound.
   */
  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6})
  void shouldRecountRandomRequestsExactly(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    ServerMetrics exporter = exporter(() -> null);
    Map<String, Long> counters = new LinkedHashMap<>();
    Map<String, List<Double>> observed = new LinkedHashMap<>();
    for (String h : List.of("ttft", "tpot", "queue", "e2e")) {
      observed.put(h, new ArrayList<>());
    }
    List<String> reasons = List.of("stop", "length", "cancelled", "error", "abort");
    for (int r = 0; r < 300; r++) {
      String reason = reasons.get(rnd.nextInt(reasons.size()));
      int generated = rnd.nextInt(4) == 0 ? rnd.nextInt(2) : rnd.nextInt(500);
      long e2e = (long) Math.pow(10, 5 + rnd.nextDouble() * 6); // 0.1 ms .. 100 s
      RequestMetrics m = null;
      if (rnd.nextInt(10) != 0) {
        int prompt = 1 + rnd.nextInt(4000);
        int device = rnd.nextInt(prompt + 1);
        int host = rnd.nextInt(prompt - device + 1);
        int storage = rnd.nextInt(host + 1);
        long queue = rnd.nextInt(5) == 0 ? 0 : (long) Math.pow(10, 4 + rnd.nextDouble() * 6);
        long ttft = generated == 0 ? 0 : queue + (long) Math.pow(10, 5 + rnd.nextDouble() * 5);
        long tpot = generated < 2 ? 0 : (long) Math.pow(10, 5 + rnd.nextDouble() * 3);
        m = new RequestMetrics(queue, ttft, tpot, prompt, device, host, storage, prompt);
        counters.merge("prompt", (long) prompt, Long::sum);
        counters.merge("device", (long) device, Long::sum);
        counters.merge("host", (long) (host - storage), Long::sum);
        counters.merge("storage", (long) storage, Long::sum);
        if (queue > 0) {
          observed.get("queue").add(queue / 1e9);
        }
        if (generated >= 1 && ttft > 0) {
          observed.get("ttft").add(ttft / 1e9);
        }
        if (generated >= 2) {
          observed.get("tpot").add(tpot / 1e9);
        }
      }
      observed.get("e2e").add(e2e / 1e9);
      counters.merge("generated", (long) generated, Long::sum);
      counters.merge("reason:" + reason, 1L, Long::sum);
      exporter.onRequestFinished(m, generated, e2e, reason);
    }
    Map<String, Family> f = scrape(exporter);
    assertEquals(counters.get("prompt"), (long) value(f, "tokenspeed:prompt_tokens_total"));
    assertEquals(counters.get("generated"), (long) value(f, "tokenspeed:generation_tokens_total"));
    for (String source : List.of("device", "host", "storage")) {
      assertEquals(
          counters.get(source),
          (long) value(f, "tokenspeed:cached_prompt_tokens_total", "source", source),
          source);
    }
    for (String reason : reasons) {
      if (!ServerMetrics.FINISH_REASONS.contains(reason)
          && !counters.containsKey("reason:" + reason)) {
        continue; // a reason outside the engine's has a series once a request ends with it
      }
      assertEquals(
          counters.getOrDefault("reason:" + reason, 0L),
          (long) value(f, "tokenspeed:requests_finished_total", "finish_reason", reason),
          reason);
    }
    Map<String, String> names =
        Map.of(
            "ttft", "tokenspeed:time_to_first_token_seconds",
            "tpot", "tokenspeed:time_per_output_token_seconds",
            "queue", "tokenspeed:request_queue_time_seconds",
            "e2e", "tokenspeed:e2e_request_latency_seconds");
    for (var h : names.entrySet()) {
      List<Double> obs = observed.get(h.getKey());
      String name = h.getValue();
      assertEquals(obs.size(), (long) value(f, name + "_count"), name);
      assertEquals(
          obs.stream().mapToDouble(Double::doubleValue).sum(),
          value(f, name + "_sum"),
          1e-9 * Math.max(1, obs.size()),
          name);
      for (Sample s : f.get(name).samples(name + "_bucket")) {
        String le = s.labels().get("le");
        double bound = le.equals("+Inf") ? Double.POSITIVE_INFINITY : Double.parseDouble(le);
        long want = obs.stream().filter(x -> x <= bound).count();
        assertEquals(want, (long) s.value(), name + " le=" + le);
      }
    }
  }

  @Test
  void shouldRefuseBadArgumentsNamingTheField() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> new ServerMetrics(" ", ROLE, 0, 0, () -> null));
    assertTrue(e.getMessage().contains("model_name"), e.getMessage());
    e =
        assertThrows(
            IllegalArgumentException.class, () -> new ServerMetrics("m", "", 0, 0, () -> null));
    assertTrue(e.getMessage().contains("engine_role"), e.getMessage());
    e =
        assertThrows(
            IllegalArgumentException.class, () -> new ServerMetrics("m", ROLE, -1, 0, () -> null));
    assertTrue(e.getMessage().contains("dp_rank=-1"), e.getMessage());
    ServerMetrics exporter = exporter(() -> null);
    e =
        assertThrows(
            IllegalArgumentException.class, () -> exporter.onRequestFinished(null, -1, 0, "stop"));
    assertTrue(e.getMessage().contains("generated_tokens=-1"), e.getMessage());
    e =
        assertThrows(
            IllegalArgumentException.class, () -> exporter.onRequestFinished(null, 0, 0, null));
    assertTrue(e.getMessage().contains("finish_reason"), e.getMessage());
    assertNotEquals(
        0, PrometheusText.parse(exporter.scrape()).size(), "a refused call recorded nothing");
    assertEquals(
        0, value(PrometheusText.parse(exporter.scrape()), "tokenspeed:generation_tokens_total"));
  }
}

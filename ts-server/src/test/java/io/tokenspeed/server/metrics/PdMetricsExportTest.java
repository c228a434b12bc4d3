package io.tokenspeed.server.metrics;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.core.metrics.PrometheusText.Family;
import io.tokenspeed.core.metrics.PrometheusText.Type;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.pd.PdMetrics;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.ToLongFunction;
import org.junit.jupiter.api.Test;

/**
 * The {@code tokenspeed:pd_*} series of an engine with a prefill or decode role, read back through
 * the strict text parser: each family under its exact name and type with the identity labels (the
 * role as {@code engine_role}), each value the field of the {@link PdMetrics} the scrape read (one
 * read per scrape), zeros before the endpoint reported, and none at all on a fused engine.
 */
class PdMetricsExportTest {

  private static final EngineMetrics IDLE =
      new EngineMetrics(
          System.nanoTime(),
          0,
          0,
          new EngineMetrics.TierUsage(8, 0, 8),
          new EngineMetrics.TierUsage(32, 0, 32),
          Optional.empty());

  /** Every PD family but the rooms' outcomes, with its type and the field it shows. */
  private static final Map<String, Map.Entry<Type, ToLongFunction<PdMetrics>>> FAMILIES =
      new LinkedHashMap<>();

  static {
    counter("tokenspeed:pd_connections_opened_total", PdMetrics::connectionsOpened);
    gauge("tokenspeed:pd_connections_open", PdMetrics::connectionsOpen);
    counter("tokenspeed:pd_handshake_failures_total", PdMetrics::handshakeFailures);
    counter("tokenspeed:pd_connections_refused_total", PdMetrics::connectionsRefused);
    counter("tokenspeed:pd_connection_failures_total", PdMetrics::connectionFailures);
    counter("tokenspeed:pd_rooms_opened_total", PdMetrics::roomsOpened);
    gauge("tokenspeed:pd_rooms_open", PdMetrics::roomsOpen);
    gauge("tokenspeed:pd_registrations_waiting", PdMetrics::registrationsWaiting);
    counter("tokenspeed:pd_registrations_expired_total", PdMetrics::registrationsExpired);
    counter("tokenspeed:pd_block_bytes_sent_total", PdMetrics::bytesSent);
    counter("tokenspeed:pd_block_bytes_received_total", PdMetrics::bytesReceived);
  }

  private static void counter(String name, ToLongFunction<PdMetrics> field) {
    FAMILIES.put(name, Map.entry(Type.COUNTER, field));
  }

  private static void gauge(String name, ToLongFunction<PdMetrics> field) {
    FAMILIES.put(name, Map.entry(Type.GAUGE, field));
  }

  private static final Map<String, ToLongFunction<PdMetrics>> OUTCOMES =
      Map.of(
          "landed", PdMetrics::roomsLanded,
          "refused", PdMetrics::roomsRefused,
          "cancelled", PdMetrics::roomsCancelled,
          "failed", PdMetrics::roomsFailed);

  private static String[] identity(String role, String... more) {
    List<String> all =
        new java.util.ArrayList<>(
            List.of("model_name", "m", "engine_role", role, "dp_rank", "0", "tp_rank", "0"));
    all.addAll(List.of(more));
    return all.toArray(String[]::new);
  }

  private static PdMetrics random(SplittableRandom r) {
    long[] v = new long[15];
    for (int i = 0; i < v.length; i++) {
      v[i] = r.nextLong(0, 1L << 40);
    }
    return new PdMetrics(
        v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13],
        v[14]);
  }

  @Test
  void shouldExposeEveryFieldOfTheSnapshotTheScrapeRead() {
    SplittableRandom r = new SplittableRandom(42);
    for (String role : List.of("prefill", "decode")) {
      AtomicReference<PdMetrics> now = new AtomicReference<>();
      AtomicInteger reads = new AtomicInteger();
      ServerMetrics exporter =
          new ServerMetrics(
              "m",
              role,
              0,
              0,
              () -> IDLE,
              () -> {
                reads.incrementAndGet();
                return Optional.ofNullable(now.get());
              });
      for (int round = 0; round < 20; round++) {
        PdMetrics m = random(r);
        now.set(m);
        int before = reads.get();
        Map<String, Family> f = PrometheusText.parse(exporter.scrape());
        assertEquals(before + 1, reads.get(), "one read of the endpoint's counters per scrape");
        for (var e : FAMILIES.entrySet()) {
          assertEquals(e.getValue().getKey(), f.get(e.getKey()).type(), e.getKey());
          assertEquals(
              (double) e.getValue().getValue().applyAsLong(m),
              PrometheusText.value(f, e.getKey(), identity(role)),
              e.getKey());
        }
        Family ended = f.get("tokenspeed:pd_rooms_ended_total");
        assertEquals(Type.COUNTER, ended.type());
        assertEquals(4, ended.samples().size(), ended.toString());
        for (var o : OUTCOMES.entrySet()) {
          assertEquals(
              (double) o.getValue().applyAsLong(m),
              PrometheusText.value(
                  f, "tokenspeed:pd_rooms_ended_total", identity(role, "outcome", o.getKey())),
              o.getKey());
        }
      }
    }
  }

  @Test
  void shouldReadZerosBeforeTheEndpointReported() {
    Map<String, Family> f =
        PrometheusText.parse(
            new ServerMetrics("m", "decode", 0, 0, () -> IDLE, Optional::empty).scrape());
    for (String name : FAMILIES.keySet()) {
      assertEquals(0.0, PrometheusText.value(f, name, identity("decode")), name);
    }
    for (String outcome : OUTCOMES.keySet()) {
      assertEquals(
          0.0,
          PrometheusText.value(
              f, "tokenspeed:pd_rooms_ended_total", identity("decode", "outcome", outcome)));
    }
  }

  @Test
  void shouldExposeNoPdSeriesOnAFusedEngine() {
    Map<String, Family> f =
        PrometheusText.parse(new ServerMetrics("m", "fused", 0, 0, () -> IDLE).scrape());
    assertTrue(
        f.keySet().stream().noneMatch(n -> n.startsWith("tokenspeed:pd_")), f.keySet()::toString);
    assertTrue(f.containsKey("tokenspeed:requests_finished_total"));
  }
}

package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import io.tokenspeed.server.cli.BenchTraceCommand.L3Figures;
import io.tokenspeed.server.cli.TargetMetrics.L3Counter;
import io.tokenspeed.server.cli.TargetMetrics.Reading;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.Test;

/**
 * What {@code bench trace --targets} makes of its targets' {@code /metrics}: the L3 counters summed
 * over ranks and series, no L3 for a server without a store, differences summed over the targets
 * that have L3, and errors that name the target's URL (over a loopback HTTP server).
 */
class TargetMetricsTest {
  private static final URI A = URI.create("http://127.0.0.1:1/metrics");
  private static final URI B = URI.create("http://127.0.0.1:2/metrics");
  private static final URI C = URI.create("http://127.0.0.1:3/metrics");

  /** The identity labels but tp_rank. */
  private static final String ID = "model_name=\"m\",engine_role=\"fused\",dp_rank=\"0\"";

  /**
   * An exposition of the server's shape: executor bytes on two ranks, the scheduler's counters
   * once, the health state, and the gauges that say whether it is busy.
   */
  private static String exposition(
      boolean l3, long getBytes, long putBytes, long gets, long soft, long expired, long bypassed) {
    return """
        # HELP tokenspeed:num_requests_running Requests admitted by the scheduler.
        # TYPE tokenspeed:num_requests_running gauge
        tokenspeed:num_requests_running{%1$s,tp_rank="0"} 0.0
        # TYPE tokenspeed:num_requests_waiting gauge
        tokenspeed:num_requests_waiting{%1$s,tp_rank="0"} 0.0
        # TYPE tokenspeed:l3_payload_bytes_total counter
        tokenspeed:l3_payload_bytes_total{%1$s,kind="query",tp_rank="0"} 0.0
        tokenspeed:l3_payload_bytes_total{%1$s,kind="get",tp_rank="0"} %2$d
        tokenspeed:l3_payload_bytes_total{%1$s,kind="get",tp_rank="1"} %2$d
        tokenspeed:l3_payload_bytes_total{%1$s,kind="put",tp_rank="0"} %3$d
        tokenspeed:l3_payload_bytes_total{%1$s,kind="put",tp_rank="1"} 0
        # TYPE tokenspeed:l3_health_state gauge
        tokenspeed:l3_health_state{%1$s,state="healthy",tp_rank="0"} %8$d
        tokenspeed:l3_health_state{%1$s,state="disabled",tp_rank="0"} %9$d
        # TYPE tokenspeed:l3_storage_pending gauge
        tokenspeed:l3_storage_pending{%1$s,tp_rank="0"} 0
        # TYPE tokenspeed:l3_soft_timeouts_total counter
        tokenspeed:l3_soft_timeouts_total{%1$s,tp_rank="0"} %5$d
        # TYPE tokenspeed:l3_ready_expirations_total counter
        tokenspeed:l3_ready_expirations_total{%1$s,tp_rank="0"} %6$d
        # TYPE tokenspeed:l3_pressure_bypasses_total counter
        tokenspeed:l3_pressure_bypasses_total{%1$s,reason="pressure",tp_rank="0"} %7$d
        tokenspeed:l3_pressure_bypasses_total{%1$s,reason="slower_than_compute",tp_rank="0"} 9
        # TYPE tokenspeed:l3_break_even_bandwidth_bytes_per_second gauge
        tokenspeed:l3_break_even_bandwidth_bytes_per_second{%1$s,tp_rank="0"} NaN
        # TYPE tokenspeed:l3_operations_issued_total counter
        tokenspeed:l3_operations_issued_total{%1$s,kind="query",tp_rank="0"} 40
        tokenspeed:l3_operations_issued_total{%1$s,kind="get",tp_rank="0"} %4$d
        """
        .formatted(ID, getBytes, putBytes, gets, soft, expired, bypassed, l3 ? 1 : 0, l3 ? 0 : 1);
  }

  private static Reading withL3(
      URI uri, long getBytes, long putBytes, long gets, long soft, long expired, long bypassed) {
    return TargetMetrics.reading(
        uri, exposition(true, getBytes, putBytes, gets, soft, expired, bypassed));
  }

  @Test
  void shouldReadTheCountersSummedOverRanksAndSelectedByLabel() {
    Reading r = withL3(A, 100, 300, 7, 2, 3, 4);
    Map<L3Counter, Long> l3 = r.l3().orElseThrow();
    assertEquals(200L, l3.get(L3Counter.GET_BYTES), "both ranks' GET bytes");
    assertEquals(300L, l3.get(L3Counter.PUT_BYTES));
    assertEquals(7L, l3.get(L3Counter.GETS_ISSUED), "GETs, not queries");
    assertEquals(2L, l3.get(L3Counter.SOFT_TIMEOUTS));
    assertEquals(3L, l3.get(L3Counter.READY_EXPIRATIONS));
    assertEquals(4L, l3.get(L3Counter.PRESSURE_BYPASSES), "reason=pressure only");
    assertTrue(r.quiet());
  }

  @Test
  void shouldReadNoL3FromAServerWithoutAStoreOrWithoutL3Metrics() {
    Reading disabled = TargetMetrics.reading(A, exposition(false, 0, 0, 0, 0, 0, 0));
    assertEquals(Optional.empty(), disabled.l3());
    Reading other = TargetMetrics.reading(B, "# another server\nhttp_requests_total 12\n");
    assertEquals(Optional.empty(), other.l3());
    assertTrue(other.quiet(), "no gauge says it is busy");
    String pending = "tokenspeed:l3_storage_pending{" + ID + ",tp_rank=\"0\"} ";
    Reading busy =
        TargetMetrics.reading(
            C, exposition(true, 1, 1, 1, 0, 0, 0).replace(pending + "0", pending + "1"));
    assertFalse(busy.quiet(), "L3 work pending");
  }

  @Test
  void shouldSumTheDifferencesOverTheTargetsThatHaveL3() {
    List<Reading> before =
        List.of(
            withL3(A, 100, 1000, 1, 0, 0, 0),
            TargetMetrics.reading(B, exposition(false, 0, 0, 0, 0, 0, 0)),
            withL3(C, 0, 0, 0, 5, 5, 5));
    List<Reading> after =
        List.of(
            withL3(A, 150, 4000, 3, 1, 0, 2),
            TargetMetrics.reading(B, exposition(false, 0, 0, 0, 0, 0, 0)),
            withL3(C, 10, 20, 1, 6, 7, 5));
    L3Figures f = TargetMetrics.difference(before, after).orElseThrow();
    // GET bytes count twice: each exposition shows them on two ranks
    assertEquals(new L3Figures(2 * 50 + 2 * 10, 3000 + 20, 2 + 1, 1 + 1, 0 + 2, 2 + 0), f);
    assertEquals(1 + 1 + 0 + 2 + 2 + 0, f.fallbacks());
    List<Reading> none = List.of(TargetMetrics.reading(B, exposition(false, 0, 0, 0, 0, 0, 0)));
    assertEquals(Optional.empty(), TargetMetrics.difference(none, none));
  }

  @Test
  void shouldNameTheTargetWhoseCounterWentDownOrIsMissing() {
    IllegalArgumentException down =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                TargetMetrics.difference(
                    List.of(withL3(A, 0, 0, 0, 0, 0, 0), withL3(B, 0, 500, 0, 0, 0, 0)),
                    List.of(withL3(A, 0, 0, 0, 0, 0, 0), withL3(B, 0, 20, 0, 0, 0, 0))));
    assertEquals(
        "--targets: "
            + B
            + ": tokenspeed:l3_payload_bytes_total{kind=\"put\"} went down from 500 to 20 during"
            + " the replay (did the server restart?)",
        down.getMessage());
    String lacking =
        exposition(true, 1, 1, 1, 1, 1, 1)
            .lines()
            .filter(l -> !l.contains("ready_expirations"))
            .reduce("", (x, l) -> x + l + "\n");
    IllegalArgumentException missing =
        assertThrows(IllegalArgumentException.class, () -> TargetMetrics.reading(C, lacking));
    assertEquals(
        "--targets: "
            + C
            + " has L3 but no tokenspeed:l3_ready_expirations_total: not a tokenspeed server?",
        missing.getMessage());
    String soft = "tokenspeed:l3_soft_timeouts_total{" + ID + ",tp_rank=\"0\"} ";
    String notACount = exposition(true, 1, 1, 1, 1, 1, 1).replace(soft + "1", soft + "NaN");
    IllegalArgumentException nan =
        assertThrows(IllegalArgumentException.class, () -> TargetMetrics.reading(C, notACount));
    assertEquals(
        "--targets: " + C + ": tokenspeed:l3_soft_timeouts_total is NaN, not a count",
        nan.getMessage());
  }

  /**
   * A loopback server: /metrics of the server's shape, /bad with a malformed line, /slow that
   * answers only once the test ends; any other path 404.
   */
  @Test
  void shouldNameTheUrlWhenMetricsCannotBeFetchedOrRead() throws Exception {
    CountDownLatch release = new CountDownLatch(1);
    HttpServer server =
        HttpServer.create(new InetSocketAddress(InetAddress.getByName("127.0.0.1"), 0), 0);
    server.createContext(
        "/",
        exchange -> {
          String path = exchange.getRequestURI().getPath();
          String body =
              switch (path) {
                case "/metrics" -> exposition(true, 5, 6, 1, 0, 0, 0);
                case "/bad" -> "# TYPE a counter\na_total{kind=\"get\" 1\n";
                case "/slow" -> {
                  try {
                    release.await();
                  } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                  }
                  yield "";
                }
                default -> null;
              };
          byte[] bytes = (body == null ? "no such page" : body).getBytes(StandardCharsets.UTF_8);
          exchange.sendResponseHeaders(body == null ? 404 : 200, bytes.length);
          exchange.getResponseBody().write(bytes);
          exchange.close();
        });
    server.setExecutor(java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
    server.start();
    String base = "http://127.0.0.1:" + server.getAddress().getPort();
    URI metrics = URI.create(base + "/metrics");
    URI bad = URI.create(base + "/bad");
    URI missing = URI.create(base + "/nothing");
    URI slow = URI.create(base + "/slow");
    URI closed = URI.create("http://127.0.0.1:" + closedPort() + "/metrics");
    try (TargetMetrics t = new TargetMetrics(List.of(metrics), Duration.ofMillis(500))) {
      Reading ok = t.readAll().getFirst();
      assertEquals(10L, ok.l3().orElseThrow().get(L3Counter.GET_BYTES));
      assertEquals(
          "--targets: "
              + bad
              + " is not Prometheus text: line 2: ',' or '}' expected after the value of label"
              + " kind: a_total{kind=\"get\" 1",
          assertThrows(IllegalArgumentException.class, () -> t.read(bad)).getMessage());
      assertEquals(
          "--targets: GET " + missing + " answered 404: no such page",
          assertThrows(IllegalArgumentException.class, () -> t.read(missing)).getMessage());
      String refused =
          assertThrows(IllegalArgumentException.class, () -> t.read(closed)).getMessage();
      assertTrue(refused.startsWith("--targets: GET " + closed + " failed: "), refused);
      String timedOut =
          assertThrows(IllegalArgumentException.class, () -> t.read(slow)).getMessage();
      assertTrue(
          timedOut.startsWith("--targets: GET " + slow + " failed: ")
              && timedOut.contains("HttpTimeoutException"),
          timedOut);
    } finally {
      release.countDown();
      server.stop(0);
    }
  }

  /** A loopback port nothing listens on (just closed). */
  static int closedPort() throws IOException {
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
      return s.getLocalPort();
    }
  }

  /**
   * A router stands for its backends: its /ready names them, and their /metrics are scraped in its
   * place (a backend two routers share once); a server whose /ready names none is scraped itself.
   */
  @Test
  void shouldScrapeARoutersBackendsInItsPlace() throws Exception {
    HttpServer router =
        HttpServer.create(new InetSocketAddress(InetAddress.getByName("127.0.0.1"), 0), 0);
    HttpServer plain =
        HttpServer.create(new InetSocketAddress(InetAddress.getByName("127.0.0.1"), 0), 0);
    router.createContext(
        "/ready",
        exchange -> {
          byte[] bytes =
              ("{\"status\":\"ready\",\"missing\":[],"
                      + "\"prefill\":[{\"url\":\"http://127.0.0.1:7001\",\"ready\":true},"
                      + "{\"url\":\"http://127.0.0.1:7002\",\"ready\":false}],"
                      + "\"decode\":[{\"url\":\"http://127.0.0.1:7003\",\"ready\":true}]}")
                  .getBytes(StandardCharsets.UTF_8);
          exchange.sendResponseHeaders(200, bytes.length);
          exchange.getResponseBody().write(bytes);
          exchange.close();
        });
    plain.createContext(
        "/ready",
        exchange -> {
          byte[] bytes = "{\"status\":\"ready\"}".getBytes(StandardCharsets.UTF_8);
          exchange.sendResponseHeaders(200, bytes.length);
          exchange.getResponseBody().write(bytes);
          exchange.close();
        });
    router.start();
    plain.start();
    try {
      URI r = URI.create("http://127.0.0.1:" + router.getAddress().getPort() + "/");
      URI p = URI.create("http://127.0.0.1:" + plain.getAddress().getPort() + "/");
      assertEquals(
          List.of(
              URI.create("http://127.0.0.1:7001/metrics"),
              URI.create("http://127.0.0.1:7002/metrics"),
              URI.create("http://127.0.0.1:7003/metrics"),
              p.resolve("/metrics")),
          TargetMetrics.metricsOf(List.of(r, r, p), Duration.ofSeconds(5)));
    } finally {
      router.stop(0);
      plain.stop(0);
    }
  }
}

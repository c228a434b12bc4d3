package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.core.metrics.PrometheusText.Family;
import io.tokenspeed.server.metrics.RouterMetrics;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The router's {@code /metrics} count exactly what its clients and backends did. */
class RouterMetricsTest {
  private RouterRig rig;

  @AfterEach
  void stop() {
    if (rig != null) {
      rig.close();
    }
  }

  @Test
  void shouldCountRequestsChoicesFailuresAndReadyBackendsAsTheyHappened() throws Exception {
    rig = new RouterRig(2, 2, 31);
    String p0 = rig.prefill.get(0).url();
    String p1 = rig.prefill.get(1).url();
    String d0 = rig.decode.get(0).url();
    String d1 = rig.decode.get(1).url();
    Map<String, PrometheusText.Family> before = rig.metrics();
    assertEquals(0.0, total(before, "tokenspeed:router_requests_total"), "all at 0 from the start");
    assertEquals(
        RouterMetrics.ENDPOINTS.size() * RouterMetrics.OUTCOMES.size(),
        requestSeries(before).size(),
        "every endpoint and outcome present");

    // three plain completions: P0 D0, P1 D1, P0 D0
    for (int i = 0; i < 3; i++) {
      assertEquals(200, rig.post("/v1/completions", RouterTest.completion(false)).statusCode());
    }
    // a streamed chat: P1 D1
    rig.decode.get(1).script = new StubBackend.Stream(RouterTest.events(7, 3), 0, false, -1, -1);
    assertEquals(
        200, rig.post("/v1/chat/completions", "{\"messages\":[],\"stream\":true}").statusCode());
    // a body that is not JSON: refused, nothing routed
    assertEquals(400, rig.post("/v1/chat/completions", "{\"messages\":").statusCode());
    // the models of a decode backend: D0
    assertEquals(200, rig.get("/v1/models").statusCode());
    // prefill P0 answers 500 while D1 waits: 502, D1 cancelled (not a failure of D1)
    rig.prefill.get(0).script = new StubBackend.Answer(500, "{}");
    rig.decode.get(1).receivedOne = new java.util.concurrent.CountDownLatch(1);
    rig.prefill.get(0).before = rig.decode.get(1).receivedOne;
    rig.decode.get(1).script = new StubBackend.Hold();
    assertEquals(502, rig.post("/v1/completions", RouterTest.completion(false)).statusCode());
    assertTrue(rig.decode.get(1).awaitCancellations(1, 10_000), "decode cancelled");

    Map<String, Family> m = rig.metrics();
    Map<List<String>, Double> expected = new HashMap<>();
    expected.put(List.of("/v1/completions", "ok"), 3.0);
    expected.put(List.of("/v1/chat/completions", "ok"), 1.0);
    expected.put(List.of("/v1/chat/completions", "refused"), 1.0);
    expected.put(List.of("/v1/models", "ok"), 1.0);
    expected.put(List.of("/v1/completions", "upstream_failed"), 1.0);
    for (String endpoint : RouterMetrics.ENDPOINTS) {
      for (String outcome : RouterMetrics.OUTCOMES) {
        assertEquals(
            expected.getOrDefault(List.of(endpoint, outcome), 0.0),
            PrometheusText.value(
                m, "tokenspeed:router_requests_total", "endpoint", endpoint, "outcome", outcome),
            endpoint + " " + outcome);
      }
    }
    assertEquals(3.0, routed(m, "prefill", p0));
    assertEquals(2.0, routed(m, "prefill", p1));
    assertEquals(3.0, routed(m, "decode", d0), "two completions and the models");
    assertEquals(3.0, routed(m, "decode", d1));
    for (String role : List.of("prefill", "decode")) {
      for (String kind : RouterMetrics.FAILURE_KINDS) {
        double want = role.equals("prefill") && kind.equals("status") ? 1.0 : 0.0;
        assertEquals(
            want,
            PrometheusText.value(
                m, "tokenspeed:router_upstream_failures_total", "role", role, "kind", kind),
            role + " " + kind);
      }
      assertEquals(
          2.0, PrometheusText.value(m, "tokenspeed:router_backends_ready", "role", role), role);
    }

    rig.decode.get(0).readyStatus = 503;
    rig.poll();
    Map<String, Family> after = rig.metrics();
    assertEquals(
        1.0, PrometheusText.value(after, "tokenspeed:router_backends_ready", "role", "decode"));
    assertEquals(
        0.0,
        PrometheusText.value(
            after, "tokenspeed:router_backend_ready", "role", "decode", "backend", d0));
    assertEquals(
        1.0,
        PrometheusText.value(
            after, "tokenspeed:router_backend_ready", "role", "decode", "backend", d1));
  }

  @Test
  void shouldRefuseALabelValueOutsideItsSet() {
    RouterMetrics metrics =
        new RouterMetrics(Map.of("prefill", List.of("http://a:1")), (role, url) -> true);
    assertThrows(IllegalArgumentException.class, () -> metrics.onRequest("/v1/other", "ok"));
    assertThrows(
        IllegalArgumentException.class, () -> metrics.onRequest("/v1/completions", "fine"));
    assertThrows(IllegalArgumentException.class, () -> metrics.onRouted("prefill", "http://b:1"));
    assertThrows(IllegalArgumentException.class, () -> metrics.onFailure("decode", "oops"));
    assertThrows(
        IllegalArgumentException.class,
        () -> new RouterMetrics(Map.of("mixed", List.of()), (role, url) -> true));
    assertThrows(
        IllegalArgumentException.class,
        () -> metrics.onRoutingDecision("luck", true, 1, 0, 0, 0),
        "a reason outside the set");
    assertThrows(
        IllegalArgumentException.class,
        () -> metrics.onEventBatch("http://b:1"),
        "a backend that is not routed");
  }

  private static double routed(Map<String, Family> m, String role, String url) {
    return PrometheusText.value(
        m, "tokenspeed:router_routed_requests_total", "role", role, "backend", url);
  }

  private static List<PrometheusText.Sample> requestSeries(Map<String, Family> m) {
    return PrometheusText.samples(m, "tokenspeed:router_requests_total");
  }

  private static double total(Map<String, Family> m, String name) {
    return PrometheusText.samples(m, name).stream().mapToDouble(PrometheusText.Sample::value).sum();
  }
}

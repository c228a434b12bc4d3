package io.tokenspeed.server.metrics;

import io.prometheus.metrics.config.EscapingScheme;
import io.prometheus.metrics.core.metrics.Counter;
import io.prometheus.metrics.core.metrics.GaugeWithCallback;
import io.prometheus.metrics.expositionformats.PrometheusTextFormatWriter;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.BiPredicate;

/**
 * The Prometheus exporter of {@code tokenspeed router}: its requests by endpoint and outcome, its
 * choices of backends, the failures of its upstream requests by role and kind, and the backends
 * ready now. docs/metrics.md lists every metric (section "Router").
 *
 * <p>What it guarantees:
 *
 * <ul>
 *   <li><b>One registry of its own</b>, never the process-wide default.
 *   <li><b>Fixed label sets</b>: every label value comes from the constants below or from the
 *       backends named at startup, and every series of those sets is present at 0 from the start; a
 *       value outside them is a bug and fails fast. No label carries a request id or a room.
 *   <li><b>Names keep the prefix {@code tokenspeed:router_}</b>; client_java appends {@code _total}
 *       to every counter. The router serves no model and runs no engine: its series carry none of
 *       an engine's identity labels.
 *   <li><b>Metrics never feed a decision</b>: the router's routing reads its own state, never
 *       these.
 * </ul>
 *
 * <p>Thread-safe: requests finish on any thread; scrapes are serialized.
 */
public final class RouterMetrics {

  /** The content type of {@link #scrape}: Prometheus text format 0.0.4. */
  public static final String CONTENT_TYPE = PrometheusTextFormatWriter.CONTENT_TYPE;

  /** The endpoints counted ({@code endpoint}). */
  public static final List<String> ENDPOINTS =
      List.of("/v1/completions", "/v1/chat/completions", "/v1/models");

  /**
   * How a request ended ({@code outcome}): {@code ok} (a backend's 2xx answer passed through
   * whole), {@code refused} (the router's own 4xx: a body that is not a JSON object, too large,
   * unreadable), {@code backend_error} (a backend's non-2xx answer passed through), {@code
   * unavailable} (503: no ready backend of a role), {@code upstream_failed} (502 or 504, or a
   * stream ended by an error event), {@code client_gone} (the client left first; both upstream
   * requests were cancelled) and {@code internal_error} (a bug in the router: 500).
   */
  public static final List<String> OUTCOMES =
      List.of(
          "ok",
          "refused",
          "backend_error",
          "unavailable",
          "upstream_failed",
          "client_gone",
          "internal_error");

  /** The backends' roles ({@code role}). */
  public static final List<String> ROLES = List.of("prefill", "decode");

  /**
   * How an upstream request failed ({@code kind}): {@code unreachable} (no connection, or it broke
   * before any answer), {@code timeout} (no answer within the upstream timeout, or a body that
   * stalled that long), {@code status} (a non-2xx answer) and {@code broken} (the answer started
   * and then failed: a stream cut, a truncated body).
   */
  public static final List<String> FAILURE_KINDS =
      List.of("unreachable", "timeout", "status", "broken");

  private final PrometheusRegistry registry = new PrometheusRegistry();
  private final PrometheusTextFormatWriter writer = PrometheusTextFormatWriter.create();
  private final Map<String, List<String>> backends;
  private final Counter requests;
  private final Counter routed;
  private final Counter failures;

  /**
   * An exporter for a router over {@code backends}.
   *
   * @param backends each role's backend URLs, as the router names them ({@link #ROLES} only)
   * @param ready whether the backend of a role and a URL is ready now; read at each scrape
   */
  public RouterMetrics(Map<String, List<String>> backends, BiPredicate<String, String> ready) {
    if (!Set.copyOf(ROLES).containsAll(backends.keySet())) {
      throw new IllegalArgumentException("roles=" + backends.keySet() + " must be among " + ROLES);
    }
    this.backends = new LinkedHashMap<>();
    for (String role : ROLES) {
      this.backends.put(role, List.copyOf(backends.getOrDefault(role, List.of())));
    }
    requests =
        Counter.builder()
            .name("tokenspeed:router_requests")
            .help("Requests the router answered, by endpoint and outcome.")
            .labelNames("endpoint", "outcome")
            .withoutExemplars()
            .register(registry);
    for (String endpoint : ENDPOINTS) {
      for (String outcome : OUTCOMES) {
        requests.initLabelValues(endpoint, outcome);
      }
    }
    routed =
        Counter.builder()
            .name("tokenspeed:router_routed_requests")
            .help("Upstream requests the router sent, by the backend's role and URL.")
            .labelNames("role", "backend")
            .withoutExemplars()
            .register(registry);
    failures =
        Counter.builder()
            .name("tokenspeed:router_upstream_failures")
            .help("Upstream requests that failed, by the backend's role and the kind of failure.")
            .labelNames("role", "kind")
            .withoutExemplars()
            .register(registry);
    for (String role : ROLES) {
      for (String url : this.backends.get(role)) {
        routed.initLabelValues(role, url);
      }
      for (String kind : FAILURE_KINDS) {
        failures.initLabelValues(role, kind);
      }
    }
    GaugeWithCallback.builder()
        .name("tokenspeed:router_backends_ready")
        .help("Backends of each role ready now (their /ready answered 200 and /pd named the role).")
        .labelNames("role")
        .callback(
            cb -> {
              for (String role : ROLES) {
                long n = this.backends.get(role).stream().filter(u -> ready.test(role, u)).count();
                cb.call(n, role);
              }
            })
        .register(registry);
    GaugeWithCallback.builder()
        .name("tokenspeed:router_backend_ready")
        .help("1 while the backend is ready, else 0.")
        .labelNames("role", "backend")
        .callback(
            cb -> {
              for (String role : ROLES) {
                for (String url : this.backends.get(role)) {
                  cb.call(ready.test(role, url) ? 1 : 0, role, url);
                }
              }
            })
        .register(registry);
  }

  /** A request to {@code endpoint} ended with {@code outcome}. */
  public void onRequest(String endpoint, String outcome) {
    requests
        .labelValues(check("endpoint", endpoint, ENDPOINTS), check("outcome", outcome, OUTCOMES))
        .inc();
  }

  /** An upstream request went to the {@code role} backend at {@code url}. */
  public void onRouted(String role, String url) {
    check("backend", url, backends.get(check("role", role, ROLES)));
    routed.labelValues(role, url).inc();
  }

  /** An upstream request to a {@code role} backend failed with {@code kind}. */
  public void onFailure(String role, String kind) {
    failures.labelValues(check("role", role, ROLES), check("kind", kind, FAILURE_KINDS)).inc();
  }

  private static String check(String label, String value, List<String> allowed) {
    if (!allowed.contains(value)) {
      throw new IllegalArgumentException(label + "=" + value + " must be one of " + allowed);
    }
    return value;
  }

  /** The exposition of every metric now, in the Prometheus text format ({@link #CONTENT_TYPE}). */
  public synchronized byte[] scrape() {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try {
      writer.write(out, registry.scrape(), EscapingScheme.UNDERSCORE_ESCAPING);
    } catch (IOException e) {
      throw new UncheckedIOException(e); // a byte array does not fail
    }
    return out.toByteArray();
  }
}

package io.tokenspeed.server.metrics;

import io.prometheus.metrics.config.EscapingScheme;
import io.prometheus.metrics.core.datapoints.CounterDataPoint;
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

  /**
   * The backends' roles ({@code role}): {@code prefill} and {@code decode} behind a disaggregated
   * router, {@code fused} behind {@code router --replicas}. Only the roles a router has are
   * exported.
   */
  public static final List<String> ROLES = List.of("prefill", "decode", "fused");

  /**
   * Why a backend was chosen ({@code reason}): the best the chosen backend offered the prompt, a
   * prefix in its Device tier ({@code device_prefix}), else in its Host tier ({@code host_prefix}),
   * else one only the shared L3 store holds ({@code l3_prefix}), else nothing, when it was the only
   * cheapest ({@code load}) or tied, or under {@code --routing round-robin} ({@code round_robin}).
   */
  public static final List<String> REASONS =
      List.of("device_prefix", "host_prefix", "l3_prefix", "load", "round_robin");

  /** Where a routed prompt's prefix was expected to come from ({@code tier}). */
  public static final List<String> TIERS = List.of("device", "host", "l3");

  /**
   * What the router mirrors of a backend from its KV events ({@code tier}): its Device and Host
   * tiers, and the blocks it wrote to the shared L3 store.
   */
  public static final List<String> INDEX_TIERS = List.of("device", "host", "l3");

  /**
   * How a gap in a backend's KV event sequence ended ({@code outcome}): filled from its replay
   * socket ({@code replayed}), or not ({@code lost}: its index was cleared).
   */
  public static final List<String> GAP_OUTCOMES = List.of("replayed", "lost");

  /** What the prefix routing's gauges read at each scrape. */
  public interface RoutingView {
    /** Whether the router follows the KV events of the backend at {@code url} now. */
    boolean eventsLive(String url);

    /** The blocks the router's index holds for the backend at {@code url} on {@code tier}. */
    long indexBlocks(String url, String tier);

    /** The backend's load: the requests it runs or holds waiting, and the router's in flight. */
    double load(String url);

    /** A view of nothing (every gauge 0). */
    RoutingView NONE =
        new RoutingView() {
          @Override
          public boolean eventsLive(String url) {
            return false;
          }

          @Override
          public long indexBlocks(String url, String tier) {
            return 0;
          }

          @Override
          public double load(String url) {
            return 0;
          }
        };
  }

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
  private final String routedRole;
  private final List<String> routedBackends;
  private final Counter decisions;
  private final Counter promptTokens;
  private final Counter prefixTokens;
  private final Counter unknownPrompts;
  private final Counter eventBatches;
  private final Counter eventGaps;
  private final Counter eventMalformed;

  /**
   * An exporter for a disaggregated router over {@code backends}, its prefill backends routed, with
   * no routing gauges.
   */
  public RouterMetrics(Map<String, List<String>> backends, BiPredicate<String, String> ready) {
    this(backends, "prefill", ready, RoutingView.NONE);
  }

  /**
   * An exporter for a router over {@code backends}.
   *
   * @param backends each role's backend URLs, as the router names them ({@link #ROLES} only)
   * @param routedRole the role whose backends the router chooses by its routing (one of them)
   * @param ready whether the backend of a role and a URL is ready now; read at each scrape
   * @param view what the routing gauges read at each scrape
   */
  public RouterMetrics(
      Map<String, List<String>> backends,
      String routedRole,
      BiPredicate<String, String> ready,
      RoutingView view) {
    if (!Set.copyOf(ROLES).containsAll(backends.keySet())) {
      throw new IllegalArgumentException("roles=" + backends.keySet() + " must be among " + ROLES);
    }
    if (!backends.containsKey(routedRole)) {
      throw new IllegalArgumentException(
          "routedRole=" + routedRole + " must be one of the roles " + backends.keySet());
    }
    this.backends = new LinkedHashMap<>();
    for (String role : ROLES) {
      if (backends.containsKey(role)) {
        this.backends.put(role, List.copyOf(backends.get(role)));
      }
    }
    this.routedRole = routedRole;
    this.routedBackends = this.backends.get(routedRole);
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
    for (String role : this.backends.keySet()) {
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
              for (String role : this.backends.keySet()) {
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
              for (String role : this.backends.keySet()) {
                for (String url : this.backends.get(role)) {
                  cb.call(ready.test(role, url) ? 1 : 0, role, url);
                }
              }
            })
        .register(registry);

    decisions =
        Counter.builder()
            .name("tokenspeed:router_routing_decisions")
            .help("Choices of a routed backend (a replica, or prefill), by role and reason.")
            .labelNames("role", "reason")
            .withoutExemplars()
            .register(registry);
    for (String reason : REASONS) {
      decisions.initLabelValues(routedRole, reason);
    }
    promptTokens =
        Counter.builder()
            .name("tokenspeed:router_routed_prompt_tokens")
            .help("Prompt tokens of the routed requests whose token ids the router knew.")
            .labelNames("role")
            .withoutExemplars()
            .register(registry);
    promptTokens.initLabelValues(routedRole);
    prefixTokens =
        Counter.builder()
            .name("tokenspeed:router_prefix_tokens")
            .help(
                "Of those, the tokens the chosen backend was expected to reuse, by where they"
                    + " were held (its Device or Host tier, or only the shared L3 store).")
            .labelNames("role", "tier")
            .withoutExemplars()
            .register(registry);
    for (String tier : TIERS) {
      prefixTokens.initLabelValues(routedRole, tier);
    }
    unknownPrompts =
        Counter.builder()
            .name("tokenspeed:router_unknown_prompts")
            .help(
                "Routed requests whose token ids the router could not tell (routed by load):"
                    + " a text prompt without --tokenizer, a prompt the backends will refuse.")
            .labelNames("role")
            .withoutExemplars()
            .register(registry);
    unknownPrompts.initLabelValues(routedRole);
    eventBatches =
        Counter.builder()
            .name("tokenspeed:router_kv_event_batches")
            .help("KV event batches applied to the router's index, by backend.")
            .labelNames("backend")
            .withoutExemplars()
            .register(registry);
    eventGaps =
        Counter.builder()
            .name("tokenspeed:router_kv_event_gaps")
            .help("Gaps in a backend's KV event sequence, by how they ended.")
            .labelNames("backend", "outcome")
            .withoutExemplars()
            .register(registry);
    eventMalformed =
        Counter.builder()
            .name("tokenspeed:router_kv_event_malformed")
            .help("KV event messages that did not decode, by backend (handled as lost).")
            .labelNames("backend")
            .withoutExemplars()
            .register(registry);
    for (String url : routedBackends) {
      eventBatches.initLabelValues(url);
      eventMalformed.initLabelValues(url);
      for (String outcome : GAP_OUTCOMES) {
        eventGaps.initLabelValues(url, outcome);
      }
    }
    GaugeWithCallback.builder()
        .name("tokenspeed:router_kv_events_live")
        .help("1 while the router follows the backend's KV events, else 0.")
        .labelNames("backend")
        .callback(
            cb -> {
              for (String url : routedBackends) {
                cb.call(view.eventsLive(url) ? 1 : 0, url);
              }
            })
        .register(registry);
    GaugeWithCallback.builder()
        .name("tokenspeed:router_kv_index_blocks")
        .help(
            "Blocks the router's index holds for the backend, from its KV events: on its Device"
                + " and Host tiers, and written by it to the shared L3 store.")
        .labelNames("backend", "tier")
        .callback(
            cb -> {
              for (String url : routedBackends) {
                for (String tier : INDEX_TIERS) {
                  cb.call(view.indexBlocks(url, tier), url, tier);
                }
              }
            })
        .register(registry);
    GaugeWithCallback.builder()
        .name("tokenspeed:router_backend_load")
        .help(
            "The load the routing prices a backend at: the requests its /metrics named running"
                + " or waiting at the last poll beyond the router's own then, plus the router's"
                + " requests in flight to it now.")
        .labelNames("backend")
        .callback(
            cb -> {
              for (String url : routedBackends) {
                cb.call(view.load(url), url);
              }
            })
        .register(registry);
  }

  /**
   * A routed backend was chosen for {@code reason}; the prompt's token ids were known ({@code
   * promptTokens} of them, and the chosen backend was expected to reuse the device, host and store
   * tokens) or not ({@code known} false).
   */
  public void onRoutingDecision(
      String reason,
      boolean known,
      long promptTokens,
      long deviceTokens,
      long hostTokens,
      long storeTokens) {
    decisions.labelValues(routedRole, check("reason", reason, REASONS)).inc();
    if (!known) {
      unknownPrompts.labelValues(routedRole).inc();
      return;
    }
    add(this.promptTokens.labelValues(routedRole), promptTokens);
    add(prefixTokens.labelValues(routedRole, "device"), deviceTokens);
    add(prefixTokens.labelValues(routedRole, "host"), hostTokens);
    add(prefixTokens.labelValues(routedRole, "l3"), storeTokens);
  }

  private static void add(CounterDataPoint counter, long n) {
    if (n > 0) {
      counter.inc(n);
    }
  }

  /** A KV event batch of the backend at {@code url} was applied. */
  public void onEventBatch(String url) {
    eventBatches.labelValues(check("backend", url, routedBackends)).inc();
  }

  /** A gap in the KV events of the backend at {@code url} was filled by its replay, or lost. */
  public void onEventGap(String url, boolean replayed) {
    eventGaps
        .labelValues(check("backend", url, routedBackends), replayed ? "replayed" : "lost")
        .inc();
  }

  /** A KV event message of the backend at {@code url} did not decode. */
  public void onEventMalformed(String url) {
    eventMalformed.labelValues(check("backend", url, routedBackends)).inc();
  }

  /** A request to {@code endpoint} ended with {@code outcome}. */
  public void onRequest(String endpoint, String outcome) {
    requests
        .labelValues(check("endpoint", endpoint, ENDPOINTS), check("outcome", outcome, OUTCOMES))
        .inc();
  }

  /** An upstream request went to the {@code role} backend at {@code url}. */
  public void onRouted(String role, String url) {
    check("role", role, ROLES);
    check("backend", url, backends.getOrDefault(role, List.of()));
    routed.labelValues(role, url).inc();
  }

  /** An upstream request to a {@code role} backend failed with {@code kind}. */
  public void onFailure(String role, String kind) {
    failures
        .labelValues(
            check("role", role, List.copyOf(backends.keySet())), check("kind", kind, FAILURE_KINDS))
        .inc();
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

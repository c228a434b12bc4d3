package io.tokenspeed.server.cli;

import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.core.metrics.PrometheusText.Family;
import io.tokenspeed.server.cli.BenchTraceCommand.L3Figures;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalDouble;

/**
 * What {@code bench trace --targets} reads from its targets' {@code GET /metrics}
 * (docs/metrics.md): the L3 counters of {@link L3Figures} just before the replay and once the
 * targets are quiet after it, so that the report's L3 figures are the differences of the servers'
 * own counters, summed over the targets.
 *
 * <p>Each figure is one counter family's {@code _total} samples (client_java appends the suffix),
 * summed over those that carry the label it selects: over {@code tp_rank} for the executor's
 * rank-local bytes (a tensor-parallel replica's rank 0 shows every rank's), once for the
 * scheduler's mirrored counters (they appear under one rank).
 *
 * <pre>
 *   getBytes          tokenspeed:l3_payload_bytes_total{kind="get"}
 *   putBytes          tokenspeed:l3_payload_bytes_total{kind="put"}
 *   getsIssued        tokenspeed:l3_operations_issued_total{kind="get"}
 *   softTimeouts      tokenspeed:l3_soft_timeouts_total
 *   readyExpirations  tokenspeed:l3_ready_expirations_total
 *   pressureBypasses  tokenspeed:l3_pressure_bypasses_total{reason="pressure"}
 * </pre>
 *
 * <p>A target has L3 when its exposition has {@code tokenspeed:l3_health_state} and none of its
 * series reads 1 for {@code state="disabled"} (a server without a store exports every L3 series at
 * 0 and that one at 1); one without contributes nothing. A target with L3 must export every counter
 * above, a finite count that never goes down between the two scrapes (a restart in between would
 * make the difference meaningless): anything else is an error naming the target's URL, as is a
 * {@code /metrics} that cannot be fetched (connection, timeout, a status other than 200) or is not
 * the text format ({@link PrometheusText}, strict: one line it refuses makes the whole scrape an
 * error, never a sum with a line left out).
 *
 * <p>It never waits for longer than its timeout on one request; {@link #awaitQuiet} polls for at
 * most the wait given and then takes what the targets show.
 */
final class TargetMetrics implements AutoCloseable {

  /** How long one scrape may take, connection included. */
  static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(10);

  /** How long {@link #awaitQuiet} waits for the targets to finish their work. */
  static final Duration DEFAULT_QUIET_WAIT = Duration.ofSeconds(30);

  /** Between two scrapes of {@link #awaitQuiet}. */
  private static final long POLL_MS = 50;

  /** The L3 counters read, each a family and the one label it selects (if any). */
  enum L3Counter {
    GET_BYTES("tokenspeed:l3_payload_bytes", "kind", "get"),
    PUT_BYTES("tokenspeed:l3_payload_bytes", "kind", "put"),
    GETS_ISSUED("tokenspeed:l3_operations_issued", "kind", "get"),
    SOFT_TIMEOUTS("tokenspeed:l3_soft_timeouts"),
    READY_EXPIRATIONS("tokenspeed:l3_ready_expirations"),
    PRESSURE_BYPASSES("tokenspeed:l3_pressure_bypasses", "reason", "pressure");

    final String family;
    final String[] labels;

    L3Counter(String family, String... labels) {
      this.family = family;
      this.labels = labels;
    }

    /** The series as the exposition names it, e.g. {@code x_total{kind="get"}}. */
    String series() {
      return family
          + "_total"
          + (labels.length == 0 ? "" : "{" + labels[0] + "=\"" + labels[1] + "\"}");
    }
  }

  /**
   * One scrape of one target.
   *
   * @param uri the target's {@code /metrics}
   * @param l3 its L3 counters, each cumulative since it started; empty without L3
   * @param quiet whether it showed no request running or waiting and no pending L3 work
   */
  record Reading(URI uri, Optional<Map<L3Counter, Long>> l3, boolean quiet) {
    Reading {
      Objects.requireNonNull(uri, "uri");
      l3 = l3.map(m -> Map.copyOf(new EnumMap<>(m)));
    }
  }

  private final List<URI> uris;
  private final Duration timeout;
  private final HttpClient http;

  /**
   * @param uris the targets' {@code /metrics}
   * @param timeout how long one scrape may take
   */
  TargetMetrics(List<URI> uris, Duration timeout) {
    if (uris.isEmpty()) {
      throw new IllegalArgumentException("uris is empty: no target to scrape");
    }
    if (timeout.isNegative() || timeout.isZero()) {
      throw new IllegalArgumentException("timeout=" + timeout + " must be positive");
    }
    this.uris = List.copyOf(uris);
    this.timeout = timeout;
    this.http =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(timeout)
            .followRedirects(HttpClient.Redirect.NEVER)
            .build();
  }

  /**
   * The {@code /metrics} that stand for {@code targets} (base URLs, http://HOST:PORT): a server's
   * own, or, for a router (its {@code GET /ready} answers JSON naming {@code prefill} and {@code
   * decode} backends, docs/pd.md), each backend's instead: the router runs no engine, and its
   * backends' counters (the prefill engines' L3 work, every engine's requests) are what a replay
   * through it moves. A backend two routers share is scraped once.
   */
  static List<URI> metricsOf(List<URI> targets, Duration timeout) throws InterruptedException {
    HttpClient http =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(timeout)
            .followRedirects(HttpClient.Redirect.NEVER)
            .build();
    java.util.LinkedHashSet<URI> out = new java.util.LinkedHashSet<>();
    for (URI target : targets) {
      List<URI> backends = routerBackends(http, target, timeout);
      if (backends.isEmpty()) {
        out.add(target.resolve("/metrics"));
      } else {
        for (URI b : backends) {
          out.add(b.resolve("/metrics"));
        }
      }
    }
    return List.copyOf(out);
  }

  /** A router's backends as its {@code /ready} names them; empty for any other server. */
  private static List<URI> routerBackends(HttpClient http, URI target, Duration timeout)
      throws InterruptedException {
    String body;
    try {
      HttpResponse<String> r =
          http.send(
              HttpRequest.newBuilder(target.resolve("/ready")).timeout(timeout).GET().build(),
              HttpResponse.BodyHandlers.ofString());
      body = r.body();
    } catch (IOException e) {
      return List.of(); // its /metrics scrape says what is wrong, naming it
    }
    com.fasterxml.jackson.databind.JsonNode ready;
    try {
      ready = new com.fasterxml.jackson.databind.ObjectMapper().readTree(body);
    } catch (IOException e) {
      return List.of(); // a server's /ready that is not JSON: not a router
    }
    if (ready == null || !ready.path("prefill").isArray() || !ready.path("decode").isArray()) {
      return List.of();
    }
    List<URI> out = new ArrayList<>();
    for (String role : List.of("prefill", "decode")) {
      for (com.fasterxml.jackson.databind.JsonNode b : ready.get(role)) {
        String url = b.path("url").asText("");
        try {
          URI u = URI.create(url);
          if (u.getScheme() == null || u.getHost() == null) {
            throw new IllegalArgumentException("no scheme or host");
          }
          out.add(u);
        } catch (IllegalArgumentException e) {
          throw new IllegalArgumentException(
              "--targets: the router at "
                  + target
                  + " names a "
                  + role
                  + " backend '"
                  + url
                  + "' that is no URL",
              e);
        }
      }
    }
    return out;
  }

  /** One scrape of every target, in the order given. */
  List<Reading> readAll() throws InterruptedException {
    List<Reading> out = new ArrayList<>(uris.size());
    for (URI u : uris) {
      out.add(read(u));
    }
    return out;
  }

  /**
   * Scrapes every target until all of them are quiet, for at most {@code wait}; a target still busy
   * then is named on {@code err} and its figures are those of the last scrape.
   */
  List<Reading> awaitQuiet(Duration wait, PrintWriter err) throws InterruptedException {
    long deadlineNs = System.nanoTime() + wait.toNanos();
    while (true) {
      List<Reading> now = readAll();
      if (now.stream().allMatch(Reading::quiet)) {
        return now;
      }
      if (System.nanoTime() - deadlineNs >= 0) {
        for (Reading r : now) {
          if (!r.quiet()) {
            err.println(
                r.uri()
                    + ": still busy after "
                    + wait.toSeconds()
                    + " s (requests running or waiting, or L3 work pending): its L3 figures are"
                    + " as it showed them then");
          }
        }
        err.flush();
        return now;
      }
      Thread.sleep(POLL_MS);
    }
  }

  /** One scrape of {@code uri}. */
  Reading read(URI uri) throws InterruptedException {
    HttpRequest request =
        HttpRequest.newBuilder(uri)
            .timeout(timeout)
            .header("Accept", "text/plain; version=0.0.4")
            .GET()
            .build();
    HttpResponse<String> response;
    try {
      response = http.send(request, HttpResponse.BodyHandlers.ofString());
    } catch (IOException e) {
      throw new IllegalArgumentException("--targets: GET " + uri + " failed: " + e, e);
    }
    if (response.statusCode() != 200) {
      String body = response.body().strip();
      throw new IllegalArgumentException(
          "--targets: GET "
              + uri
              + " answered "
              + response.statusCode()
              + (body.isEmpty() ? "" : ": " + body.substring(0, Math.min(200, body.length()))));
    }
    return reading(uri, response.body());
  }

  /**
   * What the exposition {@code text} of {@code uri} says.
   *
   * @throws IllegalArgumentException naming {@code uri} when it is not the text format, or has L3
   *     and lacks one of the counters or shows one that is not a count
   */
  static Reading reading(URI uri, String text) {
    Map<String, Family> e;
    try {
      e = PrometheusText.parse(text);
    } catch (PrometheusText.FormatException bad) {
      throw new IllegalArgumentException(
          "--targets: " + uri + " is not Prometheus text: " + bad.getMessage(), bad);
    }
    boolean quiet =
        zero(e, "tokenspeed:num_requests_running")
            && zero(e, "tokenspeed:num_requests_waiting")
            && zero(e, "tokenspeed:l3_storage_pending");
    boolean l3 =
        sum(e, "tokenspeed:l3_health_state").isPresent()
            && sum(e, "tokenspeed:l3_health_state", "state", "disabled").orElse(0) != 1;
    if (!l3) {
      return new Reading(uri, Optional.empty(), quiet);
    }
    Map<L3Counter, Long> counts = new EnumMap<>(L3Counter.class);
    for (L3Counter c : L3Counter.values()) {
      OptionalDouble v = sum(e, c.family + "_total", c.labels);
      if (v.isEmpty()) {
        throw new IllegalArgumentException(
            "--targets: " + uri + " has L3 but no " + c.series() + ": not a tokenspeed server?");
      }
      double d = v.getAsDouble();
      if (!(d >= 0) || Double.isInfinite(d) || d != Math.rint(d)) {
        throw new IllegalArgumentException(
            "--targets: " + uri + ": " + c.series() + " is " + d + ", not a count");
      }
      counts.put(c, (long) d);
    }
    return new Reading(uri, Optional.of(counts), quiet);
  }

  /** Whether the gauge {@code name} sums to 0 (absent counts as 0). */
  private static boolean zero(Map<String, Family> e, String name) {
    return sum(e, name).orElse(0) == 0;
  }

  /**
   * The sum of the samples named {@code sampleName} whose labels include every pair of {@code
   * labels} (name, value, name, value, ...); empty when none matches.
   */
  private static OptionalDouble sum(Map<String, Family> e, String sampleName, String... labels) {
    List<PrometheusText.Sample> found = PrometheusText.samples(e, sampleName, labels);
    return found.isEmpty()
        ? OptionalDouble.empty()
        : OptionalDouble.of(found.stream().mapToDouble(PrometheusText.Sample::value).sum());
  }

  /**
   * The L3 figures of the interval between two scrapes of the same targets: each counter's
   * difference, summed over the targets that have L3 in both; empty when none has.
   *
   * @throws IllegalArgumentException naming the target when a counter went down
   */
  static Optional<L3Figures> difference(List<Reading> before, List<Reading> after) {
    if (before.size() != after.size()) {
      throw new IllegalArgumentException(
          "before has " + before.size() + " readings, after " + after.size());
    }
    Map<L3Counter, Long> sum = new EnumMap<>(L3Counter.class);
    boolean any = false;
    for (int i = 0; i < before.size(); i++) {
      Reading b = before.get(i);
      Reading a = after.get(i);
      if (!b.uri().equals(a.uri())) {
        throw new IllegalArgumentException(
            "reading " + i + " is of " + b.uri() + " before, of " + a.uri() + " after");
      }
      if (b.l3().isEmpty() || a.l3().isEmpty()) {
        continue;
      }
      any = true;
      for (L3Counter c : L3Counter.values()) {
        long from = b.l3().get().get(c);
        long to = a.l3().get().get(c);
        if (to < from) {
          throw new IllegalArgumentException(
              "--targets: "
                  + a.uri()
                  + ": "
                  + c.series()
                  + " went down from "
                  + from
                  + " to "
                  + to
                  + " during the replay (did the server restart?)");
        }
        sum.merge(c, to - from, Long::sum);
      }
    }
    if (!any) {
      return Optional.empty();
    }
    return Optional.of(
        new L3Figures(
            sum.get(L3Counter.GET_BYTES),
            sum.get(L3Counter.PUT_BYTES),
            sum.get(L3Counter.GETS_ISSUED),
            sum.get(L3Counter.SOFT_TIMEOUTS),
            sum.get(L3Counter.READY_EXPIRATIONS),
            sum.get(L3Counter.PRESSURE_BYPASSES)));
  }

  @Override
  public void close() {
    http.close();
  }
}

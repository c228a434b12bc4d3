package io.tokenspeed.server.router;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.server.http.PdServing;
import java.io.IOException;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
import java.util.logging.Logger;
import org.zeromq.ZContext;

/**
 * The router's backends by role: which are ready, the round robin over them, and the poll that
 * keeps their readiness.
 *
 * <p><b>The poll.</b> One virtual thread per backend asks its {@code GET /ready} and {@code GET
 * /pd} together every poll period (the first at once); each answer may take the connect timeout. A
 * backend is ready when {@code /ready} answered 200 and {@code /pd} answered 200 with a JSON object
 * whose {@code role} is the role the backend is configured for, whose {@code tp} (1 when absent) is
 * an integer in [1, {@value #MAX_RANKS}], and, for a decode backend, whose {@code kv_endpoints}
 * lists {@code tp} {@code host:port} strings (or, without {@code kv_endpoints}, at {@code tp} 1,
 * whose {@code kv_endpoint} is one). A decode replica whose ranks have not all reported their KV
 * endpoints yet names none: it is not chosen until a later poll finds them. A backend that names
 * another role is never chosen, and says so in the log.
 *
 * <p>A fused replica ({@code --replicas}) must name role {@code fused}.
 *
 * <p><b>Prefix routing.</b> With {@link Routing#PREFIX}, the poll of a backend of the routed role
 * (a replica, or prefill) also asks its {@code GET /kv-events} and {@code GET /metrics}: the first
 * says where it publishes its KV events ({@link KvEventSource}; 404: events off), and a {@link
 * KvEventSubscriber} follows them into the backend's {@link PrefixIndex} (the store's blocks of all
 * of them are one {@link StoreIndex}); the second gives its load and prices ({@link LoadReport}). A
 * source that changes (the backend restarted elsewhere, or turned its events off) replaces the
 * subscription, and a backend whose poll fails loses it with its index: a backend back from a
 * restart holds nothing until its events say otherwise. A backend without events is still chosen,
 * by its load.
 *
 * <p><b>The choice.</b> Round robin over the ready backends of a role, in the order they were
 * configured: the role's counter picks among the ones ready at the moment of the choice. With
 * prefix routing the routed role's choice is {@link PrefixChooser}'s (its ties round robin by the
 * same counter).
 *
 * <p>Thread-safe.
 */
final class Backends implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(Backends.class.getName());

  /** The most ranks of a backend's replica ({@code /pd}'s {@code tp}). */
  static final int MAX_RANKS = PdServing.MAX_RANKS;

  /** The largest {@code /ready} or {@code /pd} answer read. */
  private static final long MAX_POLL_ANSWER_BYTES = 64 * 1024;

  /** The largest {@code /metrics} answer read. */
  private static final long MAX_METRICS_ANSWER_BYTES = 8 << 20;

  private final Map<Role, List<Backend>> byRole = new EnumMap<>(Role.class);
  private final Map<Role, AtomicLong> cursors = new EnumMap<>(Role.class);
  private final HttpClient client;
  private final ObjectMapper json;
  private final long pollMs;
  private final Duration answerTimeout;
  private final List<Thread> pollers = new ArrayList<>();
  private final Routing routing;
  private final Role routed;
  private final int loadTokens;
  private final StoreIndex store;
  private final Function<Backend, KvEventSubscriber.Listener> listeners;
  private ZContext zmq;
  private volatile boolean closed;

  /**
   * The backends of {@code settings}' roles; {@code listeners} gives each routed backend's events
   * subscription its metrics.
   */
  Backends(
      RouterSettings settings,
      HttpClient client,
      ObjectMapper json,
      Function<Backend, KvEventSubscriber.Listener> listeners) {
    this.client = client;
    this.json = json;
    this.pollMs = settings.pollMs();
    this.answerTimeout = Duration.ofMillis(settings.connectTimeoutMs());
    this.routing = settings.routing();
    this.routed = settings.routedRole();
    this.loadTokens = settings.loadTokens();
    this.listeners = listeners;
    for (Map.Entry<Role, List<String>> e : settings.roles().entrySet()) {
      Role role = e.getKey();
      boolean indexed = routing == Routing.PREFIX && role == routed;
      byRole.put(
          role,
          e.getValue().stream()
              .map(
                  u ->
                      new Backend(
                          role,
                          u,
                          indexed
                              ? new PrefixIndex(
                                  settings.kvIndexBlocks(),
                                  System::nanoTime,
                                  PrefixIndex.DEFAULT_PENDING_MS)
                              : null))
              .toList());
    }
    for (Role role : Role.values()) {
      cursors.put(role, new AtomicLong());
    }
    this.store =
        new StoreIndex(
            of(routed).stream().map(b -> b.index).filter(java.util.Objects::nonNull).toList());
  }

  /** The roles configured, in {@link Role} order. */
  List<Role> roles() {
    return List.copyOf(byRole.keySet());
  }

  /** Starts polling every backend. */
  void start() {
    for (List<Backend> list : byRole.values()) {
      for (Backend b : list) {
        pollers.add(Thread.ofVirtual().name("ts-router-poll " + b.url).start(() -> pollLoop(b)));
      }
    }
  }

  /** Every backend of {@code role}, in the order configured (none when it is not configured). */
  List<Backend> of(Role role) {
    return byRole.getOrDefault(role, List.of());
  }

  /** The backend of {@code role} and {@code url}, if configured. */
  Optional<Backend> find(Role role, String url) {
    return of(role).stream().filter(b -> b.url.equals(url)).findFirst();
  }

  /** A backend chosen, and its state when it was: the state a request to it goes by. */
  record Chosen(Backend backend, Backend.State state) {}

  /**
   * A prefix-aware choice: the backend, its state, why it was chosen, and the prompt tokens it is
   * expected to reuse by tier (all 0 when the prompt is unknown).
   */
  record Routed(
      Chosen chosen,
      PrefixChooser.Reason reason,
      int promptTokens,
      int deviceTokens,
      int hostTokens,
      int storeTokens) {}

  /**
   * The ready backend of the routed role for a prompt of {@code tokens} (null: unknown), by {@link
   * #routing}; empty when none is ready. With prefix routing the request's pages are noted pending
   * on the chosen backend.
   */
  Optional<Routed> route(int[] tokens) {
    List<Chosen> ready = new ArrayList<>();
    for (Backend b : of(routed)) {
      Backend.State state = b.state();
      if (state.ready()) {
        ready.add(new Chosen(b, state));
      }
    }
    if (ready.isEmpty()) {
      return Optional.empty();
    }
    long turn = cursors.get(routed).getAndIncrement();
    int promptTokens = tokens == null ? 0 : tokens.length;
    if (routing == Routing.ROUND_ROBIN) {
      Chosen c = ready.get((int) Math.floorMod(turn, (long) ready.size()));
      return Optional.of(new Routed(c, PrefixChooser.Reason.ROUND_ROBIN, promptTokens, 0, 0, 0));
    }
    // the page hashes of the prompt, once per block size among the backends with live events,
    // and how far the store holds them from each page on
    Map<Integer, long[]> hashesBySize = new HashMap<>();
    Map<Integer, int[]> storeRuns = new HashMap<>();
    List<PrefixChooser.Candidate> candidates = new ArrayList<>(ready.size());
    for (Chosen c : ready) {
      Backend b = c.backend();
      KvEventSubscriber events = b.events();
      if (tokens == null || events == null || b.index == null) {
        candidates.add(PrefixChooser.Candidate.loadOnly(b.load(), b.polled().report()));
        continue;
      }
      int size = events.source().blockSize();
      long[] hashes = hashesBySize.computeIfAbsent(size, p -> PageHashes.of(tokens, p));
      PrefixIndex.Match m = b.index.match(hashes, hashes.length);
      int stored = storeRuns.computeIfAbsent(size, p -> store.runs(hashes))[m.localPages()];
      candidates.add(
          new PrefixChooser.Candidate(
              size, m.devicePages(), m.localPages(), stored, b.load(), b.polled().report()));
    }
    PrefixChooser.Choice choice = PrefixChooser.choose(promptTokens, candidates, loadTokens, turn);
    Chosen c = ready.get(choice.index());
    KvEventSubscriber events = c.backend().events();
    if (tokens != null && events != null && c.backend().index != null) {
      long[] hashes = hashesBySize.get(events.source().blockSize());
      if (hashes != null) {
        c.backend().index.notePending(hashes);
      }
    }
    return Optional.of(
        new Routed(
            c,
            choice.reason(),
            promptTokens,
            choice.deviceTokens(),
            choice.hostTokens(),
            choice.storeTokens()));
  }

  /** The next ready backend of {@code role}, round robin; empty when none is ready. */
  Optional<Chosen> choose(Role role) {
    List<Chosen> ready = new ArrayList<>();
    for (Backend b : of(role)) {
      Backend.State state = b.state();
      if (state.ready()) {
        ready.add(new Chosen(b, state));
      }
    }
    if (ready.isEmpty()) {
      return Optional.empty();
    }
    long turn = cursors.get(role).getAndIncrement();
    return Optional.of(ready.get((int) Math.floorMod(turn, (long) ready.size())));
  }

  /** The roles without a ready backend now, in {@link Role} order. */
  List<Role> missing() {
    List<Role> out = new ArrayList<>();
    for (Role role : byRole.keySet()) {
      if (byRole.get(role).stream().noneMatch(Backend::ready)) {
        out.add(role);
      }
    }
    return out;
  }

  private void pollLoop(Backend b) {
    while (!closed) {
      poll(b);
      try {
        Thread.sleep(pollMs);
      } catch (InterruptedException e) {
        return; // closing
      }
    }
  }

  /**
   * Asks {@code b}'s {@code /ready} and {@code /pd} (and, routed by prefix, its {@code /kv-events}
   * and {@code /metrics}) and takes what they say.
   */
  void poll(Backend b) {
    long epoch = b.failureEpoch();
    boolean prefix = b.index != null;
    CompletableFuture<HttpResponse<byte[]>> ready = get(b, "/ready", MAX_POLL_ANSWER_BYTES);
    CompletableFuture<HttpResponse<byte[]>> pd = get(b, "/pd", MAX_POLL_ANSWER_BYTES);
    CompletableFuture<HttpResponse<byte[]>> events =
        prefix ? get(b, "/kv-events", MAX_POLL_ANSWER_BYTES) : null;
    CompletableFuture<HttpResponse<byte[]>> load =
        prefix ? get(b, "/metrics", MAX_METRICS_ANSWER_BYTES) : null;
    int inFlightThen = b.inFlight();
    Backend.State found;
    try {
      found = judge(b, ready.get(), pd.get());
    } catch (ExecutionException e) {
      Throwable cause = e.getCause() == null ? e : e.getCause();
      found = Backend.State.down("its poll failed: " + Upstream.describe(cause));
      if (prefix && !closed) {
        unsubscribe(b, "its poll failed"); // restarting, perhaps: it may come back empty
      }
    } catch (InterruptedException e) {
      ready.cancel(true);
      pd.cancel(true);
      if (events != null) {
        events.cancel(true);
        load.cancel(true);
      }
      Thread.currentThread().interrupt();
      return;
    }
    if (prefix && found.ready() && !closed) {
      takeEvents(b, events);
      takeLoad(b, load, inFlightThen);
    }
    if (!closed) {
      b.onPolled(found, epoch);
    }
  }

  private CompletableFuture<HttpResponse<byte[]>> get(Backend b, String path, long maxBytes) {
    HttpRequest request =
        HttpRequest.newBuilder(b.base.resolve(path)).timeout(answerTimeout).GET().build();
    return client.sendAsync(
        request,
        HttpResponse.BodyHandlers.limiting(HttpResponse.BodyHandlers.ofByteArray(), maxBytes));
  }

  /** Takes {@code /metrics}' figures; an answer that is not 200 leaves the backend's unknown. */
  private void takeLoad(
      Backend b, CompletableFuture<HttpResponse<byte[]>> answer, int inFlightThen) {
    LoadReport report = LoadReport.UNKNOWN;
    try {
      HttpResponse<byte[]> r = answer.get();
      if (r.statusCode() == 200) {
        report = LoadReport.parse(new String(r.body(), StandardCharsets.UTF_8));
      }
    } catch (ExecutionException | RuntimeException e) {
      // unknown load: priced by the router's own requests in flight
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return;
    }
    b.onLoadPolled(report, inFlightThen);
  }

  /**
   * Takes {@code /kv-events}' answer: a source starts (or replaces) the subscription; 404 or an
   * answer this router cannot follow ends it. A failed or other answer leaves it as it is.
   */
  private void takeEvents(Backend b, CompletableFuture<HttpResponse<byte[]>> answer) {
    HttpResponse<byte[]> r;
    try {
      r = answer.get();
    } catch (ExecutionException e) {
      return; // this poll could not ask: keep what it had
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return;
    }
    if (r.statusCode() == 404) {
      unsubscribe(b, "its /kv-events answered 404: its events are off (routed by load)");
      return;
    }
    if (r.statusCode() != 200) {
      return;
    }
    KvEventSource source;
    try {
      source = source(b, json.readTree(r.body()));
    } catch (IOException | IllegalArgumentException e) {
      unsubscribe(b, "its /kv-events answer cannot be followed: " + e.getMessage());
      return;
    }
    synchronized (b) {
      KvEventSubscriber current = b.events();
      if (current != null && current.source().equals(source)) {
        return;
      }
      if (current != null) {
        current.close();
      }
      b.index.clear();
      if (closed) {
        return;
      }
      KvEventSubscriber s =
          new KvEventSubscriber(zmq(), source, b.url, b.index, store, listeners.apply(b));
      b.events(s, null);
      s.start();
      LOG.info(
          () ->
              b
                  + " publishes its KV events on "
                  + source.endpoint()
                  + (source.replayEndpoint() == null
                      ? ""
                      : " (replay " + source.replayEndpoint() + ")")
                  + ", block size "
                  + source.blockSize()
                  + ": routed by prefix");
    }
  }

  /** Ends {@code b}'s subscription (if any) and forgets what its index held. */
  private void unsubscribe(Backend b, String reason) {
    synchronized (b) {
      KvEventSubscriber current = b.events();
      if (current != null) {
        current.close();
        LOG.info(() -> b + ": KV events no longer followed (" + reason + ")");
      }
      b.index.clear();
      b.events(null, reason);
    }
  }

  /**
   * The source a {@code /kv-events} answer names. An endpoint bound to a wildcard address names the
   * backend's own host, as the router reaches it.
   *
   * @throws IllegalArgumentException naming what is wrong
   */
  static KvEventSource source(Backend b, JsonNode info) {
    if (info == null || !info.isObject()) {
      throw new IllegalArgumentException("not a JSON object");
    }
    String hash = info.path("hash").isTextual() ? info.get("hash").asText() : null;
    if (hash != null && !hash.equals(KvEventSource.HASH)) {
      throw new IllegalArgumentException(
          "hash " + hash + " is not the one this router computes (" + KvEventSource.HASH + ")");
    }
    String endpoint = tcp(b, info.get("endpoint"), "endpoint");
    if (endpoint == null) {
      throw new IllegalArgumentException("no endpoint");
    }
    String replay = tcp(b, info.get("replay_endpoint"), "replay_endpoint");
    JsonNode topic = info.get("topic");
    JsonNode size = info.get("block_size");
    if (size == null || !size.isIntegralNumber() || !size.canConvertToInt()) {
      throw new IllegalArgumentException("block_size " + shortly(size) + " is not an integer");
    }
    JsonNode rank = info.get("dp_rank");
    return new KvEventSource(
        endpoint,
        replay,
        topic != null && topic.isTextual() ? topic.asText() : "",
        size.intValue(),
        rank != null && rank.isIntegralNumber() && rank.canConvertToInt() ? rank.intValue() : -1);
  }

  /** A {@code tcp://HOST:PORT} address (null when absent), a wildcard host made the backend's. */
  private static String tcp(Backend b, JsonNode node, String field) {
    if (node == null || node.isNull()) {
      return null;
    }
    String text = node.isTextual() ? node.asText() : null;
    if (text == null || !text.startsWith("tcp://") || !isHostPort(text.substring(6))) {
      throw new IllegalArgumentException(field + " " + shortly(node) + " is not tcp://HOST:PORT");
    }
    String hostPort = text.substring(6);
    int colon = hostPort.lastIndexOf(':');
    String host = hostPort.substring(0, colon);
    if (host.equals("*") || host.equals("0.0.0.0") || host.equals("[::]") || host.equals("[::0]")) {
      String own = b.base.getHost();
      if (own.indexOf(':') >= 0 && !own.startsWith("[")) {
        own = "[" + own + "]";
      }
      return "tcp://" + own + hostPort.substring(colon);
    }
    return text;
  }

  private synchronized ZContext zmq() {
    if (zmq == null) {
      zmq = new ZContext(1);
      zmq.setLinger(0);
    }
    return zmq;
  }

  /** What a backend's {@code /ready} and {@code /pd} answers say of it. */
  private Backend.State judge(Backend b, HttpResponse<byte[]> ready, HttpResponse<byte[]> pd) {
    if (ready.statusCode() != 200) {
      return Backend.State.down("its /ready answered " + ready.statusCode());
    }
    if (pd.statusCode() != 200) {
      return Backend.State.down(
          "its /pd answered " + pd.statusCode() + " (not an engine with a PD role?)");
    }
    JsonNode info;
    try {
      info = json.readTree(pd.body());
    } catch (IOException e) {
      return Backend.State.down("its /pd answer is not JSON");
    }
    if (info == null || !info.isObject()) {
      return Backend.State.down("its /pd answer is not a JSON object");
    }
    String role = info.path("role").isTextual() ? info.get("role").asText() : null;
    if (!b.role.wireName().equals(role)) {
      return Backend.State.down(
          "MISCONFIGURED: it is configured as a "
              + b.role.wireName()
              + " backend but its /pd says role "
              + (role == null ? "(none)" : role)
              + "; it is not used until they agree");
    }
    String model = info.path("model").isTextual() ? info.get("model").asText() : null;
    JsonNode tpNode = info.get("tp");
    int tp = 1; // an engine that names no size serves one rank
    if (tpNode != null) {
      if (!tpNode.isIntegralNumber()
          || !tpNode.canConvertToInt()
          || tpNode.intValue() < 1
          || tpNode.intValue() > MAX_RANKS) {
        return Backend.State.down(
            "its /pd names tp " + shortly(tpNode) + ", not an integer in [1, " + MAX_RANKS + "]");
      }
      tp = tpNode.intValue();
    }
    List<String> kv = List.of();
    if (b.role == Role.DECODE) {
      JsonNode all = info.get("kv_endpoints");
      if (all != null) {
        if (!all.isArray() || all.size() != tp) {
          return Backend.State.down(
              "its /pd names kv_endpoints "
                  + shortly(all)
                  + ", not an array of its "
                  + tp
                  + " ranks' host:port");
        }
        List<String> list = new ArrayList<>();
        for (JsonNode e : all) {
          String text = e.isTextual() ? e.asText() : null;
          if (!isHostPort(text)) {
            return Backend.State.down(
                "its /pd names kv_endpoints with " + shortly(e) + ", not host:port");
          }
          list.add(text);
        }
        kv = list;
      } else if (tp > 1) {
        return Backend.State.down(
            "its /pd names no kv_endpoints yet: the "
                + tp
                + " ranks of the decode replica have not all reported their KV endpoints");
      } else {
        // an engine of one rank that names only its kv_endpoint (an older engine)
        String one = info.path("kv_endpoint").isTextual() ? info.get("kv_endpoint").asText() : null;
        if (!isHostPort(one)) {
          return Backend.State.down(
              "its /pd names no kv_endpoint host:port (got "
                  + shortly(info.path("kv_endpoint"))
                  + ")");
        }
        kv = List.of(one);
      }
    }
    return new Backend.State(true, null, tp, kv, model);
  }

  /** At most 80 characters of a JSON value, for a reason. */
  private static String shortly(JsonNode v) {
    String text = String.valueOf(v);
    return text.length() <= 80 ? text : text.substring(0, 80) + "...";
  }

  /** {@code host:port} with a port in 1..65535 (an IPv6 host in brackets). */
  static boolean isHostPort(String text) {
    if (text == null) {
      return false;
    }
    int colon = text.lastIndexOf(':');
    if (colon <= 0 || colon == text.length() - 1) {
      return false;
    }
    String host = text.substring(0, colon);
    if (host.isBlank() || host.chars().anyMatch(c -> c <= ' ' || c == '/' || c == '@')) {
      return false;
    }
    if (host.indexOf(':') >= 0 && !(host.startsWith("[") && host.endsWith("]"))) {
      return false;
    }
    try {
      int port = Integer.parseInt(text.substring(colon + 1));
      return port >= 1 && port <= 65535;
    } catch (NumberFormatException e) {
      return false;
    }
  }

  @Override
  public void close() {
    closed = true;
    for (Thread t : pollers) {
      t.interrupt();
    }
    for (List<Backend> list : byRole.values()) {
      for (Backend b : list) {
        synchronized (b) {
          KvEventSubscriber s = b.events();
          if (s != null) {
            s.close();
          }
        }
      }
    }
    synchronized (this) {
      if (zmq != null) {
        zmq.close();
      }
    }
  }
}

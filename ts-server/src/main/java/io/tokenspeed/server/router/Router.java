package io.tokenspeed.server.router;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.helidon.http.HeaderNames;
import io.helidon.webserver.http.HttpRouting;
import io.helidon.webserver.http.ServerRequest;
import io.helidon.webserver.http.ServerResponse;
import io.tokenspeed.server.http.ApiException;
import io.tokenspeed.server.http.WebFront;
import io.tokenspeed.server.metrics.RouterMetrics;
import java.io.UncheckedIOException;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.function.LongSupplier;

/**
 * {@code tokenspeed router}: the front door of a disaggregated deployment (docs/pd.md), or of fused
 * data-parallel replicas ({@code --replicas}, docs/serving.md). It takes the OpenAI API's
 * completions, sends each to a prefill and a decode backend (or to one replica), and passes the
 * answering backend's answer to the client ({@link Exchange}). The prefill backend (or the replica)
 * is chosen by the prompt's prefixes the backends hold and their load ({@link Routing#PREFIX},
 * {@link PrefixChooser}) or round robin; a decode backend round robin.
 *
 * <p>Endpoints: {@code POST /v1/completions} and {@code POST /v1/chat/completions} (streamed or
 * not), {@code GET /v1/models} (a ready decode backend's or replica's, passed through), {@code GET
 * /health} (200 while the router runs), {@code GET /ready} (200 while each role has a ready
 * backend, else 503 naming the roles missing; the body lists every backend's state) and {@code GET
 * /metrics} ({@link RouterMetrics}).
 *
 * <p>It is an HTTP server of the same kind as {@code serve}'s ({@link WebFront}): the same body
 * limit and header timeout, the same refusals of malformed and hostile requests, the same error
 * shape. It never checks a request beyond its being one JSON object (the engines check the rest,
 * each the same way), and reads of it only the prompt, for the prefix lookup ({@link
 * PromptReader}); the body it forwards is the client's.
 *
 * <p><b>The room.</b> Each request's room is a random non-zero 64-bit value from {@link
 * SecureRandom}, written into both bodies as the decimal string of its unsigned value ({@code
 * "room": "13260572831089785859"}): a JSON number above 2^53 loses precision in JavaScript and in
 * every parser that reads numbers as doubles, while a string survives them all. A client's own
 * {@code pd} field is replaced.
 *
 * <p>Thread-safe: each request runs on its own virtual thread.
 */
public final class Router implements AutoCloseable {

  /** The largest {@code /v1/models} answer passed through. */
  private static final long MAX_MODELS_ANSWER_BYTES = 1 << 20;

  /** The methods each route takes, for the 405 of another method on its path. */
  private static final Map<String, String> ALLOWED =
      Map.of(
          "/v1/completions", "POST",
          "/v1/chat/completions", "POST",
          "/v1/models", "GET",
          "/health", "GET",
          "/ready", "GET",
          "/metrics", "GET");

  private final RouterSettings settings;
  private final ObjectMapper json = new ObjectMapper();
  private final ExecutorService clientThreads = Executors.newVirtualThreadPerTaskExecutor();
  private final HttpClient client;
  private final ScheduledExecutorService timer;
  private final Backends backends;
  private final RouterMetrics metrics;
  private final LongSupplier rooms;
  private final PromptReader prompts;
  private final WebFront web;

  /** Completions being answered now (from reading the body to the answer's end). */
  private final java.util.concurrent.atomic.AtomicInteger inFlight =
      new java.util.concurrent.atomic.AtomicInteger();

  /** Set by {@link #drain}: new completions are answered 503 and {@code /ready} says so. */
  private volatile boolean draining;

  private Router(RouterSettings s, LongSupplier rooms, PromptReader prompts) {
    this.settings = s;
    this.rooms = rooms;
    this.prompts = prompts;
    this.client =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofMillis(s.connectTimeoutMs()))
            .followRedirects(HttpClient.Redirect.NEVER)
            .executor(clientThreads)
            .build();
    this.timer =
        Executors.newSingleThreadScheduledExecutor(
            r -> {
              Thread t = new Thread(r, "ts-router-upstream-deadlines");
              t.setDaemon(true);
              return t;
            });
    // the metrics and the backends refer to each other: the events count into the metrics, the
    // gauges read the backends; the holder is set before either runs
    RouterMetrics[] holder = new RouterMetrics[1];
    this.backends =
        new Backends(
            s,
            client,
            json,
            b ->
                new KvEventSubscriber.Listener() {
                  @Override
                  public void onBatch() {
                    holder[0].onEventBatch(b.url);
                  }

                  @Override
                  public void onGap(boolean replayed) {
                    holder[0].onEventGap(b.url, replayed);
                  }

                  @Override
                  public void onMalformed() {
                    holder[0].onEventMalformed(b.url);
                  }
                });
    Map<String, List<String>> urls = new LinkedHashMap<>();
    s.roles().forEach((role, list) -> urls.put(role.wireName(), list));
    Role routed = s.routedRole();
    this.metrics =
        new RouterMetrics(
            urls,
            routed.wireName(),
            (role, url) ->
                backends
                    .find(Role.valueOf(role.toUpperCase(Locale.ROOT)), url)
                    .map(Backend::ready)
                    .orElse(false),
            new RouterMetrics.RoutingView() {
              @Override
              public boolean eventsLive(String url) {
                return backends.find(routed, url).map(b -> b.events() != null).orElse(false);
              }

              @Override
              public long indexBlocks(String url, String tier) {
                int bit =
                    switch (tier) {
                      case "device" -> PrefixIndex.DEVICE;
                      case "host" -> PrefixIndex.HOST;
                      default -> PrefixIndex.STORE;
                    };
                return backends
                    .find(routed, url)
                    .map(b -> b.index == null ? 0L : (long) b.index.blocks(bit))
                    .orElse(0L);
              }

              @Override
              public double load(String url) {
                return backends.find(routed, url).map(Backend::load).orElse(0.0);
              }
            });
    holder[0] = metrics;
    this.web = WebFront.create(s.host(), s.port(), s.headerTimeoutMs(), this::routes);
  }

  /** Starts polling the backends and listening; prompts are read for their token ids only. */
  public static Router start(RouterSettings settings) {
    return start(settings, PromptReader.tokenIdsOnly());
  }

  /** Starts polling the backends and listening; {@code prompts} reads a request's token ids. */
  public static Router start(RouterSettings settings, PromptReader prompts) {
    SecureRandom random = new SecureRandom();
    return start(
        settings,
        () -> {
          long room;
          do {
            room = random.nextLong();
          } while (room == 0);
          return room;
        },
        prompts);
  }

  /** {@link #start(RouterSettings)} with the rooms drawn from {@code rooms} (never 0). */
  static Router start(RouterSettings settings, LongSupplier rooms) {
    return start(settings, rooms, PromptReader.tokenIdsOnly());
  }

  static Router start(RouterSettings settings, LongSupplier rooms, PromptReader prompts) {
    Router r = new Router(settings, rooms, prompts);
    r.backends.start();
    r.web.start();
    return r;
  }

  /** The port it listens on. */
  public int port() {
    return web.port();
  }

  /**
   * Stops taking completions (503, and {@code /ready} answers 503 "draining") and waits until the
   * ones being answered have ended or {@code timeout} has passed. Returns how many were still being
   * answered then ({@link #close} cancels them).
   */
  public int drain(Duration timeout) throws InterruptedException {
    draining = true;
    long deadline = System.nanoTime() + timeout.toNanos();
    while (inFlight.get() > 0 && System.nanoTime() < deadline) {
      Thread.sleep(10);
    }
    return inFlight.get();
  }

  /** Completions being answered now. */
  public int inFlight() {
    return inFlight.get();
  }

  /** Stops listening, polling and every upstream request. */
  @Override
  public void close() {
    web.close();
    backends.close();
    client.shutdownNow();
    timer.shutdownNow();
    clientThreads.shutdownNow();
  }

  // ---------------------------------------------------------------- for the exchanges

  RouterSettings settings() {
    return settings;
  }

  Backends backends() {
    return backends;
  }

  HttpClient client() {
    return client;
  }

  ScheduledExecutorService timer() {
    return timer;
  }

  RouterMetrics metrics() {
    return metrics;
  }

  WebFront web() {
    return web;
  }

  /** Polls every backend once, now, on this thread (for tests: the poll period can be long). */
  void pollNow() {
    for (Role role : backends.roles()) {
      for (Backend b : backends.of(role)) {
        backends.poll(b);
      }
    }
  }

  /**
   * The backend of the routed role (a replica, or prefill) for a request of {@code body} to {@code
   * path}, by the routing; the choice is counted. Empty when none is ready.
   */
  Optional<Backends.Chosen> route(String path, JsonNode body) {
    int[] tokens = settings.routing() == Routing.PREFIX ? prompts.tokens(path, body) : null;
    Optional<Backends.Routed> routed = backends.route(tokens);
    routed.ifPresent(
        r ->
            metrics.onRoutingDecision(
                r.reason().label(),
                tokens != null || settings.routing() == Routing.ROUND_ROBIN, // nothing to know
                r.promptTokens(),
                r.deviceTokens(),
                r.hostTokens(),
                r.storeTokens()));
    return routed.map(Backends.Routed::chosen);
  }

  /** The next room: random, never 0. */
  long nextRoom() {
    long room = rooms.getAsLong();
    if (room == 0) {
      throw new IllegalStateException("room=0 is not a room");
    }
    return room;
  }

  byte[] bytes(JsonNode node) {
    try {
      return json.writeValueAsBytes(node);
    } catch (JsonProcessingException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** 503 naming the roles without a ready backend. */
  ApiException noBackend() {
    List<Role> missing = backends.missing();
    if (missing.isEmpty()) {
      // the backends turned ready between the choice and this answer: say what the choice saw
      missing = backends.roles();
    }
    return ApiException.unavailable(
        "no ready "
            + String.join(" or ", missing.stream().map(Role::wireName).toList())
            + " backend (GET /ready lists every backend's state)");
  }

  // ---------------------------------------------------------------- routes

  private void routes(HttpRouting.Builder r) {
    r.post("/v1/completions", (req, res) -> completion(req, res, "/v1/completions"))
        .post("/v1/chat/completions", (req, res) -> completion(req, res, "/v1/chat/completions"))
        .get("/v1/models", this::models)
        .get("/health", (req, res) -> WebFront.sendJson(res, 200, status("ok")))
        .get("/ready", (req, res) -> ready(res))
        .get("/metrics", (req, res) -> metricsText(res))
        .any((req, res) -> WebFront.unrouted(req, res, ALLOWED));
  }

  private void completion(ServerRequest req, ServerResponse res, String endpoint) {
    Tally tally = new Tally(metrics, endpoint);
    inFlight.incrementAndGet();
    try {
      answer(req, res, endpoint, tally);
    } finally {
      inFlight.decrementAndGet();
    }
  }

  private void answer(ServerRequest req, ServerResponse res, String endpoint, Tally tally) {
    WebFront.guarded(
        res,
        () -> {
          try {
            if (draining) {
              throw ApiException.unavailable("the router is shutting down");
            }
            JsonNode body = WebFront.readJson(req, settings.maxBodyBytes());
            if (!body.isObject()) {
              throw ApiException.invalid(
                  null, "the request body must be a JSON object, not " + kind(body));
            }
            tally.count(new Exchange(this, tally, req, res).serve(endpoint, (ObjectNode) body));
          } catch (ApiException e) {
            tally.count(Outcome.ofRefusal(e.status()));
            throw e;
          } catch (WebFront.ClientGoneException e) {
            tally.count(Outcome.CLIENT_GONE);
            throw e;
          } catch (InterruptedException e) {
            tally.count(Outcome.UNAVAILABLE); // the router is closing: answered 503
            throw e;
          } finally {
            tally.count(Outcome.INTERNAL_ERROR); // unless counted: a bug, answered 500
          }
        });
  }

  private static String kind(JsonNode node) {
    return switch (node.getNodeType()) {
      case ARRAY -> "an array";
      case STRING -> "a string";
      case NUMBER -> "a number";
      case BOOLEAN -> "a boolean";
      case NULL -> "null";
      case OBJECT -> "an object";
      case BINARY, MISSING, POJO -> "a " + node.getNodeType().name().toLowerCase(Locale.ROOT);
    };
  }

  /** A ready decode backend's {@code /v1/models}, passed through. */
  private void models(ServerRequest req, ServerResponse res) {
    Tally tally = new Tally(metrics, "/v1/models");
    WebFront.guarded(
        res,
        () -> {
          try {
            relayModels(res, tally);
          } catch (ApiException e) {
            tally.count(Outcome.ofRefusal(e.status()));
            throw e;
          } finally {
            tally.count(Outcome.INTERNAL_ERROR); // unless counted: a bug, answered 500
          }
        });
  }

  private void relayModels(ServerResponse res, Tally tally) throws InterruptedException {
    Role answering = settings.answeringRole();
    Backends.Chosen d =
        backends
            .choose(answering)
            .orElseThrow(
                () ->
                    ApiException.unavailable(
                        "no ready " + answering.wireName() + " backend to list the models"));
    BlockingQueue<Exchange.Event> events = new ArrayBlockingQueue<>(Exchange.QUEUE_CAPACITY);
    HttpRequest request =
        HttpRequest.newBuilder(d.backend().base.resolve("/v1/models"))
            .timeout(Duration.ofMillis(settings.upstreamTimeoutMs()))
            .GET()
            .build();
    Upstream u =
        Upstream.send(
            client,
            request,
            d.backend(),
            false,
            events::offer,
            metrics,
            timer,
            settings.upstreamTimeoutMs());
    try {
      while (true) {
        switch (events.take()) {
          case Exchange.Answered a -> {
            if (a.body().length > MAX_MODELS_ANSWER_BYTES) {
              throw new ApiException(
                  502,
                  "upstream_error",
                  null,
                  "bad_gateway",
                  "the "
                      + u.backend
                      + "'s model list exceeds "
                      + MAX_MODELS_ANSWER_BYTES
                      + " bytes");
            }
            tally.count(a.status() / 100 == 2 ? Outcome.OK : Outcome.BACKEND_ERROR);
            res.status(a.status());
            if (a.contentType() != null) {
              res.header(HeaderNames.CONTENT_TYPE, a.contentType());
            }
            res.send(a.body());
            return;
          }
          case Exchange.Failed f ->
              throw f.kind() == FailureKind.TIMEOUT
                  ? new ApiException(
                      504,
                      "upstream_error",
                      null,
                      "gateway_timeout",
                      "the " + u.backend + " failed: " + f.why())
                  : new ApiException(
                      502,
                      "upstream_error",
                      null,
                      "bad_gateway",
                      "the " + u.backend + " failed: " + f.why());
          case Exchange.Started s -> {}
          case Exchange.Chunk c -> throw new IllegalStateException("a buffered answer streamed");
          case Exchange.Ended e -> throw new IllegalStateException("a buffered answer streamed");
          case Exchange.ClientGone g -> throw new IllegalStateException("no client watch here");
        }
      }
    } finally {
      u.cancel();
    }
  }

  private void ready(ServerResponse res) {
    List<Role> missing = backends.missing();
    boolean ready = missing.isEmpty() && !draining;
    ObjectNode out = status(draining ? "draining" : ready ? "ready" : "not_ready");
    ArrayNode names = out.putArray("missing");
    for (Role role : missing) {
      names.add(role.wireName());
    }
    if (settings.fused() || settings.routing() == Routing.ROUND_ROBIN) {
      out.put("routing", settings.routing().wireName());
    } else {
      out.put("routing", settings.routing().wireName() + " (prefill)");
    }
    for (Role role : backends.roles()) {
      ArrayNode list = out.putArray(role.wireName());
      for (Backend b : backends.of(role)) {
        Backend.State state = b.state();
        ObjectNode o = list.addObject();
        o.put("url", b.url);
        o.put("ready", state.ready());
        if (state.reason() != null) {
          o.put("reason", state.reason());
        }
        if (state.model() != null) {
          o.put("model", state.model());
        }
        if (state.ready()) {
          o.put("tp", state.tp());
        }
        if (state.kvEndpoint() != null) {
          o.put("kv_endpoint", state.kvEndpoint());
          ArrayNode kv = o.putArray("kv_endpoints");
          state.kvEndpoints().forEach(kv::add);
        }
        if (b.index != null) {
          KvEventSubscriber events = b.events();
          ObjectNode e = o.putObject("kv_events");
          if (events != null) {
            e.put("endpoint", events.source().endpoint());
            if (events.source().replayEndpoint() != null) {
              e.put("replay_endpoint", events.source().replayEndpoint());
            }
            e.put("block_size", events.source().blockSize());
            e.put("batches", events.applied());
            e.put("device_blocks", b.index.blocks(PrefixIndex.DEVICE));
            e.put("host_blocks", b.index.blocks(PrefixIndex.HOST));
            e.put("store_blocks", b.index.blocks(PrefixIndex.STORE));
          } else {
            e.put("off", b.eventsReason());
          }
          o.put("load", b.load());
        }
      }
    }
    WebFront.sendJson(res, ready ? 200 : 503, out);
  }

  private void metricsText(ServerResponse res) {
    WebFront.guarded(
        res,
        () -> {
          byte[] text = metrics.scrape();
          res.status(200);
          res.header(HeaderNames.CONTENT_TYPE, RouterMetrics.CONTENT_TYPE);
          res.send(text);
        });
  }

  private ObjectNode status(String status) {
    ObjectNode out = json.createObjectNode();
    out.put("status", status);
    return out;
  }
}

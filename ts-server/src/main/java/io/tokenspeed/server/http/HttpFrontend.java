package io.tokenspeed.server.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.helidon.http.HeaderNames;
import io.helidon.http.Status;
import io.helidon.webserver.http.HttpRouting;
import io.helidon.webserver.http.ServerRequest;
import io.helidon.webserver.http.ServerResponse;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.kvevents.KvEventPublisher;
import io.tokenspeed.server.kvevents.ZmqEndpoint;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * The HTTP server of {@code tokenspeed serve}, on Helidon WebServer (one virtual thread per
 * request, blocking code): the OpenAI-compatible endpoints, {@code /v1/models}, {@code /health},
 * {@code /ready}, {@code /pd}, {@code /kv-events}, {@code /metrics} and {@code /admin/*}. Every
 * error is answered in the OpenAI error shape.
 */
public final class HttpFrontend implements AutoCloseable {

  /** The Prometheus exposition: its content type and a fresh scrape. */
  public interface MetricsText {
    String contentType();

    byte[] scrape();
  }

  /**
   * Everything the server needs.
   *
   * @param engine the engine it serves (the caller closes it, after {@link #close})
   * @param tokenizer the model's tokenizer
   * @param vocabSize the model's vocabulary (token ids must be below it)
   * @param servedModelName the name clients give as {@code model}
   * @param maxRequestTokens the most tokens of one request, prompt and completion together (at most
   *     the engine's own limit)
   * @param chatPrompt renders and tokenizes chat messages (throws {@link ApiException})
   * @param host the address to listen on
   * @param port the port (0 = any free one)
   * @param maxBodyBytes the largest request body taken
   * @param adminToken the admin token, or null for administration off
   * @param state the server's phase and its requests in flight
   * @param observer receives every finished request's figures
   * @param metrics the {@code /metrics} exposition
   * @param storage what {@code /ready} says of L3 (null without it)
   * @param headerTimeoutMs how long a request's head may take ({@link ConnectionGuard}); also how
   *     long an idle keep-alive connection stays open
   * @param kvEvents the KV events' publisher, which {@code GET /kv-events} describes (null: off)
   */
  public record Settings(
      Engine engine,
      Tokenizer tokenizer,
      int vocabSize,
      String servedModelName,
      int maxRequestTokens,
      Function<List<Map<String, Object>>, int[]> chatPrompt,
      String host,
      int port,
      long maxBodyBytes,
      String adminToken,
      ServingState state,
      RequestObserver observer,
      MetricsText metrics,
      Supplier<JsonNode> storage,
      long headerTimeoutMs,
      KvEventPublisher kvEvents) {}

  /** The default of {@code --header-timeout}, in seconds. */
  public static final int DEFAULT_HEADER_TIMEOUT_S = 10;

  /** The default of {@code --max-body-bytes}: 4 MiB. */
  public static final long DEFAULT_MAX_BODY_BYTES = 4L << 20;

  private final Settings settings;
  private final Completions completions;
  private final Admin admin;
  private final WebFront web;
  private final long created = System.currentTimeMillis() / 1000;

  private HttpFrontend(Settings s) {
    this.settings = s;
    RequestParser parser =
        new RequestParser(
            s.servedModelName(),
            s.tokenizer(),
            s.vocabSize(),
            Math.min(s.maxRequestTokens(), s.engine().maxRequestTokens()),
            s.chatPrompt(),
            s.engine().role());
    this.completions = new Completions(s.engine(), s.tokenizer(), parser, s.state(), s.observer());
    this.admin = new Admin(s.engine(), s.adminToken());
    this.web = WebFront.create(s.host(), s.port(), s.headerTimeoutMs(), this::routes);
  }

  /** The bound on the listener's connections ({@link WebFront#maxConnections}). */
  int maxTcpConnections() {
    return web.maxTcpConnections();
  }

  /** Whether accepted connections send each write at once (TCP_NODELAY: Nagle's algorithm off). */
  boolean tcpNoDelay() {
    return web.tcpNoDelay();
  }

  /** Starts listening; requests are answered 503 until the state turns ready. */
  public static HttpFrontend start(Settings settings) {
    HttpFrontend f = new HttpFrontend(settings);
    f.web.start();
    return f;
  }

  /** The port it listens on. */
  public int port() {
    return web.port();
  }

  /** Stops listening and closes the connections. */
  @Override
  public void close() {
    web.close();
  }

  /** The guard of the connections' request boundaries and header deadlines. */
  ConnectionGuard guard() {
    return web.guard();
  }

  private void routes(HttpRouting.Builder r) {
    r.post("/v1/completions", (req, res) -> generate(req, res, false))
        .post("/v1/chat/completions", (req, res) -> generate(req, res, true))
        .get("/v1/models", (req, res) -> guarded(res, () -> sendJson(res, 200, models())))
        .get("/health", (req, res) -> sendJson(res, 200, status("ok")))
        .get("/ready", (req, res) -> ready(res))
        .get("/pd", (req, res) -> guarded(res, () -> sendJson(res, 200, pd(req))))
        .get("/kv-events", (req, res) -> guarded(res, () -> sendJson(res, 200, kvEvents(req))))
        .get("/metrics", (req, res) -> metrics(res))
        .post("/admin/clear_cache", (req, res) -> admin(req, res, a -> admin.clearCache()))
        .post(
            "/admin/clear_device_cache",
            (req, res) -> admin(req, res, a -> admin.clearDeviceCache()))
        .post(
            "/admin/rotate_namespace",
            (req, res) -> admin(req, res, body -> admin.rotateNamespace(body)))
        .post(
            "/admin/update_weights",
            (req, res) -> admin(req, res, body -> admin.updateWeights(body)))
        .post("/admin/freeze", (req, res) -> admin(req, res, a -> admin.freeze(true)))
        .post("/admin/unfreeze", (req, res) -> admin(req, res, a -> admin.freeze(false)))
        .any(this::unrouted);
  }

  /** The methods each route takes, for the 405 of another method on its path. */
  private static final Map<String, String> ALLOWED =
      Map.ofEntries(
          Map.entry("/v1/completions", "POST"),
          Map.entry("/v1/chat/completions", "POST"),
          Map.entry("/v1/models", "GET"),
          Map.entry("/health", "GET"),
          Map.entry("/ready", "GET"),
          Map.entry("/pd", "GET"),
          Map.entry("/kv-events", "GET"),
          Map.entry("/metrics", "GET"),
          Map.entry("/admin/clear_cache", "POST"),
          Map.entry("/admin/clear_device_cache", "POST"),
          Map.entry("/admin/rotate_namespace", "POST"),
          Map.entry("/admin/update_weights", "POST"),
          Map.entry("/admin/freeze", "POST"),
          Map.entry("/admin/unfreeze", "POST"));

  /** A known path with another method: 405 with {@code Allow}; any other path: 404. */
  private void unrouted(ServerRequest req, ServerResponse res) {
    WebFront.unrouted(req, res, ALLOWED);
  }

  private interface Body {
    ObjectNode apply(JsonNode body) throws Exception;
  }

  private void generate(ServerRequest req, ServerResponse res, boolean chat) {
    long arrival = System.nanoTime();
    guarded(
        res,
        () -> {
          settings.state().requireServing();
          JsonNode body = readJson(req);
          completions.serve(
              body,
              chat,
              arrival,
              new Completions.Answer() {
                @Override
                public ClientWatch.Registration watchClient(Runnable onGone) {
                  WebFront.ClientRegistration r = web.watchClient(req, onGone);
                  return r::close;
                }

                @Override
                public void json(int status, byte[] bytes) {
                  res.status(status);
                  res.header(HeaderNames.CONTENT_TYPE, "application/json");
                  res.send(bytes);
                }

                @Override
                public OutputStream events() {
                  res.status(Status.OK_200);
                  res.header(HeaderNames.CONTENT_TYPE, "text/event-stream; charset=utf-8");
                  res.header(HeaderNames.CACHE_CONTROL, "no-cache");
                  return res.outputStream();
                }
              });
        });
  }

  private void admin(ServerRequest req, ServerResponse res, Body action) {
    guarded(
        res,
        () -> {
          admin.authorize(req.headers().first(HeaderNames.AUTHORIZATION).orElse(null));
          JsonNode body =
              req.content().hasEntity() ? readJson(req) : Completions.JSON.createObjectNode();
          sendJson(res, 200, action.apply(body));
        });
  }

  private void ready(ServerResponse res) {
    ServingState.Phase phase = settings.state().phase();
    ObjectNode out = status(phase.name().toLowerCase(java.util.Locale.ROOT));
    out.put("model", settings.servedModelName());
    if (settings.state().failure() != null) {
      out.put("failure", settings.state().failure());
    }
    if (settings.storage() != null) {
      out.set("storage", settings.storage().get());
    }
    sendJson(res, phase == ServingState.Phase.READY ? 200 : 503, out);
  }

  private void metrics(ServerResponse res) {
    guarded(
        res,
        () -> {
          byte[] text = settings.metrics().scrape();
          res.status(Status.OK_200);
          res.header(HeaderNames.CONTENT_TYPE, settings.metrics().contentType());
          res.send(text);
        });
  }

  /**
   * {@code GET /pd}: the engine's role, its replica's size, a decode replica's KV endpoints and the
   * served model, for a router's poller ({@link PdServing#answer}); answered in every phase, as
   * {@code /ready} is.
   */
  private ObjectNode pd(ServerRequest req) {
    InetAddress reached =
        req.localPeer().address() instanceof InetSocketAddress local ? local.getAddress() : null;
    Engine engine = settings.engine();
    return PdServing.answer(
        engine.role(),
        engine.tpSize(),
        engine.pdEndpoint(),
        engine.pdEndpoints(),
        settings.servedModelName(),
        reached);
  }

  /** The hash a KV event names a page by (docs/kv-events.md). */
  static final String KV_EVENTS_HASH = "sha256-page-prefix-u64";

  /**
   * {@code GET /kv-events}: where the KV events are published and how to read them, for a router
   * (docs/kv-events.md#discovery); answered in every phase, as {@code /pd} is. An endpoint bound to
   * every interface is named by the local address this request reached. 404 while KV events are
   * off.
   */
  private ObjectNode kvEvents(ServerRequest req) {
    KvEventPublisher k = settings.kvEvents();
    if (k == null) {
      throw new ApiException(
          404,
          "invalid_request_error",
          null,
          "not_found",
          "KV events are off: serve publishes them with --kv-events-endpoint tcp://HOST:PORT");
    }
    InetAddress reached =
        req.localPeer().address() instanceof InetSocketAddress local ? local.getAddress() : null;
    ObjectNode out = Completions.JSON.createObjectNode();
    out.put("endpoint", reachable(k.endpoint(), reached));
    if (k.replayEndpoint() != null) {
      out.put("replay_endpoint", reachable(k.replayEndpoint(), reached));
    }
    out.put("topic", k.settings().topic());
    out.put("block_size", k.settings().blockSize());
    out.put("dp_rank", k.settings().dpRank());
    out.put("hash", KV_EVENTS_HASH);
    return out;
  }

  /** {@code tcp://HOST:PORT} a subscriber dials: a wildcard bind named by {@code reached}. */
  static String reachable(ZmqEndpoint bound, InetAddress reached) {
    if (bound.wildcard() && reached != null) {
      return "tcp://" + PdServing.hostPort(reached, bound.port());
    }
    return bound.toString();
  }

  private ObjectNode models() {
    ObjectNode out = Completions.JSON.createObjectNode();
    out.put("object", "list");
    ObjectNode m = out.putArray("data").addObject();
    m.put("id", settings.servedModelName());
    m.put("object", "model");
    m.put("created", created);
    m.put("owned_by", "tokenspeed");
    m.put(
        "max_model_len",
        Math.min(settings.maxRequestTokens(), settings.engine().maxRequestTokens()));
    return out;
  }

  private static ObjectNode status(String status) {
    ObjectNode out = Completions.JSON.createObjectNode();
    out.put("status", status);
    return out;
  }

  private JsonNode readJson(ServerRequest req) {
    return WebFront.readJson(req, settings.maxBodyBytes());
  }

  private static void guarded(ServerResponse res, WebFront.Action action) {
    WebFront.guarded(res, action);
  }

  private static void sendError(ServerResponse res, ApiException e) {
    WebFront.sendError(res, e);
  }

  private static void sendJson(ServerResponse res, int status, JsonNode body) {
    WebFront.sendJson(res, status, body);
  }
}

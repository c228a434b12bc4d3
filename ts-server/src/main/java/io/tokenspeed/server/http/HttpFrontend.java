package io.tokenspeed.server.http;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectReader;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.helidon.http.HeaderNames;
import io.helidon.http.Status;
import io.helidon.webserver.CloseConnectionException;
import io.helidon.webserver.WebServer;
import io.helidon.webserver.http.HttpRouting;
import io.helidon.webserver.http.ServerRequest;
import io.helidon.webserver.http.ServerResponse;
import io.helidon.webserver.http1.Http1Config;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.model.tokenizer.Tokenizer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.function.Supplier;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The HTTP server of {@code tokenspeed serve}, on Helidon WebServer (one virtual thread per
 * request, blocking code): the OpenAI-compatible endpoints, {@code /v1/models}, {@code /health},
 * {@code /ready}, {@code /metrics} and {@code /admin/*}. Every error is answered in the OpenAI
 * error shape.
 */
public final class HttpFrontend implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(HttpFrontend.class.getName());

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
      long headerTimeoutMs) {}

  /** The default of {@code --header-timeout}, in seconds. */
  public static final int DEFAULT_HEADER_TIMEOUT_S = 10;

  private static final ObjectReader READER =
      Completions.JSON
          .reader()
          .with(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
          .with(StreamReadFeature.STRICT_DUPLICATE_DETECTION);

  private final Settings settings;
  private final Completions completions;
  private final Admin admin;
  private final WebServer server;
  private final ConnectionGuard guard;
  private final ClientWatch clientWatch;
  private final long created = System.currentTimeMillis() / 1000;

  private HttpFrontend(Settings s) {
    this.settings = s;
    RequestParser parser =
        new RequestParser(
            s.servedModelName(),
            s.tokenizer(),
            s.vocabSize(),
            Math.min(s.maxRequestTokens(), s.engine().maxRequestTokens()),
            s.chatPrompt());
    this.completions = new Completions(s.engine(), s.tokenizer(), parser, s.state(), s.observer());
    this.admin = new Admin(s.engine(), s.adminToken());
    this.guard = new ConnectionGuard(s.headerTimeoutMs());
    this.clientWatch = ClientWatch.ofKernel();
    this.server =
        WebServer.builder()
            .host(s.host())
            .port(s.port())
            .shutdownHook(false)
            // one HTTP/1.1 selector, the guard's: it sees each connection open (with the
            // discovered default beside it the server would wait for a connection's first bytes
            // to choose between them); the guard bounds the request heads and idle connections
            .protocolsDiscoverServices(false)
            .addConnectionSelector(
                guard.selector(Http1Config.builder().addReceiveListener(guard).build()))
            .directHandlers(ProtocolErrors.handlers())
            // Nagle's algorithm off: a stream's events are small writes, and with it on a write
            // waits while an earlier one is unacknowledged, which a client delays: in bench serve
            // the first event's median came 18-33 ms after the headers' (docs/benchmarks/
            // 2026-12-02-serving.md)
            .connectionOptions(o -> o.tcpNoDelay(true))
            // the listener stops for good when accept fails, and accept fails when the process
            // is out of file descriptors: connections beyond the bound wait in the backlog
            .maxTcpConnections(maxConnections(openFileLimit()))
            .routing(this::routes)
            .build();
  }

  /**
   * The most connections the listener holds at once for a process allowed {@code openFileLimit}
   * descriptors (-1 when unknown: no bound): half of the limit, at least 16. The other half is left
   * to everything else the process opens (the store's files and sockets, the model, the JVM's own
   * files, and in {@code bench serve} the clients' sockets in the same process). An accept that
   * finds no descriptor stops the web server's listener for good; with this bound a burst of
   * connections waits in the kernel's backlog instead.
   */
  static int maxConnections(long openFileLimit) {
    if (openFileLimit <= 0) {
      return -1;
    }
    return (int) Math.clamp(openFileLimit / 2, 16, Integer.MAX_VALUE);
  }

  /** The process's limit of open file descriptors, or -1 where the platform does not say. */
  private static long openFileLimit() {
    return java.lang.management.ManagementFactory.getOperatingSystemMXBean()
            instanceof com.sun.management.UnixOperatingSystemMXBean unix
        ? unix.getMaxFileDescriptorCount()
        : -1;
  }

  /** The bound on the listener's connections ({@link #maxConnections}). */
  int maxTcpConnections() {
    return server.prototype().maxTcpConnections();
  }

  /** Whether accepted connections send each write at once (TCP_NODELAY: Nagle's algorithm off). */
  boolean tcpNoDelay() {
    return server.prototype().connectionOptions().tcpNoDelay();
  }

  /** Starts listening; requests are answered 503 until the state turns ready. */
  public static HttpFrontend start(Settings settings) {
    HttpFrontend f = new HttpFrontend(settings);
    f.server.start();
    return f;
  }

  /** The port it listens on. */
  public int port() {
    return server.port();
  }

  /** Stops listening and closes the connections. */
  @Override
  public void close() {
    server.stop();
    guard.close();
    clientWatch.close();
  }

  /** The guard of the connections' request boundaries and header deadlines. */
  ConnectionGuard guard() {
    return guard;
  }

  private void routes(HttpRouting.Builder r) {
    r.addFilter(guard)
        .post("/v1/completions", (req, res) -> generate(req, res, false))
        .post("/v1/chat/completions", (req, res) -> generate(req, res, true))
        .get("/v1/models", (req, res) -> guarded(res, () -> sendJson(res, 200, models())))
        .get("/health", (req, res) -> sendJson(res, 200, status("ok")))
        .get("/ready", (req, res) -> ready(res))
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
          Map.entry("/metrics", "GET"),
          Map.entry("/admin/clear_cache", "POST"),
          Map.entry("/admin/clear_device_cache", "POST"),
          Map.entry("/admin/rotate_namespace", "POST"),
          Map.entry("/admin/update_weights", "POST"),
          Map.entry("/admin/freeze", "POST"),
          Map.entry("/admin/unfreeze", "POST"));

  /** A known path with another method: 405 with {@code Allow}; any other path: 404. */
  private void unrouted(ServerRequest req, ServerResponse res) {
    String path = req.path().path();
    String method = req.prologue().method().text();
    String allowed = ALLOWED.get(path);
    if (allowed != null) {
      res.header(HeaderNames.ALLOW, allowed);
      sendError(
          res,
          new ApiException(
              405,
              "invalid_request_error",
              null,
              "method_not_allowed",
              "method " + method + " is not allowed on " + path + "; allowed: " + allowed));
      return;
    }
    sendError(
        res,
        new ApiException(
            404, "invalid_request_error", null, "not_found", "no endpoint " + method + " " + path));
  }

  private interface Body {
    ObjectNode apply(JsonNode body) throws Exception;
  }

  private interface Action {
    void run() throws Exception;
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
                  return clientWatch.watch(
                      req.localPeer().address(), req.remotePeer().address(), onGone);
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

  /**
   * Reads the body: at most the configured bytes (413 beyond), strict UTF-8 (400 naming the byte
   * offset of the first bad sequence), one JSON value (400 with the parser's line and column).
   */
  private JsonNode readJson(ServerRequest req) {
    long limit = settings.maxBodyBytes();
    var declared = req.headers().contentLength();
    if (declared.isPresent() && declared.getAsLong() > limit) {
      throw tooLarge(limit);
    }
    byte[] bytes;
    if (!req.content().hasEntity()) {
      throw ApiException.invalid(null, "the request body is empty; a JSON object is required");
    }
    try (InputStream in = req.content().inputStream()) {
      bytes = in.readNBytes((int) Math.min(Integer.MAX_VALUE - 8, limit + 1));
      if (bytes.length > limit) {
        throw tooLarge(limit);
      }
    } catch (IOException | UncheckedIOException e) {
      throw ApiException.invalid(null, "the request body could not be read: " + e.getMessage());
    }
    return parseBody(bytes);
  }

  /**
   * A request body's bytes as one JSON value: strict UTF-8 (400 naming the byte offset of the first
   * bad sequence), then exactly one JSON value (400 with the parser's line and column); an empty
   * body is a 400 too. Every refusal is an {@link ApiException}.
   */
  static JsonNode parseBody(byte[] bytes) {
    if (bytes.length == 0) {
      throw ApiException.invalid(null, "the request body is empty; a JSON object is required");
    }
    String text;
    try {
      text =
          StandardCharsets.UTF_8
              .newDecoder()
              .onMalformedInput(CodingErrorAction.REPORT)
              .onUnmappableCharacter(CodingErrorAction.REPORT)
              .decode(ByteBuffer.wrap(bytes))
              .toString();
    } catch (CharacterCodingException e) {
      throw ApiException.invalid(
          null, "the request body is not valid UTF-8 (at byte " + badByte(bytes) + ")");
    }
    try {
      return READER.readTree(text);
    } catch (JsonProcessingException e) {
      // Syntax errors and binding errors (a second value after the first) alike: the parser's
      // own message, whose getMessage() would add a second line with the source's location.
      var at = e.getLocation();
      throw ApiException.invalid(
          null,
          "the request body is not valid JSON"
              + (at == null
                  ? ""
                  : " (line " + at.getLineNr() + ", column " + at.getColumnNr() + ")")
              + ": "
              + e.getOriginalMessage());
    } catch (IOException e) {
      throw ApiException.invalid(null, "the request body could not be read as JSON: " + e);
    }
  }

  private static ApiException tooLarge(long limit) {
    return new ApiException(
        413,
        "invalid_request_error",
        null,
        "request_too_large",
        "the request body exceeds the server's limit of " + limit + " bytes (--max-body-bytes)");
  }

  /** The offset of the first byte that does not start or continue a valid UTF-8 sequence. */
  private static int badByte(byte[] bytes) {
    var decoder = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT);
    ByteBuffer in = ByteBuffer.wrap(bytes);
    var out = java.nio.CharBuffer.allocate(bytes.length + 1);
    var result = decoder.decode(in, out, true);
    return result.isError() ? in.position() : bytes.length;
  }

  /** Runs {@code action}, answering its refusal or failure in the OpenAI error shape. */
  private void guarded(ServerResponse res, Action action) {
    try {
      action.run();
    } catch (ApiException e) {
      sendError(res, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      sendError(res, ApiException.unavailable("the request was interrupted"));
    } catch (IllegalArgumentException e) {
      sendError(res, ApiException.invalid(null, e.getMessage()));
    } catch (Completions.ClientGoneException e) {
      throw e; // the connection ends without an answer; the departure is logged
    } catch (UncheckedIOException | CloseConnectionException e) {
      // the client closed its connection before its answer was written: nothing to answer
      LOG.info("client went away before its answer was written: " + e.getMessage());
      throw new CloseConnectionException("the client went away", e);
    } catch (Exception | Error e) {
      LOG.log(Level.WARNING, "request failed", e);
      sendError(res, new ApiException(500, "internal_error", null, null, "internal error: " + e));
    }
  }

  private static void sendError(ServerResponse res, ApiException e) {
    if (res.isSent() || res.bytesWritten() > 0) {
      return; // a stream already started: the client sees it end without [DONE]
    }
    ObjectNode out = Completions.JSON.createObjectNode();
    ObjectNode error = out.putObject("error");
    error.put("message", e.getMessage());
    error.put("type", e.type());
    if (e.param() == null) {
      error.putNull("param");
    } else {
      error.put("param", e.param());
    }
    if (e.code() == null) {
      error.putNull("code");
    } else {
      error.put("code", e.code());
    }
    try {
      sendJson(res, e.status(), out);
    } catch (IllegalStateException | UncheckedIOException gone) {
      // the response was committed (a stream began) or the client went away: nothing to answer
    }
  }

  private static void sendJson(ServerResponse res, int status, JsonNode body) {
    res.status(status);
    res.header(HeaderNames.CONTENT_TYPE, "application/json");
    res.send(Completions.bytes(body));
  }
}

package io.tokenspeed.server.http;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectReader;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.helidon.http.HeaderNames;
import io.helidon.webserver.CloseConnectionException;
import io.helidon.webserver.WebServer;
import io.helidon.webserver.http.HttpRouting;
import io.helidon.webserver.http.ServerRequest;
import io.helidon.webserver.http.ServerResponse;
import io.helidon.webserver.http1.Http1Config;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The web server every HTTP process of TokenSpeed runs ({@code serve}'s front end, the {@code
 * router}), and the conventions they share: Helidon WebServer with one virtual thread per request;
 * the {@link ConnectionGuard} around every route (trusted request boundaries, the header timeout);
 * the web server's own refusals answered in OpenAI's error shape ({@link ProtocolErrors}); Nagle's
 * algorithm off; the listener's connections bounded by the descriptor limit; request bodies read
 * under a size limit as strict UTF-8 JSON; every refusal answered as {@code {"error": {"message",
 * "type", "param", "code"}}}; and a watch on each request's client ({@link ClientWatch}).
 *
 * <p>Thread-safe; the static helpers hold no state.
 */
public final class WebFront implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(WebFront.class.getName());

  private static final ObjectReader READER =
      Completions.JSON
          .reader()
          .with(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
          .with(StreamReadFeature.STRICT_DUPLICATE_DETECTION);

  private final WebServer server;
  private final ConnectionGuard guard;
  private final ClientWatch clientWatch;

  private WebFront(
      String host, int port, long headerTimeoutMs, Consumer<HttpRouting.Builder> routes) {
    this.guard = new ConnectionGuard(headerTimeoutMs);
    this.clientWatch = ClientWatch.ofKernel();
    this.server =
        WebServer.builder()
            .host(host)
            .port(port)
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
            .routing(
                r -> {
                  r.addFilter(guard);
                  routes.accept(r);
                })
            .build();
  }

  /**
   * A server for {@code host}:{@code port} (0: any free port) with {@code routes} behind the guard;
   * a request's head must arrive within {@code headerTimeoutMs}, which is also how long an idle
   * keep-alive connection stays open. It listens once {@link #start} is called.
   */
  public static WebFront create(
      String host, int port, long headerTimeoutMs, Consumer<HttpRouting.Builder> routes) {
    return new WebFront(host, port, headerTimeoutMs, routes);
  }

  /** Starts listening. */
  public WebFront start() {
    server.start();
    return this;
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

  /** The bound on the listener's connections ({@link #maxConnections}). */
  int maxTcpConnections() {
    return server.prototype().maxTcpConnections();
  }

  /** Whether accepted connections send each write at once (TCP_NODELAY: Nagle's algorithm off). */
  boolean tcpNoDelay() {
    return server.prototype().connectionOptions().tcpNoDelay();
  }

  /** A watched client; closing it ends the watch. */
  public interface ClientRegistration extends AutoCloseable {
    @Override
    void close();
  }

  /**
   * Runs {@code onGone} once if the client of {@code req} closes its connection before the
   * registration is closed, noticed within a fraction of a second even while nothing is written to
   * it ({@link ClientWatch}); where the kernel's tables cannot tell, nothing is watched and a
   * departure shows at the next write.
   */
  public ClientRegistration watchClient(ServerRequest req, Runnable onGone) {
    ClientWatch.Registration r =
        clientWatch.watch(req.localPeer().address(), req.remotePeer().address(), onGone);
    return r::close;
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

  // ---------------------------------------------------------------- requests and answers

  /** A route's work; its refusals and failures are answered by {@link #guarded}. */
  public interface Action {
    void run() throws Exception;
  }

  /**
   * The request ends without an answer because its client went away (the departure is logged where
   * it is noticed): the connection closes.
   */
  public static final class ClientGoneException extends CloseConnectionException {
    private static final long serialVersionUID = 1L;

    public ClientGoneException() {
      super("the client closed its connection");
    }
  }

  /** Runs {@code action}, answering its refusal or failure in the OpenAI error shape. */
  public static void guarded(ServerResponse res, Action action) {
    try {
      action.run();
    } catch (ApiException e) {
      sendError(res, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      sendError(res, ApiException.unavailable("the request was interrupted"));
    } catch (IllegalArgumentException e) {
      sendError(res, ApiException.invalid(null, e.getMessage()));
    } catch (ClientGoneException e) {
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

  /**
   * A request to a path of no route: 405 with {@code Allow} when {@code allowed} (path to method)
   * knows the path, else 404.
   */
  public static void unrouted(
      ServerRequest req, ServerResponse res, Map<String, String> allowedByPath) {
    String path = req.path().path();
    String method = req.prologue().method().text();
    String allowed = allowedByPath.get(path);
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

  /**
   * Reads the body: at most {@code limitBytes} (413 beyond, naming {@code --max-body-bytes}),
   * strict UTF-8 (400 naming the byte offset of the first bad sequence), one JSON value (400 with
   * the parser's line and column).
   */
  public static JsonNode readJson(ServerRequest req, long limitBytes) {
    var declared = req.headers().contentLength();
    if (declared.isPresent() && declared.getAsLong() > limitBytes) {
      throw tooLarge(limitBytes);
    }
    byte[] bytes;
    if (!req.content().hasEntity()) {
      throw ApiException.invalid(null, "the request body is empty; a JSON object is required");
    }
    try (InputStream in = req.content().inputStream()) {
      bytes = in.readNBytes((int) Math.min(Integer.MAX_VALUE - 8, limitBytes + 1));
      if (bytes.length > limitBytes) {
        throw tooLarge(limitBytes);
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
  public static JsonNode parseBody(byte[] bytes) {
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

  /** The body of an error answer: {@code {"error": {"message", "type", "param", "code"}}}. */
  public static ObjectNode errorBody(ApiException e) {
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
    return out;
  }

  /**
   * The event that ends a stream which failed after it started: {@code data: {"error": {"message",
   * "type", "param": null, "code": <status>}}} and a blank line. The stream's {@code data: [DONE]}
   * follows it.
   */
  public static byte[] errorEvent(String message, String type, int code) {
    ObjectNode event = Completions.JSON.createObjectNode();
    ObjectNode error = event.putObject("error");
    error.put("message", message);
    error.put("type", type);
    error.putNull("param");
    error.put("code", code);
    return event(Completions.bytes(event));
  }

  /** {@code data: <json>} and a blank line. */
  static byte[] event(byte[] json) {
    byte[] frame = new byte[json.length + 8];
    System.arraycopy("data: ".getBytes(StandardCharsets.US_ASCII), 0, frame, 0, 6);
    System.arraycopy(json, 0, frame, 6, json.length);
    frame[frame.length - 2] = '\n';
    frame[frame.length - 1] = '\n';
    return frame;
  }

  /** The event that ends every stream: {@code data: [DONE]} and a blank line. */
  public static byte[] doneEvent() {
    return "data: [DONE]\n\n".getBytes(StandardCharsets.US_ASCII);
  }

  /** Answers {@code e} in the OpenAI error shape, unless an answer already started. */
  public static void sendError(ServerResponse res, ApiException e) {
    if (res.isSent() || res.bytesWritten() > 0) {
      return; // a stream already started: the client sees it end without [DONE]
    }
    try {
      sendJson(res, e.status(), errorBody(e));
    } catch (IllegalStateException | UncheckedIOException gone) {
      // the response was committed (a stream began) or the client went away: nothing to answer
    }
  }

  /** Answers {@code status} with {@code body} as {@code application/json}. */
  public static void sendJson(ServerResponse res, int status, JsonNode body) {
    res.status(status);
    res.header(HeaderNames.CONTENT_TYPE, "application/json");
    res.send(Completions.bytes(body));
  }
}

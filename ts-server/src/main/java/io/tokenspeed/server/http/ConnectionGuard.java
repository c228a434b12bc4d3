package io.tokenspeed.server.http;

import io.helidon.common.buffers.BufferData;
import io.helidon.http.HeaderNames;
import io.helidon.http.HeaderValues;
import io.helidon.http.Headers;
import io.helidon.http.HttpPrologue;
import io.helidon.webserver.CloseConnectionException;
import io.helidon.webserver.ConnectionContext;
import io.helidon.webserver.http.Filter;
import io.helidon.webserver.http.FilterChain;
import io.helidon.webserver.http.RoutingRequest;
import io.helidon.webserver.http.RoutingResponse;
import io.helidon.webserver.http1.Http1Config;
import io.helidon.webserver.http1.Http1ConnectionListener;
import io.helidon.webserver.http1.Http1ConnectionSelector;
import io.helidon.webserver.spi.ServerConnection;
import io.helidon.webserver.spi.ServerConnectionSelector;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Keeps every HTTP/1.1 connection of the server at a request boundary it can trust: after an
 * answer, the next bytes the server parses as a request are a request the client sent as one.
 *
 * <p><b>No body is ever read as a request.</b> A route may answer without reading the body (an
 * unknown path, a refused admin token, a declared length over the limit, the 503 while starting or
 * draining). The web server library keeps such a connection open in two cases where the unread body
 * would then be parsed as further requests: when the request said {@code Connection: close} (it
 * answers {@code Connection: close} and goes on reading), and when it never tried to consume the
 * body. This guard runs around every route and, once the answer is out:
 *
 * <ul>
 *   <li>closes the connection when the request said {@code Connection: close};
 *   <li>when the body was not read to its end: drains it if its declared length is at most {@link
 *       #DRAIN_LIMIT_BYTES} (and no {@code Expect: 100-continue} is pending), else closes the
 *       connection; the answer then carries {@code Connection: close}, set before it is sent.
 * </ul>
 *
 * <p><b>A request's head arrives within the header timeout.</b> The connection's idle timeout (the
 * web server's, set to the header timeout by {@link HttpFrontend}) closes a connection whose
 * request line has not arrived that long after its previous request ended, or after it opened; once
 * the request line is in, the headers must follow within the header timeout, or this guard
 * interrupts the connection's thread, which closes the socket (a virtual thread blocked on a socket
 * read is woken by closing the socket). A client that sends a byte a second therefore holds a
 * connection for at most twice the header timeout.
 *
 * <p>Thread-safe: the listener and the filter run on each connection's own thread; one daemon
 * thread sweeps the deadlines.
 */
final class ConnectionGuard implements Filter, Http1ConnectionListener, AutoCloseable {

  /** The largest unread body drained to keep a connection open; larger ones close it. */
  static final long DRAIN_LIMIT_BYTES = 64 * 1024;

  /**
   * The most of an unread body read and dropped before its connection closes ({@link #linger}), so
   * that the answer reaches a client still sending: four times the default body limit.
   */
  static final long LINGER_LIMIT_BYTES = 4L << 20;

  /** How often the header deadlines are checked. */
  private static final long SWEEP_PERIOD_MS = 200;

  /** A connection thread's request head in progress: when its request line came. */
  private static final class Head {
    final long startNs;

    /** Set once: by the headers' arrival (done) or by the sweep (timed out), whichever is first. */
    final AtomicReference<String> outcome = new AtomicReference<>();

    Head(long startNs) {
      this.startNs = startNs;
    }
  }

  private final long headerTimeoutNs;
  private final Map<Thread, Head> heads = new ConcurrentHashMap<>();
  private final AtomicLong headerTimeouts = new AtomicLong();
  private final ScheduledExecutorService sweeper;

  /**
   * @param headerTimeoutMs how long a request's headers may take after its request line
   */
  ConnectionGuard(long headerTimeoutMs) {
    if (headerTimeoutMs < 1) {
      throw new IllegalArgumentException("header_timeout_ms=" + headerTimeoutMs + " must be >= 1");
    }
    this.headerTimeoutNs = TimeUnit.MILLISECONDS.toNanos(headerTimeoutMs);
    this.sweeper =
        Executors.newSingleThreadScheduledExecutor(
            r -> {
              Thread t = new Thread(r, "ts-http-header-deadlines");
              t.setDaemon(true);
              return t;
            });
    long period = Math.min(SWEEP_PERIOD_MS, Math.max(10, headerTimeoutMs / 4));
    sweeper.scheduleWithFixedDelay(this::sweep, period, period, TimeUnit.MILLISECONDS);
  }

  // ---- the request head's deadline (on the connection's thread) ----

  /**
   * The HTTP/1.1 connection selector of {@code http1}, which starts each new connection's wait for
   * its first request line. With it the only selector, the server hands it every connection at
   * once, on the connection's own thread.
   */
  ServerConnectionSelector selector(Http1Config http1) {
    ServerConnectionSelector delegate = Http1ConnectionSelector.builder().config(http1).build();
    return new ServerConnectionSelector() {
      @Override
      public int bytesToIdentifyConnection() {
        return delegate.bytesToIdentifyConnection();
      }

      @Override
      public Support supports(BufferData data) {
        return delegate.supports(data);
      }

      @Override
      public Set<String> supportedApplicationProtocols() {
        return delegate.supportedApplicationProtocols();
      }

      @Override
      public ServerConnection connection(ConnectionContext ctx) {
        await(); // a fresh connection awaits its first request line
        return delegate.connection(ctx);
      }
    };
  }

  /** This connection thread now waits for a request line. */
  private void await() {
    replace(new Head(System.nanoTime()));
  }

  @Override
  public void prologue(ConnectionContext ctx, HttpPrologue prologue) {
    replace(new Head(System.nanoTime())); // the request line is in: now its headers
  }

  @Override
  public void headers(ConnectionContext ctx, Headers headers) {
    replace(null); // the head is complete: no deadline while the request is handled
  }

  /**
   * Ends this thread's current deadline (and starts {@code next}, unless null); if the sweep timed
   * the current one out a moment ago (and is interrupting this thread), the connection ends here.
   */
  private void replace(Head next) {
    Thread me = Thread.currentThread();
    Head current = next == null ? heads.remove(me) : heads.put(me, next);
    if (current != null && !current.outcome.compareAndSet(null, "done")) {
      heads.remove(me, next);
      throw new CloseConnectionException("the request head did not arrive within the timeout");
    }
  }

  /** Interrupts the connections whose headers are overdue; forgets threads that ended. */
  private void sweep() {
    long nowNs = System.nanoTime();
    for (var e : heads.entrySet()) {
      Thread thread = e.getKey();
      Head head = e.getValue();
      if (!thread.isAlive()) {
        heads.remove(thread, head);
      } else if (nowNs - head.startNs - headerTimeoutNs > 0
          && head.outcome.compareAndSet(null, "timed out")) {
        heads.remove(thread, head);
        headerTimeouts.incrementAndGet();
        thread.interrupt(); // closes the socket the thread is blocked reading
      }
    }
  }

  /** Connections closed because their request head did not arrive within the header timeout. */
  long headerTimeouts() {
    return headerTimeouts.get();
  }

  // ---- the request boundary (routing filter, on the connection's thread) ----

  @Override
  public void filter(FilterChain chain, RoutingRequest req, RoutingResponse res) {
    boolean closeRequested = req.headers().containsToken(HeaderValues.CONNECTION_CLOSE);
    // decided as the answer goes out, so that the answer itself says the connection ends
    boolean[] closing = {closeRequested};
    res.beforeSend(
        () -> {
          if (!closing[0] && !bodyDone(req) && !drainable(req)) {
            closing[0] = true;
          }
          if (closing[0]) {
            res.header(HeaderValues.CONNECTION_CLOSE);
          }
        });
    chain.proceed();
    if (!bodyDone(req)) {
      // the answer is out (and may already say the connection closes): the body is read either
      // way, whole when small, else up to the linger limit so that the client gets the answer
      if (drainable(req)) {
        closing[0] |= !drain(req); // closed when the client stopped sending mid-body
      } else {
        closing[0] = true;
        linger(req);
      }
    }
    if (!closing[0]) {
      await(); // kept open: the next request line is due within the header timeout
      return;
    }
    throw new CloseConnectionException(
        closeRequested
            ? "the client asked to close the connection after this request"
            : "the request body was not read to its end; the connection closes after the answer");
  }

  /**
   * Before a connection closes with a body unread, reads and drops up to {@link
   * #LINGER_LIMIT_BYTES} more of it, within the header timeout: a socket closed with bytes unread
   * answers the client with a reset, and a client still sending its body may then lose the answer
   * already sent (a 413 for a body over the limit, say). A body longer than that, or a client that
   * stalls, is cut off as before.
   */
  private void linger(RoutingRequest req) {
    if (req.headers().containsToken(HeaderValues.EXPECT_100) && !req.continueSent()) {
      return; // the client waits for our go-ahead: it sends no body
    }
    replace(new Head(System.nanoTime())); // the sweep closes a client that stalls mid-body
    try (java.io.InputStream in = req.content().inputStream()) {
      byte[] buffer = new byte[64 * 1024];
      long left = LINGER_LIMIT_BYTES;
      for (int n;
          left > 0 && (n = in.read(buffer, 0, (int) Math.min(buffer.length, left))) >= 0; ) {
        left -= n;
      }
    } catch (java.io.IOException | RuntimeException e) {
      // the client stopped sending, or the sweep closed the connection: it closes either way
    } finally {
      heads.remove(Thread.currentThread());
    }
  }

  /** Reads and drops a small unread body; false when the client stopped sending mid-body. */
  private static boolean drain(RoutingRequest req) {
    try {
      req.content().consume();
      return true;
    } catch (RuntimeException e) {
      return false;
    }
  }

  private static boolean bodyDone(RoutingRequest req) {
    return !req.content().hasEntity() || req.content().consumed();
  }

  /** Whether an unread body is small enough, and known to be coming, to read and drop. */
  private static boolean drainable(RoutingRequest req) {
    if (req.headers().containsToken(HeaderValues.EXPECT_100) && !req.continueSent()) {
      return false; // the client waits for our go-ahead before it sends the body
    }
    if (!req.headers().contains(HeaderNames.CONTENT_LENGTH)) {
      return false; // chunked: its length is unknown until read
    }
    var length = req.headers().contentLength();
    return length.isPresent() && length.getAsLong() <= DRAIN_LIMIT_BYTES;
  }

  @Override
  public void close() {
    sweeper.shutdownNow();
  }
}

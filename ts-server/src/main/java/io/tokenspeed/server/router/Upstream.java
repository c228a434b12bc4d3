package io.tokenspeed.server.router;

import io.tokenspeed.server.metrics.RouterMetrics;
import java.io.ByteArrayOutputStream;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Flow;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;

/**
 * One request the router sends a backend, and everything it hears back, reported as {@link
 * Exchange.Event}s to the exchange that sent it.
 *
 * <pre>
 *   sent ──▶ Started(status, content type, streamed) ──▶ Chunk … Ended     (streamed: 2xx SSE)
 *                                                   └──▶ Answered(body)    (anything else)
 *   any time before the end ──▶ Failed(kind)       (never after Ended, Answered or cancel())
 * </pre>
 *
 * <p><b>Streamed or buffered.</b> A 2xx answer with the event-stream content type to a request that
 * may stream is <i>streamed</i>: each piece of body the client library hands over becomes a {@link
 * Exchange.Chunk}, and the next is asked for only when the exchange calls {@link #more} (so a slow
 * client slows the backend through TCP, and at most one chunk waits in the exchange's queue). Any
 * other answer is <i>buffered</i>, up to {@link #MAX_BUFFERED_BYTES}, and reported whole.
 *
 * <p><b>Exactly one end.</b> {@code Ended}, {@code Answered} or {@code Failed} is reported once,
 * and nothing after {@link #cancel}: a failure that the cancellation itself causes is not one. Each
 * failure is counted in the metrics by role and kind where it is found; a connection-level one
 * takes the backend out until its next poll ({@link Backend#onConnectionFailure}).
 *
 * <p><b>Timeouts.</b> The answer must start within the upstream timeout (the request's own timeout
 * in the client library); after that, the body may stall at most as long: a watchdog armed while
 * the exchange waits for body bytes fails the request with {@link FailureKind#TIMEOUT} and cancels
 * it.
 *
 * <p><b>Cancellation</b> ({@link #cancel}) cancels the client library's exchange (which closes its
 * HTTP/1.1 connection: the backend sees the request end) and the body's subscription.
 *
 * <p>Thread-safe: the client library calls it on its threads, the exchange on its own.
 */
final class Upstream implements HttpResponse.BodyHandler<Void> {
  private static final java.util.logging.Logger LOG =
      java.util.logging.Logger.getLogger(Upstream.class.getName());

  /** The largest buffered answer; a longer one fails as {@link FailureKind#BROKEN}. */
  static final int MAX_BUFFERED_BYTES = 64 << 20;

  final Backend backend;
  private final boolean mayStream;
  private final Consumer<Exchange.Event> sink;
  private final RouterMetrics metrics;
  private final ScheduledExecutorService timer;
  private final long idleTimeoutMs;

  private final AtomicBoolean cancelled = new AtomicBoolean();
  private final AtomicBoolean settled = new AtomicBoolean();
  private final AtomicBoolean released = new AtomicBoolean();
  private final CompletableFuture<Void> bodyDone = new CompletableFuture<>();
  private volatile CompletableFuture<HttpResponse<Void>> call;
  private volatile Flow.Subscription subscription;
  private volatile boolean started;
  private volatile ScheduledFuture<?> watchdog;

  // set in apply(), read by the subscriber's calls, which the client library orders after it
  private int status;
  private String contentType;
  private boolean streamed;
  private ByteArrayOutputStream buffer;

  private Upstream(
      Backend backend,
      boolean mayStream,
      Consumer<Exchange.Event> sink,
      RouterMetrics metrics,
      ScheduledExecutorService timer,
      long idleTimeoutMs) {
    this.backend = backend;
    this.mayStream = mayStream;
    this.sink = sink;
    this.metrics = metrics;
    this.timer = timer;
    this.idleTimeoutMs = idleTimeoutMs;
  }

  /**
   * Sends {@code request} to {@code backend} and reports to {@code sink}; {@code mayStream}: a 2xx
   * event stream is passed on as it arrives. The request's own timeout bounds the wait for the
   * answer's start; {@code idleTimeoutMs} bounds each wait for more of its body.
   */
  static Upstream send(
      HttpClient client,
      HttpRequest request,
      Backend backend,
      boolean mayStream,
      Consumer<Exchange.Event> sink,
      RouterMetrics metrics,
      ScheduledExecutorService timer,
      long idleTimeoutMs) {
    Upstream u = new Upstream(backend, mayStream, sink, metrics, timer, idleTimeoutMs);
    metrics.onRouted(backend.role.wireName(), backend.url);
    backend.onSent();
    CompletableFuture<HttpResponse<Void>> call = client.sendAsync(request, u);
    u.call = call;
    if (u.cancelled.get()) {
      call.cancel(true);
    }
    call.whenComplete(
        (response, failure) -> {
          if (failure != null) {
            u.fail(failure);
          }
        });
    return u;
  }

  /** Whether the answer started (its status line and headers arrived). */
  boolean started() {
    return started;
  }

  /** Whether the request ended: answered, ended, failed or cancelled. */
  boolean finished() {
    return settled.get() || cancelled.get();
  }

  /** Asks for the next chunk of a streamed answer. */
  void more() {
    Flow.Subscription s = subscription;
    if (s != null && !finished()) {
      arm();
      s.request(1);
    }
  }

  /**
   * Abandons the request: the backend's connection is closed and nothing more is reported.
   * Idempotent; a no-op once the request ended.
   */
  void cancel() {
    if (settled.get() || !cancelled.compareAndSet(false, true)) {
      return;
    }
    release();
    disarm();
    CompletableFuture<HttpResponse<Void>> c = call;
    if (c != null) {
      c.cancel(true);
    }
    Flow.Subscription s = subscription;
    if (s != null) {
      s.cancel();
    }
  }

  // ---------------------------------------------------------------- the client library's calls

  @Override
  public HttpResponse.BodySubscriber<Void> apply(HttpResponse.ResponseInfo info) {
    status = info.statusCode();
    contentType = info.headers().firstValue("content-type").orElse(null);
    streamed =
        mayStream
            && status / 100 == 2
            && contentType != null
            && contentType.toLowerCase(java.util.Locale.ROOT).startsWith("text/event-stream");
    if (!streamed) {
      buffer = new ByteArrayOutputStream();
    }
    started = true;
    if (!finished()) {
      sink.accept(new Exchange.Started(this, status, contentType, streamed));
    }
    return new Subscriber();
  }

  private final class Subscriber implements HttpResponse.BodySubscriber<Void> {
    @Override
    public CompletionStage<Void> getBody() {
      return bodyDone;
    }

    @Override
    public void onSubscribe(Flow.Subscription s) {
      subscription = s;
      if (finished()) {
        s.cancel();
        return;
      }
      arm();
      s.request(streamed ? 1 : Long.MAX_VALUE);
    }

    @Override
    public void onNext(List<ByteBuffer> item) {
      int length = 0;
      for (ByteBuffer b : item) {
        length += b.remaining();
      }
      byte[] bytes = new byte[length];
      int at = 0;
      for (ByteBuffer b : item) {
        int n = b.remaining();
        b.get(bytes, at, n);
        at += n;
      }
      if (streamed) {
        disarm(); // the demand is met; more() arms the watchdog again
        if (!finished()) {
          sink.accept(new Exchange.Chunk(Upstream.this, bytes));
        }
        return;
      }
      arm();
      if (buffer.size() + (long) length > MAX_BUFFERED_BYTES) {
        settle(
            new Exchange.Failed(
                Upstream.this,
                FailureKind.BROKEN,
                "its answer exceeds " + MAX_BUFFERED_BYTES + " bytes"));
        abandon();
        return;
      }
      buffer.write(bytes, 0, length);
    }

    @Override
    public void onError(Throwable failure) {
      fail(failure);
      bodyDone.completeExceptionally(failure);
    }

    @Override
    public void onComplete() {
      disarm();
      settle(
          streamed
              ? new Exchange.Ended(Upstream.this)
              : new Exchange.Answered(Upstream.this, status, contentType, buffer.toByteArray()));
      bodyDone.complete(null);
    }
  }

  // ---------------------------------------------------------------- ends

  /** A failure the client library reported; none when we cancelled. */
  private void fail(Throwable failure) {
    Throwable cause = unwrap(failure);
    if (cancelled.get() || cause instanceof CancellationException) {
      return;
    }
    FailureKind kind;
    if (cause instanceof HttpConnectTimeoutException) {
      kind = FailureKind.UNREACHABLE;
    } else if (cause instanceof HttpTimeoutException) {
      kind = FailureKind.TIMEOUT;
    } else if (started) {
      kind = FailureKind.BROKEN;
    } else {
      kind = FailureKind.UNREACHABLE;
    }
    if (settle(new Exchange.Failed(this, kind, kindText(kind)))) {
      LOG.info(() -> "request to the " + backend + " failed: " + describe(cause));
    }
  }

  private String kindText(FailureKind kind) {
    return switch (kind) {
      case UNREACHABLE -> "it could not be reached";
      case TIMEOUT -> "it did not answer within the upstream timeout";
      case STATUS -> "it answered with an error status";
      case BROKEN -> "its answer broke off";
    };
  }

  /** Reports the request's one end, counting a failure; false when it had ended already. */
  private boolean settle(Exchange.Event end) {
    if (cancelled.get() || !settled.compareAndSet(false, true)) {
      return false;
    }
    release();
    disarm();
    switch (end) {
      case Exchange.Failed f -> {
        metrics.onFailure(backend.role.wireName(), f.kind().label());
        if (f.kind().connectionLevel()) {
          backend.onConnectionFailure(f.why());
        }
      }
      case Exchange.Answered a -> {
        if (a.status() / 100 != 2) {
          metrics.onFailure(backend.role.wireName(), FailureKind.STATUS.label());
        }
      }
      case Exchange.Ended e -> {}
      case Exchange.Started s -> throw new IllegalStateException("not an end: " + s);
      case Exchange.Chunk c -> throw new IllegalStateException("not an end: " + c);
      case Exchange.ClientGone g -> throw new IllegalStateException("not an end: " + g);
    }
    sink.accept(end);
    return true;
  }

  /** The request no longer counts in its backend's load: once, at its end or cancellation. */
  private void release() {
    if (released.compareAndSet(false, true)) {
      backend.onEnded();
    }
  }

  /** Stops the transfer after this side settled it (a timeout, an answer too long). */
  private void abandon() {
    CompletableFuture<HttpResponse<Void>> c = call;
    cancelled.set(true);
    if (c != null) {
      c.cancel(true);
    }
    Flow.Subscription s = subscription;
    if (s != null) {
      s.cancel();
    }
  }

  private void arm() {
    ScheduledFuture<?> previous = watchdog;
    if (previous != null) {
      previous.cancel(false);
    }
    watchdog = timer.schedule(this::onIdle, idleTimeoutMs, TimeUnit.MILLISECONDS);
  }

  private void disarm() {
    ScheduledFuture<?> w = watchdog;
    if (w != null) {
      w.cancel(false);
    }
  }

  /** The body stalled for the upstream timeout while the exchange waited for it. */
  private void onIdle() {
    settle(
        new Exchange.Failed(
            this,
            FailureKind.TIMEOUT,
            "its answer stalled for " + idleTimeoutMs + " ms (--upstream-timeout-ms)"));
    abandon();
  }

  private static Throwable unwrap(Throwable t) {
    while ((t instanceof CompletionException
            || t instanceof java.util.concurrent.ExecutionException)
        && t.getCause() != null) {
      t = t.getCause();
    }
    return t;
  }

  /** A failure in a few words: its class and message, without a stack. */
  static String describe(Throwable t) {
    Throwable cause = unwrap(t);
    String message = cause.getMessage();
    return cause.getClass().getSimpleName()
        + (message == null || message.isBlank() ? "" : ": " + message);
  }

  @Override
  public String toString() {
    return backend.toString();
  }
}

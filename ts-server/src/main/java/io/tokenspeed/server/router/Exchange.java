package io.tokenspeed.server.router;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.helidon.http.HeaderNames;
import io.helidon.webserver.CloseConnectionException;
import io.helidon.webserver.http.ServerRequest;
import io.helidon.webserver.http.ServerResponse;
import io.tokenspeed.server.http.ApiException;
import io.tokenspeed.server.http.WebFront;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.http.HttpRequest;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;

/**
 * One client request served disaggregated (the router's half of docs/pd.md's "One request"), or by
 * one fused replica ({@code router --replicas}: the body goes to the replica as it came, and its
 * answer back as D's would; there is no P).
 *
 * <pre>
 *   client ──▶ router: a JSON object
 *   router ──▶ D: the object + "pd": {"room": R, "prefill_ranks": P's tp}  (the client's stream flag;
 *                                                                      no prefill_ranks at tp 1)
 *   router ──▶ P: the object + "pd": {"room": R, "decode": D's KV endpoints}, "stream": false
 *                (one rank's "host:port", or ["host:port", ...] in D's rank order)
 *   D ──▶ router ──▶ client: D's answer, passed through (an event stream event by event)
 * </pre>
 *
 * <p>Both upstream requests go out at once. Everything they report ({@link Upstream}) and the
 * client's departure arrive as {@link Event}s on one bounded queue that this exchange's thread (the
 * client request's) drains: it alone decides and writes, so no decision races another.
 *
 * <p><b>What decides the answer.</b> "D started" means D's status line and headers arrived.
 *
 * <ul>
 *   <li>P answers 2xx: nothing to do; D's answer is the client's.
 *   <li>P fails or answers non-2xx before D started: the client gets P's own answer when it is a
 *       4xx (the request itself was refused: every engine checks a request the same way). Else the
 *       answer waits up to {@link #DECODE_VERDICT_MS} for D: a D that fails meanwhile is named (a
 *       decode engine that went away fails its prefill too, usually first); otherwise D is
 *       cancelled and the client gets 502 naming the prefill backend (504 for a timeout).
 *   <li>P fails after D started: D is left alone (it fails on its own if the KV never comes); the
 *       failure is counted.
 *   <li>D fails before it started: P is cancelled; 502 naming the decode backend (504 for a
 *       timeout).
 *   <li>D answers: its status, content type and body go to the client. A 2xx event stream is passed
 *       on event by event as they arrive, each flushed; if it breaks off, the event in progress is
 *       dropped and the stream ends with an error event ({@link WebFront#errorEvent}, {@code
 *       serve}'s shape) and {@code data: [DONE]}. A D answer other than 2xx cancels P, and so does
 *       a D stream that carried an error event of its own (its KV transfer failed, say, after a
 *       chat's first event had gone out): the request failed, and is counted so.
 *   <li>The client leaves (a write fails, or {@link WebFront#watchClient} sees its connection
 *       close): both upstream requests are cancelled and the connection ends.
 * </ul>
 *
 * <p>Upstream requests left when the exchange ends are cancelled, except P after a successful
 * answer (P is then finishing its transfer; its own timeout bounds it).
 */
final class Exchange {
  private static final Logger LOG = Logger.getLogger(Exchange.class.getName());

  /**
   * The queue's bound. At most: P's start and end, D's start, one chunk (the next is asked for
   * after it is written) and end, and the client's departure.
   */
  static final int QUEUE_CAPACITY = 16;

  /** What an upstream request or the client reports to the exchange. */
  sealed interface Event permits Started, Chunk, Ended, Answered, Failed, ClientGone {}

  /** The answer's status line and headers arrived; {@code streamed}: chunks follow. */
  record Started(Upstream from, int status, String contentType, boolean streamed)
      implements Event {}

  /** The next piece of a streamed answer. */
  record Chunk(Upstream from, byte[] bytes) implements Event {}

  /** A streamed answer ended normally. */
  record Ended(Upstream from) implements Event {}

  /** A buffered answer, whole. */
  record Answered(Upstream from, int status, String contentType, byte[] body) implements Event {}

  /** The request failed; {@code why} is fit for the client (no backend internals). */
  record Failed(Upstream from, FailureKind kind, String why) implements Event {}

  /** The client closed its connection. */
  record ClientGone() implements Event {}

  private final Router router;
  private final Tally tally;
  private final ServerRequest req;
  private final ServerResponse res;
  private final BlockingQueue<Event> events = new ArrayBlockingQueue<>(QUEUE_CAPACITY);
  private final EventFramer framer = new EventFramer();

  private Upstream prefill;
  private Upstream decode;
  private boolean decodeStarted;
  private boolean prefillAnswered;
  private boolean decodeErrorEvent;
  private OutputStream stream;
  private Outcome outcome;

  /** P's failure before D started, held while D's verdict is awaited (see prefillFailed). */
  private ApiException prefillFailure;

  private long verdictDeadlineNs;

  /** How long P's failure waits for D's before it is the client's answer. */
  static final long DECODE_VERDICT_MS = 300;

  Exchange(Router router, Tally tally, ServerRequest req, ServerResponse res) {
    this.router = router;
    this.tally = tally;
    this.req = req;
    this.res = res;
  }

  private void post(Event e) {
    if (!events.offer(e)) {
      throw new IllegalStateException(
          "the exchange's queue of " + QUEUE_CAPACITY + " events is full; dropped " + e);
    }
  }

  /**
   * Serves {@code body} (a JSON object) posted to {@code path}; returns how it ended. Throws {@link
   * ApiException} for an answer of the router's own (502, 503, 504) and {@link
   * WebFront.ClientGoneException} when the client left.
   */
  Outcome serve(String path, ObjectNode body) throws InterruptedException {
    if (router.settings().fused()) {
      return serveFused(path, body);
    }
    Backends.Chosen p = router.route(path, body).orElse(null);
    Backends.Chosen d = router.backends().choose(Role.DECODE).orElse(null);
    if (p == null || d == null) {
      throw router.noBackend();
    }
    String room = Long.toUnsignedString(router.nextRoom());
    ObjectNode toDecode = body.deepCopy();
    ObjectNode dpd = toDecode.putObject("pd");
    dpd.put("room", room);
    if (p.state().tp() > 1) {
      dpd.put(
          "prefill_ranks", p.state().tp()); // 1 is the default: a one-rank engine's body as before
    }
    ObjectNode toPrefill = body.deepCopy();
    toPrefill.put("stream", false);
    toPrefill.remove("stream_options"); // serve refuses stream_options without stream: true
    ObjectNode pd = toPrefill.putObject("pd");
    pd.put("room", room);
    List<String> kv = d.state().kvEndpoints();
    if (kv.size() == 1) {
      pd.put("decode", kv.getFirst());
    } else {
      ArrayNode ranks = pd.putArray("decode");
      kv.forEach(ranks::add);
    }
    try (WebFront.ClientRegistration watch =
        router.web().watchClient(req, () -> post(new ClientGone()))) {
      decode = send(d.backend(), path, toDecode, true);
      prefill = send(p.backend(), path, toPrefill, false);
      while (outcome == null) {
        Event next = prefillFailure == null ? events.take() : awaitDecodeVerdict();
        outcome = on(next);
      }
      return outcome;
    } finally {
      if (decode != null && !decode.finished()) {
        decode.cancel();
      }
      if (prefill != null && outcome != Outcome.OK) {
        prefill.cancel();
      }
    }
  }

  /** The whole request to one fused replica, its answer passed through. */
  private Outcome serveFused(String path, ObjectNode body) throws InterruptedException {
    Backends.Chosen f = router.route(path, body).orElse(null);
    if (f == null) {
      throw router.noBackend();
    }
    try (WebFront.ClientRegistration watch =
        router.web().watchClient(req, () -> post(new ClientGone()))) {
      decode = send(f.backend(), path, body, true);
      while (outcome == null) {
        outcome = on(events.take());
      }
      return outcome;
    } finally {
      if (decode != null && !decode.finished()) {
        decode.cancel();
      }
    }
  }

  private Upstream send(Backend backend, String path, ObjectNode body, boolean mayStream) {
    HttpRequest request =
        HttpRequest.newBuilder(backend.base.resolve(path))
            .timeout(Duration.ofMillis(router.settings().upstreamTimeoutMs()))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofByteArray(router.bytes(body)))
            .build();
    return Upstream.send(
        router.client(),
        request,
        backend,
        mayStream,
        this::post,
        router.metrics(),
        router.timer(),
        router.settings().upstreamTimeoutMs());
  }

  /** Takes one event; returns the outcome once the client's answer is complete, else null. */
  private Outcome on(Event event) {
    return switch (event) {
      case Started s when s.from() == decode -> onDecodeStarted(s);
      case Started s -> null; // P's answer is taken whole (Answered)
      case Chunk c -> onChunk(c);
      case Ended e -> onStreamEnded();
      case Answered a when a.from() == decode -> relay(a);
      case Answered a -> onPrefillAnswered(a);
      case Failed f when f.from() == decode -> onDecodeFailed(f);
      case Failed f -> onPrefillFailed(f);
      case ClientGone g -> clientGone(null);
    };
  }

  private Outcome onDecodeStarted(Started s) {
    decodeStarted = true;
    if (s.streamed()) {
      res.status(s.status());
      res.header(HeaderNames.CONTENT_TYPE, s.contentType());
      res.header(HeaderNames.CACHE_CONTROL, "no-cache");
      try {
        stream = res.outputStream();
      } catch (UncheckedIOException | CloseConnectionException e) {
        return clientGone(e);
      }
    }
    return null;
  }

  private Outcome onChunk(Chunk c) {
    framer.append(c.bytes());
    byte[] events = framer.takeComplete();
    decodeErrorEvent |= EventFramer.hasErrorEvent(events);
    if (events.length > 0) {
      try {
        stream.write(events);
        stream.flush();
      } catch (IOException | UncheckedIOException | CloseConnectionException e) {
        return clientGone(e);
      }
    }
    decode.more();
    return null;
  }

  /**
   * D's stream ended: passed on whole. It failed when it carried an error event (D's own: the
   * stream had started when its request failed), and is counted so, not as a 2xx answer.
   */
  private Outcome onStreamEnded() {
    Outcome done;
    try {
      byte[] rest = framer.takeAll();
      decodeErrorEvent |= EventFramer.hasErrorEvent(rest);
      if (rest.length > 0) {
        stream.write(rest);
      }
      done = decodeErrorEvent ? Outcome.UPSTREAM_FAILED : Outcome.OK;
      tally.count(done);
      stream.close();
    } catch (IOException | UncheckedIOException | CloseConnectionException e) {
      return clientGone(e);
    }
    return done;
  }

  /** D's whole answer, passed through. */
  private Outcome relay(Answered a) {
    Outcome done = a.status() / 100 == 2 ? Outcome.OK : Outcome.BACKEND_ERROR;
    tally.count(done);
    send(a);
    return done;
  }

  private void send(Answered a) {
    res.status(a.status());
    if (a.contentType() != null) {
      res.header(HeaderNames.CONTENT_TYPE, a.contentType());
    }
    res.send(a.body());
  }

  private Outcome onPrefillAnswered(Answered a) {
    if (a.status() / 100 == 2) {
      prefillAnswered = true;
      return null;
    }
    if (decodeStarted) {
      return null; // counted by the upstream; D fails on its own if the KV never comes
    }
    if (a.status() / 100 == 4) {
      tally.count(Outcome.BACKEND_ERROR);
      send(a); // the request itself was refused: the client's answer, not a gateway failure
      return Outcome.BACKEND_ERROR;
    }
    return prefillFailed(failed(prefill, "it answered " + a.status(), false));
  }

  private Outcome onPrefillFailed(Failed f) {
    if (decodeStarted) {
      return null; // counted by the upstream; D fails on its own if the KV never comes
    }
    return prefillFailed(failed(prefill, f.why(), f.kind() == FailureKind.TIMEOUT));
  }

  /**
   * P failed before D started. A decode engine that went away fails its prefill too (P cannot reach
   * D's KV endpoint), and P's failure usually arrives first: so the answer waits up to {@link
   * #DECODE_VERDICT_MS} for D's. If D fails meanwhile, the client's 502 names D, the cause;
   * otherwise it names P, and D is cancelled.
   */
  private Outcome prefillFailed(ApiException failure) {
    outcome = null; // not decided yet: see awaitDecodeVerdict
    prefillFailure = failure;
    verdictDeadlineNs = System.nanoTime() + DECODE_VERDICT_MS * 1_000_000L;
    return null;
  }

  /** The next event while P's failure waits for D's verdict; throws P's failure when none came. */
  private Event awaitDecodeVerdict() throws InterruptedException {
    long left = verdictDeadlineNs - System.nanoTime();
    Event next = left > 0 ? events.poll(left, TimeUnit.NANOSECONDS) : null;
    if (next == null) {
      outcome = Outcome.UPSTREAM_FAILED;
      throw prefillFailure;
    }
    if (next instanceof Failed f && f.from() == decode) {
      return next; // D failed too: onDecodeFailed names D
    }
    if (next instanceof Started || next instanceof Answered a && a.from() == decode) {
      outcome = Outcome.UPSTREAM_FAILED; // D is alive: P's failure is the answer
      throw prefillFailure;
    }
    return next; // the client's departure, or nothing that decides
  }

  private Outcome onDecodeFailed(Failed f) {
    if (stream == null) {
      throw failed(decode, f.why(), f.kind() == FailureKind.TIMEOUT);
    }
    framer.takeAll(); // the event in progress is lost: never pass half an event on
    String message =
        "the "
            + decode.backend
            + " failed during the stream: "
            + f.why()
            + (prefillAnswered || prefill == null ? "" : " (the prefill had not answered yet)");
    try {
      tally.count(Outcome.UPSTREAM_FAILED);
      stream.write(WebFront.errorEvent(message, "upstream_error", 502));
      stream.write(WebFront.doneEvent());
      stream.close();
    } catch (IOException | UncheckedIOException | CloseConnectionException e) {
      return clientGone(e);
    }
    return Outcome.UPSTREAM_FAILED;
  }

  /** 502 (or 504 after a timeout) naming the backend that failed, never its internals. */
  private ApiException failed(Upstream u, String why, boolean timeout) {
    outcome = Outcome.UPSTREAM_FAILED;
    String message = "the " + u.backend + " failed: " + why;
    return timeout
        ? new ApiException(504, "upstream_error", null, "gateway_timeout", message)
        : new ApiException(502, "upstream_error", null, "bad_gateway", message);
  }

  /** The client left: both upstream requests are cancelled and the connection ends. */
  private Outcome clientGone(Exception cause) {
    outcome = Outcome.CLIENT_GONE;
    tally.count(outcome);
    if (prefill != null) {
      prefill.cancel();
    }
    decode.cancel();
    LOG.info(
        () ->
            "client went away"
                + (cause == null ? "" : " (" + cause.getClass().getSimpleName() + ")")
                + ": cancelled its "
                + (prefill == null
                    ? "request to the " + decode.backend
                    : "requests to the " + prefill.backend + " and the " + decode.backend)
                + (stream == null ? " before the answer started" : " during the stream"));
    throw new WebFront.ClientGoneException();
  }
}

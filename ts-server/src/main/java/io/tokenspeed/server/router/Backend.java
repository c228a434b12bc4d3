package io.tokenspeed.server.router;

import java.net.URI;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * One backend engine of the router and what is known of it: whether it is ready to be chosen, why
 * not, and what its {@code /pd} said (its replica's size, a decode replica's KV endpoints, its
 * model).
 *
 * <p>It turns ready only through a poll ({@link #onPolled}): its {@code /ready} answered 200 and
 * its {@code /pd} named the role it is configured for. A request to it that fails at the connection
 * level ({@link #onConnectionFailure}) takes it out at once, and a poll that was already under way
 * then cannot bring it back: only a poll begun after the failure can ({@link #failureEpoch}).
 *
 * <p>Thread-safe: polls, requests and readers run on any thread.
 */
final class Backend {
  private static final Logger LOG = Logger.getLogger(Backend.class.getName());

  /**
   * What the latest poll or request found.
   *
   * @param ready whether the backend may be chosen
   * @param reason why not (null when ready)
   * @param tp the replica's ranks its {@code /pd} names (1 when it names none, or unknown)
   * @param kvEndpoints a decode replica's KV transfer endpoints {@code host:port}, by rank (empty
   *     for prefill, or unknown)
   * @param model the model its {@code /pd} names, or null
   */
  record State(boolean ready, String reason, int tp, List<String> kvEndpoints, String model) {
    State {
      if (ready == (reason != null)) {
        throw new IllegalArgumentException(
            "ready=" + ready + " and reason=" + reason + ": a reason exactly when not ready");
      }
      kvEndpoints = List.copyOf(kvEndpoints);
    }

    static State down(String reason) {
      return new State(false, reason, 1, List.of(), null);
    }

    /** Rank 0's KV endpoint (a decode backend's), or null. */
    String kvEndpoint() {
      return kvEndpoints.isEmpty() ? null : kvEndpoints.getFirst();
    }
  }

  final Role role;

  /** The base URL, {@code http://host:port}, as the router names the backend. */
  final String url;

  final URI base;

  /**
   * What its KV events said it holds: its Device and Host tiers' blocks. Null for a backend the
   * router does not choose by prefix (decode, or round-robin routing).
   */
  final PrefixIndex index;

  private final AtomicLong connectionFailures = new AtomicLong();
  private final AtomicInteger inFlight = new AtomicInteger();
  private volatile State state = State.down("not polled yet");

  /** Its latest {@code /metrics} figures, and the router's requests in flight to it then. */
  private volatile Polled polled = new Polled(LoadReport.UNKNOWN, 0);

  /** Its events' subscription, or null (none yet, events off, or not routed by prefix). */
  private volatile KvEventSubscriber events;

  /** Why it has no events subscription, for {@code /ready} (null while it has one). */
  private volatile String eventsReason = "not polled yet";

  /** A {@code /metrics} poll's figures and the requests the router had in flight to it then. */
  record Polled(LoadReport report, int inFlightThen) {}

  Backend(Role role, String url) {
    this(role, url, null);
  }

  Backend(Role role, String url, PrefixIndex index) {
    this.role = Objects.requireNonNull(role, "role");
    this.url = Objects.requireNonNull(url, "url");
    this.base = URI.create(url);
    this.index = index;
  }

  /** A request to it was sent. */
  void onSent() {
    inFlight.incrementAndGet();
  }

  /** A request to it ended (answered, failed or cancelled): once per {@link #onSent}. */
  void onEnded() {
    inFlight.decrementAndGet();
  }

  /** The router's requests to it now. */
  int inFlight() {
    return inFlight.get();
  }

  /** Its latest {@code /metrics} figures were {@code report}. */
  void onLoadPolled(LoadReport report, int inFlightThen) {
    polled = new Polled(report, inFlightThen);
  }

  Polled polled() {
    return polled;
  }

  /**
   * Its load now: the requests the router has in flight to it, and those its {@code /metrics} named
   * at the last poll beyond the router's own then (other clients', or still queued).
   */
  double load() {
    Polled p = polled;
    int now = inFlight.get();
    return now + Math.max(0, p.report().queued() - p.inFlightThen());
  }

  KvEventSubscriber events() {
    return events;
  }

  void events(KvEventSubscriber subscriber, String reason) {
    this.events = subscriber;
    this.eventsReason = subscriber == null ? reason : null;
  }

  String eventsReason() {
    return eventsReason;
  }

  State state() {
    return state;
  }

  boolean ready() {
    return state.ready();
  }

  /** The count of connection-level failures so far; a poll reads it before it starts. */
  long failureEpoch() {
    return connectionFailures.get();
  }

  /**
   * A poll begun at {@code epoch} ({@link #failureEpoch}) found {@code polled}; it is taken unless
   * a request failed at the connection level since the poll began and the poll says ready.
   */
  void onPolled(State polled, long epoch) {
    State next =
        polled.ready() && connectionFailures.get() != epoch
            ? State.down("a request failed at the connection level during the poll")
            : polled;
    transition(next);
  }

  /** A request to it failed at the connection level: not chosen again until a poll succeeds. */
  void onConnectionFailure(String why) {
    connectionFailures.incrementAndGet();
    transition(
        State.down("a request failed at the connection level (" + why + "); waiting for a poll"));
  }

  /** Sets the state, logging a change of readiness or of the reason. */
  private synchronized void transition(State next) {
    State previous = state;
    state = next;
    if (previous.ready() && next.ready()) {
      return;
    }
    if (next.ready()) {
      LOG.info(
          () ->
              role.wireName()
                  + " backend "
                  + url
                  + " is ready"
                  + (next.model() == null ? "" : " (model " + next.model() + ")")
                  + (next.tp() == 1 ? "" : " (tp " + next.tp() + ")")
                  + (next.kvEndpoints().isEmpty()
                      ? ""
                      : next.kvEndpoints().size() == 1
                          ? " (KV endpoint " + next.kvEndpoint() + ")"
                          : " (KV endpoints " + String.join(", ", next.kvEndpoints()) + ")"));
    } else if (!Objects.equals(previous.reason(), next.reason())) {
      LOG.log(
          Level.WARNING,
          () -> role.wireName() + " backend " + url + " is not ready: " + next.reason());
    }
  }

  @Override
  public String toString() {
    return role.wireName() + " backend " + url;
  }
}

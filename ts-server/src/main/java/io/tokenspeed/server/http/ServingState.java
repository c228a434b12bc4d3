package io.tokenspeed.server.http;

import io.tokenspeed.engine.RequestHandle;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Where the server is in its life — starting (model loading, warm-up), ready, draining (SIGTERM: no
 * new requests), failed — and the engine requests HTTP exchanges hold now, so that draining can
 * wait for them and cancel what is left at its deadline.
 */
public final class ServingState {
  /** The server's phase. */
  public enum Phase {
    STARTING,
    READY,
    DRAINING,
    FAILED
  }

  private volatile Phase phase = Phase.STARTING;
  private volatile String failure;
  private volatile String cutReason;
  private final Set<RequestHandle> inFlight = ConcurrentHashMap.newKeySet();

  public Phase phase() {
    return phase;
  }

  /** Why the engine failed, or null. */
  public String failure() {
    return failure;
  }

  public void ready() {
    if (phase == Phase.STARTING) {
      phase = Phase.READY;
    }
  }

  /** Stops intake: later requests are answered 503. */
  public void drain() {
    if (phase != Phase.FAILED) {
      phase = Phase.DRAINING;
    }
  }

  /** The engine stopped after a failure: every later request is answered 503. */
  public void fail(String why) {
    failure = why;
    phase = Phase.FAILED;
  }

  /** Fails with 503 unless requests are taken now. */
  void requireServing() {
    switch (phase) {
      case READY -> {}
      case STARTING -> throw ApiException.unavailable("the server is starting");
      case DRAINING -> throw ApiException.unavailable("the server is shutting down");
      case FAILED -> throw ApiException.unavailable("the engine has failed: " + failure);
    }
  }

  void track(RequestHandle h) {
    inFlight.add(h);
  }

  void untrack(RequestHandle h) {
    inFlight.remove(h);
  }

  /** Engine requests that HTTP exchanges hold now. */
  public int inFlight() {
    return inFlight.size();
  }

  /**
   * Why the server cancelled requests it held (the end of a drain), or null: what a cut request's
   * error says.
   */
  String cutReason() {
    return cutReason;
  }

  /** Cancels every engine request held now (the end of a drain). */
  public void cancelAll() {
    cutReason =
        phase == Phase.DRAINING
            ? "the server is shutting down and cancelled the request before it finished"
            : "the server cancelled the request before it finished";
    for (RequestHandle h : inFlight) {
      h.cancel();
    }
  }
}

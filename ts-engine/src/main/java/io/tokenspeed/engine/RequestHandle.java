package io.tokenspeed.engine;

import java.util.OptionalInt;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The caller's side of one request: its generated tokens as they come, its result, and
 * cancellation. The token queue holds at most the request's {@code max_tokens} tokens plus the end
 * marker, so it is bounded by the request itself.
 */
public final class RequestHandle {
  private static final int END = -1;

  private final long id;
  private final Engine engine;
  private final LinkedBlockingQueue<Integer> tokens = new LinkedBlockingQueue<>();
  private final CompletableFuture<GenerationResult> result = new CompletableFuture<>();
  private boolean ended;

  RequestHandle(long id, Engine engine) {
    this.id = id;
    this.engine = engine;
  }

  /** The engine's id of this request. */
  public long id() {
    return id;
  }

  /** Completes with the request's result; never exceptionally. */
  public CompletableFuture<GenerationResult> result() {
    return result;
  }

  /**
   * The next generated token, waiting for it; empty once the request has ended (see {@link
   * #result()} for why).
   */
  public OptionalInt nextToken() throws InterruptedException {
    return unwrap(tokens.take());
  }

  /** Like {@link #nextToken()}, or null when nothing came within the timeout. */
  public OptionalInt nextToken(long timeout, TimeUnit unit) throws InterruptedException {
    Integer t = tokens.poll(timeout, unit);
    return t == null ? null : unwrap(t);
  }

  private OptionalInt unwrap(int t) {
    if (t == END) {
      tokens.add(END); // every later call sees the end too
      return OptionalInt.empty();
    }
    return OptionalInt.of(t);
  }

  /**
   * Asks the engine to stop this request at its next round; every resource it holds goes back. A
   * request that already ended is left as it is.
   */
  public void cancel() {
    engine.cancel(id);
  }

  void emit(int token) {
    tokens.add(token);
  }

  synchronized void end(GenerationResult r) {
    if (!ended) {
      ended = true;
      tokens.add(END);
      result.complete(r);
    }
  }
}

package io.tokenspeed.engine;

import io.tokenspeed.model.sampling.TokenLogprobs;
import java.util.Arrays;
import java.util.List;
import java.util.OptionalInt;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.LongConsumer;

/**
 * The caller's side of one request: its generated tokens as they come, their log probabilities when
 * it asked for them, its result, and cancellation. The token queue holds at most the request's
 * {@code max_tokens} tokens plus the end marker, so it is bounded by the request itself.
 *
 * <p>Log probabilities: the loop thread stores a step's {@link TokenLogprobs} before it streams
 * that step's token, so {@link #logprobs(int) logprobs(step)} can be read, from any thread, as soon
 * as {@link #nextToken()} has returned the token; after the end (a cancellation or a failure
 * included) the logprobs of every emitted step stay readable. The steps live in an array the loop
 * thread appends to and publishes with a volatile count: readers take no lock and never block the
 * loop.
 */
public final class RequestHandle {
  private static final int END = -1;

  private final long id;

  /** Asks the loop to stop this request (by id). */
  private final LongConsumer cancel;

  private final LinkedBlockingQueue<Integer> tokens = new LinkedBlockingQueue<>();
  private final CompletableFuture<GenerationResult> result = new CompletableFuture<>();
  private final int topLogprobs;
  private boolean ended;

  /** Each step's logprobs, in step order; null until the first (written by the loop thread). */
  private volatile TokenLogprobs[] logprobSteps;

  /** How many of {@link #logprobSteps} are stored; written after the step it counts. */
  private volatile int numLogprobSteps;

  /**
   * @param topLogprobs what the request asked for: {@link TokenLogprobs#NO_LOGPROBS}, or 0 to
   *     {@link TokenLogprobs#MAX_TOP_LOGPROBS} (a request asking for another value ends with an
   *     error before anything is stored)
   */
  RequestHandle(long id, LongConsumer cancel, int topLogprobs) {
    this.id = id;
    this.cancel = cancel;
    this.topLogprobs = topLogprobs;
  }

  /** The engine's id of this request. */
  public long id() {
    return id;
  }

  /**
   * The {@code topLogprobs} the request was submitted with: {@link TokenLogprobs#NO_LOGPROBS} (-1)
   * for none, 0 for the sampled token's own only, up to {@link TokenLogprobs#MAX_TOP_LOGPROBS}
   * alternatives (any other value ended the request with an error).
   */
  public int topLogprobs() {
    return topLogprobs;
  }

  /**
   * The log probabilities of generated token {@code step} (0 = the first), readable once {@link
   * #nextToken()} has returned that token (they are stored before it is streamed). Thread-safe.
   *
   * @throws IllegalStateException when the request did not ask for logprobs
   * @throws IndexOutOfBoundsException when step {@code step} has not been generated (yet)
   */
  public TokenLogprobs logprobs(int step) {
    if (topLogprobs < 0) {
      throw new IllegalStateException(
          "request " + id + " did not ask for logprobs (topLogprobs=" + topLogprobs + ")");
    }
    int n = numLogprobSteps; // read before the array: the count is written after the step
    if (step < 0 || step >= n) {
      throw new IndexOutOfBoundsException(
          "step=" + step + " of request " + id + ": " + n + " steps have logprobs so far");
    }
    return logprobSteps[step];
  }

  /**
   * Every step's log probabilities stored so far, in step order (an immutable snapshot): all of
   * them once {@link #result()} has completed. Empty for a request that did not ask for logprobs.
   * Thread-safe.
   */
  public List<TokenLogprobs> logprobs() {
    int n = numLogprobSteps;
    return n == 0 ? List.of() : List.of(Arrays.copyOf(logprobSteps, n));
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
    cancel.accept(id);
  }

  /**
   * Stores step {@code step}'s logprobs before its token is emitted (loop thread only; steps come
   * in order, once each).
   */
  void addLogprobs(int step, TokenLogprobs logprobs) {
    int n = numLogprobSteps;
    if (step != n) {
      throw new IllegalStateException(
          "request " + id + ": logprobs of step=" + step + " arrived with " + n + " steps stored");
    }
    TokenLogprobs[] steps = logprobSteps;
    if (steps == null || n == steps.length) {
      // a grown copy holds every stored step before it is published
      steps = steps == null ? new TokenLogprobs[16] : Arrays.copyOf(steps, 2 * n);
      logprobSteps = steps;
    }
    steps[n] = logprobs;
    numLogprobSteps = n + 1;
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

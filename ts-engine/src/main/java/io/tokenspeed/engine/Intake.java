package io.tokenspeed.engine;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.Scheduler;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.function.IntSupplier;

/**
 * The engine's front door: checks a request when it is submitted (on the caller's thread), holds it
 * in a bounded queue until the loop's next round, and carries cancellations to the loop. At the
 * round's start the loop takes every queued request into the scheduler with the keys of its known
 * tokens.
 *
 * <p>{@code max_queued} bounds every request that waits for admission: those in the queue and those
 * the loop has taken into the scheduler that do not run yet (the loop publishes their number after
 * every round). Without the second part the loop would empty the queue into the scheduler each
 * round and an overload would pile up there without bound, each later request waiting longer.
 *
 * <p>Callers touch only the two queues and that published number; the scheduler is the loop
 * thread's.
 */
final class Intake {
  private final int vocabSize;
  private final IntSupplier maxRequestTokens;
  private final ArrayBlockingQueue<ActiveRequest> queue;
  private final ConcurrentLinkedQueue<Long> cancels = new ConcurrentLinkedQueue<>();

  /** Requests the loop took in that do not run yet, as of its last round. */
  private volatile int waitingInLoop;

  Intake(int vocabSize, IntSupplier maxRequestTokens, int maxQueued) {
    this.vocabSize = vocabSize;
    this.maxRequestTokens = maxRequestTokens;
    this.queue = new ArrayBlockingQueue<>(maxQueued);
  }

  /** What is wrong with a request, or null when it may be served (any thread). */
  String check(int[] prompt, SamplingParams params, int topLogprobs) {
    if (prompt == null || prompt.length == 0) {
      return "prompt is empty: at least one token is needed";
    }
    if (params == null) {
      return "sampling params are required";
    }
    if (topLogprobs < TokenLogprobs.NO_LOGPROBS || topLogprobs > TokenLogprobs.MAX_TOP_LOGPROBS) {
      return "top_logprobs="
          + topLogprobs
          + " is outside [-1, "
          + TokenLogprobs.MAX_TOP_LOGPROBS
          + "] (-1 = no logprobs, 0 = the sampled token's only, N = also the N most likely)";
    }
    for (int i = 0; i < prompt.length; i++) {
      if (prompt[i] < 0 || prompt[i] >= vocabSize) {
        return "prompt token "
            + i
            + " id="
            + prompt[i]
            + " is outside the vocabulary [0, "
            + vocabSize
            + ")";
      }
    }
    long need = (long) prompt.length + params.maxTokens();
    int limit = maxRequestTokens.getAsInt();
    if (need > limit) {
      return "prompt of "
          + prompt.length
          + " tokens + max_tokens "
          + params.maxTokens()
          + " = "
          + need
          + " exceeds the single-request limit of "
          + limit
          + " tokens (what the Device holds of one request in every cache group)";
    }
    return null;
  }

  /** How many requests the queue holds at most ({@code max_queued}). */
  int capacity() {
    return queue.size() + queue.remainingCapacity();
  }

  /**
   * Queues a checked request for the next round; false when {@code max_queued} requests already
   * wait for admission, here or in the loop (any thread).
   */
  boolean offer(ActiveRequest a) {
    if (queue.size() + waitingInLoop >= capacity()) {
      return false;
    }
    return queue.offer(a);
  }

  /** The loop's requests that do not run yet, after a round (the loop thread). */
  void noteWaitingInLoop(int n) {
    waitingInLoop = Math.max(0, n);
  }

  /** Requests waiting for admission: queued here, and taken by the loop but not running. */
  int waitingCount() {
    return queue.size() + waitingInLoop;
  }

  /** Asks the loop to end request {@code id} at its next round (any thread). */
  void cancel(long id) {
    cancels.add(id);
  }

  /** Whether requests or cancellations wait for the loop. */
  boolean pending() {
    return !queue.isEmpty() || !cancels.isEmpty();
  }

  /** Requests in the queue now (any thread). */
  int queuedCount() {
    return queue.size();
  }

  /** Whether requests wait for the loop. */
  boolean requestsPending() {
    return !queue.isEmpty();
  }

  /** The next queued request, or null. */
  ActiveRequest poll() {
    return queue.poll();
  }

  /** The cancellations that arrived since the last call. */
  List<Long> drainCancellations() {
    List<Long> out = new ArrayList<>();
    for (Long id; (id = cancels.poll()) != null; ) {
      out.add(id);
    }
    return out;
  }

  /** The requests still queued (on failure: the loop ends them). */
  Iterable<ActiveRequest> queued() {
    return queue;
  }

  /**
   * Submits {@code a}'s known tokens to the scheduler: a new request's prompt, or, for a request
   * retracted after it generated tokens, its prompt and those tokens with its image, if any (whose
   * references pass to the scheduler). Returns the scheduler's refusal, or null.
   */
  static String submit(Scheduler scheduler, CacheLayout layout, ActiveRequest a) {
    try {
      a.keys = PromptKeys.of(layout, Arrays.copyOf(a.tokens, a.known), List.of());
      int maxNewTokens = a.sampling.params().maxTokens() - a.generated();
      if (a.generated() == 0) {
        scheduler.submit(a.id, a.keys, maxNewTokens, false);
      } else {
        scheduler.resubmitRetracted(a.id, a.keys, maxNewTokens, a.image);
      }
      return null;
    } catch (IllegalArgumentException e) {
      return e.getMessage();
    }
  }
}

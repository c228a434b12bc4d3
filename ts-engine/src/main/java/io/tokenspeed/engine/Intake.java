package io.tokenspeed.engine;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.TokenLogprobs;
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
 * <p>{@code max_queued} bounds every request that was accepted and does not run yet: those in the
 * queue and those the loop has taken in that wait in the scheduler. Without the second part the
 * loop would empty the queue into the scheduler each round and an overload would pile up there
 * without bound, each later request waiting longer. A request counts as waiting in the loop from
 * the moment the loop takes it ({@link #poll}), and after every round the loop replaces that count
 * with the exact number ({@link #noteWaitingInLoop}); the check and the queueing of a submission,
 * and the taking of a request, hold this object's lock, so concurrent submitters cannot pass the
 * bound together, nor while the loop takes requests in.
 *
 * <p>Callers touch only the two queues and that count; the scheduler is the loop thread's.
 */
final class Intake {
  private final int vocabSize;
  private final IntSupplier maxRequestTokens;
  private final int maxPositions;
  private final ArrayBlockingQueue<ActiveRequest> queue;
  private final int capacity;
  private final ConcurrentLinkedQueue<Long> cancels = new ConcurrentLinkedQueue<>();

  /**
   * Requests the loop took in that do not run yet: exact after a round, and counting every request
   * taken since (guarded by {@code this}).
   */
  private int waitingInLoop;

  /**
   * @param maxRequestTokens what the Device holds of one request (the scheduler's limit)
   * @param maxPositions the longest sequence the model accepts (its max_position_embeddings)
   */
  Intake(int vocabSize, IntSupplier maxRequestTokens, int maxPositions, int maxQueued) {
    this.vocabSize = vocabSize;
    this.maxRequestTokens = maxRequestTokens;
    this.maxPositions = maxPositions;
    this.queue = new ArrayBlockingQueue<>(maxQueued);
    this.capacity = maxQueued;
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
    if (need > maxPositions) {
      return overLimit(prompt, params, need)
          + "the model's max_position_embeddings of "
          + maxPositions
          + " tokens";
    }
    int limit = maxRequestTokens.getAsInt();
    if (need > limit) {
      return overLimit(prompt, params, need)
          + "the single-request limit of "
          + limit
          + " tokens (what the Device holds of one request in every cache group)";
    }
    return null;
  }

  private static String overLimit(int[] prompt, SamplingParams params, long need) {
    return "prompt of "
        + prompt.length
        + " tokens + max_tokens "
        + params.maxTokens()
        + " = "
        + need
        + " exceeds ";
  }

  /** How many requests the queue holds at most ({@code max_queued}). */
  int capacity() {
    return capacity;
  }

  /**
   * Queues a checked request for the next round; false when {@code max_queued} accepted requests do
   * not run yet, here or in the loop (any thread).
   */
  synchronized boolean offer(ActiveRequest a) {
    if (queue.size() + waitingInLoop >= capacity) {
      return false;
    }
    return queue.offer(a);
  }

  /** The loop's requests that do not run yet, after a round (the loop thread). */
  synchronized void noteWaitingInLoop(int n) {
    waitingInLoop = Math.max(0, n);
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

  /**
   * The next queued request, or null (the loop thread). The request counts as waiting in the loop
   * until the round's end replaces the count ({@link #noteWaitingInLoop}).
   */
  synchronized ActiveRequest poll() {
    ActiveRequest a = queue.poll();
    if (a != null) {
      waitingInLoop++;
    }
    return a;
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
   * Submits {@code a}'s known tokens to the scheduler: a new request's prompt (the decode half of a
   * disaggregated request into Landing, the prefill half waiting for its bootstrap), or, for a
   * request retracted after it generated tokens, its prompt and those tokens with its image, if any
   * (whose references pass to the scheduler). The pages of the keys are noted for the KV events
   * ({@code events}, null without them). Returns the scheduler's refusal, or null.
   */
  static String submit(
      Scheduler scheduler, CacheLayout layout, ActiveRequest a, KvEventRecorder events) {
    try {
      a.keys = PromptKeys.of(layout, Arrays.copyOf(a.tokens, a.known), List.of());
      if (events != null) {
        events.noteKeys(a.keys); // before anything of the request is published
      }
      int maxNewTokens = a.sampling.params().maxTokens() - a.generated();
      if (a.generated() == 0 && a.ticket instanceof PdTicket.Decode) {
        scheduler.submitLanding(a.id, a.keys, maxNewTokens); // its KV comes from a prefill engine
      } else if (a.generated() == 0) {
        scheduler.submit(a.id, a.keys, maxNewTokens, a.ticket instanceof PdTicket.Prefill);
      } else {
        scheduler.resubmitRetracted(a.id, a.keys, maxNewTokens, a.image);
      }
      return null;
    } catch (IllegalArgumentException e) {
      return e.getMessage();
    }
  }
}

package io.tokenspeed.engine;

import java.util.Arrays;

/**
 * The log probabilities of a sampled token and of the most likely alternatives, from the logits row
 * it was sampled from. The loop thread runs it only for requests that asked for logprobs; a request
 * that did not costs nothing here.
 *
 * <p>The values are the log-softmax of the raw row, the model's distribution before temperature,
 * penalties and filters, computed stably:
 *
 * <pre>
 *   m      = max_i x[i]                  the row was checked by the sampler: every logit is finite
 *                                        or -Infinity, and at least one is finite
 *   s      = sum_i exp(x[i] - m)         in double, in id order
 *   logZ   = m + ln(s)                   in double
 *   lp[i]  = (float) (x[i] - logZ)       -Infinity stays -Infinity; never above 0
 * </pre>
 *
 * Every pass runs over one row in id order, so the result depends on the row alone: a row that is
 * bit-identical (the engine's exactness guarantee whatever the batch, chunking, retraction or tier)
 * gives bit-identical log probabilities.
 *
 * <p>The row is the model's whole row, as the sampler sees it: ids past the tokenizer's vocabulary
 * (an LM head padded for alignment) take part in the normalization and may be among the top ones.
 *
 * <p>The top N are selected with a bounded max-heap of N keys ordered by logit descending, then id
 * ascending (O(V log N), no sort of the vocabulary), and the N kept are then sorted. That is the
 * sampler's order: a greedy token (the argmax, lowest id on ties) always comes first, and since
 * rounding to float never reverses an order, the reported values never increase along the list (two
 * different logits may round to one value; they keep their logits' order).
 *
 * <p>Not thread-safe: the heap is reused across calls; one per loop thread. It never writes the
 * row.
 */
final class LogSoftmax {
  private final long[] heap = new long[TokenLogprobs.MAX_TOP_LOGPROBS];

  /**
   * The log probabilities of {@code token} and of the {@code numTop} most likely ids of {@code row}
   * (fewer when the row is shorter).
   *
   * @param numTop {@code 0} to {@link TokenLogprobs#MAX_TOP_LOGPROBS}
   */
  TokenLogprobs of(float[] row, int token, int numTop) {
    if (numTop < 0 || numTop > TokenLogprobs.MAX_TOP_LOGPROBS) {
      throw new IllegalArgumentException(
          "numTop=" + numTop + " must be in [0, " + TokenLogprobs.MAX_TOP_LOGPROBS + "]");
    }
    if (token < 0 || token >= row.length) {
      throw new IllegalArgumentException(
          "token=" + token + " is outside the row [0, " + row.length + ")");
    }
    double logZ = logNormalizer(row);
    int n = Math.min(numTop, row.length);
    for (int i = 0; i < n; i++) {
      heap[i] = key(row[i], i);
    }
    for (int i = n / 2 - 1; i >= 0; i--) {
      siftDown(i, n);
    }
    for (int i = n; i < row.length && n > 0; i++) {
      long k = key(row[i], i);
      if (k < heap[0]) {
        heap[0] = k;
        siftDown(0, n);
      }
    }
    Arrays.sort(heap, 0, n);
    int[] topTokens = new int[n];
    float[] topLogprobs = new float[n];
    for (int j = 0; j < n; j++) {
      int id = (int) heap[j];
      topTokens[j] = id;
      topLogprobs[j] = logprob(row[id], logZ);
    }
    return new TokenLogprobs(token, logprob(row[token], logZ), topTokens, topLogprobs);
  }

  /**
   * {@code logZ = m + ln(sum exp(x - m))} over the row, in double and id order.
   *
   * @throws IllegalArgumentException for NaN or +Infinity, or a row without a finite logit (the
   *     sampler refuses those rows first)
   */
  static double logNormalizer(float[] row) {
    float max = Float.NEGATIVE_INFINITY;
    for (int i = 0; i < row.length; i++) {
      float x = row[i];
      if (Float.isNaN(x) || x == Float.POSITIVE_INFINITY) {
        throw new IllegalArgumentException(
            "logit at token id " + i + " is " + x + ": logits must be finite or -Infinity");
      }
      max = Math.max(max, x);
    }
    if (max == Float.NEGATIVE_INFINITY) {
      throw new IllegalArgumentException(
          "every logit is -Infinity (length=" + row.length + "): no distribution");
    }
    double sum = 0;
    for (float x : row) {
      sum += Math.exp((double) x - max); // exp(-Infinity) = 0
    }
    return max + Math.log(sum);
  }

  /** The reported log probability of a logit under {@code logZ}; never above 0. */
  static float logprob(float logit, double logZ) {
    return (float) Math.min(0.0, (double) logit - logZ);
  }

  /**
   * A key whose signed ascending order is logit descending, then id ascending: the high half is the
   * complement of the logit's order-preserving int image, the low half the id.
   */
  private static long key(float logit, int id) {
    int bits = Float.floatToRawIntBits(logit + 0.0f); // -0.0 ties with +0.0, as in the argmax
    int ascending = bits ^ ((bits >> 31) & 0x7fffffff);
    return ((long) ~ascending << 32) | (id & 0xffffffffL);
  }

  /** Restores the max-heap order of {@code heap[0, size)} below {@code i}. */
  private void siftDown(int i, int size) {
    long k = heap[i];
    while (true) {
      int child = 2 * i + 1;
      if (child >= size) {
        break;
      }
      if (child + 1 < size && heap[child + 1] > heap[child]) {
        child++;
      }
      if (heap[child] <= k) {
        break;
      }
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = k;
  }
}

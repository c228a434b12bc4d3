package io.tokenspeed.model.sampling;

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
 * ascending ({@link Sampler#orderKey}; O(V log N), no sort of the vocabulary), and the N kept are
 * then sorted. That is the sampler's order: a greedy token (the argmax, lowest id on ties) always
 * comes first, and since rounding to float never reverses an order, the reported values never
 * increase along the list (two different logits may round to one value; they keep their logits'
 * order).
 *
 * <p>Not thread-safe: the heap is reused across calls; one per loop thread. It never writes the
 * row.
 */
public final class LogSoftmax {
  private final long[] heap = new long[TokenLogprobs.MAX_TOP_LOGPROBS];

  public LogSoftmax() {}

  /**
   * The log probabilities of {@code token} and of the {@code numTop} most likely ids of {@code row}
   * (fewer when the row is shorter).
   *
   * @param numTop {@code 0} to {@link TokenLogprobs#MAX_TOP_LOGPROBS}
   */
  public TokenLogprobs of(float[] row, int token, int numTop) {
    return of(row, 0, row.length, token, numTop);
  }

  /**
   * The same for the row {@code logits[offset, offset + length)}, for example the last row of a
   * request's {@code [rows × vocabSize]} logits, without copying it out.
   */
  public TokenLogprobs of(float[] logits, int offset, int length, int token, int numTop) {
    if (numTop < 0 || numTop > TokenLogprobs.MAX_TOP_LOGPROBS) {
      throw new IllegalArgumentException(
          "numTop=" + numTop + " must be in [0, " + TokenLogprobs.MAX_TOP_LOGPROBS + "]");
    }
    checkRow(logits, offset, length);
    if (token < 0 || token >= length) {
      throw new IllegalArgumentException(
          "token=" + token + " is outside the row [0, " + length + ")");
    }
    double logZ = logNormalizer(logits, offset, length);
    int n = Math.min(numTop, length);
    for (int i = 0; i < n; i++) {
      heap[i] = Sampler.orderKey(logits[offset + i], i);
    }
    for (int i = n / 2 - 1; i >= 0; i--) {
      siftDown(i, n);
    }
    for (int i = n; i < length && n > 0; i++) {
      long k = Sampler.orderKey(logits[offset + i], i);
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
      topLogprobs[j] = logprob(logits[offset + id], logZ);
    }
    return new TokenLogprobs(token, logprob(logits[offset + token], logZ), topTokens, topLogprobs);
  }

  /**
   * {@code logZ = m + ln(sum exp(x - m))} over the row, in double and id order.
   *
   * @throws IllegalArgumentException for NaN or +Infinity, or a row without a finite logit (the
   *     sampler refuses those rows first)
   */
  public static double logNormalizer(float[] row) {
    return logNormalizer(row, 0, row.length);
  }

  /** The same over the row {@code logits[offset, offset + length)}. */
  public static double logNormalizer(float[] logits, int offset, int length) {
    checkRow(logits, offset, length);
    float max = Float.NEGATIVE_INFINITY;
    for (int i = 0; i < length; i++) {
      float x = logits[offset + i];
      if (Float.isNaN(x) || x == Float.POSITIVE_INFINITY) {
        throw new IllegalArgumentException(
            "logit at token id " + i + " is " + x + ": logits must be finite or -Infinity");
      }
      max = Math.max(max, x);
    }
    if (max == Float.NEGATIVE_INFINITY) {
      throw new IllegalArgumentException(
          "every logit is -Infinity (length=" + length + "): no distribution");
    }
    double sum = 0;
    for (int i = 0; i < length; i++) {
      sum += Math.exp((double) logits[offset + i] - max); // exp(-Infinity) = 0
    }
    return max + Math.log(sum);
  }

  /** The reported log probability of a logit under {@code logZ}; never above 0. */
  public static float logprob(float logit, double logZ) {
    return (float) Math.min(0.0, (double) logit - logZ);
  }

  private static void checkRow(float[] logits, int offset, int length) {
    if (length < 0 || offset < 0 || offset > logits.length - length) {
      throw new IllegalArgumentException(
          "row [offset="
              + offset
              + ", offset+length="
              + ((long) offset + length)
              + ") must lie in logits.length="
              + logits.length);
    }
  }

  /** Restores the max-heap order of {@code heap[0, size)} below {@code i}. */
  private void siftDown(int i, int size) {
    Sampler.siftDown(heap, i, size);
  }
}

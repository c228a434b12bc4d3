package io.tokenspeed.model.sampling;

import java.util.Arrays;

/**
 * Chooses the next token from one row of logits. The result is a pure function of (logits, params,
 * seed, step): the only randomness is one uniform draw from {@link StepRandom} keyed by the
 * sequence's seed and step, and every sum runs in a fixed order over one row. The same row with the
 * same seed and step gives the same id whatever else is in the batch, whichever thread samples it,
 * and after a retracted sequence is recomputed.
 *
 * <p>The steps, in order:
 *
 * <pre>
 *  logits row ──► check ──► greedy? ──yes──► argmax (lowest id on ties)
 *                              │no
 *                              ▼
 *   w[i] = exp((logit[i] - max) / temperature)      in double; -Infinity gives w = 0
 *                              │
 *   candidates = finite tokens, minus w[i] < min_p  (min-p; w[argmax] = 1, so it is p/p_max)
 *                              │
 *   order: by logit descending, id ascending        (only when top-k removes tokens or top-p
 *                              │                     is on; otherwise candidates stay in id order)
 *   top-k: keep the first k                         (the k most likely)
 *                              │
 *   top-p: keep the shortest prefix whose mass      (over the candidates left by top-k;
 *          reaches top_p × their total               always at least the first)
 *                              │
 *   inverse CDF: u ∈ [0,1) from (seed, step); walk the kept candidates in order summing w, and
 *   return the first whose running sum exceeds u × (sum of the kept w)
 * </pre>
 *
 * <p>Min-p and top-k both keep a most-likely prefix and min-p's threshold is relative to the most
 * likely token, so they commute; top-p sees the distribution renormalized after both, which is
 * vLLM's order. The weights are never normalized: the walk compares against {@code u} times the
 * kept total, summed in the same order as the walk, so rounding cannot put the target past the end.
 *
 * <p>Logits: NaN or +Infinity at any position is a broken model and fails with the position;
 * -Infinity marks a token that must never be sampled (a mask); a row that is all -Infinity fails.
 *
 * <p>Not thread-safe: the scratch arrays are reused across calls. Use one sampler per thread; it
 * never allocates on the sampling path and never writes the logits.
 */
public final class Sampler {

  private final int vocabSize;
  private final double[] weights;
  private final long[] order;
  private final long[] heap;

  /**
   * @param vocabSize the length of a logits row
   */
  public Sampler(int vocabSize) {
    if (vocabSize < 1) {
      throw new IllegalArgumentException("vocabSize=" + vocabSize + " must be >= 1");
    }
    this.vocabSize = vocabSize;
    this.weights = new double[vocabSize];
    this.order = new long[vocabSize];
    this.heap = new long[vocabSize];
  }

  public int vocabSize() {
    return vocabSize;
  }

  /** Samples from {@code logits}, a row of exactly {@link #vocabSize()} values. */
  public int sample(float[] logits, SamplingParams params, long seed, int step) {
    if (logits.length != vocabSize) {
      throw new IllegalArgumentException(
          "logits.length=" + logits.length + " must equal vocabSize=" + vocabSize);
    }
    return sample(logits, 0, params, seed, step);
  }

  /**
   * Samples from the row {@code logits[offset, offset + vocabSize)}, for example one row of a
   * batch's {@code [numSequences × vocabSize]} matrix. Returns a token id in {@code [0,
   * vocabSize)}.
   */
  public int sample(float[] logits, int offset, SamplingParams params, long seed, int step) {
    if (offset < 0 || offset > logits.length - vocabSize) {
      throw new IllegalArgumentException(
          "row [offset="
              + offset
              + ", offset+vocabSize="
              + ((long) offset + vocabSize)
              + ") must lie in logits.length="
              + logits.length);
    }
    if (step < 0) {
      throw new IllegalArgumentException("step=" + step + " must be >= 0");
    }
    int argmax = checkAndArgmax(logits, offset);
    if (params.isGreedy()) {
      return argmax;
    }
    return sampleTempered(logits, offset, logits[offset + argmax], params, seed, step);
  }

  /** Fails on NaN/+Infinity or an all -Infinity row; returns the argmax, lowest id on ties. */
  private int checkAndArgmax(float[] logits, int offset) {
    int argmax = -1;
    float max = Float.NEGATIVE_INFINITY;
    for (int i = 0; i < vocabSize; i++) {
      float x = logits[offset + i];
      if (Float.isNaN(x) || x == Float.POSITIVE_INFINITY) {
        throw new IllegalArgumentException(
            "logit at token id " + i + " is " + x + ": logits must be finite or -Infinity");
      }
      if (x > max) {
        max = x;
        argmax = i;
      }
    }
    if (argmax < 0) {
      throw new IllegalArgumentException(
          "every logit is -Infinity (vocabSize=" + vocabSize + "): no token can be sampled");
    }
    return argmax;
  }

  private int sampleTempered(
      float[] logits, int offset, float max, SamplingParams params, long seed, int step) {
    double temperature = params.temperature();
    double minP = params.minP();
    int numCandidates = 0;
    for (int i = 0; i < vocabSize; i++) {
      float x = logits[offset + i];
      if (x == Float.NEGATIVE_INFINITY) {
        continue;
      }
      double w = Math.exp(((double) x - max) / temperature);
      if (w < minP) {
        continue;
      }
      weights[i] = w;
      order[numCandidates++] = orderKey(x, i);
    }

    int numKept = numCandidates;
    if (params.isTopKOn() && params.topK() < numCandidates) {
      numKept = selectSmallest(params.topK(), numCandidates);
    } else if (params.isTopPOn()) {
      Arrays.sort(order, 0, numCandidates);
    }

    double total = 0;
    for (int j = 0; j < numKept; j++) {
      total += weights[(int) order[j]];
    }
    if (params.isTopPOn()) {
      double threshold = params.topP() * total;
      double cumulative = 0;
      for (int j = 0; j < numKept; j++) {
        cumulative += weights[(int) order[j]];
        if (cumulative >= threshold) {
          numKept = j + 1;
          break;
        }
      }
      total = cumulative;
    }

    double target = StepRandom.uniform(seed, step) * total;
    double cumulative = 0;
    int lastPositive = (int) order[0];
    for (int j = 0; j < numKept; j++) {
      int id = (int) order[j];
      double w = weights[id];
      cumulative += w;
      if (target < cumulative) {
        return id;
      }
      if (w > 0) {
        lastPositive = id;
      }
    }
    return lastPositive;
  }

  /**
   * A key whose signed ascending order is logit descending, then id ascending: the high half is the
   * complemented order-preserving int image of the logit, the low half the id. Sorting primitives
   * keeps the sort allocation-free and its result unique.
   */
  static long orderKey(float logit, int id) {
    int bits = Float.floatToRawIntBits(logit + 0.0f); // -0.0 ties with +0.0, as in the argmax
    int ascending = bits ^ ((bits >> 31) & 0x7fffffff);
    return ((long) ~ascending << 32) | (id & 0xffffffffL);
  }

  /**
   * Moves the {@code k} smallest of {@code order[0, n)} to {@code order[0, k)}, sorted, with a
   * bounded max-heap: O(n log k) rather than sorting the whole vocabulary. Returns {@code k}.
   */
  private int selectSmallest(int k, int n) {
    System.arraycopy(order, 0, heap, 0, k);
    for (int i = k / 2 - 1; i >= 0; i--) {
      siftDown(i, k);
    }
    for (int j = k; j < n; j++) {
      long key = order[j];
      if (key < heap[0]) {
        heap[0] = key;
        siftDown(0, k);
      }
    }
    System.arraycopy(heap, 0, order, 0, k);
    Arrays.sort(order, 0, k);
    return k;
  }

  private void siftDown(int i, int size) {
    long key = heap[i];
    while (true) {
      int child = 2 * i + 1;
      if (child >= size) {
        break;
      }
      if (child + 1 < size && heap[child + 1] > heap[child]) {
        child++;
      }
      if (heap[child] <= key) {
        break;
      }
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = key;
  }
}

package io.tokenspeed.model.sampling;

import java.util.Arrays;

/**
 * Chooses the next token from one row of logits. The result is a pure function of (logits, params,
 * seed, step): the only randomness is one uniform draw from {@link #uniform} keyed by the
 * sequence's seed and step, and every sum is a sum of integers over one row. The same row with the
 * same seed and step gives the same id whatever else is in the batch, whichever thread samples it,
 * after a retracted sequence is recomputed, and on a device that sums the row in another order.
 *
 * <p>The steps, in order ({@code V} is {@link #vocabSize()}):
 *
 * <pre>
 *  logits row ──► penalties: only when given, {@link Penalties#apply} to a copy of the row
 *                              │
 *         row ──► check ──► greedy? ──yes──► argmax (lowest id on ties)
 *                              │no
 *                              ▼
 *   w[i]  = Math.exp(((double) logit[i] - max) / temperature)    in double; a -Infinity logit is
 *                              │                                  no candidate
 *   candidates = finite tokens, minus w[i] < min_p   (min-p on the double w; w[argmax] = 1, so
 *                              │                     it is p/p_max)
 *   wq[i] = (long) floor(w[i] × SCALE)               SCALE = {@link #weightScale}(V)
 *                              │                           = 2^(53 − max(1, ceil(log2 V)));
 *                              │                     wq[argmax] = SCALE; a candidate whose wq is 0
 *                              │                     stays one (top-k counts it) but is never drawn
 *   order: by {@link #orderKey} ascending            (logit descending, id ascending; only when
 *                              │                     top-k removes tokens or top-p is on;
 *                              │                     otherwise the candidates stay in id order)
 *   top-k: keep the first k                          (the k most likely)
 *                              │
 *   top-p: T = Σ wq over the kept (a long); keep the shortest prefix whose running sum C has
 *          (double) C >= top_p × (double) T          (always at least the first)
 *                              │
 *   inverse CDF: total = Σ wq over the kept (a long); target = {@link #uniform}(seed, step) ×
 *          (double) total; walk the kept candidates in order with the running sum C (a long) and
 *          return the first whose target < (double) C; past the end (rounding), the last kept
 *          candidate whose wq > 0
 * </pre>
 *
 * <p>Min-p and top-k both keep a most-likely prefix and min-p's threshold is relative to the most
 * likely token, so they commute; top-p sees the distribution renormalized after both, which is
 * vLLM's order. The weights are never normalized: the walk compares against {@code u} times the
 * kept total.
 *
 * <p><b>Why integer weights.</b> A sum of doubles depends on the order of its terms, and the only
 * cheap order for a device is a tree reduction whose shape depends on the launch. A sum of {@code
 * long}s is the same in any order, so a device that computes every {@code wq} as above and sums or
 * scans them with any reduction gets the host's totals and running sums bit for bit. {@code SCALE}
 * is the largest power of two for which a whole row's sum stays at most {@code V × SCALE <= 2^53}:
 * every total and running sum then converts to double exactly, and the two comparisons in double
 * (top-p's threshold, the draw's target) see the same numbers on both sides. What remains in
 * floating point is per token (one subtraction, one division, {@code Math.exp}, and a multiply by a
 * power of two, which is exact) and per row (two multiplies), each a single correctly rounded IEEE
 * operation with no fused multiply-add, except {@code Math.exp}, which a port must reproduce bit
 * for bit. Quantizing costs nothing a user can see: a weight loses at most one part in {@code
 * SCALE} of the most likely token's weight (2^-35 at a vocabulary of 150,000), so only tokens at
 * most that likely relative to the argmax can never be drawn.
 *
 * <p>Logits: NaN or +Infinity at any position is a broken model and fails with the position;
 * -Infinity marks a token that must never be sampled (a mask); a row that is all -Infinity fails.
 *
 * <p>Penalties ({@link Penalties}) are the only step that looks at a request's earlier tokens, and
 * they change the row rather than the draw: the penalized row is the model's row with a few logits
 * moved, computed per token in float, so a device that moves the same logits the same way samples
 * the same token. They go into the sampler's own copy of the row, because the caller's row is the
 * model's output and still gives the log probabilities ({@link LogSoftmax}) of the raw logits.
 *
 * <p>Not thread-safe: the scratch arrays are reused across calls. Use one sampler per thread; it
 * never allocates on the sampling path and never writes the logits.
 */
public final class Sampler {

  private final int vocabSize;
  private final double scale;
  private final long[] weights;
  private final long[] order;
  private final long[] heap;
  private float[] penalized; // the penalized copy of a row, allocated at the first penalties

  /**
   * @param vocabSize the length of a logits row
   */
  public Sampler(int vocabSize) {
    this.scale = weightScale(vocabSize);
    this.vocabSize = vocabSize;
    this.weights = new long[vocabSize];
    this.order = new long[vocabSize];
    this.heap = new long[vocabSize];
  }

  public int vocabSize() {
    return vocabSize;
  }

  /**
   * The factor {@code SCALE} that turns a weight {@code w} in {@code [0, 1]} into the integer
   * {@code wq = (long) Math.floor(w * SCALE)}: {@code 2^(53 - max(1, ceil(log2(vocabSize))))}, so
   * that the sum of a whole row's weights is at most {@code 2^53} and converts to double exactly.
   */
  public static double weightScale(int vocabSize) {
    if (vocabSize < 1) {
      throw new IllegalArgumentException("vocabSize=" + vocabSize + " must be >= 1");
    }
    int bits = Math.max(1, 64 - Long.numberOfLeadingZeros(vocabSize - 1L));
    return Math.scalb(1.0, 53 - bits);
  }

  /**
   * The uniform draw in {@code [0, 1)} of a sequence with {@code seed} at decode step {@code step
   * >= 0}: the {@code step}-th {@link java.util.SplittableRandom#nextDouble()} of a generator
   * seeded with a mix of {@code seed}, computed in O(1). A device sampler takes each row's draw
   * from here, so host and device draw with the same {@code u}.
   */
  public static double uniform(long seed, int step) {
    return StepRandom.uniform(seed, step);
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
    checkRow(logits, offset, step);
    int argmax = checkAndArgmax(logits, offset);
    if (params.isGreedy()) {
      return argmax;
    }
    return sampleTempered(logits, offset, logits[offset + argmax], params, seed, step);
  }

  /**
   * Samples from the row {@code logits[offset, offset + vocabSize)} after the request's {@code
   * penalties}: the row is copied into the sampler's scratch, {@link Penalties#apply} changes the
   * copy, and the copy is sampled as {@link #sample(float[], int, SamplingParams, long, int)}
   * samples a row. {@code logits} is never written. With {@code penalties == null} this is that
   * method, at no extra cost.
   */
  public int sample(
      float[] logits, int offset, SamplingParams params, long seed, int step, Penalties penalties) {
    if (penalties == null) {
      return sample(logits, offset, params, seed, step);
    }
    checkRow(logits, offset, step);
    if (penalized == null) {
      penalized = new float[vocabSize];
    }
    System.arraycopy(logits, offset, penalized, 0, vocabSize);
    penalties.apply(penalized, 0);
    return sample(penalized, 0, params, seed, step);
  }

  private void checkRow(float[] logits, int offset, int step) {
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
      weights[i] = (long) Math.floor(w * scale);
      order[numCandidates++] = orderKey(x, i);
    }

    int numKept = numCandidates;
    if (params.isTopKOn() && params.topK() < numCandidates) {
      numKept = selectSmallest(params.topK(), numCandidates);
    } else if (params.isTopPOn()) {
      Arrays.sort(order, 0, numCandidates);
    }

    long total = 0;
    for (int j = 0; j < numKept; j++) {
      total += weights[(int) order[j]];
    }
    if (params.isTopPOn()) {
      double threshold = params.topP() * (double) total;
      long cumulative = 0;
      for (int j = 0; j < numKept; j++) {
        cumulative += weights[(int) order[j]];
        if ((double) cumulative >= threshold) {
          numKept = j + 1;
          break;
        }
      }
      total = cumulative;
    }

    double target = StepRandom.uniform(seed, step) * (double) total;
    long cumulative = 0;
    int lastPositive = (int) order[0];
    for (int j = 0; j < numKept; j++) {
      int id = (int) order[j];
      long wq = weights[id];
      cumulative += wq;
      if (target < (double) cumulative) {
        return id;
      }
      if (wq > 0) {
        lastPositive = id;
      }
    }
    return lastPositive;
  }

  /**
   * A key whose signed ascending order is logit descending, then id ascending: the high half is the
   * complemented order-preserving int image of the logit, the low half the id. Sorting primitives
   * keeps the sort allocation-free and its result unique; a device port sorts by the same key (or
   * compares the same pair) to walk the candidates in the same order. {@code -0.0} and {@code +0.0}
   * have one key (they tie, as in the argmax).
   */
  public static long orderKey(float logit, int id) {
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
    siftDown(heap, i, size);
  }

  /**
   * Restores the max-heap order of {@code heap[0, size)} below {@code i} (the bounded heaps of
   * top-k here and of {@link LogSoftmax}'s most likely ids).
   */
  static void siftDown(long[] heap, int i, int size) {
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

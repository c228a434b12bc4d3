package io.tokenspeed.model.sampling;

import java.util.Arrays;

/**
 * The presence, frequency and repetition penalties of one request at one step, with the token
 * counts they need: what turns the model's logits row into the row the {@link Sampler} draws from.
 * The request's {@link SamplingState} builds one per step; a device sampler receives it in the
 * {@link RowSampling} and must change the row exactly as {@link #apply} does, bit for bit.
 *
 * <p>With {@code P} the request's prompt tokens, {@code O} the tokens it generated before this step
 * and {@code c_t} the number of times token {@code t} occurs in {@code O}, the penalties touch the
 * logit {@code x} of every distinct token {@code t} of {@code P ∪ O}, and only those:
 *
 * <pre>
 *   rf = repetition, ff = frequency, pf = presence             (floats, as given)
 *
 *   1. if rf != 1:                     x = x > 0 ? x / rf : x * rf
 *   2. if c_t > 0 and (ff != 0 or pf != 0):
 *                                      m = ff * (float) c_t
 *                                      s = m + pf
 *                                      x = x - s
 * </pre>
 *
 * <p>Every operation is one IEEE 754 single-precision operation rounded to nearest, in exactly this
 * order: step 2 is three separately rounded operations (a multiply, an add, a subtract). Java never
 * fuses a multiply and an add, so a port must not either: a CUDA kernel writes them as {@code
 * __fmul_rn}, {@code __fadd_rn} and {@code __fsub_rn} (or {@code __fdiv_rn} for the division),
 * because the compiler would otherwise contract {@code x - (ff * c + pf)} into a fused multiply-add
 * and round once where this rounds twice. A {@code -Infinity} logit (a mask) stays {@code
 * -Infinity}: multiplying it by a positive factor and subtracting a finite number leave it there.
 * The row is then sampled as if the model had produced it: the sampler's check sees the penalized
 * row, and greedy decoding takes its argmax. Log probabilities stay those of the raw row ({@link
 * LogSoftmax}), the model's distribution.
 *
 * <p>The record is a value: the arrays are copied in and out, and {@link #equals} compares their
 * contents.
 *
 * @param presence OpenAI's {@code presence_penalty} as a float; in {@code [-2, 2]}
 * @param frequency OpenAI's {@code frequency_penalty} as a float; in {@code [-2, 2]}
 * @param repetition vLLM's {@code repetition_penalty} as a float; in {@code (0, 10]}
 * @param ids the distinct token ids of the prompt and the generated tokens, strictly ascending,
 *     each {@code >= 0}
 * @param outputCounts {@code outputCounts[i]} is how many times {@code ids[i]} was generated
 *     ({@code 0} for a token only in the prompt); each {@code >= 0}; as long as {@code ids}
 */
public record Penalties(
    float presence, float frequency, float repetition, int[] ids, int[] outputCounts) {

  public Penalties {
    if (!(Math.abs(presence) <= SamplingParams.MAX_ABS_PRESENCE_FREQUENCY_PENALTY)) {
      throw new IllegalArgumentException("presence=" + presence + " must be in [-2, 2]");
    }
    if (!(Math.abs(frequency) <= SamplingParams.MAX_ABS_PRESENCE_FREQUENCY_PENALTY)) {
      throw new IllegalArgumentException("frequency=" + frequency + " must be in [-2, 2]");
    }
    if (!(repetition > 0 && repetition <= SamplingParams.MAX_REPETITION_PENALTY)) {
      throw new IllegalArgumentException("repetition=" + repetition + " must be in (0, 10]");
    }
    ids = ids.clone();
    outputCounts = outputCounts.clone();
    if (ids.length != outputCounts.length) {
      throw new IllegalArgumentException(
          "ids.length=" + ids.length + " must equal outputCounts.length=" + outputCounts.length);
    }
    for (int i = 0; i < ids.length; i++) {
      if (ids[i] < 0 || (i > 0 && ids[i] <= ids[i - 1])) {
        throw new IllegalArgumentException(
            "ids[" + i + "]=" + ids[i] + " must be >= 0 and above ids[i-1] (strictly ascending)");
      }
      if (outputCounts[i] < 0) {
        throw new IllegalArgumentException(
            "outputCounts[" + i + "]=" + outputCounts[i] + " must be >= 0");
      }
    }
  }

  /** The distinct token ids, ascending (a copy). */
  @Override
  public int[] ids() {
    return ids.clone();
  }

  /** How many times each of {@link #ids()} was generated (a copy). */
  @Override
  public int[] outputCounts() {
    return outputCounts.clone();
  }

  /** The number of distinct tokens the penalties touch. */
  public int size() {
    return ids.length;
  }

  /**
   * Penalizes the row {@code row[offset, ...)} in place, as the class comment states; the caller
   * owns the row (the sampler applies it to its own copy, never to the model's logits).
   *
   * @throws IllegalArgumentException if the largest id lies past the end of {@code row}
   */
  public void apply(float[] row, int offset) {
    if (ids.length == 0) {
      return;
    }
    int last = ids[ids.length - 1];
    if (offset < 0 || (long) offset + last >= row.length) {
      throw new IllegalArgumentException(
          "token id "
              + last
              + " at offset="
              + offset
              + " lies outside the row: row.length="
              + row.length);
    }
    float rf = repetition;
    float ff = frequency;
    float pf = presence;
    boolean repetitionOn = rf != 1.0f;
    boolean additiveOn = ff != 0.0f || pf != 0.0f;
    for (int i = 0; i < ids.length; i++) {
      int at = offset + ids[i];
      float x = row[at];
      if (repetitionOn) {
        x = x > 0 ? x / rf : x * rf;
      }
      int count = outputCounts[i];
      if (additiveOn && count > 0) {
        float m = ff * (float) count;
        float s = m + pf;
        x = x - s;
      }
      row[at] = x;
    }
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof Penalties p
        && Float.compare(presence, p.presence) == 0
        && Float.compare(frequency, p.frequency) == 0
        && Float.compare(repetition, p.repetition) == 0
        && Arrays.equals(ids, p.ids)
        && Arrays.equals(outputCounts, p.outputCounts);
  }

  @Override
  public int hashCode() {
    int h = Float.hashCode(presence);
    h = 31 * h + Float.hashCode(frequency);
    h = 31 * h + Float.hashCode(repetition);
    h = 31 * h + Arrays.hashCode(ids);
    return 31 * h + Arrays.hashCode(outputCounts);
  }

  @Override
  public String toString() {
    return "Penalties[presence="
        + presence
        + ", frequency="
        + frequency
        + ", repetition="
        + repetition
        + ", ids="
        + Arrays.toString(ids)
        + ", outputCounts="
        + Arrays.toString(outputCounts)
        + "]";
  }
}

package io.tokenspeed.model.sampling;

import java.util.Arrays;

/**
 * The log probabilities of one generated token and of the most likely alternatives at its step, for
 * a request submitted with {@code topLogprobs >= 0} (the engine's {@code submit(prompt, params,
 * topLogprobs)}; a {@link RowSampling} carries the number to whoever samples).
 *
 * <p>Every value is the natural logarithm of a probability of the model's own distribution: the
 * log-softmax of the raw logits row the token was sampled from, before temperature and the top-k,
 * top-p and min-p filters. A token the sampler's filters removed still has its log probability
 * here, and a sampled token that is not among the most likely ones still has its own. A logit of
 * {@code -Infinity} (a masked token) has the log probability {@code -Infinity}.
 *
 * <p>The arrays are copied in and out: an instance never changes.
 *
 * @param token the sampled token id
 * @param logprob the sampled token's log probability; {@code <= 0}
 * @param topTokens the most likely token ids at this step, most likely first (by logit, the lower
 *     id first among equal logits, so a greedy token comes first); empty when the request asked for
 *     {@code topLogprobs = 0}; at most {@value #MAX_TOP_LOGPROBS}
 * @param topLogprobs their log probabilities, in the same order, never increasing; as long as
 *     {@code topTokens}
 */
public record TokenLogprobs(int token, float logprob, int[] topTokens, float[] topLogprobs) {

  /** {@code topLogprobs} of a request that reports no log probabilities (the default). */
  public static final int NO_LOGPROBS = -1;

  /** The most alternatives a request may ask for (OpenAI's and vLLM's limit). */
  public static final int MAX_TOP_LOGPROBS = 20;

  public TokenLogprobs {
    if (token < 0) {
      throw new IllegalArgumentException("token=" + token + " must be >= 0");
    }
    if (!(logprob <= 0)) {
      throw new IllegalArgumentException(
          "logprob=" + logprob + " of token=" + token + " must be <= 0");
    }
    topTokens = topTokens.clone();
    topLogprobs = topLogprobs.clone();
    if (topTokens.length != topLogprobs.length || topTokens.length > MAX_TOP_LOGPROBS) {
      throw new IllegalArgumentException(
          "topTokens.length="
              + topTokens.length
              + " and topLogprobs.length="
              + topLogprobs.length
              + " must be equal and <= "
              + MAX_TOP_LOGPROBS);
    }
    for (int i = 0; i < topTokens.length; i++) {
      if (topTokens[i] < 0 || !(topLogprobs[i] <= 0)) {
        throw new IllegalArgumentException(
            "top "
                + i
                + ": token="
                + topTokens[i]
                + " logprob="
                + topLogprobs[i]
                + ": the id must be >= 0 and the logprob <= 0");
      }
      if (i > 0 && topLogprobs[i] > topLogprobs[i - 1]) {
        throw new IllegalArgumentException(
            "top "
                + i
                + " (token="
                + topTokens[i]
                + " logprob="
                + topLogprobs[i]
                + ") must follow top "
                + (i - 1)
                + " (token="
                + topTokens[i - 1]
                + " logprob="
                + topLogprobs[i - 1]
                + "): most likely first");
      }
    }
  }

  /** A copy of the most likely token ids. */
  @Override
  public int[] topTokens() {
    return topTokens.clone();
  }

  /** A copy of their log probabilities. */
  @Override
  public float[] topLogprobs() {
    return topLogprobs.clone();
  }

  /** Whether {@code o} holds the same token, the same ids and bit-identical log probabilities. */
  @Override
  public boolean equals(Object o) {
    return o instanceof TokenLogprobs t
        && token == t.token
        && Float.floatToIntBits(logprob) == Float.floatToIntBits(t.logprob)
        && Arrays.equals(topTokens, t.topTokens)
        && Arrays.equals(topLogprobs, t.topLogprobs);
  }

  @Override
  public int hashCode() {
    return 31 * (31 * (31 * token + Float.hashCode(logprob)) + Arrays.hashCode(topTokens))
        + Arrays.hashCode(topLogprobs);
  }

  @Override
  public String toString() {
    return "TokenLogprobs[token="
        + token
        + ", logprob="
        + logprob
        + ", topTokens="
        + Arrays.toString(topTokens)
        + ", topLogprobs="
        + Arrays.toString(topLogprobs)
        + "]";
  }
}

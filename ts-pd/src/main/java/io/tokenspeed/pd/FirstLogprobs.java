package io.tokenspeed.pd;

import java.util.Arrays;

/**
 * The log probabilities of the first token, which the prefill engine sampled, for a request that
 * asked for them: DONE carries them so that the decode engine reports every token's.
 *
 * @param logprob the first token's log probability ({@code <= 0}, or negative infinity)
 * @param topTokens the most likely token ids at that step, most likely first; at most {@value
 *     #MAX_TOP}
 * @param topLogprobs their log probabilities, as long as {@code topTokens}, each {@code <= 0}
 */
public record FirstLogprobs(float logprob, int[] topTokens, float[] topLogprobs) {

  /** The most alternatives DONE carries (the API's limit). */
  public static final int MAX_TOP = 20;

  public FirstLogprobs {
    if (!(logprob <= 0)) {
      throw new IllegalArgumentException("logprob=" + logprob + " must be <= 0");
    }
    topTokens = topTokens.clone();
    topLogprobs = topLogprobs.clone();
    if (topTokens.length != topLogprobs.length || topTokens.length > MAX_TOP) {
      throw new IllegalArgumentException(
          "top tokens "
              + topTokens.length
              + " and top logprobs "
              + topLogprobs.length
              + " must be equal and <= "
              + MAX_TOP);
    }
    for (int i = 0; i < topTokens.length; i++) {
      if (topTokens[i] < 0 || !(topLogprobs[i] <= 0)) {
        throw new IllegalArgumentException(
            "top " + i + ": token=" + topTokens[i] + " logprob=" + topLogprobs[i]);
      }
    }
  }

  @Override
  public int[] topTokens() {
    return topTokens.clone();
  }

  @Override
  public float[] topLogprobs() {
    return topLogprobs.clone();
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof FirstLogprobs f
        && Float.compare(logprob, f.logprob) == 0
        && Arrays.equals(topTokens, f.topTokens)
        && Arrays.equals(topLogprobs, f.topLogprobs);
  }

  @Override
  public int hashCode() {
    return 31 * (31 * Float.hashCode(logprob) + Arrays.hashCode(topTokens))
        + Arrays.hashCode(topLogprobs);
  }

  @Override
  public String toString() {
    return "FirstLogprobs[logprob="
        + logprob
        + ", top="
        + Arrays.toString(topTokens)
        + " "
        + Arrays.toString(topLogprobs)
        + "]";
  }
}

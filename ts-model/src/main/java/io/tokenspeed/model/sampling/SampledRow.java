package io.tokenspeed.model.sampling;

/**
 * One request's sampled next token, as a forward-and-sample pass returns it: the token its {@link
 * RowSampling} chose from the request's last logits row and, when asked, its log probabilities.
 *
 * @param token the sampled id; {@code >= 0}
 * @param logprobs the token's log probabilities and the most likely alternatives, for the row's
 *     {@code topLogprobs}; {@code null} when the row asked for none
 */
public record SampledRow(int token, TokenLogprobs logprobs) {

  public SampledRow {
    if (token < 0) {
      throw new IllegalArgumentException("token=" + token + " must be >= 0");
    }
    if (logprobs != null && logprobs.token() != token) {
      throw new IllegalArgumentException(
          "logprobs.token=" + logprobs.token() + " must be the sampled token=" + token);
    }
  }
}

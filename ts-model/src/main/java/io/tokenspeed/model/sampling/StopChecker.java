package io.tokenspeed.model.sampling;

import java.util.Arrays;
import java.util.Optional;
import java.util.OptionalInt;

/**
 * Decides, after each generated token, whether a sequence has finished. The stop tokens are the
 * request's {@code stop_token_ids} plus the tokenizer's end-of-sequence id unless {@code
 * ignore_eos}.
 *
 * <p>The stop token is <b>included</b>: it is appended to the sequence's token ids (its KV is
 * written like any other token's), it counts towards {@code max_tokens}, and {@link
 * FinishReason.Stop} names it. Leaving its text out of the response is the detokenizer's choice
 * (special tokens are skipped), not the sequence's. When the {@code max_tokens}-th token is a stop
 * token the reason is {@code Stop}.
 */
public final class StopChecker {

  private final int[] stopTokenIds;
  private final int maxTokens;

  /**
   * @param params the request's stop token ids, {@code ignore_eos} and {@code max_tokens}
   * @param eosId the tokenizer's end-of-sequence id, if it has one
   */
  public StopChecker(SamplingParams params, OptionalInt eosId) {
    int[] ids = params.stopTokenIds().stream().mapToInt(Integer::intValue).toArray();
    if (!params.ignoreEos() && eosId.isPresent()) {
      ids = Arrays.copyOf(ids, ids.length + 1);
      ids[ids.length - 1] = eosId.getAsInt();
    }
    this.stopTokenIds = Arrays.stream(ids).sorted().distinct().toArray();
    this.maxTokens = params.maxTokens();
  }

  /** Whether {@code tokenId} ends a sequence. */
  public boolean isStopToken(int tokenId) {
    return Arrays.binarySearch(stopTokenIds, tokenId) >= 0;
  }

  /**
   * Checks the token just appended.
   *
   * @param tokenId the token just generated
   * @param numGeneratedTokens the tokens generated so far, this one included; in {@code [1,
   *     max_tokens]}
   * @return why the sequence finished, or empty if it goes on
   */
  public Optional<FinishReason> check(int tokenId, int numGeneratedTokens) {
    if (numGeneratedTokens < 1 || numGeneratedTokens > maxTokens) {
      throw new IllegalStateException(
          "numGeneratedTokens="
              + numGeneratedTokens
              + " must be in [1, maxTokens="
              + maxTokens
              + "]: a finished sequence was checked again");
    }
    if (isStopToken(tokenId)) {
      return Optional.of(new FinishReason.Stop(tokenId));
    }
    if (numGeneratedTokens == maxTokens) {
      return Optional.of(new FinishReason.Length(maxTokens));
    }
    return Optional.empty();
  }
}

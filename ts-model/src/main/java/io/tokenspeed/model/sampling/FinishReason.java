package io.tokenspeed.model.sampling;

/**
 * Why a sequence finished. {@link Stop} wins over {@link Length} when the token that reaches {@code
 * max_tokens} is also a stop token: the model chose to end there.
 */
public sealed interface FinishReason {

  /** The name an OpenAI-style response gives this reason: {@code "stop"} or {@code "length"}. */
  default String wireName() {
    return switch (this) {
      case Stop stop -> "stop";
      case Length length -> "length";
    };
  }

  /**
   * The sequence sampled a stop token: one of {@code stop_token_ids}, or the tokenizer's
   * end-of-sequence id unless {@code ignore_eos}. The token is part of the sequence's ids (see
   * {@link StopChecker}).
   *
   * @param tokenId the stop token that ended the sequence
   */
  record Stop(int tokenId) implements FinishReason {
    public Stop {
      if (tokenId < 0) {
        throw new IllegalArgumentException("tokenId=" + tokenId + " must be >= 0");
      }
    }
  }

  /**
   * The sequence generated {@code max_tokens} tokens without sampling a stop token.
   *
   * @param maxTokens the limit it reached
   */
  record Length(int maxTokens) implements FinishReason {
    public Length {
      if (maxTokens < 1) {
        throw new IllegalArgumentException("maxTokens=" + maxTokens + " must be >= 1");
      }
    }
  }
}

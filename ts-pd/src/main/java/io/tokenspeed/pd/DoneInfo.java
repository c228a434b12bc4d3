package io.tokenspeed.pd;

/**
 * What DONE carries besides the checksum: the first token the prefill engine sampled, from which
 * the decode engine goes on, the prompt's cached tokens by source, and, for a request that asked
 * for log probabilities, the first token's.
 *
 * @param firstToken the first generated token's id
 * @param cachedTokens the prompt's tokens the prefill engine found cached, by source
 * @param logprobs the first token's log probabilities, or null when the request asked for none
 */
public record DoneInfo(int firstToken, CachedTokens cachedTokens, FirstLogprobs logprobs) {

  public DoneInfo {
    if (cachedTokens == null) {
      throw new IllegalArgumentException("done info without cached tokens");
    }
  }

  /** Without log probabilities. */
  public DoneInfo(int firstToken, CachedTokens cachedTokens) {
    this(firstToken, cachedTokens, null);
  }
}

package io.tokenspeed.pd;

/**
 * What DONE carries besides the checksum: the first token the prefill engine sampled, from which
 * the decode engine goes on, and the prompt's cached tokens by source.
 *
 * @param firstToken the first generated token's id
 * @param cachedTokens the prompt's tokens the prefill engine found cached, by source
 */
public record DoneInfo(int firstToken, CachedTokens cachedTokens) {

  public DoneInfo {
    if (cachedTokens == null) {
      throw new IllegalArgumentException("done info without cached tokens");
    }
  }
}

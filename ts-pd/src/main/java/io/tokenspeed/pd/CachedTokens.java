package io.tokenspeed.pd;

/**
 * How many of the prompt's tokens the prefill engine found cached, by where it found them (the
 * usage's {@code cached_tokens_by_source}); DONE carries it to the decode engine, which reports it.
 *
 * @param device tokens found in the prefill engine's Device tier
 * @param host tokens restored from its Host tier
 * @param storage tokens restored from L3
 */
public record CachedTokens(long device, long host, long storage) {

  /** No token cached. */
  public static final CachedTokens NONE = new CachedTokens(0, 0, 0);

  public CachedTokens {
    if (device < 0 || host < 0 || storage < 0) {
      throw new IllegalArgumentException(
          "cached tokens device="
              + device
              + " host="
              + host
              + " storage="
              + storage
              + " must be >= 0");
    }
  }

  /** Every cached token, wherever found. */
  public long total() {
    return device + host + storage;
  }
}

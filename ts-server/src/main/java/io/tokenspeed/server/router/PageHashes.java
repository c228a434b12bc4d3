package io.tokenspeed.server.router;

import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.PrefixHasher;
import java.util.List;

/**
 * A prompt's block hashes as the backends' KV events name them: the engine's page hash ({@link
 * PrefixHasher}, docs concepts "Hashes and keys": SHA-256 chained over each page's token ids, no
 * extra keys), cut to its first 8 bytes, big-endian ({@code "hash": "sha256-page-prefix-u64"}).
 *
 * <pre>
 *   tokens  [ t0 … tP-1 | tP … t2P-1 | … | the last page, full or not ]
 *   hashes  [ h0        | h1         | … ]      only the pages within the first n − 1 tokens:
 *                                                the engine reuses at most n − 1 of a prompt's n
 * </pre>
 */
final class PageHashes {
  private PageHashes() {}

  /**
   * The u64 hashes of the full pages of {@code P} tokens within the first n − 1 of {@code tokens}.
   */
  static long[] of(int[] tokens, int pageTokens) {
    int pages = Math.max(0, tokens.length - 1) / pageTokens;
    long[] out = new long[pages];
    if (pages == 0) {
      return out;
    }
    PrefixHasher hasher = new PrefixHasher(pageTokens, List.of());
    ContentHash prev = null;
    for (int p = 0; p < pages; p++) {
      prev = hasher.hashPage(prev, tokens, p * pageTokens, pageTokens);
      out[p] = prev.w0();
    }
    return out;
  }
}

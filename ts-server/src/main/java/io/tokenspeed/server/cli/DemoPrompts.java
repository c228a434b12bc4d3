package io.tokenspeed.server.cli;

import java.util.SplittableRandom;

/**
 * The demo's prompts, the same in every process that draws them from the same seed and vocabulary:
 * for each of {@code n} shared prefixes of {@code prefixTokens} ids, a seed prompt (the prefix and
 * {@code suffixTokens} ids) that the writer serves first, and a query prompt (the same prefix and
 * other {@code suffixTokens} ids) that every cohort serves.
 */
record DemoPrompts(int[][] seeds, int[][] queries, int prefixTokens) {

  static DemoPrompts of(long seed, int vocab, int n, int prefixTokens, int suffixTokens) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int[][] seeds = new int[n][];
    int[][] queries = new int[n][];
    for (int i = 0; i < n; i++) {
      int[] prefix = rnd.ints(prefixTokens, 0, vocab).toArray();
      seeds[i] = concat(prefix, rnd.ints(suffixTokens, 0, vocab).toArray());
      queries[i] = concat(prefix, rnd.ints(suffixTokens, 0, vocab).toArray());
    }
    return new DemoPrompts(seeds, queries, prefixTokens);
  }

  private static int[] concat(int[] a, int[] b) {
    int[] out = java.util.Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, out, a.length, b.length);
    return out;
  }
}

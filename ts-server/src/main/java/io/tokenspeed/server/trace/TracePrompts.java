package io.tokenspeed.server.trace;

import java.util.SplittableRandom;

/**
 * The prompts of a trace's requests: hash id {@code h} stands for a fixed block of {@link
 * Trace#BLOCK_TOKENS} token ids drawn from the model's vocabulary by a generator seeded with {@code
 * (seed, h)}, and a request's prompt is its blocks in order, the last cut to its input length. So
 * requests that share their first k ids share exactly their first {@code k · 512} tokens (fewer
 * when one's block k - 1 is its cut last block), on every replica and in every run of the same
 * seed.
 */
public final class TracePrompts {
  private final long seed;
  private final int vocabSize;

  /**
   * @throws IllegalArgumentException when {@code vocabSize < 2}
   */
  public TracePrompts(long seed, int vocabSize) {
    if (vocabSize < 2) {
      throw new IllegalArgumentException("vocab_size=" + vocabSize + " must be at least 2");
    }
    this.seed = seed;
    this.vocabSize = vocabSize;
  }

  /** The prompt of {@code r}: {@code r.inputLength()} token ids. */
  public int[] prompt(TraceRequest r) {
    int[] out = new int[r.inputLength()];
    int at = 0;
    for (int j = 0; j < r.numBlocks(); j++) {
      SplittableRandom rnd = new SplittableRandom(mix(seed, r.hashId(j)));
      for (int i = 0, n = r.blockTokens(j); i < n; i++) {
        out[at++] = rnd.nextInt(vocabSize);
      }
    }
    return out;
  }

  private static long mix(long seed, int id) {
    long z = seed * 0x9E3779B97F4A7C15L + id + 0x632BE59BD9B4E019L;
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    return z ^ (z >>> 31);
  }
}

package io.tokenspeed.bench;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.model.kv.KvCache;
import java.lang.foreign.Arena;

/**
 * The harnesses' KV cache for a bare forward: one cache group, block tables handed out sequentially
 * from block 1 (block 0 is the null block).
 */
final class BenchKv implements AutoCloseable {
  final Arena arena = Arena.ofShared();
  final KvCache cache;
  private final int numBlocks;
  private final int blockTokens;
  private int next = 1;

  BenchKv(CacheLayout layout, int numBlocks) {
    if (layout.numGroups() != 1) {
      throw new IllegalArgumentException("expected one cache group, got " + layout.numGroups());
    }
    this.cache = KvCache.allocate(layout, numBlocks, arena);
    this.numBlocks = numBlocks;
    this.blockTokens = layout.group(0).blockGranularity();
  }

  /** The next {@code ceil(tokens / bg)} blocks as a one-group table. */
  int[][] table(int tokens) {
    int rows = Math.ceilDiv(tokens, blockTokens);
    if (next + rows > numBlocks) {
      throw new IllegalStateException("out of blocks: need " + rows + " from " + next);
    }
    int[] t = new int[rows];
    for (int i = 0; i < rows; i++) {
      t[i] = next++;
    }
    return new int[][] {t};
  }

  /** Hands the blocks out from block 1 again. */
  void reset() {
    next = 1;
  }

  @Override
  public void close() {
    arena.close();
  }
}

package io.tokenspeed.model;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kv.KvCache;
import java.lang.foreign.Arena;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Random;

/**
 * Drives a model the way an engine would, for tests: a KV cache of {@code numBlocks} blocks, block
 * tables handed out by the test (sequential or shuffled), chunked prefill and greedy decode.
 */
public final class PagedRunner implements AutoCloseable {
  private final CausalLm model;
  private final Arena arena = Arena.ofShared();
  private final KvCache kv;
  private final int blockTokens;
  private final List<List<Integer>> free = new ArrayList<>();

  /**
   * @param seed {@code < 0}: blocks handed out in ascending order; else shuffled with this seed
   */
  public PagedRunner(CausalLm model, int blockTokens, int numBlocks, long seed) {
    this.model = model;
    this.blockTokens = blockTokens;
    CacheLayout layout = model.cacheLayout(blockTokens * 4, blockTokens);
    kv = KvCache.allocate(layout, numBlocks, arena);
    for (int g = 0; g < layout.numGroups(); g++) {
      List<Integer> ids = new ArrayList<>();
      for (int b = 1; b < numBlocks; b++) {
        ids.add(b);
      }
      if (seed >= 0) {
        Collections.shuffle(ids, new Random(seed + g));
      }
      free.add(ids);
    }
  }

  public KvCache kv() {
    return kv;
  }

  /**
   * Block tables of fresh blocks covering {@code rows} rows of {@code blockTokens} tokens: one
   * table per group, each sized by its own granularity (a State group: one slot per page).
   */
  public int[][] table(int rows) {
    int[][] tables = new int[free.size()][];
    for (int g = 0; g < free.size(); g++) {
      int bg = kv.layout().group(g).blockGranularity();
      int n = Math.ceilDiv(rows * blockTokens, bg);
      List<Integer> ids = free.get(g);
      if (n > ids.size()) {
        throw new IllegalStateException(
            "out of blocks in group " + g + ": rows=" + n + " free=" + ids.size());
      }
      tables[g] = new int[n];
      for (int i = 0; i < n; i++) {
        tables[g][i] = ids.removeFirst();
      }
    }
    return tables;
  }

  /** A fresh block of group {@code group}. */
  public int block(int group) {
    return free.get(group).removeFirst();
  }

  /** Rows a request of {@code tokens} tokens needs. */
  public int rowsFor(int tokens) {
    return Math.ceilDiv(tokens, blockTokens);
  }

  /** Prefills {@code ids} in chunks of {@code chunk} tokens; returns logits of every position. */
  public float[] prefill(int[] ids, int[][] table, int chunk, ComputePool pool) {
    int vocab = model.vocabSize();
    float[] all = new float[ids.length * vocab];
    for (int start = 0; start < ids.length; start += chunk) {
      int end = Math.min(ids.length, start + chunk);
      ForwardResult r =
          model.forward(
              ForwardBatch.of(
                  new ForwardRequest(Arrays.copyOfRange(ids, start, end), start, table, true)),
              kv,
              pool);
      System.arraycopy(r.logits(0), 0, all, start * vocab, (end - start) * vocab);
    }
    return all;
  }

  /** One decode step: {@code token} at {@code position}; returns its logits. */
  public float[] decode(int token, int position, int[][] table, ComputePool pool) {
    return model
        .forward(
            ForwardBatch.of(new ForwardRequest(new int[] {token}, position, table, false)),
            kv,
            pool)
        .last(0);
  }

  /** Index of the largest logit (first on ties). */
  public static int argmax(float[] logits) {
    int best = 0;
    for (int i = 1; i < logits.length; i++) {
      if (logits[i] > logits[best]) {
        best = i;
      }
    }
    return best;
  }

  @Override
  public void close() {
    arena.close();
  }
}

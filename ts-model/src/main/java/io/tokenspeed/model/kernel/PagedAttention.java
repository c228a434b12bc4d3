package io.tokenspeed.model.kernel;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Causal attention over KV held in paged blocks, for a batch that mixes prefill chunks and decode
 * steps.
 *
 * <pre>
 *   token t of request r at position p:
 *     row = p / bg, slot = p mod bg, block = blockTable[r][row]     (physical id, any order)
 *     K/V of t live at block·bytesPerBlock + field + (kvHead·bg + slot)·headDim·4
 *   query head h reads kvHead = h / (numHeads / numKvHeads)  (GQA)
 *   out = Σ_j softmax(scores)_j · v_j   over positions j = lo .. p  (lo = 0 without a window)
 * </pre>
 *
 * <p>{@link #write} stores the batch's new K/V first; {@link #attend} then lets each token see
 * every position up to its own, so a chunk's tokens see the chunk's earlier tokens and the
 * request's earlier chunks alike.
 *
 * <p>Exactness: every output element is one fixed sequence of float operations on its query, the
 * K/V at positions {@code lo..p}, the scale, the cap and the window, and nothing else:
 *
 * <pre>
 *   s_j    = 0;  s_j = fma(q[d], k_j[d], s_j)   d = 0 .. hd−1        one chain per score
 *   s_j    = s_j · scale;   s_j = softcap(s_j, c)  when c > 0
 *   m      = max over j of s_j                                        (any order: same value)
 *   e_j    = FastExp.exp(s_j − m)
 *   part_l = 0;  part_l = part_l + e_j   j ≡ l (mod 16), j ascending   16 partial sums
 *   sum    = 0;  sum = sum + part_l      l = 0 .. 15
 *   acc[d] = 0;  acc[d] = fma(e_j, v_j[d], acc[d])   j = lo .. p ascending
 *   out[d] = acc[d] / sum
 *
 *   positions:  0 ······ 15 | 16 ····· 31 | 32 ····· 47 | …    groups of 16 absolute positions,
 *   lane l:     0 ······ 15 |  0 ····· 15 |  0 ····· 15 |      whatever the block size
 *                         lo = 21 ┘                 └ p = 44
 *   part_5 = e_21 + e_37,  part_12 = e_28 + e_44,  part_0 = e_32,  part_13 = e_29  …
 * </pre>
 *
 * <p>The work ({@link AttentionTile}) is split into items of one KV head and a run of up to 64
 * queries: tokens of one request at consecutive positions, times the query heads of that KV head.
 * Threads claim items from a shared counter. An item transposes each span of keys once and scores
 * all its queries against it, a vector lane being one (query, position) pair, then accumulates
 * values with a lane per (query, dimension) — sharing loads between tokens and GQA heads but never
 * an operation. Chunking, batch neighbours, thread count and physical block ids change which item a
 * query lands in and where bytes are read, not the sequence above, so a token's output is
 * bit-identical whatever they are.
 */
public final class PagedAttention {
  /** The softmax sum keeps one partial sum per absolute position mod GROUP. */
  static final int GROUP = 16;

  /** Queries an item aims for: tokens × the query heads of one KV head. */
  private static final int TILE_QUERIES = 64;

  /** Bound on an item's score scratch (queries × positions), in floats. */
  private static final int TILE_SCORES = 1 << 20;

  private PagedAttention() {}

  /**
   * The KV of one attention layer inside a pool.
   *
   * @param memory the group's pool
   * @param bytesPerBlock the group's block size
   * @param kFieldOffset byte offset of this layer's K field inside a block
   * @param vFieldOffset byte offset of this layer's V field inside a block
   * @param blockTokens tokens per block ({@code bg})
   * @param numKvHeads key/value heads
   * @param headDim width of one head
   */
  public record LayerKv(
      MemorySegment memory,
      long bytesPerBlock,
      long kFieldOffset,
      long vFieldOffset,
      int blockTokens,
      int numKvHeads,
      int headDim) {

    long kAt(int block, int slot, int kvHead) {
      return block * bytesPerBlock
          + kFieldOffset
          + ((long) kvHead * blockTokens + slot) * headDim * 4L;
    }

    long vAt(int block, int slot, int kvHead) {
      return block * bytesPerBlock
          + vFieldOffset
          + ((long) kvHead * blockTokens + slot) * headDim * 4L;
    }
  }

  /**
   * Stores K and V ({@code [tokens][numKvHeads*headDim]}) of every token at its position's block
   * and slot. A token whose row's table entry is 0 is not stored: the row is a hole, or (a
   * page-cyclic group) a page another rank holds.
   */
  public static void write(
      ComputePool pool,
      LayerKv kv,
      float[] k,
      float[] v,
      int tokens,
      int[] positions,
      int[] tokenRequest,
      int[][] blockTables) {
    int hd = kv.headDim();
    int width = kv.numKvHeads() * hd;
    pool.parallelFor(
        tokens,
        (from, to) -> {
          for (int t = from; t < to; t++) {
            int p = positions[t];
            int block = blockTables[tokenRequest[t]][p / kv.blockTokens()];
            if (block == 0) {
              continue;
            }
            int slot = p % kv.blockTokens();
            for (int h = 0; h < kv.numKvHeads(); h++) {
              MemorySegment.copy(
                  k,
                  t * width + h * hd,
                  kv.memory(),
                  io.tokenspeed.model.checkpoint.Tensor.F32_LE,
                  kv.kAt(block, slot, h),
                  hd);
              MemorySegment.copy(
                  v,
                  t * width + h * hd,
                  kv.memory(),
                  io.tokenspeed.model.checkpoint.Tensor.F32_LE,
                  kv.vAt(block, slot, h),
                  hd);
            }
          }
        });
  }

  /**
   * {@code out[t][h] = attention of q[t][h]} over positions {@code 0..positions[t]} of request
   * {@code tokenRequest[t]}. {@code q} and {@code out} are {@code [tokens][numHeads*headDim]}.
   */
  public static void attend(
      ComputePool pool,
      LayerKv kv,
      float[] q,
      int tokens,
      int numHeads,
      float scale,
      int[] positions,
      int[] tokenRequest,
      int[][] blockTables,
      float[] out) {
    attend(pool, kv, q, tokens, numHeads, scale, 0f, 0, positions, tokenRequest, blockTables, out);
  }

  /**
   * Like {@link #attend(ComputePool, LayerKv, float[], int, int, float, int[], int[], int[][],
   * float[])}, optionally within a sliding window and with soft-capped scores.
   *
   * <pre>
   *   windowTokens = W > 0:  token at p reads positions lo .. p, lo = max(0, p - W + 1)
   *
   *   rows:   | hole | hole | blk | blk | blk |      (bg = 4, W = 6, p = 13)
   *   tokens:  0..3   4..7   8..11 12..15
   *                             ^lo=8     ^p=13      rows left of row(lo) are never read
   *
   *   softcap = c > 0:       score = c · tanh(score / c)   (before the softmax)
   * </pre>
   *
   * <p>Rows entirely left of {@code lo} are never read, so they may be holes (null block 0). The
   * window only moves {@code lo} in the sequence of the class comment, so exactness holds as stated
   * there.
   *
   * @param softcap 0 for none, else the cap {@code c}
   * @param windowTokens 0 for the full history, else the window {@code W} (current token included)
   */
  public static void attend(
      ComputePool pool,
      LayerKv kv,
      float[] q,
      int tokens,
      int numHeads,
      float scale,
      float softcap,
      int windowTokens,
      int[] positions,
      int[] tokenRequest,
      int[][] blockTables,
      float[] out) {
    if (tokens == 0) {
      return;
    }
    int group = numHeads / kv.numKvHeads();
    Tiles tiles = Tiles.of(tokens, group, windowTokens, positions, tokenRequest);
    int items = tiles.count() * kv.numKvHeads();
    AtomicInteger claimed = new AtomicInteger();
    pool.parallelFor(
        Math.min(pool.threads(), items),
        (from, to) -> {
          AttentionTile tile = new AttentionTile(kv, tiles.maxTokens() * group, tiles.maxColumns());
          for (int i = claimed.getAndIncrement(); i < items; i = claimed.getAndIncrement()) {
            int item = items - 1 - i;
            int start = tiles.start()[item / kv.numKvHeads()];
            tile.attend(
                q,
                out,
                start,
                tiles.length()[item / kv.numKvHeads()],
                item % kv.numKvHeads(),
                group,
                numHeads,
                scale,
                softcap,
                windowTokens,
                positions,
                blockTables[tokenRequest[start]]);
          }
        });
  }

  /**
   * Attention of every query over the positions {@code 0..positions[t]} of its request that lie in
   * the rows this rank holds — the rows whose table entry is not 0 — as a partial result that
   * {@link #combinePartials} joins with the other ranks' (the pages of a page-cyclic group):
   *
   * <pre>
   *   J      = held positions j ≤ p              (rows with a block; slots up to p in p's row)
   *   s_j    = scale · q·k_j   (soft-capped when c > 0)
   *   m      = max over J of s_j
   *   out    = Σ_J exp(s_j − m) · v_j  /  Σ_J exp(s_j − m)
   *   lse    = m + ln Σ_J exp(s_j − m)            −∞ and out = 0 when J is empty
   * </pre>
   *
   * Sums run in double over held positions in ascending order; every (token, head) is one item of
   * work, so thread count and batch neighbours do not change a result.
   *
   * @param out {@code [tokens][numHeads*headDim]}
   * @param lse {@code [tokens][numHeads]}
   */
  public static void attendPartial(
      ComputePool pool,
      LayerKv kv,
      float[] q,
      int tokens,
      int numHeads,
      float scale,
      float softcap,
      int[] positions,
      int[] tokenRequest,
      int[][] blockTables,
      float[] out,
      float[] lse) {
    int hd = kv.headDim();
    int bg = kv.blockTokens();
    int group = numHeads / kv.numKvHeads();
    int maxContext = 0;
    for (int t = 0; t < tokens; t++) {
      maxContext = Math.max(maxContext, positions[t] + 1);
    }
    int span = maxContext;
    pool.parallelFor(
        tokens * numHeads,
        (from, to) -> {
          float[] scores = new float[span];
          long[] values = new long[span]; // the byte offset of each scored position's V
          double[] acc = new double[hd];
          for (int item = from; item < to; item++) {
            int t = item / numHeads;
            int kvHead = (item % numHeads) / group;
            int p = positions[t];
            int[] table = blockTables[tokenRequest[t]];
            int qOff = item * hd;
            float m = Float.NEGATIVE_INFINITY;
            int n = 0;
            for (int row = 0; row <= p / bg; row++) {
              int block = table[row];
              if (block == 0) {
                continue;
              }
              int slots = Math.min(bg, p - row * bg + 1);
              for (int slot = 0; slot < slots; slot++) {
                float sc =
                    VectorMath.dot(q, qOff, kv.memory(), kv.kAt(block, slot, kvHead), hd) * scale;
                if (softcap > 0f) {
                  sc = softcap(sc, softcap);
                }
                values[n] = kv.vAt(block, slot, kvHead);
                scores[n++] = sc;
                m = Math.max(m, sc);
              }
            }
            if (n == 0) {
              lse[item] = Float.NEGATIVE_INFINITY;
              java.util.Arrays.fill(out, qOff, qOff + hd, 0f);
              continue;
            }
            java.util.Arrays.fill(acc, 0.0);
            double sum = 0;
            for (int i = 0; i < n; i++) {
              double e = Math.exp((double) scores[i] - m);
              sum += e;
              for (int d = 0; d < hd; d++) {
                acc[d] +=
                    e
                        * kv.memory()
                            .get(io.tokenspeed.model.checkpoint.Tensor.F32_LE, values[i] + 4L * d);
              }
            }
            for (int d = 0; d < hd; d++) {
              out[qOff + d] = (float) (acc[d] / sum);
            }
            lse[item] = (float) (m + Math.log(sum));
          }
        });
  }

  /**
   * Joins the partial results of {@code ranks} ranks ({@link #attendPartial}) exactly: for each
   * (token, head), with {@code L = max_r lse_r} and {@code w_r = exp(lse_r − L)},
   *
   * <pre>
   *   out = Σ_r w_r · out_r / Σ_r w_r          r = 0 .. ranks−1 in order, in double
   * </pre>
   *
   * which is the attention over the union of the ranks' positions. {@code gathered} holds rank r's
   * block {@code [outs (items·headDim) | lses (items)]} at {@code r · items · (headDim + 1)}; a
   * rank whose lse is −∞ held no position and weighs nothing.
   *
   * @param out {@code [items][headDim]}, the combined attention
   */
  public static void combinePartials(
      float[] gathered, int ranks, int items, int headDim, float[] out) {
    int stride = items * (headDim + 1);
    int lseAt = items * headDim;
    for (int item = 0; item < items; item++) {
      float top = Float.NEGATIVE_INFINITY;
      for (int r = 0; r < ranks; r++) {
        top = Math.max(top, gathered[r * stride + lseAt + item]);
      }
      int o = item * headDim;
      if (top == Float.NEGATIVE_INFINITY) {
        java.util.Arrays.fill(out, o, o + headDim, 0f);
        continue;
      }
      double weights = 0;
      double[] acc = new double[headDim];
      for (int r = 0; r < ranks; r++) {
        float l = gathered[r * stride + lseAt + item];
        if (l == Float.NEGATIVE_INFINITY) {
          continue;
        }
        double w = Math.exp((double) l - top);
        weights += w;
        int base = r * stride + o;
        for (int d = 0; d < headDim; d++) {
          acc[d] += w * gathered[base + d];
        }
      }
      for (int d = 0; d < headDim; d++) {
        out[o + d] = (float) (acc[d] / weights);
      }
    }
  }

  /**
   * The batch cut into runs of at most {@code maxTokens} tokens, each of one request at consecutive
   * positions, and the widest score row among them.
   */
  private record Tiles(int[] start, int[] length, int count, int maxTokens, int maxColumns) {

    static Tiles of(int tokens, int group, int windowTokens, int[] positions, int[] tokenRequest) {
      int context = 0;
      for (int t = 0; t < tokens; t++) {
        context = Math.max(context, positions[t] + 1);
      }
      int span = windowTokens > 0 ? Math.min(context, windowTokens + TILE_QUERIES) : context;
      int queries = Math.min(TILE_QUERIES, Math.max(1, TILE_SCORES / span));
      int maxTokens = Math.max(1, queries / group);
      int[] start = new int[tokens];
      int[] length = new int[tokens];
      int count = 0;
      int maxColumns = 0;
      for (int t = 0; t < tokens; ) {
        int first = t++;
        while (t < tokens
            && t - first < maxTokens
            && tokenRequest[t] == tokenRequest[first]
            && positions[t] == positions[t - 1] + 1) {
          t++;
        }
        start[count] = first;
        length[count++] = t - first;
        int lo = windowTokens > 0 ? Math.max(0, positions[first] - windowTokens + 1) : 0;
        maxColumns = Math.max(maxColumns, AttentionTile.rowLength(lo, positions[t - 1]));
      }
      return new Tiles(start, length, count, maxTokens, maxColumns);
    }
  }

  /** {@code cap · tanh(x / cap)} in float, with {@link StrictMath#tanh}. */
  public static float softcap(float x, float cap) {
    return (float) StrictMath.tanh(x / cap) * cap;
  }
}

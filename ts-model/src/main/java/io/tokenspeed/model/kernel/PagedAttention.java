package io.tokenspeed.model.kernel;

import java.lang.foreign.MemorySegment;

/**
 * Causal attention over KV held in paged blocks, for a batch that mixes prefill chunks and decode
 * steps.
 *
 * <pre>
 *   token t of request r at position p:
 *     row = p / bg, slot = p mod bg, block = blockTable[r][row]     (physical id, any order)
 *     K/V of t live at block·bytesPerBlock + field + (kvHead·bg + slot)·headDim·4
 *   query head h reads kvHead = h / (numHeads / numKvHeads)  (GQA)
 *   scores_j = (q · k_j) · scale     for j = 0 .. p   (positions, ascending)
 *   out = Σ_j softmax(scores)_j · v_j                  (j ascending)
 * </pre>
 *
 * <p>{@link #write} stores the batch's new K/V first; {@link #attend} then lets each token see
 * every position up to its own, so a chunk's tokens see the chunk's earlier tokens and the
 * request's earlier chunks alike.
 *
 * <p>Exactness: one (token, head) pair is computed by one thread: scores in ascending position
 * order with {@link VectorMath#dot}, {@link Softmax#inPlace}, then the weighted sum of values in
 * ascending position order, one fused multiply-add per element and position. Physical block ids
 * only change where bytes are read, never the order, and a token's result reads nothing of other
 * requests: it is bit-identical whatever the chunking, batch, thread count or block placement.
 */
public final class PagedAttention {
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
   * and slot.
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
   * window only narrows the ascending walk; the arithmetic of the positions read is that of the
   * full walk, so exactness holds as stated in the class comment.
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
    int hd = kv.headDim();
    int group = numHeads / kv.numKvHeads();
    int width = numHeads * hd;
    int bg = kv.blockTokens();
    int maxCtx = 0;
    for (int t = 0; t < tokens; t++) {
      maxCtx = Math.max(maxCtx, positions[t] + 1);
    }
    int scratchLength = windowTokens > 0 ? Math.min(maxCtx, windowTokens) : maxCtx;
    pool.parallelFor(
        tokens * numHeads,
        (from, to) -> {
          float[] scores = new float[scratchLength];
          for (int item = from; item < to; item++) {
            int t = item / numHeads;
            int h = item % numHeads;
            int kvHead = h / group;
            int[] table = blockTables[tokenRequest[t]];
            int end = positions[t] + 1;
            int lo = windowTokens > 0 ? Math.max(0, end - windowTokens) : 0;
            int n = end - lo;
            int qOff = t * width + h * hd;
            for (int i = 0; i < n; i++) {
              int j = lo + i;
              int block = table[j / bg];
              float s =
                  VectorMath.dot(q, qOff, kv.memory(), kv.kAt(block, j % bg, kvHead), hd) * scale;
              scores[i] = softcap > 0f ? softcap(s, softcap) : s;
            }
            Softmax.inPlace(scores, 0, n);
            java.util.Arrays.fill(out, qOff, qOff + hd, 0f);
            for (int i = 0; i < n; i++) {
              int j = lo + i;
              int block = table[j / bg];
              VectorMath.axpy(scores[i], kv.memory(), kv.vAt(block, j % bg, kvHead), out, qOff, hd);
            }
          }
        });
  }

  /** {@code cap · tanh(x / cap)} in float, with {@link StrictMath#tanh}. */
  public static float softcap(float x, float cap) {
    return (float) StrictMath.tanh(x / cap) * cap;
  }
}

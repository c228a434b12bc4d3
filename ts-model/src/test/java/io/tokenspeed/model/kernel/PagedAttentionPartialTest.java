package io.tokenspeed.model.kernel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.checkpoint.Tensor;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.SplittableRandom;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Attention over pages dealt to several owners: each owner attends over its own pages ({@link
 * PagedAttention#attendPartial}), and {@link PagedAttention#combinePartials} joins the partial
 * results with their log-sum-exps into the attention over every page ({@link
 * PagedAttention#attend}), whatever the deal — owners with no page of a token included.
 */
class PagedAttentionPartialTest {
  private static final int BG = 4;
  private static final int KV_HEADS = 2;
  private static final int HEADS = 4;
  private static final int HD = 8;

  @ParameterizedTest(name = "seed={0} owners={1} softcap={2}")
  @CsvSource({"1, 2, 0", "2, 3, 0", "3, 4, 0", "4, 2, 5", "5, 5, 0", "6, 1, 0"})
  void shouldCombineTheOwnersPartialsIntoTheWholeAttention(long seed, int owners, float softcap) {
    SplittableRandom random = new SplittableRandom(seed);
    int rows = 1 + random.nextInt(9);
    int numBlocks = rows + 4;
    long fieldBytes = (long) KV_HEADS * BG * HD * 4;
    try (Arena arena = Arena.ofShared();
        ComputePool pool = ComputePool.ofThreads(2)) {
      MemorySegment memory = arena.allocate(numBlocks * 2 * fieldBytes, 64);
      for (long at = 2 * fieldBytes; at < memory.byteSize(); at += 4) {
        memory.set(Tensor.F32_LE, at, (float) random.nextGaussian());
      }
      PagedAttention.LayerKv kv =
          new PagedAttention.LayerKv(memory, 2 * fieldBytes, 0, fieldBytes, BG, KV_HEADS, HD);
      int[] table = new int[rows];
      for (int i = 0; i < rows; i++) {
        table[i] = rows - i; // distinct, non-null blocks, in reverse
      }
      // queries: a few tokens of one request at random positions within the rows
      int tokens = 1 + random.nextInt(6);
      int[] positions = new int[tokens];
      int[] tokenRequest = new int[tokens];
      for (int t = 0; t < tokens; t++) {
        positions[t] = random.nextInt(rows * BG);
      }
      float[] q = new float[tokens * HEADS * HD];
      for (int i = 0; i < q.length; i++) {
        q[i] = (float) random.nextGaussian();
      }
      float[] want = new float[q.length];
      PagedAttention.attend(
          pool,
          kv,
          q,
          tokens,
          HEADS,
          0.35f,
          softcap,
          0,
          positions,
          tokenRequest,
          new int[][] {table},
          want);

      int items = tokens * HEADS;
      int stride = items * (HD + 1);
      float[] gathered = new float[owners * stride];
      int[] owner = new int[rows];
      for (int i = 0; i < rows; i++) {
        owner[i] = random.nextInt(owners); // any deal, an owner may get nothing
      }
      for (int r = 0; r < owners; r++) {
        int[] mine = new int[rows];
        for (int i = 0; i < rows; i++) {
          mine[i] = owner[i] == r ? table[i] : 0;
        }
        float[] out = new float[stride];
        float[] lse = new float[items];
        PagedAttention.attendPartial(
            pool,
            kv,
            q,
            tokens,
            HEADS,
            0.35f,
            softcap,
            positions,
            tokenRequest,
            new int[][] {mine},
            out,
            lse);
        System.arraycopy(out, 0, gathered, r * stride, items * HD);
        System.arraycopy(lse, 0, gathered, r * stride + items * HD, items);
        for (int t = 0; t < tokens; t++) {
          boolean any = false;
          for (int i = 0; i <= positions[t] / BG; i++) {
            any |= owner[i] == r;
          }
          for (int h = 0; h < HEADS; h++) {
            assertEquals(
                !any,
                lse[t * HEADS + h] == Float.NEGATIVE_INFINITY,
                "owner " + r + " token " + t + ": lse is -inf exactly when it holds no page");
          }
        }
      }
      float[] got = new float[q.length];
      PagedAttention.combinePartials(gathered, owners, items, HD, got);
      double worst = 0;
      for (int i = 0; i < want.length; i++) {
        worst = Math.max(worst, Math.abs(want[i] - got[i]));
      }
      assertTrue(worst < 2e-5, "max |combined - whole| = " + worst);
    }
  }
}

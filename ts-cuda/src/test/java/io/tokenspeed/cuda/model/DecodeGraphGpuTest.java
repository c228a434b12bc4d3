package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.OnTheGpu;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Decode steps replayed as CUDA graphs give the same bits as the same steps launched kernel by
 * kernel: two deterministic models over the same weights and the same KV, one with graphs, decode
 * the same requests step after step (batches of several sizes, a context that crosses a stride
 * bucket, so that steps are captured, replayed and captured again), and every step's logits must be
 * equal bit for bit, with most steps replayed. Then the same with two normal-mode models that take
 * the split-KV decode attention on every step: a captured split step launches a grid widened to its
 * stride's longest context ({@link CudaCausalLm#graphSplitPlan}), whose extra blocks must change
 * nothing.
 */
class DecodeGraphGpuTest extends OnTheGpu {
  @ParameterizedTest(name = "deterministic {0}, split-KV {1}")
  @CsvSource({"true, false", "false, true"})
  void shouldGiveTheEagerStepsBitsWhenReplayed(
      boolean deterministic, boolean splitKv, @TempDir Path dir) {
    Path folder = FlashAttentionGpuTest.model(64, dir);
    SplittableRandom rnd = new SplittableRandom(77);
    try (CudaCausalLm eager = CudaCausalLm.load(device, folder, "graphs", "test", deterministic);
        CudaCausalLm graphed = CudaCausalLm.load(device, folder, "graphs", "test", deterministic);
        CudaKvCache kv = new CudaKvCache(device, eager.cacheLayout(16, 16), 600)) {
      eager.useGraphs(false);
      graphed.useGraphs(true);
      if (splitKv) {
        eager.useSplitKv(true);
        graphed.useSplitKv(true);
      }
      int vocab = eager.vocabSize();
      CudaCausalLmGpuTest.Blocks blocks = new CudaCausalLmGpuTest.Blocks(kv.numBlocks(0), 5);
      // contexts 30, 70, 500 and 1,010: the last crosses 1,024 positions (64 table rows) while
      // decoding, which takes a stride of 128 rows and new graphs
      int[] contexts = {30, 70, 500, 1010};
      int steps = 40;
      List<int[]> tables = new ArrayList<>();
      for (int context : contexts) {
        int[] table = blocks.table(Math.ceilDiv(context + steps, 16));
        tables.add(table);
        CudaCausalLmGpuTest.prefill(
            eager, kv, rnd.ints(context, 0, vocab).toArray(), table, Math.min(context, 512));
      }
      int[] position = contexts.clone();
      int compared = 0;
      for (int step = 0; step < steps; step++) {
        // all four, or the first two, or the last three: three batch sizes, each seen again
        int from = step % 3 == 2 ? 1 : 0;
        int to = step % 3 == 1 ? 2 : contexts.length;
        List<ForwardRequest> batch = new ArrayList<>();
        for (int r = from; r < to; r++) {
          batch.add(
              new ForwardRequest(
                  new int[] {rnd.nextInt(vocab)}, position[r], new int[][] {tables.get(r)}, false));
        }
        // the same step both ways: both write the same KV at the same positions
        float[][] want = logits(eager, kv, batch);
        float[][] got = logits(graphed, kv, batch);
        for (int r = 0; r < batch.size(); r++) {
          FlashAttentionGpuTest.assertSameBits(
              "step " + step + ", request " + (from + r) + " at " + position[from + r],
              got[r],
              want[r]);
          assertEquals(vocab, got[r].length);
          compared++;
        }
        for (int r = from; r < to; r++) {
          position[r]++;
        }
      }
      long[] counts = graphed.graphCounts();
      long[] none = eager.graphCounts();
      System.out.printf(
          Locale.ROOT,
          "decode graphs (deterministic %b, split-KV %b): %d steps, %d rows compared bit for bit,"
              + " %d captures, %d replays%n",
          deterministic,
          splitKv,
          steps,
          compared,
          counts[0],
          counts[1]);
      assertEquals(0, none[0] + none[1], "the eager model never captures");
      assertTrue(counts[0] >= 4, "captures: " + counts[0]);
      assertTrue(counts[1] >= steps / 2, "replays: " + counts[1]);
      if (splitKv) {
        assertEquals(steps, graphed.splitForwards(), "every step took the split path");
      }
    }
  }

  private static float[][] logits(CudaCausalLm m, CudaKvCache kv, List<ForwardRequest> batch) {
    var result = m.forward(new ForwardBatch(batch), kv);
    float[][] out = new float[batch.size()][];
    for (int r = 0; r < batch.size(); r++) {
      out[r] = result.logits(r).clone();
    }
    return out;
  }
}

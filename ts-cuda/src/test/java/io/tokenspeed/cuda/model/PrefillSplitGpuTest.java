package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.tokenspeed.cuda.Bf16Bits;
import io.tokenspeed.cuda.OnTheGpu;
import io.tokenspeed.cuda.model.CudaCausalLm.FlashKernel;
import io.tokenspeed.cuda.model.CudaCausalLm.SplitPlan;
import io.tokenspeed.cuda.model.FlashAttentionGpuTest.Float64Check;
import io.tokenspeed.cuda.model.FlashAttentionGpuTest.Problem;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Hopper's flash kernels split over the keys for prefill chunks ({@code
 * flash_attention_wgmma_split_d64/d128}, {@code flash_attention_tma_split_d64/d128}, then {@code
 * decode_attention_combine}; {@link CudaCausalLm#prefillSplitPlan}):
 *
 * <ul>
 *   <li>kernel by kernel, on {@link FlashAttentionGpuTest}'s problems (random bf16 keys and values,
 *       every unwritten slot of the pool NaN): every output within the float64 bound of the unsplit
 *       kernel; a token whose keys fit the first split bit-identical to the unsplit kernel (split 0
 *       reads its keys in the same tiles, in the same order); chunks that start before a split
 *       boundary and end after it, tokens whose context ends exactly on one, decode tokens beside a
 *       chunk, a group of 3 whose token's rows fall in both consumers;
 *   <li>on a model, a 24-token chunk after a 20,000-token context through the split kernel and the
 *       unsplit one over the same KV: the logits within {@link SplitKvGpuTest#SPLIT_RELATIVE}.
 * </ul>
 */
class PrefillSplitGpuTest extends OnTheGpu {

  @BeforeEach
  void onHopper() {
    assumeTrue(
        "sm_90".equals(device.arch()),
        "the wgmma kernels need compute capability 9.0; this GPU is " + device.arch());
  }

  /** A kernel-level case: shape, block size, split keys, and each request's (start, tokens). */
  record Case(String label, int heads, int kvHeads, int blockTokens, int splitKeys, int[][] reqs) {
    @Override
    public String toString() {
      return label;
    }
  }

  static Stream<Arguments> cases() {
    List<Case> shapes =
        List.of(
            new Case(
                "64 tokens after 3,000 (6 splits of 512), 8 heads on 2",
                8,
                2,
                16,
                512,
                new int[][] {{3000, 64}}),
            new Case(
                "a chunk across the boundary at 1,536, a token of one split, a chunk from 0",
                4,
                1,
                16,
                512,
                new int[][] {{1500, 40}, {100, 32}, {0, 20}}),
            new Case(
                "group of 3, 42 tokens across 1,024, blocks of 12",
                6,
                2,
                12,
                512,
                new int[][] {{1000, 42}}),
            new Case(
                "contexts ending on a boundary (640, 1,280), decode tokens beside a chunk",
                4,
                2,
                16,
                640,
                new int[][] {{639, 1}, {1279, 1}, {2000, 1}, {700, 100}}),
            new Case(
                "one head a KV head, 128 tokens after 5,000, blocks of 48 (splits inside blocks)",
                1,
                1,
                48,
                1024,
                new int[][] {{5000, 128}}));
    List<Arguments> all = new ArrayList<>();
    for (FlashKernel kernel : new FlashKernel[] {FlashKernel.WGMMA, FlashKernel.TMA}) {
      for (int headDim : new int[] {128, 64}) {
        for (Case c : shapes) {
          all.add(Arguments.of(kernel, headDim, c));
        }
      }
    }
    return all.stream();
  }

  @ParameterizedTest
  @MethodSource("cases")
  void shouldMatchTheUnsplitKernelAndFloat64(FlashKernel kernel, int headDim, Case c) {
    try (Problem p = new Problem(c.heads(), c.kvHeads(), headDim, c.blockTokens(), c.reqs(), 11)) {
      int[] which = new int[p.requests.size()];
      int maxContext = 0;
      for (int r = 0; r < which.length; r++) {
        which[r] = r;
        maxContext = Math.max(maxContext, p.requests.get(r).keys());
      }
      int maxSplits = Math.ceilDiv(maxContext, c.splitKeys());
      SplitPlan plan = new SplitPlan(c.splitKeys(), maxSplits, maxSplits);
      int[] tiles = FlashAttentionGpuTest.tiles(p, which, null);
      String name = kernel.function(headDim) + " split " + plan;
      System.out.printf(Locale.ROOT, "%s, %s ...%n", name, c);
      short[] split = FlashAttentionGpuTest.attend(kernel, plan, p, which, tiles);
      short[] whole = FlashAttentionGpuTest.attend(kernel, p, which, tiles);
      Float64Check check = new Float64Check(name);
      int width = p.heads * headDim;
      int row = 0;
      int oneSplitRows = 0;
      int oneSplitDiffer = 0;
      int severalRows = 0;
      double severalWorst = 0;
      for (int r = 0; r < which.length; r++) {
        var req = p.requests.get(r);
        short[] mine = Arrays.copyOfRange(split, row * width, (row + req.n()) * width);
        check.add(p, r, mine);
        for (int t = 0; t < req.n(); t++) {
          int keys = req.start() + t + 1;
          for (int i = 0; i < width; i++) {
            int at = (row + t) * width + i;
            if (keys <= c.splitKeys()) {
              oneSplitRows++;
              oneSplitDiffer += split[at] == whole[at] ? 0 : 1;
            } else {
              severalRows++;
              double d = Math.abs(Bf16Bits.value(split[at]) - Bf16Bits.value(whole[at]));
              severalWorst = Double.isNaN(d) ? Double.POSITIVE_INFINITY : Math.max(severalWorst, d);
            }
          }
        }
        row += req.n();
      }
      System.out.printf(
          Locale.ROOT,
          "  float64: worst %.3f of the bound at %s; one split: %d of %d outputs differ from the"
              + " unsplit kernel; several: %d outputs, largest difference %.3g%n",
          check.worst,
          check.worstAt,
          oneSplitDiffer,
          oneSplitRows,
          severalRows,
          severalWorst);
      check.assertNone();
      assertEquals(0, oneSplitDiffer, name + ": tokens of one split must equal the unsplit kernel");
      assertTrue(severalRows > 0, c + " has no token of several splits");
    }
  }

  @ParameterizedTest
  @EnumSource(
      value = FlashKernel.class,
      names = {"WGMMA", "TMA"})
  void shouldKeepAModelsLogitsWithinTheSplitBound(FlashKernel kernel, @TempDir Path dir) {
    int headDim = 128;
    Path folder =
        SyntheticCheckpoints.materialize(
            "prefill-split", CudaCausalLmGpuTest.attentionConfig(headDim), 8, DType.BF16, dir);
    int bg = 16;
    int context = 20000;
    int chunk = 24;
    int numBlocks = 2 + Math.ceilDiv(context + chunk, bg);
    Random rnd = new Random(53);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, "prefill-split", "test");
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(bg, bg), numBlocks)) {
      m.useFlash(kernel);
      int vocab = m.vocabSize();
      int[] table = new CudaCausalLmGpuTest.Blocks(numBlocks, 5).table(numBlocks - 2);
      int[] prompt = CudaCausalLmGpuTest.randomIds(rnd, context, vocab);
      m.useSplitKv(false);
      for (int start = 0; start < context; start += 4096) {
        int[] part = Arrays.copyOfRange(prompt, start, Math.min(context, start + 4096));
        m.forward(ForwardBatch.of(new ForwardRequest(part, start, new int[][] {table}, false)), kv);
      }
      int[] suffix = CudaCausalLmGpuTest.randomIds(rnd, chunk, vocab);
      ForwardBatch batch =
          ForwardBatch.of(new ForwardRequest(suffix, context, new int[][] {table}, true));
      // each pass rewrites the chunk's own KV (the same values) before its attention reads them
      long before = m.prefillSplitForwards();
      ForwardResult whole = m.forward(batch, kv);
      assertEquals(before, m.prefillSplitForwards(), "split off: the unsplit kernel");
      m.useSplitKv(true);
      ForwardResult split = m.forward(batch, kv);
      assertEquals(before + 1, m.prefillSplitForwards(), "the chunk took the split kernel");
      double worst = 0;
      int same = 0;
      for (int i = 0; i < chunk; i++) {
        worst = Math.max(worst, CudaCausalLmGpuTest.relative(split.row(0, i), whole.row(0, i)));
        same +=
            CudaCausalLmGpuTest.argmax(split.row(0, i), 0, vocab)
                    == CudaCausalLmGpuTest.argmax(whole.row(0, i), 0, vocab)
                ? 1
                : 0;
      }
      System.out.printf(
          Locale.ROOT,
          "%s: %d tokens after %d, split vs unsplit logits %.2e relative, argmax equal on %d%n",
          kernel,
          chunk,
          context,
          worst,
          same);
      assertTrue(worst <= SplitKvGpuTest.SPLIT_RELATIVE, "split vs unsplit: " + worst);
    }
  }
}

package io.tokenspeed.cuda.model;

import static io.tokenspeed.cuda.Bf16Bits.value;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.tokenspeed.cuda.CallTimes;
import io.tokenspeed.cuda.OnTheGpu;
import io.tokenspeed.cuda.model.CudaCausalLm.FlashKernel;
import io.tokenspeed.cuda.model.FlashAttentionGpuTest.Float64Check;
import io.tokenspeed.cuda.model.FlashAttentionGpuTest.Problem;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Hopper's flash kernel ({@code flash_attention_wgmma_d64/d128}, {@code
 * -Dtokenspeed.cuda.flash=wgmma}) with {@link FlashAttentionGpuTest}'s checks: every output within
 * the same bf16 bound of float64, a request's rows bit-identical alone, in a batch and in any
 * tiles, a model's logits the same chunked and whole, batched and alone; then both kernels timed on
 * the same inputs. Skipped on a GPU that is not of compute capability 9.0.
 *
 * <p>Written to be read from one run's output: the methods run in order, the smallest cases first,
 * and each case prints its worst error (and where) before anything is asserted, so a failure (or a
 * launch that fails) shows which part of the kernel is wrong: one key alone exercises only p · v
 * and the output's layout; 64 rows one consumer warpgroup and one key tile; 128 rows both
 * consumers; a later start two key tiles and the causal mask; a group of 3 a token whose rows fall
 * in both consumers.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class WgmmaFlashGpuTest extends OnTheGpu {

  @BeforeEach
  void onHopper() {
    assumeTrue(
        "sm_90".equals(device.arch()),
        "the wgmma kernel needs compute capability 9.0; this GPU is " + device.arch());
  }

  /**
   * Small problems, each printed as it completes: its worst error over the bound and where, the
   * first output past the bound, the first values of the first row against float64, and the largest
   * difference from the {@code mma.sync} kernel on the same problem. Asserted at the end: no output
   * past the bound in any case.
   */
  @Test
  @Order(1)
  void shouldComputeSmallCasesWithinTheBound() {
    int failures = 0;
    for (int headDim : new int[] {128, 64}) {
      failures += smallCase("one key: p = 1, out = v", headDim, 4, 1, 16, new int[][] {{0, 1}});
      failures +=
          smallCase(
              "64 rows (64 tokens, 1 head) x 64 keys: one consumer, one key tile",
              headDim,
              1,
              1,
              16,
              new int[][] {{0, 64}});
      failures +=
          smallCase(
              "128 rows (32 tokens x 4 heads), 32 keys: both consumers",
              headDim,
              4,
              1,
              16,
              new int[][] {{0, 32}});
      failures +=
          smallCase(
              "32 tokens from position 100: two key tiles, the mask inside the second",
              headDim,
              4,
              1,
              16,
              new int[][] {{100, 32}});
      failures +=
          smallCase(
              "group of 3, 42 tokens: token 21's rows in both consumers",
              headDim,
              3,
              1,
              12,
              new int[][] {{0, 42}});
      failures +=
          smallCase(
              "600 tokens (5 key tiles, 38 blocks of tiles) and a decode at 700, 8 heads on 2",
              headDim,
              8,
              2,
              16,
              new int[][] {{0, 600}, {700, 1}});
    }
    assertEquals(0, failures, "outputs past the bound in the small cases (printed above)");
  }

  /** One small case alone (each request in its own launch); returns the outputs past the bound. */
  private static int smallCase(
      String label, int headDim, int heads, int kvHeads, int blockTokens, int[][] startAndN) {
    String kernel = FlashKernel.WGMMA.function(headDim);
    // named before it runs: a launch that fails says which case it was
    System.out.printf(Locale.ROOT, "%s, head size %d: %s ...%n", kernel, headDim, label);
    try (Problem p = new Problem(heads, kvHeads, headDim, blockTokens, startAndN, 7L + headDim)) {
      Float64Check check = new Float64Check(kernel);
      double fromMma = 0;
      StringBuilder firstRow = new StringBuilder();
      for (int r = 0; r < p.requests.size(); r++) {
        int[] one = {r};
        int[] tiles = FlashAttentionGpuTest.tiles(p, one, null);
        short[] got = FlashAttentionGpuTest.attend(FlashKernel.WGMMA, p, one, tiles);
        short[] mma = FlashAttentionGpuTest.attend(FlashKernel.MMA, p, one, tiles);
        double[] want = check.add(p, r, got);
        for (int i = 0; i < got.length; i++) {
          double d = Math.abs(value(got[i]) - value(mma[i]));
          fromMma = Double.isNaN(d) ? Double.POSITIVE_INFINITY : Math.max(fromMma, d);
        }
        if (r == 0) {
          for (int e = 0; e < 4; e++) {
            firstRow.append(
                String.format(
                    Locale.ROOT, " %.4f/%.4f/%.4f", value(got[e]), want[e], value(mma[e])));
          }
        }
      }
      System.out.printf(
          Locale.ROOT,
          "%s, head size %d, %d heads on %d KV heads, %s: worst error / bound %.3f (%s);"
              + " %d outputs past the bound%s; largest |wgmma - mma| %.3g; token 0, head 0,"
              + " dims 0-3 (wgmma/float64/mma):%s%n",
          kernel,
          headDim,
          heads,
          kvHeads,
          label,
          check.worst,
          check.worstAt,
          check.failures,
          check.first == null ? "" : ", the first: " + check.first,
          fromMma,
          firstRow);
      return check.failures;
    }
  }

  /** {@link FlashAttentionGpuTest#shouldMatchFloat64AndStayBatchInvariant} on the wgmma kernel. */
  @ParameterizedTest
  @Order(2)
  @CsvSource({
    "128, 32, 8, 16", // Llama 3 8B: 4 query heads per KV head
    "128, 6, 2, 12", // 3 per KV head (126 of a block's 128 rows), blocks of 12 positions
    "128, 16, 2, 64", // 8 per KV head: tiles of 16 tokens
    "64, 12, 4, 16", // llama-100m
    "64, 8, 8, 16" // one per KV head: tiles of 128 tokens
  })
  void shouldMatchFloat64AndStayBatchInvariant(
      int headDim, int heads, int kvHeads, int blockTokens) {
    FlashAttentionGpuTest.matchFloat64AndStayBatchInvariant(
        FlashKernel.WGMMA, headDim, heads, kvHeads, blockTokens);
  }

  /**
   * {@link FlashAttentionGpuTest#shouldGiveTheSameLogitsChunkedAsWholeAndBatchedAsAlone} on a
   * deterministic model switched to the wgmma kernel.
   */
  @ParameterizedTest
  @Order(3)
  @ValueSource(ints = {64, 128})
  void shouldGiveTheSameLogitsChunkedAsWholeAndBatchedAsAlone(int headDim, @TempDir Path dir) {
    FlashAttentionGpuTest.sameLogitsChunkedAsWholeAndBatchedAsAlone(
        FlashKernel.WGMMA, headDim, dir);
  }

  /**
   * The default ({@code tokenspeed.cuda.flash} unset: auto) on Hopper, in normal mode: a batch of
   * decode tokens only runs on the mma kernel and a batch with a prefill chunk on the wgmma kernel.
   * On one model, after prefilling two contexts: a decode-only batch and a batch of a decode and a
   * chunk, first under the default, then with every batch forced to mma, then to wgmma. The
   * default's decode-only logits equal the mma run's bit for bit, its mixed batch's the wgmma
   * run's; and the two kernels' runs differ, so the equalities say which kernel ran. (Every run
   * rewrites the positions it computes before reading them, so all read the same contexts.)
   */
  @ParameterizedTest
  @Order(4)
  @ValueSource(ints = {64, 128})
  void shouldRunDecodeOnlyBatchesOnMmaAndPrefillBatchesOnWgmmaByDefault(
      int headDim, @TempDir Path dir) {
    Path folder = FlashAttentionGpuTest.model(headDim, dir);
    SplittableRandom rnd = new SplittableRandom(71 + headDim);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, "flash", "test");
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(16, 16), 256)) {
      assertEquals(FlashKernel.WGMMA, m.flash());
      assertEquals(FlashKernel.MMA, m.decodeFlash());
      int vocab = m.vocabSize();
      CudaCausalLmGpuTest.Blocks blocks = new CudaCausalLmGpuTest.Blocks(kv.numBlocks(0), 13);
      int[] a = rnd.ints(301, 0, vocab).toArray();
      int[] b = rnd.ints(264, 0, vocab).toArray();
      int[] ta = blocks.table(19);
      int[] tb = blocks.table(17);
      CudaCausalLmGpuTest.prefill(m, kv, Arrays.copyOf(a, 300), ta, 300);
      CudaCausalLmGpuTest.prefill(m, kv, Arrays.copyOf(b, 200), tb, 200);
      ForwardRequest decode = new ForwardRequest(new int[] {a[300]}, 300, new int[][] {ta}, false);
      ForwardRequest chunk =
          new ForwardRequest(Arrays.copyOfRange(b, 200, 264), 200, new int[][] {tb}, false);
      ForwardBatch decodeOnly = ForwardBatch.of(decode);
      ForwardBatch mixed = new ForwardBatch(List.of(decode, chunk));
      float[] decodeAuto = m.forward(decodeOnly, kv).logits(0);
      float[] mixedAuto = m.forward(mixed, kv).logits(0);
      m.useFlash(FlashKernel.MMA);
      float[] decodeMma = m.forward(decodeOnly, kv).logits(0);
      float[] mixedMma = m.forward(mixed, kv).logits(0);
      m.useFlash(FlashKernel.WGMMA);
      float[] decodeWgmma = m.forward(decodeOnly, kv).logits(0);
      float[] mixedWgmma = m.forward(mixed, kv).logits(0);
      assertFalse(
          Arrays.equals(decodeMma, decodeWgmma),
          "the two kernels gave the same bits: the comparisons below could not tell them apart");
      assertFalse(Arrays.equals(mixedMma, mixedWgmma), "the same for the mixed batch");
      FlashAttentionGpuTest.assertSameBits(
          "head size " + headDim + ", decode-only batch: default vs mma", decodeAuto, decodeMma);
      FlashAttentionGpuTest.assertSameBits(
          "head size " + headDim + ", decode in a batch with a chunk: default vs wgmma",
          mixedAuto,
          mixedWgmma);
      System.out.printf(
          Locale.ROOT,
          "head size %d, normal mode by default: decode-only batch = mma bit for bit, mixed batch ="
              + " wgmma bit for bit%n",
          headDim);
    }
  }

  /**
   * The TMA kernel ({@code flash_attention_tma_d64/d128}) gives the wgmma kernel's bits on every
   * output: the same problems as {@link #shouldMatchFloat64AndStayBatchInvariant} (whose pool holds
   * NaNs wherever no position was written, so a TMA box that reaches past a request's last position
   * copies NaNs the kernel must not let through) with blocks the TMA takes, each request alone, the
   * batch, and random tiles; blocks of 12 positions, which it does not take, run the wgmma kernel
   * in its place. Then a model's logits under each kernel, chunked and whole, equal bit for bit.
   */
  @ParameterizedTest
  @Order(5)
  @CsvSource({
    "128, 32, 8, 16",
    "128, 16, 2, 64",
    "128, 8, 8, 8",
    "128, 6, 2, 12",
    "64, 12, 4, 16",
    "64, 8, 8, 128",
    "64, 8, 4, 256"
  })
  void shouldGiveTheWgmmaKernelsBitsWithTma(int headDim, int heads, int kvHeads, int blockTokens) {
    assertEquals(blockTokens != 12, CudaCausalLm.tmaTakes(blockTokens));
    int[][] startAndN = {{0, 1}, {0, 17}, {0, 200}, {0, 1000}, {300, 77}, {129, 250}, {1000, 1}};
    try (Problem p =
        new Problem(heads, kvHeads, headDim, blockTokens, startAndN, 977L * blockTokens + heads)) {
      int all = p.requests.size();
      int[] batch = java.util.stream.IntStream.range(0, all).toArray();
      int differ = 0;
      long compared = 0;
      long notFinite = 0;
      for (int r = 0; r <= all; r++) {
        int[] which = r < all ? new int[] {r} : batch;
        for (SplittableRandom cut : new SplittableRandom[] {null, new SplittableRandom(r)}) {
          int[] tiles = FlashAttentionGpuTest.tiles(p, which, cut);
          short[] wgmma = FlashAttentionGpuTest.attend(FlashKernel.WGMMA, p, which, tiles);
          short[] tma = FlashAttentionGpuTest.attend(FlashKernel.TMA, p, which, tiles);
          differ += FlashAttentionGpuTest.differ(wgmma, tma);
          compared += tma.length;
          for (short bits : tma) {
            notFinite += (bits & 0x7f80) == 0x7f80 ? 1 : 0;
          }
        }
      }
      System.out.printf(
          Locale.ROOT,
          "tma vs wgmma, head size %d, %d heads on %d KV heads, blocks of %d: %d of %d outputs"
              + " differ in bits, %d not finite%n",
          headDim,
          heads,
          kvHeads,
          blockTokens,
          differ,
          compared,
          notFinite);
      assertEquals(0, notFinite, "the TMA kernel let a NaN or an infinity through");
      assertEquals(0, differ, "the TMA kernel's bits differ from the wgmma kernel's");
    }
  }

  /** A model's logits on the TMA kernel: chunked = whole, batched = alone, bit for bit. */
  @ParameterizedTest
  @Order(6)
  @ValueSource(ints = {64, 128})
  void shouldGiveTheSameLogitsChunkedAsWholeWithTma(int headDim, @TempDir Path dir) {
    FlashAttentionGpuTest.sameLogitsChunkedAsWholeAndBatchedAsAlone(FlashKernel.TMA, headDim, dir);
  }

  /**
   * Both kernels on the same inputs, Llama 3 8B's heads (32 of 128 on 8) and then Llama 3.2 1B's
   * (32 of 64 on 8), causal prefills of 8,192 and 32,768 tokens: each one's time (median of 5
   * launches after one), TFLOP/s and 32 layers' total, the wgmma kernel's outputs against the
   * mma.sync kernel's (largest difference, asserted within twice the float64 bound) and its speed
   * over the mma.sync kernel's. No speed is asserted.
   */
  @Test
  @Order(7)
  void shouldReportBothKernelsTimesAt8kAnd32k() {
    FlashKernel[] both = {FlashKernel.MMA, FlashKernel.WGMMA, FlashKernel.TMA};
    StringBuilder summary = new StringBuilder("wgmma over mma.sync (tma over wgmma):");
    try (CallTimes times = new CallTimes(device, 5)) {
      for (int headDim : new int[] {128, 64}) {
        for (int n : new int[] {8192, 32768}) {
          double[] ms = FlashAttentionGpuTest.timeOneShape(both, headDim, n, times);
          summary.append(
              String.format(
                  Locale.ROOT,
                  " head size %d, %d tokens %.2f ms vs %.2f ms (%.2fx; tma %.2f ms, %.2fx);",
                  headDim,
                  n,
                  ms[1],
                  ms[0],
                  ms[0] / ms[1],
                  ms[2],
                  ms[1] / ms[2]));
        }
      }
    }
    System.out.println(summary);
  }
}

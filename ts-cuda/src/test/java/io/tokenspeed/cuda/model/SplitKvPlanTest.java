package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.model.CudaCausalLm.SplitKv;
import io.tokenspeed.cuda.model.CudaCausalLm.SplitPlan;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * When a batch takes the split-KV decode attention and how many splits its tokens get: the Java
 * side of the plan, whose rule the kernels repeat ({@code split_size} in kernels.cu) to find each
 * token's own splits.
 */
class SplitKvPlanTest {

  /** An H100's multiprocessors. */
  static final int SMS = 132;

  @Test
  void shouldBeOnUnlessThePropertySaysOff() {
    assertEquals(SplitKv.AUTO, CudaCausalLm.splitKvMode(null));
    assertEquals(SplitKv.OFF, CudaCausalLm.splitKvMode("off"));
    assertEquals(SplitKv.OFF, CudaCausalLm.splitKvMode(" OFF "));
    assertEquals(SplitKv.AUTO, CudaCausalLm.splitKvMode(" ON "));
    assertEquals(SplitKv.AUTO, CudaCausalLm.splitKvMode("on"));
    var bad =
        org.junit.jupiter.api.Assertions.assertThrows(
            IllegalArgumentException.class, () -> CudaCausalLm.splitKvMode(""));
    assertEquals("tokenspeed.cuda.splitkv must be off or on, not \"\"", bad.getMessage());
    assertEquals("tokenspeed.cuda.splitkv", CudaCausalLm.SPLIT_KV_PROPERTY);
  }

  @Test
  void shouldSplitNothingWhenOffOrWhenABatchIsNotPureDecode() {
    for (SplitKv mode : SplitKv.values()) {
      assertNull(CudaCausalLm.splitPlan(mode, false, 1, 32768, 8, 4, SMS), mode + " prefill");
    }
    assertNull(CudaCausalLm.splitPlan(SplitKv.OFF, true, 1, 32768, 8, 4, SMS));
  }

  @Test
  void shouldSplitUnderAutoFromTheMinimumContextOn() {
    assertNull(
        CudaCausalLm.splitPlan(
            SplitKv.AUTO, true, 1, CudaCausalLm.SPLIT_MIN_CONTEXT - 1, 8, 4, SMS));
    // batch 1, 8 KV heads of 4 query heads: the cap aims at 4 · 132 blocks, ⌈528 / 8⌉ = 66
    assertEquals(
        new SplitPlan(128, 66, 4),
        CudaCausalLm.splitPlan(SplitKv.AUTO, true, 1, CudaCausalLm.SPLIT_MIN_CONTEXT, 8, 4, SMS));
    // 32768 positions are 256 units of 128: over the cap, 64 splits of 512 positions (the grid
    // bounds them by the cap)
    assertEquals(64, CudaCausalLm.splitsOf(32768, 128, 66));
    assertEquals(
        new SplitPlan(128, 66, 66),
        CudaCausalLm.splitPlan(SplitKv.AUTO, true, 1, 32768, 8, 4, SMS));
    // a batch of 4 on 8 KV heads: 32 blocks a split, ⌈528 / 32⌉ = 17 splits at most
    assertEquals(
        new SplitPlan(128, 17, 17),
        CudaCausalLm.splitPlan(SplitKv.AUTO, true, 4, 20000, 8, 4, SMS));
  }

  @Test
  void shouldNotSplitUnderAutoUnlessTheBatchIsSmall() {
    // 4 tokens · 8 KV heads = 32 blocks a split, a quarter of 132 or less: split
    assertEquals(
        new SplitPlan(128, 17, 16), CudaCausalLm.splitPlan(SplitKv.AUTO, true, 4, 2048, 8, 4, SMS));
    // 5 tokens: 40 blocks, more than a quarter: the flash kernel
    assertNull(CudaCausalLm.splitPlan(SplitKv.AUTO, true, 5, 2048, 8, 4, SMS));
    assertNull(CudaCausalLm.splitPlan(SplitKv.AUTO, true, 16, 20000, 8, 4, SMS));
    assertNull(CudaCausalLm.splitPlan(SplitKv.AUTO, true, 66, 32768, 8, 4, SMS));
    // ALWAYS splits them anyway; 66 tokens · 8 KV heads = 528 blocks: the cap is 1
    assertEquals(
        new SplitPlan(128, 1, 1),
        CudaCausalLm.splitPlan(SplitKv.ALWAYS, true, 66, 32768, 8, 4, SMS));
    // 65 tokens: the cap is 2
    assertEquals(
        new SplitPlan(128, 2, 2),
        CudaCausalLm.splitPlan(SplitKv.ALWAYS, true, 65, 32768, 8, 4, SMS));
  }

  @Test
  void shouldSplitEveryDecodeBatchWhenAlwaysWhateverItsContexts() {
    assertEquals(
        new SplitPlan(128, 66, 1), CudaCausalLm.splitPlan(SplitKv.ALWAYS, true, 1, 1, 8, 4, SMS));
    assertEquals(
        new SplitPlan(128, 66, 1), CudaCausalLm.splitPlan(SplitKv.ALWAYS, true, 1, 17, 8, 4, SMS));
    assertEquals(
        new SplitPlan(128, 66, 8),
        CudaCausalLm.splitPlan(SplitKv.ALWAYS, true, 1, 1000, 8, 4, SMS));
  }

  @Test
  void shouldCountAGroupAboveEightQueryHeadsAsSeveralBlocks() {
    // 16 query heads per KV head take two blocks per split: the cap halves
    assertEquals(
        new SplitPlan(128, 33, 33),
        CudaCausalLm.splitPlan(SplitKv.AUTO, true, 1, 16384, 8, 16, SMS));
    assertEquals(32, CudaCausalLm.splitsOf(16384, 128, 33));
    assertEquals(
        new SplitPlan(128, 66, 66),
        CudaCausalLm.splitPlan(SplitKv.AUTO, true, 1, 16384, 8, 8, SMS));
    assertEquals(64, CudaCausalLm.splitsOf(16384, 128, 66));
  }

  @Test
  void shouldCapTheSplitsOfASmallDevice() {
    // one multiprocessor, one KV head: ⌈4 / 1⌉ = 4 (AUTO would not split: one block a split is
    // more than a quarter of one multiprocessor)
    assertEquals(
        new SplitPlan(128, 4, 4), CudaCausalLm.splitPlan(SplitKv.ALWAYS, true, 1, 100000, 1, 1, 1));
    assertNull(CudaCausalLm.splitPlan(SplitKv.AUTO, true, 1, 100000, 1, 1, 1));
    // many multiprocessors: at most SPLIT_MAX
    SplitPlan p = CudaCausalLm.splitPlan(SplitKv.AUTO, true, 1, 1 << 20, 1, 1, 10000);
    assertEquals(CudaCausalLm.SPLIT_MAX, p.cap());
    assertEquals(CudaCausalLm.SPLIT_MAX, p.maxSplits());
  }

  @ParameterizedTest
  @CsvSource({
    "1, 256, 66, 256, 1",
    "17, 256, 66, 256, 1",
    "256, 256, 66, 256, 1",
    "257, 256, 66, 256, 2",
    "1000, 256, 66, 256, 4",
    "16896, 256, 66, 256, 66",
    "16897, 256, 66, 512, 34",
    "20000, 256, 5, 4096, 5",
    "20000, 256, 1, 20224, 1",
    "100, 32, 3, 64, 2"
  })
  void shouldSizeSplitsInWholeUnitsOfSplitKeys(
      int n, int splitKeys, int cap, int size, int splits) {
    assertEquals(size, CudaCausalLm.splitSize(n, splitKeys, cap));
    assertEquals(splits, CudaCausalLm.splitsOf(n, splitKeys, cap));
  }

  /**
   * A captured step's grid: widened to the longest context its stride holds, so that it does not
   * change with the batch's contexts, and still bounding every context up to that length.
   */
  @Test
  void shouldWidenACapturedPlanToItsStridesLongestContext() {
    SplitPlan plan = CudaCausalLm.splitPlan(SplitKv.ALWAYS, true, 1, 500, 8, 4, SMS);
    assertEquals(new SplitPlan(128, 66, 4), plan);
    // 64 table rows of 16 positions: 1,024 positions, 8 splits of 128
    assertEquals(new SplitPlan(128, 66, 8), CudaCausalLm.graphSplitPlan(plan, 64 * 16));
    // a long stride: the cap
    assertEquals(new SplitPlan(128, 66, 66), CudaCausalLm.graphSplitPlan(plan, 1 << 20));
    // never below the plan's own bound
    assertEquals(plan, CudaCausalLm.graphSplitPlan(plan, 16));
    Random rnd = new Random(11);
    for (int i = 0; i < 2_000; i++) {
      int tokens = 1 + rnd.nextInt(80);
      int positions = 16 << rnd.nextInt(12);
      int context = 1 + rnd.nextInt(positions);
      SplitPlan p = CudaCausalLm.splitPlan(SplitKv.ALWAYS, true, tokens, context, 8, 4, SMS);
      SplitPlan wide = CudaCausalLm.graphSplitPlan(p, positions);
      assertEquals(p.cap(), wide.cap());
      int n = 1 + rnd.nextInt(positions);
      assertTrue(
          CudaCausalLm.splitsOf(n, wide.splitKeys(), wide.cap()) <= wide.maxSplits(),
          () -> "context " + n + " of " + positions + " positions: " + wide);
    }
  }

  /** The grid's bound holds every shorter context's splits, though they do not grow with it. */
  @Test
  void shouldBoundTheSplitsOfEveryShorterContext() {
    assertEquals(3, CudaCausalLm.splitsOf(65, 32, 3));
    assertEquals(2, CudaCausalLm.splitsOf(97, 32, 3));
    assertEquals(3, CudaCausalLm.maxSplits(97, 32, 3));
    for (int splitKeys : new int[] {32, 256}) {
      for (int cap = 1; cap <= 40; cap++) {
        int most = 0;
        for (int n = 1; n <= 12_000; n++) {
          most = Math.max(most, CudaCausalLm.splitsOf(n, splitKeys, cap));
          int bound = CudaCausalLm.maxSplits(n, splitKeys, cap);
          String at = "n=" + n + " splitKeys=" + splitKeys + " cap=" + cap;
          assertTrue(most <= bound, at);
          assertTrue(bound <= cap, at);
        }
      }
    }
  }

  /**
   * Every split holds keys, the splits cover the context, there are at most cap of them, and their
   * size is the least whole number of units that allows it.
   */
  @Test
  void shouldCoverEveryContextWithNonEmptySplitsUpToTheCap() {
    Random rnd = new Random(3);
    for (int i = 0; i < 100_000; i++) {
      int n = 1 + rnd.nextInt(i % 2 == 0 ? 5000 : 1 << 20);
      int splitKeys = 32 << rnd.nextInt(5);
      int cap = 1 + rnd.nextInt(CudaCausalLm.SPLIT_MAX);
      int size = CudaCausalLm.splitSize(n, splitKeys, cap);
      int splits = CudaCausalLm.splitsOf(n, splitKeys, cap);
      String at = "n=" + n + " splitKeys=" + splitKeys + " cap=" + cap;
      assertEquals(0, size % splitKeys, at);
      assertTrue(splits >= 1 && splits <= cap, at);
      assertTrue((long) splits * size >= n, at + ": covered");
      assertTrue((long) (splits - 1) * size < n, at + ": the last split holds keys");
      // the least such size: one unit less would need more than cap splits
      assertTrue(size == splitKeys || Math.ceilDiv(n, size - splitKeys) > cap, at + ": least");
    }
  }

  @Test
  void shouldSizeThePartialsPerTokenHeadAndSplit() {
    // m and l, then d floats of acc, per (token, head, split)
    assertEquals(
        3L * 12 * 5 * (64 + 2) * 4,
        CudaCausalLm.splitPartialBytes(new SplitPlan(256, 5, 5), 3, 12, 64));
  }

  // ------------------------------------------------------------------ the split prefill attention

  @Test
  void shouldSplitARestoredPrefixSuffixOverTheMultiprocessors() {
    // 64 tokens of 4 query heads a KV head: two tiles of 32 tokens, 8 KV heads, 16 blocks; a
    // context of 32,832 positions is 257 key tiles: 17 splits of 16 tiles, about 2 · 132 blocks
    SplitPlan plan = CudaCausalLm.prefillSplitPlan(2, 8, 32832, SMS);
    assertEquals(new SplitPlan(16 * 128, 17, 17), plan);
    // a full prefill chunk fills the device by itself: unsplit
    assertNull(CudaCausalLm.prefillSplitPlan(256, 8, 32832, SMS));
    // 67 blocks are more than half of 132: unsplit; 66 are not
    assertNull(CudaCausalLm.prefillSplitPlan(67, 1, 32832, SMS));
    assertEquals(4, CudaCausalLm.prefillSplitPlan(66, 1, 32832, SMS).maxSplits());
    // a short context: fewer than two splits of PREFILL_SPLIT_MIN_TILES tiles (7 key tiles)
    assertNull(CudaCausalLm.prefillSplitPlan(1, 8, 7 * 128, SMS));
    assertEquals(
        new SplitPlan(4 * 128, 2, 2), CudaCausalLm.prefillSplitPlan(1, 8, 7 * 128 + 1, SMS));
  }

  /**
   * Over random batches: a plan splits into whole key tiles of at least the minimum, at most {@link
   * CudaCausalLm#SPLIT_MAX} splits that cover the longest context exactly (no split past it, none
   * missing), and the combine's rule gives every context up to the longest splits of exactly {@code
   * splitKeys} keys (the split kernel cuts by {@code splitKeys} alone); and the grid stays within
   * about twice the multiprocessors' blocks.
   */
  @ParameterizedTest
  @CsvSource({"1", "2", "3", "4", "5", "6", "7", "8"})
  void shouldCutPrefillSplitsTheCombineReadsAlike(long seed) {
    Random rnd = new Random(seed);
    int planned = 0;
    for (int i = 0; i < 2000; i++) {
      int sms = 1 + rnd.nextInt(200);
      int tiles = 1 + rnd.nextInt(64);
      int kvHeads = 1 << rnd.nextInt(5);
      int maxContext = 1 + rnd.nextInt(1 << (1 + rnd.nextInt(17)));
      SplitPlan plan = CudaCausalLm.prefillSplitPlan(tiles, kvHeads, maxContext, sms);
      long blocks = (long) tiles * kvHeads;
      String what = tiles + " tiles, " + kvHeads + " KV heads, " + maxContext + ", " + sms;
      if (2 * blocks > sms) {
        assertNull(plan, what);
        continue;
      }
      if (plan == null) {
        // too short for two splits of the minimum, or too few wanted
        int keyTiles = Math.ceilDiv(maxContext, 128);
        assertTrue(
            keyTiles / CudaCausalLm.PREFILL_SPLIT_MIN_TILES < 2
                || Math.ceilDiv(2L * sms, blocks) < 2,
            what);
        continue;
      }
      planned++;
      int keys = plan.splitKeys();
      assertEquals(0, keys % CudaCausalLm.WGMMA_FLASH_KEYS, what);
      assertTrue(keys >= CudaCausalLm.PREFILL_SPLIT_MIN_TILES * 128, what);
      assertTrue(plan.maxSplits() >= 2 && plan.maxSplits() <= CudaCausalLm.SPLIT_MAX, what);
      assertEquals(plan.maxSplits(), plan.cap(), what);
      assertTrue((long) plan.maxSplits() * keys >= maxContext, what + ": keys left out");
      assertTrue(
          (long) (plan.maxSplits() - 1) * keys < Math.ceilDiv(maxContext, 128) * 128L,
          what + ": a split past the last key tile");
      assertTrue(blocks * plan.maxSplits() <= 2L * sms + blocks, what + ": " + plan);
      for (int n = 1; n <= maxContext; n += 1 + rnd.nextInt(97)) {
        assertEquals(keys, CudaCausalLm.splitSize(n, keys, plan.cap()), what + " at " + n);
      }
      assertEquals(keys, CudaCausalLm.splitSize(maxContext, keys, plan.cap()), what);
    }
    assertTrue(planned > 100, "only " + planned + " of 2000 batches were split");
  }
}

package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** The attention pairs of a span of tokens against a token-by-token count, on random layouts. */
class AttentionPairsTest {

  static LongStream seeds() {
    return LongStream.range(0, 200);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldCountWhatEachTokenAttendsTo(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    CacheLayout layout = CostModelTest.layout(rnd);
    AttentionPairs pairs = AttentionPairs.of(layout);
    int from = rnd.nextInt(rnd.nextBoolean() ? 400 : 20_000);
    int to = from + rnd.nextInt(rnd.nextBoolean() ? 64 : 5_000);
    double want = 0;
    for (int i = from; i < to; i++) {
      want += CostModelTest.refPairs(layout, i);
    }
    assertEquals(want, pairs.between(from, to), 1e-9 * Math.max(1, want), layout.toString());
    assertEquals(0, pairs.between(to, from), "an empty span");
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldCountFullHistoryPairsExactlyAsBefore(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    long s = rnd.nextLong(1 << 20);
    long k = 1 + rnd.nextLong(1 << 16);
    CacheLayout full =
        new CacheLayout(
            64,
            "bf16",
            List.of(
                new CacheGroupSpec(
                    0,
                    new GroupKind.FullHistory(),
                    16,
                    List.of(new CacheField("kv", 1 + rnd.nextInt(1 << 16))),
                    null)));
    assertSame(AttentionPairs.FULL, AttentionPairs.of(full));
    assertEquals((double) k * s + (double) k * (k + 1) / 2, AttentionPairs.FULL.between(s, s + k));
  }

  @Test
  void shouldCountNoPairsForARecurrentModel() {
    CacheLayout mamba =
        new CacheLayout(
            64,
            "f32",
            List.of(
                new CacheGroupSpec(
                    0,
                    new GroupKind.StateCheckpoints(),
                    64,
                    List.of(new CacheField("ssm", 4096)),
                    null)));
    assertEquals(0, AttentionPairs.of(mamba).between(0, 100_000));
  }

  /**
   * Gemma 3's shape (3 full-history layers and 15 windows of 512, equal bytes per layer): forwards
   * timed as its attention computes them, whole prefills of short prompts (up to 1,024 tokens,
   * where most positions are within the window), fitted, then an 8,192-token prefill predicted.
   * Counted as the model computes, the prediction is the truth; counted as full-history pairs the
   * fit takes every position's keys to grow without bound and predicts more than twice the truth.
   */
  @Test
  void shouldLetTheFitPredictAWindowedPrefill() {
    CacheLayout gemma =
        new CacheLayout(
            64,
            "f32",
            List.of(
                new CacheGroupSpec(
                    0,
                    new GroupKind.FullHistory(),
                    16,
                    List.of(new CacheField("kv", 3L * 16 * 2048)),
                    null),
                new CacheGroupSpec(
                    1,
                    new GroupKind.SlidingWindow(512),
                    16,
                    List.of(new CacheField("kv", 15L * 16 * 2048)),
                    null)));
    AttentionPairs attention = AttentionPairs.of(gemma);
    double tokenNs = 20_000;
    double pairNs = 50;
    PrefillFit windowed = new PrefillFit(attention);
    PrefillFit fullPairs = new PrefillFit();
    SplittableRandom rnd = new SplittableRandom(3);
    for (int f = 0; f < 40; f++) {
      // an engine that has served short prompts: whole prefills of 64 to 1,024 tokens
      int start = 0;
      int k = 64 * (1 + rnd.nextInt(16));
      long ns = Math.round(tokenNs * k + pairNs * attention.between(start, start + k));
      List<ExecutionPlan.ForwardItem> items = List.of(item(start, k));
      windowed.observe(items, ns);
      fullPairs.observe(items, ns);
    }
    double truth = tokenNs * 8192 + pairNs * attention.between(0, 8192);
    double[] c = windowed.coefficients();
    double predicted = c[0] + c[1] * 8192 + c[2] * attention.between(0, 8192);
    assertEquals(truth, predicted, 0.01 * truth, "counted as the model computes");
    double[] w = fullPairs.coefficients();
    double wrong = w[0] + w[1] * 8192 + w[2] * AttentionPairs.FULL.between(0, 8192);
    assertTrue(wrong > 2 * truth, "counted as full-history pairs: " + wrong + " against " + truth);
  }

  /** A prefill chunk of {@code k} tokens of request 1 from position {@code start}. */
  private static ExecutionPlan.ForwardItem item(int start, int k) {
    return new ExecutionPlan.ForwardItem(1, start, k, false);
  }
}

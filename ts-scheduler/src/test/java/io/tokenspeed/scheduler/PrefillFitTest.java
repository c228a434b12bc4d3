package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The prefill fit recovers the cost of forwards generated from known coefficients (seeded random
 * batches of prefill chunks and decodes), keeps every coefficient non-negative, and predicts the
 * forwards it saw even when its features are collinear.
 */
class PrefillFitTest {

  static LongStream seeds() {
    return LongStream.range(0, 100);
  }

  /** A random batch: one to four items, prefill chunks at random positions, some decodes. */
  static List<ExecutionPlan.ForwardItem> batch(SplittableRandom rnd, boolean prefill) {
    List<ExecutionPlan.ForwardItem> items = new ArrayList<>();
    int n = 1 + rnd.nextInt(4);
    for (int i = 0; i < n; i++) {
      boolean chunk = prefill && (i == 0 || rnd.nextBoolean());
      int start = rnd.nextInt(8192);
      items.add(new ExecutionPlan.ForwardItem(i, start, chunk ? 1 + rnd.nextInt(512) : 1, !chunk));
    }
    return items;
  }

  static double truth(double[] c, List<ExecutionPlan.ForwardItem> items) {
    double tokens = 0;
    double pairs = 0;
    for (ExecutionPlan.ForwardItem f : items) {
      long k = f.numTokens();
      tokens += k;
      pairs += (double) k * f.startToken() + (double) k * (k + 1) / 2;
    }
    return c[0] + c[1] * tokens + c[2] * pairs;
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldRecoverTheCoefficientsOfExactForwardTimes(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    double[] c = {
      rnd.nextInt(3) == 0 ? 0 : rnd.nextDouble() * 5e6,
      rnd.nextInt(3) == 0 ? 0 : rnd.nextDouble() * 1e5,
      rnd.nextInt(3) == 0 ? 0 : rnd.nextDouble() * 50
    };
    PrefillFit fit = new PrefillFit();
    for (int i = 0; i < 60; i++) {
      List<ExecutionPlan.ForwardItem> b = batch(rnd, true);
      fit.observe(b, Math.max(1, Math.round(truth(c, b))));
    }
    double[] got = fit.coefficients();
    for (int i = 0; i < 3; i++) {
      assertTrue(got[i] >= 0, "coefficient " + i + " = " + got[i]);
    }
    for (int i = 0; i < 20; i++) {
      List<ExecutionPlan.ForwardItem> b = batch(rnd, true);
      double want = truth(c, b);
      assertEquals(want, truth(got, b), 1e-3 * want + 2e3, "predicts an unseen forward");
    }
  }

  @Test
  void shouldLeaveDecodeOnlyForwardsOut() {
    PrefillFit fit = new PrefillFit();
    assertFalse(fit.observe(List.of(new ExecutionPlan.ForwardItem(1, 100, 1, true)), 1000));
    assertEquals(0, fit.samples());
    assertEquals(0, fit.coefficients()[1], "nothing fitted");
    assertTrue(fit.observe(List.of(new ExecutionPlan.ForwardItem(1, 0, 64, false)), 1000));
    assertEquals(1, fit.samples());
  }

  /** Every chunk the same size at the same place: one equation, and still its prediction. */
  @Test
  void shouldPredictCollinearForwardsItSaw() {
    PrefillFit fit = new PrefillFit();
    List<ExecutionPlan.ForwardItem> chunk =
        List.of(new ExecutionPlan.ForwardItem(1, 0, 256, false));
    for (int i = 0; i < 10; i++) {
      fit.observe(chunk, 40_000_000);
    }
    double[] c = fit.coefficients();
    assertEquals(40_000_000, truth(c, chunk), 40_000, c[0] + " " + c[1] + " " + c[2]);
  }

  /**
   * Forwards of one size cannot tell a fixed cost from a per-token one: the fit then explains them
   * by their tokens, so that a longer prompt is expected to cost more, never what the short
   * forwards cost; once sizes span twice as many tokens the constant is fitted too. Seeded: random
   * true coefficients, a fresh engine's few forwards of one chunk size.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldNotPutTheTimeOfForwardsOfOneSizeIntoTheConstant(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    double[] c = {rnd.nextDouble() * 5e7, 1e5 + rnd.nextDouble() * 1e6, rnd.nextDouble() * 200};
    int k = 32 + rnd.nextInt(256);
    PrefillFit fit = new PrefillFit();
    int forwards = 1 + rnd.nextInt(4);
    for (int i = 0; i < forwards; i++) {
      List<ExecutionPlan.ForwardItem> b =
          List.of(new ExecutionPlan.ForwardItem(1, rnd.nextInt(4096), k, false));
      fit.observe(b, Math.round(truth(c, b) * (0.9 + 0.2 * rnd.nextDouble())));
    }
    double[] got = fit.coefficients();
    assertEquals(0, got[0], "no constant from forwards of " + k + " tokens each");
    assertTrue(got[1] + got[2] > 0, "the time went to tokens and pairs");
    List<ExecutionPlan.ForwardItem> longer =
        List.of(new ExecutionPlan.ForwardItem(1, 0, 4 * k, false));
    List<ExecutionPlan.ForwardItem> seen = List.of(new ExecutionPlan.ForwardItem(1, 0, k, false));
    assertTrue(truth(got, longer) >= 2 * truth(got, seen), "four times the tokens cost more");
    // a forward of another size lets the constant in
    List<ExecutionPlan.ForwardItem> small =
        List.of(new ExecutionPlan.ForwardItem(1, 0, Math.max(1, k / 3), false));
    for (int i = 0; i < 30; i++) {
      fit.observe(small, Math.round(truth(c, small)));
      List<ExecutionPlan.ForwardItem> b =
          List.of(new ExecutionPlan.ForwardItem(1, rnd.nextInt(4096), k, false));
      fit.observe(b, Math.round(truth(c, b)));
    }
    assertEquals(c[0], fit.coefficients()[0], 0.05 * c[0] + 2e5, "the constant, once sizes vary");
  }

  /** A machine that slows down: the fit follows within a few dozen forwards. */
  @Test
  void shouldFollowAMachineThatSlowsDown() {
    SplittableRandom rnd = new SplittableRandom(7);
    double[] fast = {1e6, 1e4, 1};
    double[] slow = {2e6, 2e4, 2};
    PrefillFit fit = new PrefillFit();
    for (int i = 0; i < 100; i++) {
      List<ExecutionPlan.ForwardItem> b = batch(rnd, true);
      fit.observe(b, Math.round(truth(fast, b)));
    }
    for (int i = 0; i < 200; i++) {
      List<ExecutionPlan.ForwardItem> b = batch(rnd, true);
      fit.observe(b, Math.round(truth(slow, b)));
    }
    List<ExecutionPlan.ForwardItem> probe =
        List.of(new ExecutionPlan.ForwardItem(1, 4096, 512, false));
    assertEquals(truth(slow, probe), truth(fit.coefficients(), probe), 0.01 * truth(slow, probe));
  }
}

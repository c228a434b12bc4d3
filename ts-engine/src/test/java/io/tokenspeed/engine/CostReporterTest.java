package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.CostFigures;
import io.tokenspeed.l3.RestoreEstimate;
import io.tokenspeed.scheduler.ExecutionPlan;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The leader's rule for agreeing on new cost figures: nothing before anything is measured, the
 * first measurement at once, then only a move of more than 5 % and not within 200 ms of the last,
 * unless the store's bandwidth halved (or worse): that is sent at once.
 */
class CostReporterTest {
  private static final long MS = 1_000_000L;

  private static final List<ExecutionPlan.ForwardItem> CHUNK =
      List.of(new ExecutionPlan.ForwardItem(1, 0, 64, false));

  @Test
  void shouldSendTheFirstFiguresAtOnceThenOnlyMovesPastTheThreshold() {
    CostReporter r = new CostReporter();
    assertNull(r.due(RestoreEstimate.NONE, 0), "nothing measured");
    r.onForward(CHUNK, 10 * MS);
    CostFigures first = r.due(RestoreEstimate.NONE, 1 * MS);
    assertNotNull(first, "the prefill measured");
    assertTrue(first.prefillKnown());
    RestoreEstimate store = new RestoreEstimate(2e6, 1e8, 3, 1);
    CostFigures second = r.due(store, 2 * MS);
    assertNull(second, "the store measured, but within 200 ms of the last");
    CostFigures third = r.due(store, 201 * MS);
    assertNotNull(third, "now: what is known changed");
    assertEquals(1e8, third.storeBytesPerSecond());
    assertNull(r.due(new RestoreEstimate(2.04e6, 1.04e8, 4, 2), 500 * MS), "4 % is no move");
    CostFigures fourth = r.due(new RestoreEstimate(2e6, 0.5e8, 4, 2), 600 * MS);
    assertNotNull(fourth, "the store halved its rate");
    assertEquals(0.5e8, fourth.storeBytesPerSecond());
  }

  /**
   * What the idle loop asks: {@code pending} says whether {@code due} would send, and changes
   * nothing; figures held back by the interval are pending once it passed.
   */
  @Test
  void shouldSayWhetherFiguresArePendingWithoutSendingThem() {
    CostReporter r = new CostReporter();
    assertFalse(r.pending(RestoreEstimate.NONE, 0), "nothing measured");
    r.onForward(CHUNK, 10 * MS);
    RestoreEstimate store = new RestoreEstimate(2e6, 1e8, 3, 1);
    assertTrue(r.pending(store, 0));
    assertTrue(r.pending(store, 0), "asking sent nothing");
    assertNotNull(r.due(store, 0));
    assertFalse(r.pending(store, 1 * MS), "sent: nothing moved");
    RestoreEstimate slower = new RestoreEstimate(2e6, 0.7e8, 4, 2);
    assertFalse(r.pending(slower, 100 * MS), "30 % slower, within the interval");
    assertTrue(r.pending(slower, 200 * MS), "the interval passed");
    assertEquals(0.7e8, r.due(slower, 200 * MS).storeBytesPerSecond());
    assertFalse(r.pending(slower, 500 * MS));
  }

  @Test
  void shouldSendAHalvedBandwidthAtOnceButWaitTheIntervalForSmallerDrops() {
    CostReporter r = new CostReporter();
    r.onForward(CHUNK, 10 * MS);
    CostFigures first = r.due(new RestoreEstimate(2e6, 1e8, 3, 1), 0);
    assertNotNull(first);
    assertEquals(1e8, first.storeBytesPerSecond());
    assertNull(
        r.due(new RestoreEstimate(2e6, 0.6e8, 4, 2), 50 * MS),
        "a 40 % drop waits for the interval");
    CostFigures halved = r.due(new RestoreEstimate(2e6, 0.5e8, 5, 3), 60 * MS);
    assertNotNull(halved, "halved within the interval: sent at once");
    assertEquals(0.5e8, halved.storeBytesPerSecond());
    assertNull(
        r.due(new RestoreEstimate(2e6, 0.3e8, 6, 4), 100 * MS),
        "40 % below the halved figures: the interval runs from their send");
    assertNull(
        r.due(new RestoreEstimate(2e6, 2e8, 7, 5), 150 * MS),
        "a faster store waits for the interval");
    assertNull(r.due(RestoreEstimate.NONE, 170 * MS), "a store no longer known is no slowdown");
    CostFigures quarter = r.due(new RestoreEstimate(2e6, 0.1e8, 8, 6), 180 * MS);
    assertNotNull(quarter, "a fifth of the last: sent at once");
    assertEquals(0.1e8, quarter.storeBytesPerSecond());
    CostFigures later = r.due(new RestoreEstimate(2e6, 0.06e8, 9, 7), 380 * MS);
    assertNotNull(later, "the 40 % drop, once the interval passed");
    assertEquals(0.06e8, later.storeBytesPerSecond());
  }

  @Test
  void shouldIgnoreDecodeOnlyForwards() {
    CostReporter r = new CostReporter();
    r.onForward(List.of(new ExecutionPlan.ForwardItem(1, 70, 1, true)), 10 * MS);
    assertNull(r.due(RestoreEstimate.NONE, 0), "a decode round says nothing of the prefill");
  }
}

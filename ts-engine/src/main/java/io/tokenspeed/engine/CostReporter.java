package io.tokenspeed.engine;

import io.tokenspeed.core.storage.CostFigures;
import io.tokenspeed.l3.RestoreEstimate;
import io.tokenspeed.scheduler.AttentionPairs;
import io.tokenspeed.scheduler.ExecutionPlan;
import io.tokenspeed.scheduler.PrefillFit;
import java.util.List;

/**
 * The TP leader's measurements of what a restore and a recomputation cost, and the rule for when
 * they are worth agreeing on. Every rank's scheduler must decide a preparation alike, so none of
 * them reads its own clock or executor: the leader fits the prefill rate to its real forward times
 * ({@link PrefillFit}), takes its executor's restore estimate ({@link RestoreEstimate}) and sends
 * both as one {@link Replica.Kind#COST_FIGURES} command, which every rank applies in the round that
 * agrees on it, as it applies a freeze or a clear.
 *
 * <pre>
 *   leader round n:   forward (timed) ─▶ fit ┐
 *                     executor estimate ────┴▶ figures changed by > 5 %, 200 ms since the last?
 *                                                   └─▶ command ─▶ exchange ─▶ every rank, round m:
 *                                                                  scheduler.onCostFigures
 * </pre>
 *
 * <p>Only the leader's measurements count: its ranks compute the same forward in lockstep, and read
 * equal shares of each prefix from the same store. The rule bounds the commands to five a second at
 * most and sends none while the figures hold still. Loop thread only.
 */
final class CostReporter {
  /** The least time between two figures sent. */
  static final long MIN_INTERVAL_NS = 200_000_000L;

  /** A figure must move by more than this share for new figures to be sent. */
  static final double CHANGE = 0.05;

  /**
   * A store bandwidth at or below this share of the one last sent (halved, or worse) is sent at
   * once, whatever the interval: restores under way may now be losing to recomputation, and every
   * round that waits for the figures is a round their requests wait on a read they may abandon.
   */
  static final double SLOWDOWN = 0.5;

  private final PrefillFit fit;

  private CostFigures sent;
  private long sentAtNs;

  /** A reporter whose prefill fit counts full-history attention pairs. */
  CostReporter() {
    this(AttentionPairs.FULL);
  }

  /** A reporter whose prefill fit counts pairs as {@code attention} does (the cost model's). */
  CostReporter(AttentionPairs attention) {
    this.fit = new PrefillFit(attention);
  }

  /** The fit's coefficients as of {@link #fittedSamples} observations. */
  private double[] coefficients = new double[3];

  private long fittedSamples;

  /** A forward of {@code plan} that took {@code ns} (the forward pass alone, sampling included). */
  void onForward(List<ExecutionPlan.ForwardItem> items, long ns) {
    fit.observe(items, ns);
  }

  /**
   * The figures to agree on now, or null: the first that know anything, then whenever a figure
   * moved by more than {@link #CHANGE} and {@link #MIN_INTERVAL_NS} passed since the last, or at
   * once when the store's bandwidth fell to {@link #SLOWDOWN} of the last sent or below.
   */
  CostFigures due(RestoreEstimate store, long nowNs) {
    CostFigures f = next(store, nowNs);
    if (f != null) {
      sent = f;
      sentAtNs = nowNs;
    }
    return f;
  }

  /**
   * Whether {@link #due} would send figures now, without sending them: the idle loop asks, so that
   * figures that moved in a burst's last rounds, within the interval, are agreed once it passed
   * rather than by the next request's round, which would decide on the older ones.
   */
  boolean pending(RestoreEstimate store, long nowNs) {
    return next(store, nowNs) != null;
  }

  private CostFigures next(RestoreEstimate store, long nowNs) {
    if (fit.samples() != fittedSamples) {
      coefficients = fit.coefficients();
      fittedSamples = fit.samples();
    }
    CostFigures f =
        new CostFigures(
            store.latencyNs(),
            store.known() ? store.bytesPerSecond() : 0,
            coefficients[0],
            coefficients[1],
            coefficients[2]);
    if (!f.storeKnown() && !f.prefillKnown()) {
      return null;
    }
    if (sent != null
        && !slowedDown(f, sent)
        && (nowNs - sentAtNs < MIN_INTERVAL_NS || !f.differsFrom(sent, CHANGE))) {
      return null;
    }
    return f;
  }

  private static boolean slowedDown(CostFigures now, CostFigures sent) {
    return now.storeKnown()
        && sent.storeKnown()
        && now.storeBytesPerSecond() <= SLOWDOWN * sent.storeBytesPerSecond();
  }
}

package io.tokenspeed.l3;

import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Whether the store refuses writes: the executor's record of the store's capacity answers to PUTs,
 * kept apart from {@link HealthMonitor}. A refused PUT row ({@code Rejected} without an outage: no
 * space, Redis's {@code OOM}, Mooncake's {@code NO_AVAILABLE_HANDLE}, a full file system) is a
 * retired capacity rejection, not an outage (architecture §8): the store answered, so health stays
 * as it is, and the page stays unacknowledged for the scheduler to offer again.
 *
 * <pre>
 *                 a PUT call refuses a row
 *   ACCEPTING ─────────────────────────────▶ REFUSING
 *       ▲                                       │ a PUT call writes a row
 *       └───────────────────────────────────────┘ and refuses none
 * </pre>
 *
 * <p>Each transition is logged once, entering with the store's reason for the first refusal and
 * leaving with how many PUT rows it refused meanwhile and for how long: a store that refuses every
 * write for an hour writes two lines, not one per key. A call that only finds existing objects, or
 * that fails otherwise (an outage, a configuration failure, a rejection at submission), says
 * nothing about capacity and changes nothing.
 *
 * <p>Only calls that reached the store count, so the state is rank-local, like the store calls; it
 * never feeds a decision. The scheduler learns refusals from the agreed facts (FAILED PUT rows) and
 * paces its backups on those (see {@code StorageTransferManager}).
 *
 * <p>Guarded by the executor's lock.
 */
final class WriteRefusals {

  private static final Logger LOG = Logger.getLogger(L3Executor.class.getName());

  private final String storeName;
  private boolean refusing;
  private String reason = "";
  private long refusedKeys;
  private long refusedSinceEntered;
  private long enteredNs;

  WriteRefusals(String storeName) {
    this.storeName = storeName;
  }

  /**
   * A PUT call finished at {@code nowNs}: the store refused {@code refused} of its rows (the first
   * for {@code firstReason}) and newly wrote {@code written}. The one transition method.
   */
  void onPutAnswered(int refused, int written, String firstReason, long nowNs) {
    refusedKeys += refused;
    if (refused > 0) {
      refusedSinceEntered += refused;
      if (!refusing) {
        refusing = true;
        reason = firstReason;
        enteredNs = nowNs;
        refusedSinceEntered = refused;
        LOG.log(
            Level.WARNING,
            "L3 store {0} refuses writes: {1} (a capacity refusal, not an outage: the engine holds"
                + " its backups back and probes the store with one page until it takes one again)",
            new Object[] {storeName, firstReason});
      }
    } else if (written > 0 && refusing) {
      refusing = false;
      LOG.log(
          Level.INFO,
          "L3 store {0} takes writes again, after refusing {1} PUT keys over {2} s ({3})",
          new Object[] {
            storeName,
            refusedSinceEntered,
            String.format(
                "%.1f", Math.max(0, nowNs - enteredNs) / (double) TimeUnit.SECONDS.toNanos(1)),
            reason
          });
      reason = "";
    }
  }

  /** Whether the store's latest capacity answer was a refusal. */
  boolean refusing() {
    return refusing;
  }

  /** The reason of the refusal that started the current refusing state; empty when accepting. */
  String reason() {
    return reason;
  }

  /** PUT rows the store refused so far. */
  long refusedKeys() {
    return refusedKeys;
  }
}

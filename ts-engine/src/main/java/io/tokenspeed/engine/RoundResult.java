package io.tokenspeed.engine;

/**
 * What one round did, for the runner's idle policy ({@link LoopRunner}): the round itself never
 * waits, so it says here whether the next round is due at once, after a storage tick, or when work
 * arrives.
 *
 * @param forwardPlanned the plan had a forward batch
 * @param endedRequests requests the round ended (finished, cancelled or refused)
 * @param housekeeping an idle round is due: a request ended, demotions or evictions may have left
 *     more for the next round, or backups wait to be offered
 * @param storageWait the round planned no forward while storage work was pending: wait a storage
 *     tick (or a completion record) before the next
 * @param stopAgreed on a replica: the ranks agreed to stop, and this round was the last
 * @param forwardWithheld the control state withheld the forward (frozen, draining, or a replica's
 *     round before the first agreed one): wait a storage tick (or work) before the next, as the
 *     round's ticks, completions and cancellations still flow but nothing computes
 */
record RoundResult(
    boolean forwardPlanned,
    int endedRequests,
    boolean housekeeping,
    boolean storageWait,
    boolean stopAgreed,
    boolean forwardWithheld) {

  /** Before the first round: nothing done, nothing due. */
  static final RoundResult NONE = new RoundResult(false, 0, false, false, false, false);
}

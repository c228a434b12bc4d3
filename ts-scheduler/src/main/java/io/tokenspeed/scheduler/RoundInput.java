package io.tokenspeed.scheduler;

import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.PressureSnapshot;
import java.util.List;

/**
 * The agreed inputs of one round, applied at the loop head in this order: tick (deadlines, expiry),
 * pressure, cancellations, then completion facts — so an expired or detached read can never publish
 * a late result.
 *
 * @param tickNs the agreed tick (the TP leader's clock)
 * @param pressure the MAX-reduced executor pressure
 * @param cancellations client cancellations
 * @param completions agreed storage completion facts
 * @param forwardPermitted false in frozen and idle rounds
 * @param storagePermitted false in frozen and idle rounds
 */
public record RoundInput(
    long tickNs,
    PressureSnapshot pressure,
    List<Long> cancellations,
    List<AgreedCompletion> completions,
    boolean forwardPermitted,
    boolean storagePermitted) {
  public RoundInput {
    cancellations = List.copyOf(cancellations);
    completions = List.copyOf(completions);
  }

  /**
   * The scheduler's view of an agreed round. New requests are submitted by the caller before the
   * round (so a request created and cancelled in one round is cancelled); the cancellations and
   * completions apply inside it, after the tick.
   */
  public static RoundInput of(
      AgreedRound round, boolean forwardPermitted, boolean storagePermitted) {
    return new RoundInput(
        round.tickNs(),
        round.pressure(),
        round.cancellations(),
        round.completions(),
        forwardPermitted,
        storagePermitted);
  }

  /** An ordinary round with nothing but a tick. */
  public static RoundInput tick(long tickNs) {
    return new RoundInput(tickNs, PressureSnapshot.IDLE, List.of(), List.of(), true, true);
  }
}

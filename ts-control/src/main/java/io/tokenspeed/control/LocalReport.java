package io.tokenspeed.control;

import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import java.util.List;

/**
 * What this rank brings to one round: its clock, its executor's poll (new completion records and
 * pressure, taken together), the leader's frontend messages, or the reason its poll was invalid, a
 * digest of the plan it executed in its previous round, and optionally a small status for every
 * rank and the events that happened on this rank only.
 *
 * <p>The exchange validates the report before anything is sent; an invalid one is replaced by an
 * error report, and every rank then raises the same {@link ProtocolException}.
 *
 * <p>The plan digest is how the replica notices that its ranks' schedulers diverged. Every rank
 * runs the same scheduler on the same agreed rounds, so every rank of a healthy replica executes
 * the same plan and reports the same digest. When the valid reports of a round carry different
 * digests, every rank raises the same {@link ProtocolException} in that round, naming every rank's
 * digest (see {@link RelayExchange}). The exchange only compares the values; how the plan is
 * digested is the caller's choice, and must be the same on every rank.
 *
 * <p>The events are a decision input: the events this rank brings to round n appear in agreed round
 * n, at this rank's index, identical on every rank, and in no other round ({@link RankEvents} has
 * the whole guarantee). When the report is invalid, the error report drops them and round n fails
 * on every rank, so they are never delivered without the round or in another one.
 *
 * @param clockNs this rank's monotonic clock ({@link System#nanoTime()}) at the round's start
 * @param pressure the executor's pressure observations from the same poll
 * @param completions records the executor completed since the last poll, each reported once
 * @param frontend the frontend messages the leader drained this round; must be empty elsewhere
 * @param pollError null, or why this rank's poll could not produce valid records
 * @param planDigest a digest of the plan this rank executed in its previous round; every rank of a
 *     healthy replica reports the same value; 0 before the first plan
 * @param status this rank's status for every rank ({@link RankStatus}); {@link RankStatus#EMPTY}
 *     (or null) for none. An error report drops it
 * @param events the events that happened on this rank for every rank ({@link RankEvents}); {@link
 *     RankEvents#EMPTY} (or null) for none. An error report drops them, and its round fails
 */
public record LocalReport(
    long clockNs,
    PressureSnapshot pressure,
    List<StorageDone> completions,
    List<FrontendMessage> frontend,
    String pollError,
    long planDigest,
    RankStatus status,
    RankEvents events) {

  public LocalReport {
    if (pressure == null) {
      throw new IllegalArgumentException("local report has no pressure snapshot");
    }
    if (completions == null || hasNull(completions)) {
      throw new IllegalArgumentException("local report completions=" + completions);
    }
    if (frontend == null || hasNull(frontend)) {
      throw new IllegalArgumentException("local report frontend=" + frontend);
    }
    if (pollError != null && pollError.isEmpty()) {
      throw new IllegalArgumentException("local report poll_error must be null or non-empty");
    }
    completions = List.copyOf(completions);
    frontend = List.copyOf(frontend);
    status = status == null ? RankStatus.EMPTY : status;
    events = events == null ? RankEvents.EMPTY : events;
  }

  /** A report without events. */
  public LocalReport(
      long clockNs,
      PressureSnapshot pressure,
      List<StorageDone> completions,
      List<FrontendMessage> frontend,
      String pollError,
      long planDigest,
      RankStatus status) {
    this(clockNs, pressure, completions, frontend, pollError, planDigest, status, RankEvents.EMPTY);
  }

  /** A report without a status or events. */
  public LocalReport(
      long clockNs,
      PressureSnapshot pressure,
      List<StorageDone> completions,
      List<FrontendMessage> frontend,
      String pollError,
      long planDigest) {
    this(clockNs, pressure, completions, frontend, pollError, planDigest, RankStatus.EMPTY);
  }

  /** A report whose plan digest is 0, as before the first plan. */
  public LocalReport(
      long clockNs,
      PressureSnapshot pressure,
      List<StorageDone> completions,
      List<FrontendMessage> frontend,
      String pollError) {
    this(clockNs, pressure, completions, frontend, pollError, 0);
  }

  private static boolean hasNull(List<?> list) {
    for (Object o : list) {
      if (o == null) {
        return true;
      }
    }
    return false;
  }

  /** An idle round: no completions, no pressure, no frontend messages; plan digest 0. */
  public static LocalReport idle(long clockNs) {
    return new LocalReport(clockNs, PressureSnapshot.IDLE, List.of(), List.of(), null);
  }

  /** A round carrying one poll's completions and pressure; plan digest 0. */
  public static LocalReport of(
      long clockNs, PressureSnapshot pressure, List<StorageDone> completions) {
    return new LocalReport(clockNs, pressure, completions, List.of(), null);
  }

  /**
   * A round whose poll failed: the exchange turns it into an error report. Plan digest 0; an error
   * report's digest is never compared.
   */
  public static LocalReport pollFailed(long clockNs, String reason) {
    return new LocalReport(clockNs, PressureSnapshot.IDLE, List.of(), List.of(), reason);
  }

  /** This report with the leader's frontend messages attached. */
  public LocalReport withFrontend(List<FrontendMessage> messages) {
    return new LocalReport(
        clockNs, pressure, completions, messages, pollError, planDigest, status, events);
  }

  /** This report with {@code digest} as the digest of the plan of this rank's previous round. */
  public LocalReport withPlanDigest(long digest) {
    return new LocalReport(
        clockNs, pressure, completions, frontend, pollError, digest, status, events);
  }

  /** This report with {@code s} as this rank's status. */
  public LocalReport withStatus(RankStatus s) {
    return new LocalReport(
        clockNs, pressure, completions, frontend, pollError, planDigest, s, events);
  }

  /**
   * This report with {@code e} as the events that happened on this rank ({@link RankEvents#EMPTY}
   * or null for none).
   */
  public LocalReport withEvents(RankEvents e) {
    return new LocalReport(
        clockNs, pressure, completions, frontend, pollError, planDigest, status, e);
  }
}

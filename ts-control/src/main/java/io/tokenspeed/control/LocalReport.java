package io.tokenspeed.control;

import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import java.util.List;

/**
 * What this rank brings to one round: its clock, its executor's poll (new completion records and
 * pressure, taken together), the leader's frontend messages, or the reason its poll was invalid.
 *
 * <p>The exchange validates the report before anything is sent; an invalid one is replaced by an
 * error report, and every rank then raises the same {@link ProtocolException}.
 *
 * @param clockNs this rank's monotonic clock ({@link System#nanoTime()}) at the round's start
 * @param pressure the executor's pressure observations from the same poll
 * @param completions records the executor completed since the last poll, each reported once
 * @param frontend the frontend messages the leader drained this round; must be empty elsewhere
 * @param pollError null, or why this rank's poll could not produce valid records
 */
public record LocalReport(
    long clockNs,
    PressureSnapshot pressure,
    List<StorageDone> completions,
    List<FrontendMessage> frontend,
    String pollError) {

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
  }

  private static boolean hasNull(List<?> list) {
    for (Object o : list) {
      if (o == null) {
        return true;
      }
    }
    return false;
  }

  /** An idle round: no completions, no pressure, no frontend messages. */
  public static LocalReport idle(long clockNs) {
    return new LocalReport(clockNs, PressureSnapshot.IDLE, List.of(), List.of(), null);
  }

  /** A round carrying one poll's completions and pressure. */
  public static LocalReport of(
      long clockNs, PressureSnapshot pressure, List<StorageDone> completions) {
    return new LocalReport(clockNs, pressure, completions, List.of(), null);
  }

  /** A round whose poll failed: the exchange turns it into an error report. */
  public static LocalReport pollFailed(long clockNs, String reason) {
    return new LocalReport(clockNs, PressureSnapshot.IDLE, List.of(), List.of(), reason);
  }

  /** This report with the leader's frontend messages attached. */
  public LocalReport withFrontend(List<FrontendMessage> messages) {
    return new LocalReport(clockNs, pressure, completions, messages, pollError);
  }
}

package io.tokenspeed.l3.spi;

import java.util.List;

/**
 * A store call's answer: one {@link RowResult} per key, in call order, and whether the store has
 * stopped touching every buffer of the call. A result that is false for {@code retired}, or that
 * contains an {@link RowResult.Unknown} row, quarantines the job's references.
 */
public record StoreResult(List<RowResult> rows, boolean retired) {
  public StoreResult {
    if (rows == null) {
      throw new IllegalArgumentException("store result rows are missing");
    }
    rows = List.copyOf(rows);
  }

  /** A retired result. */
  public static StoreResult of(List<RowResult> rows) {
    return new StoreResult(rows, true);
  }
}

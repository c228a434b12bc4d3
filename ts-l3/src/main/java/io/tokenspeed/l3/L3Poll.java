package io.tokenspeed.l3;

import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import java.util.List;

/**
 * What one {@link L3Executor#poll()} returns: new completion records and the pressure, together.
 */
public record L3Poll(List<StorageDone> completions, PressureSnapshot pressure) {
  public L3Poll {
    completions = List.copyOf(completions);
  }
}

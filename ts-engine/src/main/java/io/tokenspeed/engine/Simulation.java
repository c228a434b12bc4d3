package io.tokenspeed.engine;

import io.tokenspeed.control.LocalRelayHub;
import io.tokenspeed.control.RelayExchange;
import io.tokenspeed.engine.l3.StorageTier;
import io.tokenspeed.scheduler.StorageTransferManager;

/**
 * How the whole-loop simulation (ts-engine's tests) runs an engine; absent in production, where
 * every field's production counterpart runs instead. The engine's loop thread never starts: the
 * simulation takes the {@link Round} ({@link Engine#round()}) and calls it with simulated time.
 *
 * <pre>
 *   stepping   L3's executor starts stepped and goes to the simulation, which runs its store calls
 *              (null: no L3 seen)
 *   hub        the replica's relay exchange over an in-memory transport (null for a single rank,
 *              whose exchange is always in memory)
 *   planting   the simulation's planted bugs, switched on in the owners it is handed
 * </pre>
 */
record Simulation(StorageTier.Stepping stepping, LocalRelayHub hub, Planting planting) {

  /**
   * Where a planted-bug test switches a safety rule off: each owner is handed over once, as it is
   * built. Does nothing unless a test says otherwise.
   */
  interface Planting {
    default void manager(StorageTransferManager stm) {}

    default void exchange(RelayExchange exchange) {}

    default void publication(HostPublication publication) {}

    default void round(Round round) {}

    default void copies(Copies copies) {}

    Planting NONE = new Planting() {};
  }

  Simulation {
    if (planting == null) {
      throw new IllegalArgumentException("planting must not be null (Planting.NONE for none)");
    }
  }
}

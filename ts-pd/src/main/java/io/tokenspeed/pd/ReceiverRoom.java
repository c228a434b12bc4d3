package io.tokenspeed.pd;

import java.util.BitSet;
import java.util.concurrent.ScheduledFuture;
import java.util.zip.CRC32C;

/**
 * The decode side of one room on one connection. Its state changes only under the receiver's lock,
 * in {@link KvReceiver}; the landing bookkeeping ({@link #landed}, {@link #crc}) is the reader
 * thread's alone.
 *
 * <pre>
 *   UNCLAIMED ──registration──► RESERVING ──destinations──► RECEIVING ──DONE ok──► LANDED
 *       │  (BOOTSTRAP before the       │  (Landing.reserve)      │  (ACK written;       │
 *       │   engine's registration)     │                         │   DATA lands)        │
 *       ▼                              ▼                         ▼                      ▼
 *     REFUSE (deadline)       REFUSE (refused)          CANCELLING (our CANCEL; waits   RECEIVED
 *                                                        for the peer's) ───► CLOSED   (acknowledge)
 * </pre>
 *
 * A peer's CANCEL closes the room from any open state (answered unless ours went out); the
 * connection's failure closes it from any state.
 */
final class ReceiverRoom {

  enum State {
    UNCLAIMED,
    RESERVING,
    RECEIVING,
    LANDED,
    CANCELLING,
    CLOSED
  }

  final long id;
  final KvReceiver receiver;
  final ReceiverLink link;
  final Bootstrap bootstrap;

  // Guarded by the receiver's lock.
  State state = State.UNCLAIMED;
  Registration registration;
  Destinations destinations;

  /** True while {@link #destinations} are the receiver's to release (not yet handed over). */
  boolean holdsDestinations;

  boolean ackQueued;
  boolean doneRead;
  boolean cancelRead;

  /** How the room counts once it closes after our CANCEL. */
  Counters.End endAs = Counters.End.CANCELLED;

  ScheduledFuture<?> deadline;

  /** The blocks reserved per cache group, as the ACK said. */
  int[] reserved;

  // The reader thread's.
  BitSet[] landed;
  long landedBlocks;
  long expectedBlocks;
  final CRC32C crc = new CRC32C();

  ReceiverRoom(long id, KvReceiver receiver, ReceiverLink link, Bootstrap bootstrap) {
    this.id = id;
    this.receiver = receiver;
    this.link = link;
    this.bootstrap = bootstrap;
  }

  @Override
  public String toString() {
    return "room " + id + " (" + state + ")";
  }
}

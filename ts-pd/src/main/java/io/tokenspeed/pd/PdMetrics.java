package io.tokenspeed.pd;

/**
 * A snapshot of one endpoint's counters, for the engine to export. Counters only grow; the {@code
 * *Open} and {@code *Waiting} fields are gauges. Every room that opened ends exactly once, as
 * landed, refused, cancelled or failed, so once the endpoint is quiet {@code roomsOpened ==
 * roomsLanded + roomsRefused + roomsCancelled + roomsFailed + roomsOpen}.
 *
 * <p>A room is one BOOTSTRAP on one connection: on the prefill side from {@link KvSender#bootstrap}
 * until RECEIVED, REFUSE, the CANCEL exchange or the connection's failure; on the decode side from
 * reading the BOOTSTRAP until RECEIVED is written (after {@link Landed#acknowledge}), REFUSE is
 * written, the CANCEL exchange or the connection's failure. "Landed" is RECEIVED, read or written.
 *
 * @param connectionsOpened connections that completed the handshake
 * @param connectionsOpen those still open
 * @param handshakeFailures connections dropped before their handshake completed (wrong secret,
 *     garbage, timeout, connect failure)
 * @param connectionsRefused decode side: connections closed unread because the receiver held {@link
 *     PdSettings#maxConnections} already
 * @param connectionFailures open connections that failed (closed, broke, silent, protocol error)
 * @param roomsOpened rooms opened
 * @param roomsLanded rooms that ended with RECEIVED
 * @param roomsRefused rooms that ended with REFUSE
 * @param roomsCancelled rooms that ended with the CANCEL exchange
 * @param roomsFailed rooms that ended with their connection's failure, a checksum mismatch or the
 *     endpoint's close
 * @param roomsOpen rooms open now
 * @param registrationsWaiting decode side: registrations waiting for their BOOTSTRAP (0 on the
 *     prefill side)
 * @param registrationsExpired decode side: registrations that waited past the bootstrap deadline
 * @param bytesSent block bytes written in DATA frames (prefill side)
 * @param bytesReceived block bytes read from DATA frames (decode side)
 */
public record PdMetrics(
    long connectionsOpened,
    long connectionsOpen,
    long handshakeFailures,
    long connectionsRefused,
    long connectionFailures,
    long roomsOpened,
    long roomsLanded,
    long roomsRefused,
    long roomsCancelled,
    long roomsFailed,
    long roomsOpen,
    long registrationsWaiting,
    long registrationsExpired,
    long bytesSent,
    long bytesReceived) {

  /** Rooms that ended, however. */
  public long roomsEnded() {
    return roomsLanded + roomsRefused + roomsCancelled + roomsFailed;
  }
}

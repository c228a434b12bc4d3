package io.tokenspeed.control;

import java.util.Map;

/**
 * How a {@link RelayExchange} reaches the other ranks of its replica: the TCP {@link Mesh} between
 * processes, or a {@link LocalRelayHub} between threads of one JVM. The exchange's code path is the
 * same over either: it encodes its frame, hands the bytes to {@link #allGather}, decodes what comes
 * back, and calls {@link #settle} after a transport failure.
 *
 * <p>Both transports keep the same contract, so that a simulation over the hub sees the failures a
 * deployment over TCP sees:
 *
 * <ul>
 *   <li>{@link #allGather} returns one frame per rank (this rank's own at its index), never reading
 *       past one frame per peer: a peer one round ahead leaves its next frame for the next round.
 *   <li>It fails with a {@link MeshException} naming the peer: {@link MeshException.Reason#TIMEOUT}
 *       naming the silent ranks when {@code roundTimeoutMs} passes, {@link
 *       MeshException.Reason#DISCONNECTED} when a peer's connection ends, {@link
 *       MeshException.Reason#PEER_STOPPED} when a peer's FINAL arrives where its report was due,
 *       {@link MeshException.Reason#MALFORMED_FRAME} for a frame of another type.
 *   <li>{@link #settle} sends this rank's FINAL to every peer still reachable and collects theirs,
 *       within twice {@code roundTimeoutMs}.
 * </ul>
 *
 * <p>Called by one thread, the rank's event loop.
 */
interface RelayTransport extends AutoCloseable {

  /**
   * Sends {@code own} to every peer and receives one frame from each.
   *
   * @return the frames indexed by rank; this rank's entry is {@code own}
   */
  byte[][] allGather(long round, byte[] own) throws MeshException;

  /**
   * The survivors' last word after a failure in round {@code round}: sends this rank's FINAL
   * (gathered up to {@code gatheredRound}, blaming {@code blamedRank} or -1) to every peer whose
   * connection still works and reads theirs, skipping reports still in flight.
   *
   * @return the gathered round of every peer that answered, by rank
   */
  Map<Integer, Long> settle(long round, long gatheredRound, int blamedRank);

  /** Ends this rank's connections; peers read what was sent, then see this rank leave. */
  @Override
  void close();
}

package io.tokenspeed.control;

/**
 * A transport failure seen by this rank: it names the peer ({@link #peerRank()}, or -1 when no one
 * peer is to blame) and what went wrong ({@link #reason()}).
 */
public final class MeshException extends ControlPlaneException {

  /** What went wrong on the connection. */
  public enum Reason {
    /** A peer's handshake disagreed (replica, world size, rank, version or shared limits). */
    HANDSHAKE,
    /** A peer neither sent its frame nor took ours within the timeout. */
    TIMEOUT,
    /** A peer closed or reset its connection. */
    DISCONNECTED,
    /** A peer sent bytes that are not a valid frame. */
    MALFORMED_FRAME,
    /** A peer's frame was valid but belongs to another round or rank. */
    DESYNC,
    /** A peer sent its final frame where its report was due: it failed and stopped. */
    PEER_STOPPED,
    /** A local socket error (binding, accepting, selecting). */
    IO
  }

  private final Reason reason;
  private final int peerRank;

  MeshException(Reason reason, int peerRank, long round, String message, Throwable cause) {
    super(round, message, cause);
    this.reason = reason;
    this.peerRank = peerRank;
  }

  MeshException(Reason reason, int peerRank, long round, String message) {
    this(reason, peerRank, round, message, null);
  }

  /** What went wrong. */
  public Reason reason() {
    return reason;
  }

  /** The peer to blame, or -1. */
  public int peerRank() {
    return peerRank;
  }
}

package io.tokenspeed.control;

/**
 * Why a relay exchange ended the control plane. After one is thrown the exchange is closed: every
 * later call fails with it, and the engine shuts the replica down.
 *
 * <p>Two kinds, with different guarantees:
 *
 * <ul>
 *   <li>{@link ProtocolException} — an agreed verdict: an invalid local report, or owner records
 *       that contradict each other or overflow the window. Every rank computes it from identical
 *       inputs, so every rank throws it in the same round with the same message.
 *   <li>{@link MeshException} — a transport failure this rank observed: a silent peer, a lost
 *       connection, a malformed frame, a failed handshake. It names the peer; other ranks may see a
 *       different failure (typically the same silent rank, or this rank leaving).
 * </ul>
 */
public abstract sealed class ControlPlaneException extends Exception
    permits ProtocolException, MeshException {

  private final long round;

  ControlPlaneException(long round, String message, Throwable cause) {
    super(message, cause);
    this.round = round;
  }

  /** The exchange round in which it happened; 0 during mesh setup. */
  public long round() {
    return round;
  }
}

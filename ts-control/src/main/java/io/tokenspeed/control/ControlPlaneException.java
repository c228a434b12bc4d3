package io.tokenspeed.control;

import io.tokenspeed.core.control.AgreedRound;
import java.util.Optional;

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
 *
 * <p><b>The last round.</b> Whichever kind it is, the exception also says where this rank stops:
 * {@link #finalRound()} is a round that the caller must still apply before it stops (present when
 * the survivors settled on the round this rank held back, see {@link RelayExchange}), and {@link
 * #lastAppliedRound()} is the round the caller has applied once it did. Every surviving rank stops
 * at the same last applied round.
 */
public abstract sealed class ControlPlaneException extends Exception
    permits ProtocolException, MeshException {

  private final long round;
  private AgreedRound finalRound;
  private long lastAppliedRound = -1;

  ControlPlaneException(long round, String message, Throwable cause) {
    super(message, cause);
    this.round = round;
  }

  /** Records where the exchange stopped; called once, before the exception is thrown. */
  final void stopAt(AgreedRound finalRound, long lastAppliedRound) {
    this.finalRound = finalRound;
    this.lastAppliedRound = lastAppliedRound;
  }

  /**
   * A round every surviving rank applies before stopping and that the exchange has not yet
   * returned: apply it (once), then stop. Empty when the last round returned by {@link
   * RelayExchange#exchange} is already the last one.
   */
  public Optional<AgreedRound> finalRound() {
    return Optional.ofNullable(finalRound);
  }

  /**
   * The last round this rank applies: the final round when there is one, else the last round the
   * exchange returned (0 when it returned none); -1 for a failure during mesh setup.
   */
  public long lastAppliedRound() {
    return lastAppliedRound;
  }

  /** The exchange round in which it happened; 0 during mesh setup. */
  public long round() {
    return round;
  }
}

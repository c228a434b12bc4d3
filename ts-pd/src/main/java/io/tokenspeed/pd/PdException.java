package io.tokenspeed.pd;

/**
 * Why a room's stage ({@link Transfer#acknowledged}, {@link Transfer#received}, {@link
 * Registration#landed}) completed exceptionally. The message is one line and names the peer's
 * address where a peer is involved.
 */
public final class PdException extends RuntimeException {

  /** What ended the room. */
  public enum Kind {
    /** The connection could not be set up: connect failed, or the peer did not prove the secret. */
    HANDSHAKE,
    /** The connection closed, broke, fell silent or carried a malformed frame. */
    CONNECTION,
    /** The decode side refused the BOOTSTRAP (REFUSE, with its reason). */
    REFUSED,
    /** The room was cancelled, by this side or by the peer (CANCEL, with its reason). */
    CANCELLED,
    /** A registration waited longer than the bootstrap deadline for its BOOTSTRAP. */
    TIMEOUT,
    /** DONE's checksum did not match the bytes that landed, or blocks were missing. */
    INTEGRITY,
    /** The endpoint was closed (or, on a connection with no room open, the peer closed it). */
    CLOSED
  }

  private final Kind kind;

  public PdException(Kind kind, String message) {
    super(message, null, false, false);
    this.kind = kind;
  }

  public PdException(Kind kind, String message, Throwable cause) {
    super(message, cause, false, false);
    this.kind = kind;
  }

  /** What ended the room. */
  public Kind kind() {
    return kind;
  }

  @Override
  public String toString() {
    return "PdException[" + kind + "]: " + getMessage();
  }
}

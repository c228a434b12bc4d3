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
    /**
     * The room was cancelled, by this side or by the peer (CANCEL, with its reason; see {@link
     * #peerClientCancelled}).
     */
    CANCELLED,
    /** A registration waited longer than the bootstrap deadline for its BOOTSTRAP. */
    TIMEOUT,
    /** DONE's checksum did not match the bytes that landed, or blocks were missing. */
    INTEGRITY,
    /** The endpoint was closed (or, on a connection with no room open, the peer closed it). */
    CLOSED
  }

  private final Kind kind;
  private final boolean peerClientCancelled;

  public PdException(Kind kind, String message) {
    this(kind, message, false);
  }

  /**
   * @param peerClientCancelled the peer's REFUSE or CANCEL said that its half of the request was
   *     cancelled by its client ({@link PdFrameDescriptor#isClientCancelled})
   */
  public PdException(Kind kind, String message, boolean peerClientCancelled) {
    super(message, null, false, false);
    this.kind = kind;
    this.peerClientCancelled = peerClientCancelled;
  }

  public PdException(Kind kind, String message, Throwable cause) {
    super(message, cause, false, false);
    this.kind = kind;
    this.peerClientCancelled = false;
  }

  /** What ended the room. */
  public Kind kind() {
    return kind;
  }

  /**
   * Whether the peer ended the room ({@link Kind#CANCELLED} or {@link Kind#REFUSED}) because its
   * half of the request was cancelled by its client: nothing failed, the request was given up.
   * False for every failure, and for a room this side cancelled.
   */
  public boolean peerClientCancelled() {
    return peerClientCancelled;
  }

  @Override
  public String toString() {
    return "PdException[" + kind + "]: " + getMessage();
  }
}

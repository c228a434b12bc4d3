package io.tokenspeed.scheduler;

/**
 * Agreed input that no correct replica could have produced: a completion for an unknown or finished
 * operation, a mask of the wrong length, success and object failure on one key, object failures on
 * a QUERY or PUT. Every rank receives the same agreed input, so every rank raises the same error in
 * the same round; nothing is published first.
 */
public final class ProtocolError extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public ProtocolError(String message) {
    super(message);
  }
}

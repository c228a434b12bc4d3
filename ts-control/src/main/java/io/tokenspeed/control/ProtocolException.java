package io.tokenspeed.control;

/**
 * An agreed protocol error: every rank of the replica throws it in the same round with the same
 * message, because every rank derives it from the same gathered reports in the same order (errors
 * listed by rank, records in report order).
 */
public final class ProtocolException extends ControlPlaneException {

  ProtocolException(long round, String message) {
    super(round, "protocol error in round " + round + ": " + message, null);
  }
}

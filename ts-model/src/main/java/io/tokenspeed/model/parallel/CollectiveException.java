package io.tokenspeed.model.parallel;

/**
 * A collective operation that could not complete: a rank did not arrive in time, aborted, or
 * closed. The message names the rank or ranks and the operation.
 */
public final class CollectiveException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public CollectiveException(String message) {
    super(message);
  }

  public CollectiveException(String message, Throwable cause) {
    super(message, cause);
  }
}

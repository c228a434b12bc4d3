package io.tokenspeed.engine;

/**
 * {@link Engine#submit} refused a request because {@code max_queued} accepted requests do not run
 * yet: an overload, not a failure. A server answers it with 429 (try again later); the engine goes
 * on serving the others.
 */
public final class IntakeFullException extends IllegalStateException {
  private static final long serialVersionUID = 1L;

  IntakeFullException(String message) {
    super(message);
  }
}

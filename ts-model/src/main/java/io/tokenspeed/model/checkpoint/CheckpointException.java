package io.tokenspeed.model.checkpoint;

/**
 * A checkpoint folder that cannot be used: a file is missing, truncated or malformed, a tensor does
 * not fit its file or disagrees with {@code config.json}, or the architecture is unknown. The
 * message always names the file and, when one is at fault, the tensor.
 */
public final class CheckpointException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public CheckpointException(String message) {
    super(message);
  }

  public CheckpointException(String message, Throwable cause) {
    super(message, cause);
  }
}

package io.tokenspeed.model.checkpoint;

import io.tokenspeed.core.OneLine;

/**
 * A checkpoint folder that cannot be used: a file is missing, truncated or malformed, a tensor does
 * not fit its file or disagrees with {@code config.json}, or the architecture is unknown. The
 * message always names the file and, when one is at fault, the tensor. It is one line: a control
 * character or line separator that the file carried into it (a tensor name or dtype with a line
 * break in it) is written as an escape (backslash, u, four hex digits).
 */
public final class CheckpointException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public CheckpointException(String message) {
    super(OneLine.of(message));
  }

  public CheckpointException(String message, Throwable cause) {
    super(OneLine.of(message), cause);
  }
}

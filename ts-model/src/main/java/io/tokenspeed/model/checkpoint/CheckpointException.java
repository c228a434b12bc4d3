package io.tokenspeed.model.checkpoint;

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
    super(oneLine(message));
  }

  public CheckpointException(String message, Throwable cause) {
    super(oneLine(message), cause);
  }

  /**
   * {@code message} with control characters and line separators written as escapes, so that text a
   * file carried into a message cannot break it into lines (the tokenizer's errors use it too).
   */
  public static String oneLine(String message) {
    return io.tokenspeed.core.OneLine.of(message);
  }
}

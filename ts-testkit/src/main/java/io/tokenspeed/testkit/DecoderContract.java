package io.tokenspeed.testkit;

import java.lang.management.ManagementFactory;
import java.util.function.Supplier;

/**
 * What every decoder of outside input promises its fuzz targets, checked per input.
 *
 * <ul>
 *   <li>A refusal is clear: its message is present, not blank, one line (no CR or LF, so a log or
 *       an HTTP error body shows it whole) and of bounded length (an echoed input is cut, never
 *       pasted whole).
 *   <li>Memory stays proportional to the input: the heap bytes the decoding thread allocates for
 *       one input stay within a fixed allowance plus a multiple of the input's length, so a small
 *       input can never make the decoder reserve a large buffer because a length or count field
 *       says so.
 * </ul>
 *
 * <p>Allocation is read from the thread's own allocation counter ({@code
 * com.sun.management.ThreadMXBean#getCurrentThreadAllocatedBytes}), which counts every object the
 * thread allocated, whether it is still reachable or not. Where the JVM does not offer the counter,
 * the check passes (it only ever catches a defect; it never makes a correct decoder fail).
 */
public final class DecoderContract {

  /** The longest refusal message accepted. */
  public static final int MAX_MESSAGE_CHARS = 2_000;

  private static final com.sun.management.ThreadMXBean THREADS = threads();

  private DecoderContract() {}

  /**
   * Asserts that {@code refusal}'s message is clear (see the class comment).
   *
   * @param input renders the input for the failure message (called only on failure)
   */
  public static void assertClearMessage(Throwable refusal, Supplier<String> input) {
    String message = refusal.getMessage();
    if (message == null || message.isBlank()) {
      throw new AssertionError(
          refusal.getClass().getSimpleName() + " without a message for " + shorten(input.get()),
          refusal);
    }
    if (message.indexOf('\n') >= 0 || message.indexOf('\r') >= 0) {
      throw new AssertionError(
          "message is not one line: " + shorten(message) + " for " + shorten(input.get()), refusal);
    }
    if (message.length() > MAX_MESSAGE_CHARS) {
      throw new AssertionError(
          "message of "
              + message.length()
              + " chars (at most "
              + MAX_MESSAGE_CHARS
              + "): "
              + shorten(message),
          refusal);
    }
  }

  /**
   * The heap bytes the calling thread has allocated so far, or -1 when the JVM does not count them.
   */
  public static long allocatedBytes() {
    return THREADS == null ? -1 : THREADS.getCurrentThreadAllocatedBytes();
  }

  /**
   * Asserts that the calling thread allocated at most {@code baseBytes + perInputByte * inputBytes}
   * since {@code before} (a value of {@link #allocatedBytes()}) for one decoding of an input. A
   * first decoding also pays for loading and initializing the classes its path reaches, so when it
   * is over the allowance, {@code again} (the same decoding, its outcome ignored) runs once more
   * and that second run is the one judged.
   */
  public static void assertAllocationWithin(
      long before,
      long baseBytes,
      long perInputByte,
      int inputBytes,
      Supplier<String> input,
      Runnable again) {
    long allowed = baseBytes + perInputByte * inputBytes;
    long used = allocatedBytes() - before;
    if (before < 0 || used <= allowed) {
      return;
    }
    long start = allocatedBytes();
    again.run();
    used = allocatedBytes() - start;
    if (used > allowed) {
      throw new AssertionError(
          "decoding an input of "
              + inputBytes
              + " bytes allocated "
              + used
              + " bytes, more than the "
              + allowed
              + " allowed ("
              + baseBytes
              + " + "
              + perInputByte
              + " per input byte): "
              + shorten(input.get()));
    }
  }

  /** {@code value}'s text cut to 500 characters, for failure messages. */
  public static String shorten(Object value) {
    String s = String.valueOf(value);
    return s.length() <= 500 ? s : s.substring(0, 500) + "... (" + s.length() + " chars)";
  }

  private static com.sun.management.ThreadMXBean threads() {
    if (ManagementFactory.getThreadMXBean() instanceof com.sun.management.ThreadMXBean t
        && t.isThreadAllocatedMemorySupported()) {
      if (!t.isThreadAllocatedMemoryEnabled()) {
        t.setThreadAllocatedMemoryEnabled(true);
      }
      return t;
    }
    return null;
  }
}

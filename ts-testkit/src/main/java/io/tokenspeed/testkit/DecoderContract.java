package io.tokenspeed.testkit;

import java.lang.management.ManagementFactory;
import java.util.function.Supplier;

/**
 * What every decoder of outside input promises its fuzz targets, checked per input.
 *
 * <ul>
 *   <li>A refusal is clear: its message is present, not blank and one line (no CR or LF, so that a
 *       log line or an {@code error:} line shows it whole and nothing in it can pose as a line of
 *       its own).
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

  private static final com.sun.management.ThreadMXBean THREADS = threads();

  private DecoderContract() {}

  /**
   * What one decoding gave: a value, or a refusal of the decoder's documented type.
   *
   * @param value the decoded value (null when refused)
   * @param refusal the refusal (null when decoded)
   */
  public record Outcome<T>(T value, RuntimeException refusal) {

    public boolean refused() {
      return refusal != null;
    }
  }

  /** A decoding to run on one input. */
  @FunctionalInterface
  public interface Decoding<T> {
    T decode() throws Exception;
  }

  /**
   * Runs {@code decoding} once and checks the whole contract: it returns a non-null value or throws
   * a {@code refusalType} with a clear message; anything else it throws (another exception, an
   * error such as {@link OutOfMemoryError} or {@link StackOverflowError}) fails with the input in
   * the message; its allocation stays within {@code baseBytes + perInputByte * inputBytes}.
   *
   * @param input renders the input for failure messages (called only on failure)
   */
  public static <T> Outcome<T> decode(
      Class<? extends RuntimeException> refusalType,
      long baseBytes,
      long perInputByte,
      int inputBytes,
      Supplier<String> input,
      Decoding<T> decoding) {
    long before = allocatedBytes();
    Outcome<T> outcome = attempt(refusalType, input, decoding);
    assertAllocationWithin(
        before,
        baseBytes,
        perInputByte,
        inputBytes,
        input,
        () -> attempt(refusalType, input, decoding));
    if (outcome.refused()) {
      assertClearMessage(outcome.refusal(), input);
    } else if (outcome.value() == null) {
      throw new AssertionError("decoded to null: " + shorten(input.get()));
    }
    return outcome;
  }

  private static <T> Outcome<T> attempt(
      Class<? extends RuntimeException> refusalType, Supplier<String> input, Decoding<T> decoding) {
    try {
      return new Outcome<>(decoding.decode(), null);
    } catch (Throwable t) {
      if (refusalType.isInstance(t)) {
        return new Outcome<>(null, (RuntimeException) t);
      }
      throw new AssertionError(
          "threw "
              + t
              + " instead of a value or a "
              + refusalType.getSimpleName()
              + ": "
              + shorten(input.get()),
          t);
    }
  }

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

package io.tokenspeed.server.router;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Cuts a server-sent event stream, as it arrives in pieces of any size, after its last complete
 * event, so that the router passes events on whole: the bytes are never changed, only held until
 * the blank line that ends their event arrives. A line ends with CR, LF or CRLF; an event ends with
 * an empty line (the SSE specification).
 *
 * <pre>
 *   buffer: [ complete events … | the event in progress ]
 *                              ^ boundary: takeComplete() returns and drops what is before it
 * </pre>
 *
 * <p>Not thread-safe: one exchange's thread uses it.
 */
final class EventFramer {
  private static final byte[] DATA = "data:".getBytes(StandardCharsets.US_ASCII);
  private static final byte[] ERROR_OBJECT = "{\"error\"".getBytes(StandardCharsets.US_ASCII);

  private byte[] buffer = new byte[8192];
  private int length;
  private int boundary;
  private int lineLength;
  private boolean afterCr;
  private boolean blankLineEndedWithCr;

  /** Takes the next piece of the stream. */
  void append(byte[] bytes) {
    if (length + bytes.length > buffer.length) {
      buffer = Arrays.copyOf(buffer, Math.max(buffer.length * 2, length + bytes.length));
    }
    System.arraycopy(bytes, 0, buffer, length, bytes.length);
    for (int i = length; i < length + bytes.length; i++) {
      byte c = buffer[i];
      if (afterCr && c == '\n') {
        afterCr = false; // the LF of a CRLF: the same line end
        if (blankLineEndedWithCr) {
          boundary = i + 1;
        }
        continue;
      }
      afterCr = false;
      if (c == '\r' || c == '\n') {
        boolean blank = lineLength == 0;
        lineLength = 0;
        blankLineEndedWithCr = blank && c == '\r';
        if (blank) {
          boundary = i + 1;
        }
        afterCr = c == '\r';
      } else {
        lineLength++;
      }
    }
    length += bytes.length;
  }

  /** The complete events not taken yet (possibly none), dropped from the buffer. */
  byte[] takeComplete() {
    byte[] out = Arrays.copyOf(buffer, boundary);
    System.arraycopy(buffer, boundary, buffer, 0, length - boundary);
    length -= boundary;
    boundary = 0;
    return out;
  }

  /**
   * Whether {@code events} (whole events, as {@link #takeComplete} returns them) hold an error
   * event: a line {@code data: {"error"...}}, as {@code serve} ends a stream that failed after it
   * started ({@code WebFront.errorEvent}). Spaces after the colon are optional (the SSE
   * specification), a line end is CR, LF or CRLF.
   */
  static boolean hasErrorEvent(byte[] events) {
    boolean lineStart = true;
    for (int i = 0; i < events.length; i++) {
      byte c = events[i];
      if (c == '\r' || c == '\n') {
        lineStart = true;
        continue;
      }
      if (lineStart && startsWith(events, i, DATA)) {
        int at = i + DATA.length;
        while (at < events.length && events[at] == ' ') {
          at++; // the SSE specification strips one; a JSON parser skips the rest
        }
        if (startsWith(events, at, ERROR_OBJECT)) {
          return true;
        }
      }
      lineStart = false;
    }
    return false;
  }

  private static boolean startsWith(byte[] bytes, int at, byte[] prefix) {
    if (at + prefix.length > bytes.length) {
      return false;
    }
    for (int k = 0; k < prefix.length; k++) {
      if (bytes[at + k] != prefix[k]) {
        return false;
      }
    }
    return true;
  }

  /** Every byte not taken yet, complete events or not, dropped from the buffer. */
  byte[] takeAll() {
    byte[] out = Arrays.copyOf(buffer, length);
    length = 0;
    boundary = 0;
    return out;
  }
}

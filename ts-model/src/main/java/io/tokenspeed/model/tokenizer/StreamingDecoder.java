package io.tokenspeed.model.tokenizer;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.function.IntFunction;

/**
 * Turns generated ids into text as they arrive, one id at a time. A byte-level token can end in the
 * middle of a UTF-8 character (an emoji is often two or three tokens), so the decoder holds back a
 * trailing incomplete sequence until the bytes that complete it arrive, and never emits half a
 * character: no U+FFFD and no lone surrogate appears that the full decode would not have.
 *
 * <p>Invariant: the concatenation of everything {@link #onToken} returned plus {@link #flush()}
 * equals the tokenizer's full decode of the same ids. This holds because the decoder only cuts the
 * byte stream where a lossy UTF-8 decode of the whole would also be at a character boundary: held
 * bytes are always a valid but unfinished prefix of one character (at most three bytes), and
 * invalid bytes are emitted at once as U+FFFD, exactly where the full decode puts them.
 *
 * <p>Not thread-safe: one decoder per sequence.
 */
public final class StreamingDecoder {

  private final IntFunction<byte[]> tokenBytes;
  private byte[] pending = new byte[16];
  private int numPending;

  /**
   * @param tokenBytes the bytes of each id, or {@code null} for an id that decodes to nothing
   */
  StreamingDecoder(IntFunction<byte[]> tokenBytes) {
    this.tokenBytes = tokenBytes;
  }

  /** Adds one id and returns the text it completes, possibly empty. */
  public String onToken(int id) {
    byte[] bytes = tokenBytes.apply(id);
    if (bytes == null || bytes.length == 0) {
      return "";
    }
    if (numPending + bytes.length > pending.length) {
      pending = Arrays.copyOf(pending, Math.max(pending.length * 2, numPending + bytes.length));
    }
    System.arraycopy(bytes, 0, pending, numPending, bytes.length);
    numPending += bytes.length;
    int cut = completeLength(pending, numPending);
    if (cut == 0) {
      return "";
    }
    String text = new String(pending, 0, cut, StandardCharsets.UTF_8);
    System.arraycopy(pending, cut, pending, 0, numPending - cut);
    numPending -= cut;
    return text;
  }

  /** Emits whatever is held back (an unfinished character becomes U+FFFD) and resets. */
  public String flush() {
    String text = new String(pending, 0, numPending, StandardCharsets.UTF_8);
    numPending = 0;
    return text;
  }

  /** Number of bytes held back, waiting for the rest of a character. */
  public int numPendingBytes() {
    return numPending;
  }

  /**
   * The length of the prefix of {@code bytes[0..length)} that can be decoded now: everything but a
   * trailing sequence that is a valid, unfinished start of a UTF-8 character.
   */
  static int completeLength(byte[] bytes, int length) {
    int lead = length - 1;
    int floor = Math.max(0, length - 4);
    while (lead >= floor && (bytes[lead] & 0xC0) == 0x80) {
      lead--;
    }
    if (lead < floor) {
      return length; // only continuation bytes at the end: invalid, decode as is
    }
    int b0 = bytes[lead] & 0xFF;
    int need;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 3;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 4;
    } else {
      return length; // ASCII or a byte that never starts a character
    }
    int have = length - lead;
    if (have >= need) {
      return length;
    }
    if (have >= 2) {
      int b1 = bytes[lead + 1] & 0xFF;
      int lo = 0x80;
      int hi = 0xBF;
      switch (b0) {
        case 0xE0 -> lo = 0xA0;
        case 0xED -> hi = 0x9F;
        case 0xF0 -> lo = 0x90;
        case 0xF4 -> hi = 0x8F;
        default -> {}
      }
      if (b1 < lo || b1 > hi) {
        return length; // can never complete: the full decode has U+FFFD here too
      }
    }
    return lead;
  }
}

package io.tokenspeed.model.tokenizer;

import java.nio.charset.StandardCharsets;

/**
 * The byte-to-unicode table of GPT-2's byte-level BPE: each of the 256 byte values is shown as one
 * printable character, so that a vocabulary of strings can hold arbitrary bytes. The 188 bytes that
 * are printable Latin-1 ({@code '!'..'~'}, {@code '¡'..'¬'}, {@code '®'..'ÿ'}) stand for
 * themselves; the other 68 map, in byte order, to U+0100 onwards (space becomes {@code 'Ġ'}, line
 * feed {@code 'Ċ'}).
 *
 * <p>Public for writers of vocabularies ({@code io.tokenspeed.model.synthetic} spells its byte ids
 * with {@link #charOf}); the rest stays with the tokenizer.
 */
public final class ByteLevel {

  /** Character shown for each byte value. */
  private static final char[] BYTE_TO_CHAR = new char[256];

  /** Byte value for each character below U+0144, or -1. */
  private static final int[] CHAR_TO_BYTE = new int[256 + 68];

  static {
    java.util.Arrays.fill(CHAR_TO_BYTE, -1);
    int extra = 0;
    for (int b = 0; b < 256; b++) {
      boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char c = printable ? (char) b : (char) (256 + extra++);
      BYTE_TO_CHAR[b] = c;
      CHAR_TO_BYTE[c] = b;
    }
  }

  private ByteLevel() {}

  /** The character that stands for byte {@code b} (0..255). */
  public static char charOf(int b) {
    return BYTE_TO_CHAR[b];
  }

  /** The byte a character stands for, or -1 if it stands for none. */
  static int byteOf(char c) {
    return c < CHAR_TO_BYTE.length ? CHAR_TO_BYTE[c] : -1;
  }

  /** Shows raw bytes as byte-level characters. */
  static String toChars(byte[] bytes, int from, int to) {
    char[] chars = new char[to - from];
    for (int i = from; i < to; i++) {
      chars[i - from] = BYTE_TO_CHAR[bytes[i] & 0xFF];
    }
    return new String(chars);
  }

  /**
   * The bytes a token string decodes to, as the byte-level decoder defines them: if every character
   * stands for a byte, those bytes; otherwise (an added token such as {@code "<|im_end|>"} written
   * in plain text) the token's own UTF-8 bytes.
   */
  static byte[] decodeToken(String token) {
    byte[] bytes = new byte[token.length()];
    for (int i = 0; i < token.length(); i++) {
      int b = byteOf(token.charAt(i));
      if (b < 0) {
        return token.getBytes(StandardCharsets.UTF_8);
      }
      bytes[i] = (byte) b;
    }
    return bytes;
  }
}

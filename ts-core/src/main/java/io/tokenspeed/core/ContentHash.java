package io.tokenspeed.core;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.util.HexFormat;

/**
 * A 32-byte SHA-256 content digest held as four big-endian longs.
 *
 * <p>Page hashes are compared and hashed on the matcher's hot path, so the digest is kept as
 * primitives rather than a byte array: {@code equals} is four long compares and no copy is needed
 * to use it as a map key. {@link #toHex()} gives the 64 lowercase hex characters that object keys
 * and operator tools print.
 */
public record ContentHash(long w0, long w1, long w2, long w3) {

  /** Number of bytes in a digest. */
  public static final int BYTES = 32;

  private static final HexFormat HEX = HexFormat.of();
  private static final char[] HEX_DIGITS = "0123456789abcdef".toCharArray();
  private static final VarHandle U64_BE =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);

  /** Wraps the first 32 bytes of {@code digest}. */
  public static ContentHash of(byte[] digest) {
    if (digest.length != BYTES) {
      throw new IllegalArgumentException("digest length=" + digest.length + ", expected " + BYTES);
    }
    return new ContentHash(
        readLong(digest, 0), readLong(digest, 8), readLong(digest, 16), readLong(digest, 24));
  }

  /** Parses 64 hex characters (either case). */
  public static ContentHash fromHex(String hex) {
    if (hex == null || hex.length() != 2 * BYTES) {
      throw new IllegalArgumentException(
          "content hash must be " + 2 * BYTES + " hex characters, got " + hex);
    }
    return of(HEX.parseHex(hex));
  }

  /** The raw 32 bytes, big-endian per word (the digest's own byte order). */
  public byte[] toBytes() {
    byte[] out = new byte[BYTES];
    writeTo(out, 0);
    return out;
  }

  /** Writes the raw 32 bytes into {@code out} at {@code offset}. */
  public void writeTo(byte[] out, int offset) {
    writeLong(out, offset, w0);
    writeLong(out, offset + 8, w1);
    writeLong(out, offset + 16, w2);
    writeLong(out, offset + 24, w3);
  }

  /** 64 lowercase hex characters. */
  public String toHex() {
    return appendHex(new StringBuilder(2 * BYTES)).toString();
  }

  /**
   * Appends the 64 lowercase hex characters of {@link #toHex()} to {@code out} without an
   * intermediate string (object keys are built per row of every storage job) and returns it.
   */
  public StringBuilder appendHex(StringBuilder out) {
    appendWord(out, w0);
    appendWord(out, w1);
    appendWord(out, w2);
    appendWord(out, w3);
    return out;
  }

  private static void appendWord(StringBuilder out, long word) {
    for (int shift = 60; shift >= 0; shift -= 4) {
      out.append(HEX_DIGITS[(int) (word >>> shift) & 0xf]);
    }
  }

  @Override
  public String toString() {
    return toHex();
  }

  private static long readLong(byte[] b, int off) {
    return (long) U64_BE.get(b, off);
  }

  private static void writeLong(byte[] b, int off, long v) {
    U64_BE.set(b, off, v);
  }
}

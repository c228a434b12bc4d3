package io.tokenspeed.control;

import java.nio.ByteBuffer;
import java.security.SecureRandom;
import java.util.HexFormat;

/**
 * 32 bytes held as four longs (big-endian), so that records holding a nonce or a MAC compare by
 * value and stay immutable.
 */
record Bytes32(long w0, long w1, long w2, long w3) {

  /** The number of bytes. */
  static final int BYTES = 32;

  private static final SecureRandom RANDOM = new SecureRandom();

  /** 32 bytes from a cryptographically strong source. */
  static Bytes32 random() {
    byte[] b = new byte[BYTES];
    RANDOM.nextBytes(b);
    return of(b);
  }

  /** The 32 bytes of {@code b}, which must have exactly 32. */
  static Bytes32 of(byte[] b) {
    if (b.length != BYTES) {
      throw new IllegalArgumentException("expected 32 bytes, got " + b.length);
    }
    ByteBuffer buf = ByteBuffer.wrap(b);
    return new Bytes32(buf.getLong(), buf.getLong(), buf.getLong(), buf.getLong());
  }

  /** Reads 32 bytes from {@code buf}. */
  static Bytes32 read(ByteBuffer buf) {
    return new Bytes32(buf.getLong(), buf.getLong(), buf.getLong(), buf.getLong());
  }

  /** Writes the 32 bytes to {@code buf}. */
  void write(ByteBuffer buf) {
    buf.putLong(w0).putLong(w1).putLong(w2).putLong(w3);
  }

  /** The 32 bytes. */
  byte[] bytes() {
    byte[] b = new byte[BYTES];
    write(ByteBuffer.wrap(b));
    return b;
  }

  @Override
  public String toString() {
    return HexFormat.of().formatHex(bytes()).substring(0, 16) + "...";
  }
}

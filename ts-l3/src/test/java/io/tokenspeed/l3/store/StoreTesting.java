package io.tokenspeed.l3.store;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Random;

/** Keys and seeded bytes shared by the store tests and their child processes. */
public final class StoreTesting {

  private StoreTesting() {}

  /** A namespace of the tsl3 form derived from {@code label}. */
  public static String namespace(String label) {
    return "tsl3-" + sha256Hex("namespace " + label);
  }

  /** The {@code index}-th object key of {@code namespace}, in the tsl3 object key form. */
  public static String key(String namespace, int index) {
    return namespace + "_" + sha256Hex("page " + index) + "|g0|o" + index + "|r0";
  }

  /** {@code length} bytes drawn from a generator seeded with {@code seed}. */
  public static byte[] bytes(long seed, int length) {
    byte[] bytes = new byte[length];
    new Random(seed).nextBytes(bytes);
    return bytes;
  }

  /** Fills {@code segment} with {@link #bytes} of {@code seed}; returns the bytes written. */
  public static byte[] fill(MemorySegment segment, long seed) {
    byte[] bytes = bytes(seed, Math.toIntExact(segment.byteSize()));
    MemorySegment.copy(bytes, 0, segment, ValueLayout.JAVA_BYTE, 0, bytes.length);
    return bytes;
  }

  /** Lowercase hex SHA-256 of {@code text}'s UTF-8 bytes. */
  public static String sha256Hex(String text) {
    return sha256Hex(text.getBytes(StandardCharsets.UTF_8));
  }

  /** Lowercase hex SHA-256 of {@code bytes}. */
  public static String sha256Hex(byte[] bytes) {
    try {
      return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }
}

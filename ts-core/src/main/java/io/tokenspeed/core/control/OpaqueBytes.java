package io.tokenspeed.core.control;

import java.util.HexFormat;

/** What the opaque per-rank payloads of a report ({@link RankStatus}, {@link RankEvents}) share. */
final class OpaqueBytes {
  private OpaqueBytes() {}

  /**
   * A private copy of {@code bytes} (null reads as none).
   *
   * @throws IllegalArgumentException naming {@code what} when longer than {@code max}
   */
  static byte[] copy(byte[] bytes, int max, String what) {
    if (bytes == null) {
      return new byte[0];
    }
    if (bytes.length > max) {
      throw new IllegalArgumentException(
          what + " of " + bytes.length + " bytes: the most is " + max);
    }
    return bytes.clone();
  }

  /** {@code Name[N bytes hex..]}, the first 16 bytes in hex. */
  static String describe(String name, byte[] bytes) {
    String body =
        bytes.length <= 16
            ? HexFormat.of().formatHex(bytes)
            : HexFormat.of().formatHex(bytes, 0, 16) + "..";
    return name + "[" + bytes.length + " bytes " + body + "]";
  }
}

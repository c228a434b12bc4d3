package io.tokenspeed.l3.store.file;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.zip.CRC32C;

/**
 * Object files built byte by byte from the layouts drawn in {@link ObjectFileDescriptor}, for tests
 * that place files by hand: version 1 (the old, unaligned format, which the store no longer writes)
 * and version 2.
 */
final class ObjectFiles {

  private ObjectFiles() {}

  /** A version 1 object file: 24-byte header, key, payload at {@code 24 + K}. */
  static byte[] version1(byte[] key, byte[] payload) {
    byte[] file = new byte[24 + key.length + payload.length];
    ByteBuffer b = ByteBuffer.wrap(file);
    b.putInt(0, 0x54_53_4C_33)
        .putShort(4, (short) 1)
        .putShort(6, (short) key.length)
        .putLong(8, payload.length)
        .putInt(16, crc(payload, 0, payload.length));
    System.arraycopy(key, 0, file, 24, key.length);
    CRC32C header = new CRC32C();
    header.update(file, 0, 20);
    header.update(file, 24, key.length);
    b.putInt(20, (int) header.getValue());
    System.arraycopy(payload, 0, file, 24 + key.length, payload.length);
    return file;
  }

  /** A version 2 object file: 28-byte header, key, zeros up to a multiple of 4096, payload. */
  static byte[] version2(byte[] key, byte[] payload) {
    int offset = (28 + key.length + 4095) / 4096 * 4096;
    byte[] file = new byte[offset + payload.length];
    ByteBuffer b = ByteBuffer.wrap(file);
    b.putInt(0, 0x54_53_4C_33)
        .putShort(4, (short) 2)
        .putShort(6, (short) key.length)
        .putLong(8, payload.length)
        .putInt(16, crc(payload, 0, payload.length))
        .putInt(20, offset);
    System.arraycopy(key, 0, file, 28, key.length);
    CRC32C header = new CRC32C();
    header.update(file, 0, 24);
    header.update(file, 28, offset - 28);
    b.putInt(24, (int) header.getValue());
    System.arraycopy(payload, 0, file, offset, payload.length);
    return file;
  }

  /** The payload of a file built by {@link #version1} or {@link #version2}. */
  static byte[] payload(byte[] file, int keyBytes) {
    int version = ByteBuffer.wrap(file).getShort(4);
    int offset = version == 1 ? 24 + keyBytes : (28 + keyBytes + 4095) / 4096 * 4096;
    return Arrays.copyOfRange(file, offset, file.length);
  }

  private static int crc(byte[] bytes, int from, int length) {
    CRC32C crc = new CRC32C();
    crc.update(bytes, from, length);
    return (int) crc.getValue();
  }
}

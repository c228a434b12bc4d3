package io.tokenspeed.l3.store.file;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.util.Arrays;
import java.util.zip.CRC32C;

/**
 * The layout of one object file of the {@link FileStore} (drawn in its class javadoc) and the
 * chunked channel I/O that moves payload bytes between a file and a memory segment. All integers
 * are big-endian.
 */
final class ObjectFileDescriptor {

  /** {@code "TSL3"} in ASCII. */
  static final int MAGIC = 0x54_53_4C_33;

  /** The only format this code writes and reads; any other value is an invalid object. */
  static final short FORMAT_VERSION = 1;

  static final int MAGIC_OFFSET = 0;
  static final int VERSION_OFFSET = 4;
  static final int KEY_LENGTH_OFFSET = 6;
  static final int PAYLOAD_LENGTH_OFFSET = 8;
  static final int PAYLOAD_CRC_OFFSET = 16;
  static final int HEADER_CRC_OFFSET = 20;

  /** Bytes before the key. */
  static final int FIXED_HEADER_BYTES = 24;

  /** What {@link #payloadBytes} returns for a header that does not describe the expected key. */
  static final long NOT_VALID = -1;

  /** Largest slice moved with one {@link ByteBuffer} ({@code asByteBuffer} stops at 2 GiB). */
  private static final long MAX_CHUNK_BYTES = 1L << 30;

  private ObjectFileDescriptor() {}

  /** Header bytes (fixed part and key) of an object whose key has {@code keyBytes} bytes. */
  static int headerBytes(int keyBytes) {
    return FIXED_HEADER_BYTES + keyBytes;
  }

  /** The complete header, ready to write at offset 0. */
  static ByteBuffer encodeHeader(byte[] key, long payloadBytes, int payloadCrc) {
    ByteBuffer header = ByteBuffer.allocate(headerBytes(key.length)).order(ByteOrder.BIG_ENDIAN);
    header
        .putInt(MAGIC_OFFSET, MAGIC)
        .putShort(VERSION_OFFSET, FORMAT_VERSION)
        .putShort(KEY_LENGTH_OFFSET, (short) key.length)
        .putLong(PAYLOAD_LENGTH_OFFSET, payloadBytes)
        .putInt(PAYLOAD_CRC_OFFSET, payloadCrc)
        .put(FIXED_HEADER_BYTES, key);
    header.putInt(HEADER_CRC_OFFSET, headerCrc(header.array(), key.length));
    return header;
  }

  /**
   * The declared payload length of a header read for {@code expectedKey} (exactly {@code
   * headerBytes(expectedKey.length)} bytes, array-backed), or {@link #NOT_VALID} when its magic,
   * version, key, header checksum or length field is wrong.
   */
  static long payloadBytes(ByteBuffer header, byte[] expectedKey) {
    byte[] bytes = header.array();
    if (header.getInt(MAGIC_OFFSET) != MAGIC
        || header.getShort(VERSION_OFFSET) != FORMAT_VERSION
        || Short.toUnsignedInt(header.getShort(KEY_LENGTH_OFFSET)) != expectedKey.length
        || !Arrays.equals(
            bytes,
            FIXED_HEADER_BYTES,
            FIXED_HEADER_BYTES + expectedKey.length,
            expectedKey,
            0,
            expectedKey.length)
        || header.getInt(HEADER_CRC_OFFSET) != headerCrc(bytes, expectedKey.length)) {
      return NOT_VALID;
    }
    long payloadBytes = header.getLong(PAYLOAD_LENGTH_OFFSET);
    return payloadBytes < 0 ? NOT_VALID : payloadBytes;
  }

  /** The payload checksum a valid header declares. */
  static int payloadCrc(ByteBuffer header) {
    return header.getInt(PAYLOAD_CRC_OFFSET);
  }

  /**
   * The key stored in an object file, or null when the file does not start with a valid header.
   * Reads the header only.
   */
  static byte[] storedKey(FileChannel channel) throws IOException {
    ByteBuffer fixed = ByteBuffer.allocate(FIXED_HEADER_BYTES).order(ByteOrder.BIG_ENDIAN);
    if (readFully(channel, fixed, 0) < FIXED_HEADER_BYTES
        || fixed.getInt(MAGIC_OFFSET) != MAGIC
        || fixed.getShort(VERSION_OFFSET) != FORMAT_VERSION) {
      return null;
    }
    int keyBytes = Short.toUnsignedInt(fixed.getShort(KEY_LENGTH_OFFSET));
    ByteBuffer header = ByteBuffer.allocate(headerBytes(keyBytes)).order(ByteOrder.BIG_ENDIAN);
    if (readFully(channel, header, 0) < header.capacity()
        || header.getInt(HEADER_CRC_OFFSET) != headerCrc(header.array(), keyBytes)) {
      return null;
    }
    return Arrays.copyOfRange(header.array(), FIXED_HEADER_BYTES, FIXED_HEADER_BYTES + keyBytes);
  }

  /** CRC32C of the fixed header before its own checksum field, then the key. */
  private static int headerCrc(byte[] header, int keyBytes) {
    CRC32C crc = new CRC32C();
    crc.update(header, 0, HEADER_CRC_OFFSET);
    crc.update(header, FIXED_HEADER_BYTES, keyBytes);
    return (int) crc.getValue();
  }

  /** CRC32C of a segment's bytes, read in chunks of at most 1 GiB. */
  static int crc32c(MemorySegment segment) {
    CRC32C crc = new CRC32C();
    for (long done = 0; done < segment.byteSize(); done += MAX_CHUNK_BYTES) {
      long chunk = Math.min(MAX_CHUNK_BYTES, segment.byteSize() - done);
      crc.update(segment.asSlice(done, chunk).asByteBuffer());
    }
    return (int) crc.getValue();
  }

  /**
   * Reads from {@code position} until {@code buffer} is full or the file ends; returns the bytes
   * read.
   */
  static int readFully(FileChannel channel, ByteBuffer buffer, long position) throws IOException {
    int start = buffer.position();
    while (buffer.hasRemaining()) {
      int n = channel.read(buffer, position + buffer.position() - start);
      if (n < 0) {
        break;
      }
    }
    return buffer.position() - start;
  }

  /**
   * Reads from {@code position} into the whole segment until it is full or the file ends; returns
   * the bytes read.
   */
  static long readFully(FileChannel channel, MemorySegment destination, long position)
      throws IOException {
    long done = 0;
    while (done < destination.byteSize()) {
      long chunk = Math.min(MAX_CHUNK_BYTES, destination.byteSize() - done);
      int n = readFully(channel, destination.asSlice(done, chunk).asByteBuffer(), position + done);
      done += n;
      if (n < chunk) {
        break;
      }
    }
    return done;
  }

  /** Writes the whole buffer at the channel's position. */
  static void writeFully(FileChannel channel, ByteBuffer buffer) throws IOException {
    while (buffer.hasRemaining()) {
      channel.write(buffer);
    }
  }

  /** Writes the whole segment at the channel's position, in chunks of at most 1 GiB. */
  static void writeFully(FileChannel channel, MemorySegment source) throws IOException {
    for (long done = 0; done < source.byteSize(); done += MAX_CHUNK_BYTES) {
      long chunk = Math.min(MAX_CHUNK_BYTES, source.byteSize() - done);
      writeFully(channel, source.asSlice(done, chunk).asByteBuffer());
    }
  }
}

package io.tokenspeed.l3.store.file;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.util.Arrays;
import java.util.zip.CRC32C;

/**
 * The layout of one object file of the {@link FileStore} and the chunked channel I/O that moves
 * payload bytes between a file and a memory segment. All integers are big-endian.
 *
 * <p><b>Version 2</b>, the one this code writes (exactly {@code D + N} bytes):
 *
 * <pre>
 *   0        4         6         8                  16         20          24         28      28+K     D
 *   +--------+---------+---------+------------------+----------+-----------+----------+-------+--------+---------+
 *   | magic  | version | key     | payload length N | payload  | payload   | header   | key   | zeros  | payload |
 *   | "TSL3" | = 2     | length K| (u64)            | CRC32C   | offset D  | CRC32C   | UTF-8 |        | N bytes |
 *   |        | (u16)   | (u16)   |                  |          | (u32)     |          |       |        |         |
 *   +--------+---------+---------+------------------+----------+-----------+----------+-------+--------+---------+
 *   D = 28 + K rounded up to a multiple of 4096 (PAYLOAD_ALIGNMENT);
 *   the header CRC32C covers bytes [0, 24) and [28, D): every byte before the payload but itself
 * </pre>
 *
 * <p>The payload starts on a 4096-byte boundary so that a reader may fetch it with {@code O_DIRECT}
 * straight into Host memory: direct I/O needs file offsets, lengths and memory addresses aligned to
 * the file system's block size, and 4096 is that size on every disk file system we expect (and a
 * multiple of the 512-byte logical block of older disks). The padding costs under 4 KiB per object,
 * about 0.1% of a KV object of a few MiB. Every byte of the file is covered by one of the two
 * checksums, the padding included, so no edit of a file goes unnoticed.
 *
 * <p><b>Version 1</b>, written before payloads were aligned, is still read (never written): its
 * header is the same up to byte 20, then the header CRC32C (over bytes [0, 20) and the key), then
 * the key, then the payload at offset {@code 24 + K}.
 *
 * <pre>
 *   0        4         6         8                  16         20         24            24+K
 *   +--------+---------+---------+------------------+----------+----------+-------------+---------+
 *   | magic  | version | key     | payload length N | payload  | header   | key         | payload |
 *   | "TSL3" | = 1     | length K| (u64)            | CRC32C   | CRC32C   | (UTF-8)     | N bytes |
 *   +--------+---------+---------+------------------+----------+----------+-------------+---------+
 * </pre>
 */
final class ObjectFileDescriptor {

  /** {@code "TSL3"} in ASCII. */
  static final int MAGIC = 0x54_53_4C_33;

  /** The format this code writes. */
  static final short FORMAT_VERSION = 2;

  /** The unaligned format written before version 2; read, never written. */
  static final short VERSION_1 = 1;

  static final int MAGIC_OFFSET = 0;
  static final int VERSION_OFFSET = 4;
  static final int KEY_LENGTH_OFFSET = 6;
  static final int PAYLOAD_LENGTH_OFFSET = 8;
  static final int PAYLOAD_CRC_OFFSET = 16;

  /** Version 2: where the payload starts, a multiple of {@link #PAYLOAD_ALIGNMENT}. */
  static final int PAYLOAD_OFFSET_OFFSET = 20;

  /** Version 2: the header checksum. */
  static final int HEADER_CRC_OFFSET = 24;

  /** Version 2: bytes before the key. */
  static final int FIXED_HEADER_BYTES = 28;

  /** Version 1: the header checksum. */
  static final int VERSION_1_HEADER_CRC_OFFSET = 20;

  /** Version 1: bytes before the key. */
  static final int VERSION_1_FIXED_HEADER_BYTES = 24;

  /** Version 2 payloads start at a multiple of this many bytes. */
  static final int PAYLOAD_ALIGNMENT = 4096;

  /** Largest slice moved with one {@link ByteBuffer} ({@code asByteBuffer} stops at 2 GiB). */
  private static final long MAX_CHUNK_BYTES = 1L << 30;

  private ObjectFileDescriptor() {}

  /**
   * What a valid header says.
   *
   * @param version {@link #FORMAT_VERSION} or {@link #VERSION_1}
   * @param payloadOffset where the payload starts in the file
   * @param payloadBytes the declared payload length
   * @param payloadCrc the declared payload checksum
   */
  record Header(int version, long payloadOffset, long payloadBytes, int payloadCrc) {}

  /** Where the payload of a version 2 object whose key has {@code keyBytes} bytes starts. */
  static int payloadOffset(int keyBytes) {
    return alignUp(FIXED_HEADER_BYTES + keyBytes, PAYLOAD_ALIGNMENT);
  }

  /** Header bytes (fixed part, key and padding) of a version 2 object: its payload offset. */
  static int headerBytes(int keyBytes) {
    return payloadOffset(keyBytes);
  }

  /** Header bytes of a version 1 object (fixed part and key): its payload offset. */
  static int version1HeaderBytes(int keyBytes) {
    return VERSION_1_FIXED_HEADER_BYTES + keyBytes;
  }

  /** {@code value} rounded up to a multiple of {@code alignment} (a power of two). */
  static int alignUp(int value, int alignment) {
    return (value + alignment - 1) & -alignment;
  }

  /** {@code value} rounded up to a multiple of {@code alignment} (a power of two). */
  static long alignUp(long value, long alignment) {
    return (value + alignment - 1) & -alignment;
  }

  /** {@code value} rounded down to a multiple of {@code alignment} (a power of two). */
  static long alignDown(long value, long alignment) {
    return value & -alignment;
  }

  /** The complete version 2 header, padding included, ready to write at offset 0. */
  static ByteBuffer encodeHeader(byte[] key, long payloadBytes, int payloadCrc) {
    int payloadOffset = payloadOffset(key.length);
    ByteBuffer header = ByteBuffer.allocate(payloadOffset).order(ByteOrder.BIG_ENDIAN);
    header
        .putInt(MAGIC_OFFSET, MAGIC)
        .putShort(VERSION_OFFSET, FORMAT_VERSION)
        .putShort(KEY_LENGTH_OFFSET, (short) key.length)
        .putLong(PAYLOAD_LENGTH_OFFSET, payloadBytes)
        .putInt(PAYLOAD_CRC_OFFSET, payloadCrc)
        .putInt(PAYLOAD_OFFSET_OFFSET, payloadOffset)
        .put(FIXED_HEADER_BYTES, key);
    header.putInt(HEADER_CRC_OFFSET, headerCrc(header.array(), payloadOffset));
    return header;
  }

  /**
   * The header of a file read for {@code expectedKey}, or null when its magic, version, key, header
   * checksum, payload offset, padding (zeros) or length field is wrong, or when {@code prefix} (the
   * file's first {@code prefixBytes} bytes, array-backed from index 0) is too short to hold that
   * header.
   */
  static Header parse(byte[] prefix, int prefixBytes, byte[] expectedKey) {
    if (prefixBytes < VERSION_1_FIXED_HEADER_BYTES) {
      return null;
    }
    ByteBuffer b = ByteBuffer.wrap(prefix, 0, prefixBytes).order(ByteOrder.BIG_ENDIAN);
    if (b.getInt(MAGIC_OFFSET) != MAGIC
        || Short.toUnsignedInt(b.getShort(KEY_LENGTH_OFFSET)) != expectedKey.length) {
      return null;
    }
    int version = b.getShort(VERSION_OFFSET);
    long payloadBytes = b.getLong(PAYLOAD_LENGTH_OFFSET);
    int payloadCrc = b.getInt(PAYLOAD_CRC_OFFSET);
    int keyAt;
    long payloadOffset;
    if (version == FORMAT_VERSION) {
      keyAt = FIXED_HEADER_BYTES;
      payloadOffset = payloadOffset(expectedKey.length);
      if (prefixBytes < payloadOffset
          || Integer.toUnsignedLong(b.getInt(PAYLOAD_OFFSET_OFFSET)) != payloadOffset
          || b.getInt(HEADER_CRC_OFFSET) != headerCrc(prefix, (int) payloadOffset)
          || !zeros(prefix, FIXED_HEADER_BYTES + expectedKey.length, (int) payloadOffset)) {
        return null;
      }
    } else if (version == VERSION_1) {
      keyAt = VERSION_1_FIXED_HEADER_BYTES;
      payloadOffset = version1HeaderBytes(expectedKey.length);
      if (prefixBytes < payloadOffset
          || b.getInt(VERSION_1_HEADER_CRC_OFFSET)
              != version1HeaderCrc(prefix, expectedKey.length)) {
        return null;
      }
    } else {
      return null;
    }
    if (!Arrays.equals(
            prefix, keyAt, keyAt + expectedKey.length, expectedKey, 0, expectedKey.length)
        || payloadBytes < 0) {
      return null;
    }
    return new Header(version, payloadOffset, payloadBytes, payloadCrc);
  }

  /**
   * Where the payload of a file of {@code keyBytes}'s object starts by its version field, for
   * reporting how many payload bytes a damaged file holds: version 1's offset when the field says
   * 1, version 2's otherwise.
   */
  static long nominalPayloadOffset(byte[] prefix, int prefixBytes, int keyBytes) {
    boolean version1 =
        prefixBytes >= VERSION_OFFSET + 2
            && ByteBuffer.wrap(prefix).getShort(VERSION_OFFSET) == VERSION_1;
    return version1 ? version1HeaderBytes(keyBytes) : payloadOffset(keyBytes);
  }

  /**
   * The key stored in an object file of either version, or null when the file does not start with a
   * valid header. Reads the header only.
   */
  static byte[] storedKey(FileChannel channel) throws IOException {
    ByteBuffer fixed = ByteBuffer.allocate(FIXED_HEADER_BYTES).order(ByteOrder.BIG_ENDIAN);
    int got = readFully(channel, fixed, 0);
    if (got < VERSION_1_FIXED_HEADER_BYTES || fixed.getInt(MAGIC_OFFSET) != MAGIC) {
      return null;
    }
    int version = fixed.getShort(VERSION_OFFSET);
    int keyBytes = Short.toUnsignedInt(fixed.getShort(KEY_LENGTH_OFFSET));
    int length;
    if (version == FORMAT_VERSION) {
      length = payloadOffset(keyBytes);
    } else if (version == VERSION_1) {
      length = version1HeaderBytes(keyBytes);
    } else {
      return null;
    }
    ByteBuffer header = ByteBuffer.allocate(length).order(ByteOrder.BIG_ENDIAN);
    if (readFully(channel, header, 0) < length) {
      return null;
    }
    int keyAt = version == FORMAT_VERSION ? FIXED_HEADER_BYTES : VERSION_1_FIXED_HEADER_BYTES;
    byte[] key = Arrays.copyOfRange(header.array(), keyAt, keyAt + keyBytes);
    return parse(header.array(), length, key) == null ? null : key; // checks the header CRC
  }

  private static boolean zeros(byte[] bytes, int from, int to) {
    for (int i = from; i < to; i++) {
      if (bytes[i] != 0) {
        return false;
      }
    }
    return true;
  }

  /** Version 2: CRC32C of bytes [0, 24) and [28, payloadOffset) of the header. */
  private static int headerCrc(byte[] header, int payloadOffset) {
    CRC32C crc = new CRC32C();
    crc.update(header, 0, HEADER_CRC_OFFSET);
    crc.update(header, FIXED_HEADER_BYTES, payloadOffset - FIXED_HEADER_BYTES);
    return (int) crc.getValue();
  }

  /** Version 1: CRC32C of the fixed header before its own checksum field, then the key. */
  static int version1HeaderCrc(byte[] header, int keyBytes) {
    CRC32C crc = new CRC32C();
    crc.update(header, 0, VERSION_1_HEADER_CRC_OFFSET);
    crc.update(header, VERSION_1_FIXED_HEADER_BYTES, keyBytes);
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

  /**
   * Reads with {@code O_DIRECT} from {@code position} into the whole of {@code destination} until
   * it is full or the file ends; returns the bytes read. The position, the destination's address
   * and its length are multiples of the channel's block size {@code blockBytes}, and so is every
   * read's remainder: a read that ends off a block boundary can only have reached the end of the
   * file.
   */
  static long readDirect(
      FileChannel channel, MemorySegment destination, long position, int blockBytes)
      throws IOException {
    long done = 0;
    while (done < destination.byteSize()) {
      long chunk = Math.min(MAX_CHUNK_BYTES, destination.byteSize() - done);
      ByteBuffer buffer = destination.asSlice(done, chunk).asByteBuffer();
      int n = channel.read(buffer, position + done);
      if (n <= 0) {
        break;
      }
      done += n;
      if (n % blockBytes != 0) {
        break; // the end of the file: the next read would start off the block size
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

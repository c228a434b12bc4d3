package io.tokenspeed.l3.redis;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.ScatteringByteChannel;
import java.nio.charset.StandardCharsets;

/**
 * Pulls RESP2 replies off one connection, on the calling thread, and reads a bulk reply's payload
 * straight into its destination segment.
 *
 * <pre>
 *   wire                        next()     then
 *   +text\r\n                   SIMPLE     text()
 *   -CODE text\r\n              ERROR      text()
 *   :123\r\n                    INTEGER    integer()
 *   $N\r\n N bytes \r\n         BULK       length() = N, then exactly one of readBulk / skipBulk
 *   $-1\r\n  *-1\r\n  _\r\n     NIL        (RESP2's null bulk and null array; RESP3's null)
 *   anything else               throws ProtocolException: the connection is unusable
 * </pre>
 *
 * <p><b>Buffering.</b> Headers are read through a small direct buffer, at most {@link
 * #HEADER_READ_BYTES} bytes per read, so that a header read takes at most that much of the payload
 * that follows it. {@link #readBulk} copies that buffered prefix, then reads the rest of the
 * payload from the channel into the destination itself: a 64 KiB or 1 MiB value crosses user space
 * once, from the kernel into the destination, except its first few hundred bytes.
 *
 * <p><b>Blocking.</b> The channel is a blocking one (or a scripted one in tests); every method
 * reads until it has what it needs. A read that never completes is ended from outside, by closing
 * the channel (see {@link DirectLink}): the pending read then throws, and since all reads happen on
 * the thread that called, nothing is written into a destination after that thread returns.
 *
 * <p>Not thread-safe: one connection, one calling thread at a time.
 */
final class ReplyDecoder {

  /** What {@link #next()} found. */
  enum Kind {
    SIMPLE,
    ERROR,
    INTEGER,
    BULK,
    NIL
  }

  /** The most bytes one header read takes from the channel. */
  static final int HEADER_READ_BYTES = 512;

  /** The most bytes one read takes while a payload nobody wants is skipped. */
  static final int SKIP_READ_BYTES = 64 * 1024;

  /** The longest reply line accepted (an error's text, a number). */
  static final int MAX_LINE_BYTES = 64 * 1024;

  /** A connection that can no longer be read in step: its reply stream is not RESP2 as expected. */
  static final class ProtocolException extends IOException {
    ProtocolException(String message) {
      super(message);
    }
  }

  private final ScatteringByteChannel in;
  private final String peer;

  /** Unread bytes lie between position and limit. */
  private ByteBuffer buffer;

  private MemorySegment bufferSegment;

  /** Where skipped payloads are read; made on the first skip. */
  private ByteBuffer scratch;

  private long bulkLength = -1;
  private long integer;
  private String text;

  /** Bytes taken off the channel so far. */
  private long bytesRead;

  ReplyDecoder(ScatteringByteChannel in, String peer) {
    this.in = in;
    this.peer = peer;
    this.buffer = ByteBuffer.allocateDirect(HEADER_READ_BYTES * 2).limit(0);
    this.bufferSegment = MemorySegment.ofBuffer(buffer.duplicate().clear());
  }

  /** Bytes read from the channel since this decoder was made. */
  long bytesRead() {
    return bytesRead;
  }

  /** Whether unread bytes are buffered (a reply nobody asked for, or the rest of one). */
  boolean hasBuffered() {
    return buffer.hasRemaining();
  }

  /** Reads the next reply's header. A BULK reply's payload must be read or skipped next. */
  Kind next() throws IOException {
    if (bulkLength >= 0) {
      throw new IllegalStateException("the payload of the previous bulk reply was not consumed");
    }
    text = null;
    int lineEnd = lineEnd();
    byte type = buffer.get();
    int start = buffer.position();
    int length = lineEnd - start;
    Kind kind;
    switch (type) {
      case '+' -> {
        text = ascii(start, length);
        kind = Kind.SIMPLE;
      }
      case '-' -> {
        text = ascii(start, length);
        kind = Kind.ERROR;
      }
      case ':' -> {
        integer = parseLong(start, length, type);
        kind = Kind.INTEGER;
      }
      case '$' -> {
        long n = parseLong(start, length, type);
        if (n == -1) {
          kind = Kind.NIL;
        } else if (n < 0) {
          throw protocol("a bulk length of " + n);
        } else {
          bulkLength = n;
          kind = Kind.BULK;
        }
      }
      case '*' -> {
        long n = parseLong(start, length, type);
        if (n != -1) {
          throw protocol("an array of " + n + " elements where a single reply was expected");
        }
        kind = Kind.NIL;
      }
      case '_' -> {
        if (length != 0) {
          throw protocol("a RESP3 null with content");
        }
        kind = Kind.NIL;
      }
      default -> throw protocol("a reply of type 0x" + Integer.toHexString(type & 0xFF));
    }
    buffer.position(lineEnd + 2);
    return kind;
  }

  /** The payload length of the BULK reply just read by {@link #next()}. */
  long length() {
    return bulkLength;
  }

  /** The value of the INTEGER reply just read. */
  long integer() {
    return integer;
  }

  /** The text of the SIMPLE or ERROR reply just read. */
  String text() {
    return text;
  }

  /**
   * Reads the pending bulk payload into {@code destination}, whose size must equal {@link
   * #length()}, then its trailing CRLF. Throws (an I/O error, end of stream, or the channel closed
   * from outside) with the destination partly written; the connection is then unusable.
   */
  void readBulk(MemorySegment destination) throws IOException {
    long n = bulkLength;
    if (n < 0 || destination.byteSize() != n) {
      throw new IllegalStateException(
          "destination size=" + destination.byteSize() + " for a bulk reply of " + n + " bytes");
    }
    long buffered = Math.min(buffer.remaining(), n);
    MemorySegment.copy(bufferSegment, buffer.position(), destination, 0, buffered);
    buffer.position(buffer.position() + (int) buffered);
    if (buffered < n) {
      // The buffer is empty now. One scattering read fills the rest of the destination and then
      // the buffer, so the CRLF (and the next reply's header) usually comes with the last bytes
      // of the value instead of costing a read of its own.
      ByteBuffer rest = destination.asSlice(buffered).asByteBuffer();
      buffer.clear().limit(HEADER_READ_BYTES);
      ByteBuffer[] parts = {rest, buffer};
      try {
        while (rest.hasRemaining()) {
          long r = in.read(parts);
          if (r < 0) {
            throw endOfStream(n - buffered - rest.remaining(), n);
          }
          bytesRead += r;
        }
      } finally {
        buffer.flip(); // what came after the value, if anything
      }
    }
    bulkLength = -1;
    expectCrlf();
  }

  /** Reads and drops the pending bulk payload and its CRLF. */
  void skipBulk() throws IOException {
    long left = bulkLength;
    if (left < 0) {
      throw new IllegalStateException("no bulk reply is pending");
    }
    int take = (int) Math.min(left, buffer.remaining());
    buffer.position(buffer.position() + take);
    left -= take;
    if (left > 0) {
      if (scratch == null) {
        scratch = ByteBuffer.allocateDirect(SKIP_READ_BYTES);
      }
      while (left > 0) {
        scratch.clear().limit((int) Math.min(left, SKIP_READ_BYTES));
        int r = in.read(scratch);
        if (r < 0) {
          throw endOfStream(bulkLength - left, bulkLength);
        }
        bytesRead += r;
        left -= r;
      }
    }
    bulkLength = -1;
    expectCrlf();
  }

  // ------------------------------------------------------------------ reading

  private void expectCrlf() throws IOException {
    while (buffer.remaining() < 2) {
      fill(HEADER_READ_BYTES);
    }
    if (buffer.get() != '\r' || buffer.get() != '\n') {
      throw protocol("a bulk payload not followed by CRLF");
    }
  }

  /** The index of the CR that ends the line at the buffer's position; reads until there is one. */
  private int lineEnd() throws IOException {
    int scanned = buffer.position();
    while (true) {
      for (int i = scanned; i + 1 < buffer.limit(); i++) {
        if (buffer.get(i) == '\r') {
          if (buffer.get(i + 1) != '\n') {
            throw protocol("a CR not followed by LF");
          }
          if (i == buffer.position()) {
            throw protocol("an empty reply line");
          }
          return i;
        }
      }
      scanned = Math.max(buffer.position(), buffer.limit() - 1);
      if (buffer.remaining() > MAX_LINE_BYTES) {
        throw protocol("a reply line longer than " + MAX_LINE_BYTES + " bytes");
      }
      int before = buffer.position();
      fill(HEADER_READ_BYTES);
      scanned -= before - buffer.position(); // fill may have moved the unread bytes to the front
    }
  }

  /**
   * Reads at least one more byte, at most {@code maxBytes}, after the unread ones (moving them to
   * the front, growing the buffer for a long line).
   */
  private void fill(int maxBytes) throws IOException {
    if (buffer.position() > 0) {
      buffer.compact().flip();
    }
    if (buffer.capacity() - buffer.limit() < maxBytes) {
      ByteBuffer grown =
          ByteBuffer.allocateDirect(Math.max(buffer.capacity() * 2, buffer.limit() + maxBytes));
      grown.put(buffer).flip();
      buffer = grown;
      bufferSegment = MemorySegment.ofBuffer(buffer.duplicate().clear());
    }
    int unread = buffer.limit();
    buffer.position(unread).limit(unread + maxBytes);
    int r;
    try {
      r = in.read(buffer);
    } finally {
      buffer.limit(buffer.position()).position(0);
    }
    if (r < 0) {
      throw new EOFException("redis at " + peer + " closed the connection before its reply ended");
    }
    bytesRead += r;
  }

  private String ascii(int start, int length) {
    byte[] bytes = new byte[length];
    buffer.get(start, bytes);
    return new String(bytes, StandardCharsets.UTF_8);
  }

  private long parseLong(int start, int length, byte type) throws ProtocolException {
    if (length < 1 || length > 20) {
      throw protocol("a '" + (char) type + "' line of " + length + " characters");
    }
    boolean negative = buffer.get(start) == '-';
    int i = negative ? start + 1 : start;
    if (i == start + length) {
      throw protocol("a '" + (char) type + "' line without digits");
    }
    long value = 0;
    for (; i < start + length; i++) {
      int d = buffer.get(i) - '0';
      if (d < 0 || d > 9 || value > (Long.MAX_VALUE - d) / 10) {
        throw protocol("'" + (char) type + ascii(start, length) + "', not a number");
      }
      value = value * 10 + d;
    }
    return negative ? -value : value;
  }

  private EOFException endOfStream(long got, long of) {
    return new EOFException(
        "redis at " + peer + " closed the connection after " + got + " of " + of + " value bytes");
  }

  private ProtocolException protocol(String what) {
    return new ProtocolException("redis at " + peer + " sent " + what + " (not a RESP2 reply)");
  }
}

package io.tokenspeed.l3.redis;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.GatheringByteChannel;
import java.nio.charset.StandardCharsets;

/**
 * Writes the few RESP2 commands the direct path sends, and sends them on the calling thread.
 *
 * <pre>
 *   GET key            *2\r\n $3\r\nGET\r\n    $K\r\n key \r\n
 *   STRLEN key         *2\r\n $6\r\nSTRLEN\r\n $K\r\n key \r\n
 *   SET key value NX   *4\r\n $3\r\nSET\r\n    $K\r\n key \r\n $V\r\n │ value │ \r\n $2\r\nNX\r\n
 *                      └──────────── this buffer ──────────────────┘ └source─┘ └─ trailer ──┘
 *   ASKING             *1\r\n $6\r\nASKING\r\n
 *   AUTH [user] pass   *2\r\n or *3\r\n $4\r\nAUTH\r\n ...
 * </pre>
 *
 * A SET's value is never copied: {@link #sendWithValue} hands the channel the header, the source
 * segment's own buffer and the trailer in one gathering write. Commands without a value accumulate
 * in the buffer and go out together with {@link #send}.
 *
 * <p>Not thread-safe: one connection, one calling thread at a time.
 */
final class CommandEncoder {

  private static final byte[] GET = ascii("*2\r\n$3\r\nGET\r\n");
  private static final byte[] STRLEN = ascii("*2\r\n$6\r\nSTRLEN\r\n");
  private static final byte[] SET = ascii("*4\r\n$3\r\nSET\r\n");
  private static final byte[] SET_TRAILER = ascii("\r\n$2\r\nNX\r\n");
  private static final byte[] ASKING = ascii("*1\r\n$6\r\nASKING\r\n");

  private static final int INITIAL_BYTES = 4096;

  private ByteBuffer out = ByteBuffer.allocateDirect(INITIAL_BYTES);
  private final ByteBuffer trailer =
      ByteBuffer.allocateDirect(SET_TRAILER.length).put(SET_TRAILER).flip();
  private final ByteBuffer[] parts = new ByteBuffer[3];

  /** Bytes written and not yet sent. */
  int pendingBytes() {
    return out.position();
  }

  void get(String key) {
    put(GET);
    bulk(key);
  }

  void strlen(String key) {
    put(STRLEN);
    bulk(key);
  }

  void asking() {
    put(ASKING);
  }

  /** The part of {@code SET key value NX} before the value; {@link #sendWithValue} sends it. */
  void setHeader(String key, long valueBytes) {
    put(SET);
    bulk(key);
    room(24);
    out.put((byte) '$');
    decimal(valueBytes);
    crlf();
  }

  void auth(String username, String password) {
    boolean user = !username.isEmpty();
    put(ascii(user ? "*3\r\n$4\r\nAUTH\r\n" : "*2\r\n$4\r\nAUTH\r\n"));
    if (user) {
      bulk(username);
    }
    bulk(password);
  }

  /** Sends what was written, then forgets it. */
  void send(GatheringByteChannel channel) throws IOException {
    out.flip();
    try {
      while (out.hasRemaining()) {
        channel.write(out);
      }
    } finally {
      out.clear();
    }
  }

  /**
   * Sends what was written (ending with a {@link #setHeader}), then {@code value}, then the SET
   * trailer, in gathering writes; then forgets it. {@code value} is read where it lies.
   */
  void sendWithValue(GatheringByteChannel channel, ByteBuffer value) throws IOException {
    out.flip();
    trailer.rewind();
    parts[0] = out;
    parts[1] = value;
    parts[2] = trailer;
    try {
      while (trailer.hasRemaining()) {
        channel.write(parts);
      }
    } finally {
      parts[1] = null;
      out.clear();
    }
  }

  // ------------------------------------------------------------------ encoding

  private void bulk(String text) {
    int n = text.length();
    boolean ascii = true;
    for (int i = 0; i < n && ascii; i++) {
      ascii = text.charAt(i) < 0x80;
    }
    if (!ascii) {
      byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
      room(bytes.length + 16);
      out.put((byte) '$');
      decimal(bytes.length);
      crlf();
      out.put(bytes);
      crlf();
      return;
    }
    room(n + 16);
    out.put((byte) '$');
    decimal(n);
    crlf();
    for (int i = 0; i < n; i++) {
      out.put((byte) text.charAt(i));
    }
    crlf();
  }

  private void decimal(long value) {
    if (value == 0) {
      out.put((byte) '0');
      return;
    }
    int digits = 0;
    for (long v = value; v > 0; v /= 10) {
      digits++;
    }
    int at = out.position() + digits;
    for (long v = value; v > 0; v /= 10) {
      out.put(--at, (byte) ('0' + (v % 10)));
    }
    out.position(out.position() + digits);
  }

  private void crlf() {
    out.put((byte) '\r').put((byte) '\n');
  }

  private void put(byte[] bytes) {
    room(bytes.length);
    out.put(bytes);
  }

  private void room(int bytes) {
    if (out.remaining() < bytes) {
      ByteBuffer grown =
          ByteBuffer.allocateDirect(Math.max(out.capacity() * 2, out.position() + bytes));
      out.flip();
      grown.put(out);
      out = grown;
    }
  }

  private static byte[] ascii(String text) {
    return text.getBytes(StandardCharsets.US_ASCII);
  }
}

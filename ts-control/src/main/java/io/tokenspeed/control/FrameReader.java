package io.tokenspeed.control;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ReadableByteChannel;

/**
 * Reads whole frames from a non-blocking channel, one at a time, never past the end of the frame it
 * is reading: a header first, checked by {@link FrameDecoder#checkHeader} before a body buffer of
 * the declared length is allocated, then exactly that many bytes. Whatever the peer sent after the
 * frame stays where it was for the next read: in the socket, or, when the channel is a {@link
 * TlsLink}, decrypted in the link, which serves it before it reads the socket again.
 */
final class FrameReader {

  /** The header was refused; {@code detail} says why. */
  static final class BadHeader extends Exception {
    BadHeader(String detail) {
      super(detail, null, false, false);
    }
  }

  private final FrameDecoder decoder;
  private final int maxBytes;
  private final byte[] header = new byte[FrameDescriptor.HEADER_BYTES];
  private final ByteBuffer headerIn = ByteBuffer.wrap(header);
  private byte[] frame;
  private ByteBuffer frameIn;

  /**
   * A reader that refuses headers {@code decoder} refuses and frames longer than {@code maxBytes}
   * (for example only handshake-sized frames while a connection is not yet a peer).
   */
  FrameReader(FrameDecoder decoder, int maxBytes) {
    this.decoder = decoder;
    this.maxBytes = maxBytes;
  }

  /**
   * Reads what is available toward the current frame.
   *
   * @return the whole frame once complete (the reader then starts the next one), else null
   * @throws EOFException when the peer closed the connection
   * @throws BadHeader when the header is not one this reader accepts
   */
  byte[] read(ReadableByteChannel ch) throws IOException, BadHeader {
    if (frameIn == null) {
      if (ch.read(headerIn) < 0) {
        throw new EOFException("end of stream");
      }
      if (headerIn.hasRemaining()) {
        return null;
      }
      Decoded.Malformed bad = decoder.checkHeader(header, 0, header.length);
      if (bad != null) {
        throw new BadHeader(bad.toString());
      }
      int length = FrameDecoder.frameLength(header, 0);
      if (length > maxBytes) {
        throw new BadHeader(
            FrameDecoder.typeName(FrameDecoder.frameType(header, 0))
                + " frame of "
                + length
                + " bytes where at most "
                + maxBytes
                + " are allowed");
      }
      frame = new byte[length];
      System.arraycopy(header, 0, frame, 0, header.length);
      frameIn = ByteBuffer.wrap(frame, header.length, frame.length - header.length);
    }
    if (frameIn.hasRemaining() && ch.read(frameIn) < 0) {
      throw new EOFException("end of stream inside a frame");
    }
    if (frameIn.hasRemaining()) {
      return null;
    }
    byte[] done = frame;
    headerIn.clear();
    frame = null;
    frameIn = null;
    return done;
  }

  /** True while part of a frame has been read. */
  boolean midFrame() {
    return frameIn != null || headerIn.position() > 0;
  }
}

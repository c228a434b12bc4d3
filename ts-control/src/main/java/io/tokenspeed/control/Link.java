package io.tokenspeed.control;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ReadableByteChannel;
import java.nio.channels.SocketChannel;

/**
 * The byte transport of one mesh connection: plain TCP ({@link Plain}) or TLS ({@link TlsLink}).
 *
 * <p>The mesh's invariant is that a read never consumes a peer's next frame. Over plain TCP the
 * bytes after a frame stay in the socket; over TLS a record may carry the end of one frame and the
 * start of the next, so those bytes are decrypted and stay buffered in the link. A {@link
 * FrameReader} reads through the link, so buffered bytes are served first, and a selector loop asks
 * {@link #hasBufferedInput} before it waits for the socket: a peer whose next frame is already in
 * the link is read without waiting for {@code OP_READ}.
 *
 * <p>{@link #read} follows {@link ReadableByteChannel}: the bytes read, 0 when none are available
 * now, -1 at the end of the stream. A link is non-blocking when its channel is.
 */
sealed interface Link extends ReadableByteChannel permits Link.Plain, TlsLink {

  /** The socket under this link. */
  SocketChannel channel();

  /**
   * Moves what it can of {@code src} toward the peer without blocking.
   *
   * @return true once every byte of {@code src} has been handed to the socket
   */
  boolean send(ByteBuffer src) throws IOException;

  /**
   * The socket readiness to wait for, given the readiness the caller wants ({@code OP_READ} to
   * read, {@code OP_WRITE} to send); a TLS link adds what its own handshake or pending output
   * needs.
   */
  int interestOps(int wanted);

  /** True when bytes can be read now without the socket being readable. */
  boolean hasBufferedInput();

  /** Tells the peer, best effort and without blocking, that nothing more will be sent. */
  void closeOutbound();

  /** A plain TCP connection: every call goes straight to the socket. */
  record Plain(SocketChannel channel) implements Link {

    @Override
    public int read(ByteBuffer dst) throws IOException {
      return channel.read(dst);
    }

    @Override
    public boolean send(ByteBuffer src) throws IOException {
      channel.write(src);
      return !src.hasRemaining();
    }

    @Override
    public int interestOps(int wanted) {
      return wanted;
    }

    @Override
    public boolean hasBufferedInput() {
      return false;
    }

    @Override
    public void closeOutbound() {
      // The FIN of shutdownOutput is the whole message.
    }

    @Override
    public boolean isOpen() {
      return channel.isOpen();
    }

    @Override
    public void close() throws IOException {
      channel.close();
    }
  }
}

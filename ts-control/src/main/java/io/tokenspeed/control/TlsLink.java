package io.tokenspeed.control;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.SocketChannel;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLEngineResult;
import javax.net.ssl.SSLEngineResult.HandshakeStatus;
import javax.net.ssl.SSLException;

/**
 * One mesh connection over TLS 1.3, driven without blocking by an {@link SSLEngine}: the TLS
 * handshake advances inside {@link #read} and {@link #send}, as far as the socket allows, under the
 * same selector loops that move frames, and delegated tasks run inline.
 *
 * <pre>
 *   socket ──► netIn ──unwrap──► appIn ──► read(dst)        (FrameReader: one frame at a time)
 *   socket ◄── netOut ◄──wrap─── send(src)
 * </pre>
 *
 * Each buffer holds its bytes in {@code [0, position)}. A TLS record may end past the frame being
 * read: its remaining plaintext stays in {@code appIn}, and whole records not yet decrypted stay in
 * {@code netIn}, until the next read. {@link #read} decrypts until {@code dst} is full or neither
 * buffer nor socket has more, so when it returns short, waiting for {@code OP_READ} is right; when
 * it filled {@code dst}, {@link #hasBufferedInput} says whether more is already here.
 *
 * <p>{@link #send} reports success only once the ciphertext of every byte of {@code src} has been
 * written to the socket; ciphertext the socket did not take waits in {@code netOut} and leaves
 * before anything sent later, so a frame is never torn.
 *
 * <p>End of stream, with or without the peer's {@code close_notify}, reads as -1. A handshake
 * failure (an untrusted certificate, no certificate, not TLS at all) is an {@link SSLException};
 * the alert is sent best effort first.
 */
final class TlsLink implements Link {

  private static final ByteBuffer EMPTY = ByteBuffer.allocate(0);

  private final SocketChannel channel;
  private final SSLEngine engine;
  private ByteBuffer netIn;
  private ByteBuffer netOut;
  private ByteBuffer appIn;

  /** {@code netIn} holds no whole record and the socket had nothing more at the last look. */
  private boolean starved;

  /** The peer closed (close_notify or end of stream): reads return what is buffered, then -1. */
  private boolean inboundDone;

  private TlsLink(SocketChannel channel, SSLEngine engine) {
    this.channel = channel;
    this.engine = engine;
    int packet = engine.getSession().getPacketBufferSize();
    this.netIn = ByteBuffer.allocate(packet);
    this.netOut = ByteBuffer.allocate(packet);
    this.appIn = ByteBuffer.allocate(engine.getSession().getApplicationBufferSize());
  }

  /** The dialer's end: a TLS client that verifies the acceptor's certificate chain. */
  static TlsLink dialer(SSLContext context, SocketChannel channel) throws IOException {
    return new TlsLink(channel, engine(context, true));
  }

  /** The acceptor's end: a TLS server that requires and verifies the dialer's certificate. */
  static TlsLink acceptor(SSLContext context, SocketChannel channel) throws IOException {
    return new TlsLink(channel, engine(context, false));
  }

  /**
   * An engine from {@code context} limited to {@value ControlTls#PROTOCOL}; a server engine needs
   * the client's certificate. No host name is checked (none is given): the trust store decides.
   */
  static SSLEngine engine(SSLContext context, boolean client) throws IOException {
    SSLEngine engine = context.createSSLEngine();
    engine.setUseClientMode(client);
    engine.setEnabledProtocols(new String[] {ControlTls.PROTOCOL});
    if (!client) {
      engine.setNeedClientAuth(true);
    }
    engine.beginHandshake();
    return engine;
  }

  @Override
  public SocketChannel channel() {
    return channel;
  }

  @Override
  public int read(ByteBuffer dst) throws IOException {
    int n = 0;
    while (true) {
      n += drain(dst);
      if (!dst.hasRemaining()) {
        return n;
      }
      if (inboundDone) {
        return n > 0 ? n : -1;
      }
      if (!handshake() || !unwrap()) {
        return n;
      }
    }
  }

  @Override
  public boolean send(ByteBuffer src) throws IOException {
    if (!handshake()) {
      return false;
    }
    while (true) {
      if (!flushNet()) {
        return false;
      }
      if (!src.hasRemaining()) {
        return true;
      }
      SSLEngineResult r = engine.wrap(src, netOut);
      switch (r.getStatus()) {
        case OK -> {
          if (!idle(r.getHandshakeStatus()) && !handshake()) {
            flushNet();
            return false;
          }
        }
        case BUFFER_OVERFLOW -> netOut = grow(netOut, engine.getSession().getPacketBufferSize());
        case CLOSED -> throw new SSLException("the TLS connection is closed for sending");
        case BUFFER_UNDERFLOW -> throw new IllegalStateException("wrap reported BUFFER_UNDERFLOW");
      }
    }
  }

  @Override
  public int interestOps(int wanted) {
    int ops = netOut.position() > 0 ? SelectionKey.OP_WRITE : 0;
    return switch (engine.getHandshakeStatus()) {
      case NEED_UNWRAP, NEED_UNWRAP_AGAIN -> ops | SelectionKey.OP_READ;
      case NEED_WRAP -> ops | SelectionKey.OP_WRITE;
      case NEED_TASK, NOT_HANDSHAKING, FINISHED -> ops | wanted;
    };
  }

  @Override
  public boolean hasBufferedInput() {
    return appIn.position() > 0 || inboundDone || (netIn.position() > 0 && !starved);
  }

  @Override
  public void closeOutbound() {
    try {
      engine.closeOutbound();
      for (int i = 0; i < 4 && !engine.isOutboundDone(); i++) {
        if (engine.wrap(EMPTY, netOut).bytesProduced() == 0) {
          break;
        }
      }
      flushNet();
    } catch (IOException | RuntimeException ignored) {
      // Best effort: the peer sees end of stream either way.
    }
  }

  @Override
  public boolean isOpen() {
    return channel.isOpen();
  }

  @Override
  public void close() throws IOException {
    closeOutbound();
    channel.close();
  }

  /** Moves decrypted bytes into {@code dst}; returns how many. */
  private int drain(ByteBuffer dst) {
    if (appIn.position() == 0) {
      return 0;
    }
    appIn.flip();
    int n = Math.min(appIn.remaining(), dst.remaining());
    int limit = appIn.limit();
    appIn.limit(appIn.position() + n);
    dst.put(appIn);
    appIn.limit(limit);
    appIn.compact();
    return n;
  }

  /**
   * Advances the handshake, or a post-handshake message, as far as the socket allows.
   *
   * @return true once no handshake step is due
   */
  private boolean handshake() throws IOException {
    try {
      while (true) {
        switch (engine.getHandshakeStatus()) {
          case NOT_HANDSHAKING, FINISHED -> {
            return true;
          }
          case NEED_TASK -> {
            Runnable task;
            while ((task = engine.getDelegatedTask()) != null) {
              task.run();
            }
          }
          case NEED_WRAP -> {
            if (!flushNet()) {
              return false;
            }
            SSLEngineResult r = engine.wrap(EMPTY, netOut);
            if (r.getStatus() == SSLEngineResult.Status.BUFFER_OVERFLOW) {
              netOut = grow(netOut, engine.getSession().getPacketBufferSize());
            } else if (r.getStatus() == SSLEngineResult.Status.CLOSED) {
              flushNet();
              throw new EOFException("the TLS connection closed during the handshake");
            }
            flushNet();
          }
          case NEED_UNWRAP, NEED_UNWRAP_AGAIN -> {
            flushNet(); // this side's flight leaves before it waits for the peer's
            if (!unwrap()) {
              return false;
            }
            if (inboundDone) {
              throw new EOFException("end of stream during the TLS handshake");
            }
          }
        }
      }
    } catch (SSLException e) {
      sendAlert();
      throw e;
    }
  }

  /**
   * Decrypts the next record into {@code appIn}, reading the socket when no whole record is
   * buffered.
   *
   * @return true when a record was consumed or the inbound side ended, false when nothing more is
   *     available now
   */
  private boolean unwrap() throws IOException {
    while (true) {
      netIn.flip();
      SSLEngineResult r;
      try {
        r = engine.unwrap(netIn, appIn);
      } finally {
        netIn.compact();
      }
      switch (r.getStatus()) {
        case OK -> {
          if (r.bytesConsumed() > 0 || r.bytesProduced() > 0) {
            return true;
          }
          if (!idle(r.getHandshakeStatus())) {
            return true; // the handshake has a step of its own to take first
          }
        }
        case CLOSED -> {
          inboundDone = true;
          return true;
        }
        case BUFFER_OVERFLOW -> {
          appIn = grow(appIn, engine.getSession().getApplicationBufferSize());
          continue;
        }
        case BUFFER_UNDERFLOW -> {
          // fall through to the socket
        }
      }
      if (!netIn.hasRemaining()) {
        netIn = grow(netIn, engine.getSession().getPacketBufferSize());
      }
      int k = channel.read(netIn);
      if (k < 0) {
        inboundDone = true;
        return true;
      }
      if (k == 0) {
        starved = true;
        return false;
      }
      starved = false;
    }
  }

  /** Writes pending ciphertext; true when none is left. */
  private boolean flushNet() throws IOException {
    if (netOut.position() == 0) {
      return true;
    }
    netOut.flip();
    try {
      channel.write(netOut);
    } finally {
      netOut.compact();
    }
    return netOut.position() == 0;
  }

  /** After a handshake failure: the engine's alert, if it has one, best effort. */
  private void sendAlert() {
    try {
      for (int i = 0; i < 4 && engine.getHandshakeStatus() == HandshakeStatus.NEED_WRAP; i++) {
        if (engine.wrap(EMPTY, netOut).bytesProduced() == 0) {
          break;
        }
      }
      flushNet();
    } catch (IOException | RuntimeException ignored) {
      // The failure being reported is the one that matters.
    }
  }

  private static boolean idle(HandshakeStatus s) {
    return s == HandshakeStatus.NOT_HANDSHAKING || s == HandshakeStatus.FINISHED;
  }

  /** A larger copy of {@code b}: room for {@code more} further bytes at least, contents kept. */
  private static ByteBuffer grow(ByteBuffer b, int more) {
    ByteBuffer bigger = ByteBuffer.allocate(Math.max(b.position() + more, 2 * b.capacity()));
    b.flip();
    bigger.put(b);
    return bigger;
  }
}

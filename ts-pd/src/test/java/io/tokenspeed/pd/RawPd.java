package io.tokenspeed.pd;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.WritableByteChannel;
import java.time.Duration;

/**
 * A hand-driven end of one KV connection over a plain blocking socket, for tests that play a
 * prefill engine or a decode engine which misbehaves at a chosen byte: it speaks the protocol
 * through the production encoder, reader and handshake, and writes whatever else it is told to.
 */
final class RawPd implements AutoCloseable {

  final Socket socket;
  private final InputStream in;
  private final WritableByteChannel out;
  final PdFrameReader reader;

  private RawPd(Socket socket, PdFrameReader.Side side) throws IOException {
    this.socket = socket;
    socket.setSoTimeout((int) PdTesting.WAIT.toMillis());
    socket.setTcpNoDelay(true);
    this.in = socket.getInputStream();
    OutputStream os = socket.getOutputStream();
    this.out = Channels.newChannel(os);
    this.reader = new PdFrameReader(Channels.newChannel(in), side, PdSettings.defaults());
  }

  /** Connects to {@code address} without a handshake (to misbehave during it). */
  static RawPd connect(InetSocketAddress address) throws IOException {
    Socket s = new Socket();
    s.connect(address, 10_000);
    return new RawPd(s, PdFrameReader.Side.PREFILL);
  }

  /** Connects to a receiver at {@code address} as a prefill engine proving {@code secret}. */
  static RawPd prefill(InetSocketAddress address, PdSecret secret) throws IOException {
    RawPd p = connect(address);
    PdHandshake.dial(p.out, p.reader, secret, "receiver at " + address);
    return p;
  }

  /** Accepts one connection on {@code server} and shakes hands as a decode engine. */
  static RawPd decode(ServerSocket server, PdSecret secret)
      throws IOException, PdProtocolException {
    Socket s = server.accept();
    RawPd p = new RawPd(s, PdFrameReader.Side.DECODE);
    PdHandshake.accept(p.out, p.reader, secret);
    return p;
  }

  /** Writes {@code frame} whole. */
  RawPd send(ByteBuffer frame) throws IOException {
    PdHandshake.writeFully(out, frame);
    return this;
  }

  /** Writes raw bytes. */
  RawPd send(byte[] bytes) throws IOException {
    return send(ByteBuffer.wrap(bytes));
  }

  /** Writes a DATA frame of {@code block}'s bytes, in one write. */
  RawPd data(long room, int group, int index, MemorySegment block) throws IOException {
    ByteBuffer frame =
        ByteBuffer.allocate(PdFrameDescriptor.DATA_PREFIX_BYTES + (int) block.byteSize());
    PdFrameEncoder.dataPrefix(frame, room, group, index, (int) block.byteSize());
    frame.put(block.asByteBuffer());
    return send(frame.flip());
  }

  /** The next frame but PINGs, which must be of {@code type}. */
  <T extends PdFrame> T next(Class<T> type) throws IOException, PdProtocolException {
    PdFrame f = nextNotPing();
    if (!type.isInstance(f)) {
      throw new AssertionError("expected " + type.getSimpleName() + ", read " + f);
    }
    return type.cast(f);
  }

  /** The next frame that is not a PING. */
  PdFrame nextNotPing() throws IOException, PdProtocolException {
    while (true) {
      PdFrame f = reader.next(false);
      if (!(f instanceof PdFrame.Ping)) {
        return f;
      }
    }
  }

  /**
   * Reads (and drops) whatever comes until the peer closes the connection, and returns how long
   * that took; fails when it stays open for {@code within}.
   */
  Duration awaitClosed(Duration within) throws IOException {
    long start = System.nanoTime();
    socket.setSoTimeout((int) Math.max(1, within.toMillis()));
    byte[] sink = new byte[1 << 16];
    try {
      while (in.read(sink) >= 0) {
        if (System.nanoTime() - start > within.toNanos()) {
          throw new AssertionError("the peer kept the connection open for " + within);
        }
      }
    } catch (SocketTimeoutException e) {
      throw new AssertionError("the peer kept the connection open for " + within);
    } catch (IOException e) {
      // A reset is a close too.
    }
    return Duration.ofNanos(System.nanoTime() - start);
  }

  /** Closes abruptly (RST): no FIN handshake, pending bytes dropped. */
  void abort() throws IOException {
    socket.setSoLinger(true, 0);
    socket.close();
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }
}

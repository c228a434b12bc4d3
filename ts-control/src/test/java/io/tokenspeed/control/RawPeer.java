package io.tokenspeed.control;

import io.tokenspeed.core.storage.PressureSnapshot;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.List;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocket;

/**
 * A hand-driven end of one mesh connection over a plain blocking socket, for tests that play a
 * stray client, an impostor, or a rank that misbehaves at a chosen byte.
 */
final class RawPeer implements AutoCloseable {

  final Socket socket;

  /** The TCP socket under {@link #socket} (the same socket when there is no TLS). */
  private Socket raw;

  private final DataInputStream in;
  private final OutputStream out;
  private byte[] dialerHello;
  private byte[] acceptorHello;

  private RawPeer(Socket socket) throws IOException {
    this.socket = socket;
    socket.setSoTimeout(30_000);
    this.in = new DataInputStream(socket.getInputStream());
    this.out = socket.getOutputStream();
  }

  /** Connects to {@code address} as a dialer. */
  static RawPeer dial(InetSocketAddress address) throws IOException {
    Socket s = new Socket();
    s.connect(address, 10_000);
    s.setTcpNoDelay(true);
    return new RawPeer(s);
  }

  /**
   * Connects to {@code address} as a TLS 1.3 client with the key and trust material of {@code
   * context}, and completes the client's side of the TLS handshake.
   */
  static RawPeer dialTls(InetSocketAddress address, SSLContext context) throws IOException {
    Socket tcp = new Socket();
    SSLSocket s;
    try {
      tcp.connect(address, 10_000);
      tcp.setTcpNoDelay(true);
      s =
          (SSLSocket)
              context
                  .getSocketFactory()
                  .createSocket(tcp, address.getHostString(), address.getPort(), true);
      s.setEnabledProtocols(new String[] {ControlTls.PROTOCOL});
      s.setSoTimeout(30_000);
      s.startHandshake();
    } catch (IOException e) {
      tcp.close();
      throw e;
    }
    RawPeer p = new RawPeer(s);
    p.raw = tcp;
    return p;
  }

  /** Wraps a socket a fake acceptor accepted. */
  static RawPeer accepted(Socket s) throws IOException {
    return new RawPeer(s);
  }

  /** A HELLO of replica 7 with the default limits: the window of a mesh nothing sized. */
  static Frame.Hello hello(int rank, int worldSize) {
    return new Frame.Hello(
        7,
        worldSize,
        rank,
        ControlConfig.DEFAULT_MAX_FRAME_BYTES,
        ControlConfig.UNSIZED_MAX_PENDING_OPERATIONS,
        ControlConfig.UNSIZED_MAX_PENDING_KEYS,
        Bytes32.random());
  }

  static byte[] encode(Frame f) {
    return FrameEncoder.encode(f, ControlConfig.DEFAULT_MAX_FRAME_BYTES);
  }

  static byte[] report(int rank, long round) {
    return encode(
        new Frame.Report(rank, round, 0, PressureSnapshot.IDLE, null, List.of(), List.of()));
  }

  void send(byte[] bytes) throws IOException {
    out.write(bytes);
    out.flush();
  }

  /** One whole frame, or null when the other side closed the connection first. */
  byte[] readFrame() throws IOException {
    byte[] header = new byte[FrameDescriptor.HEADER_BYTES];
    try {
      in.readFully(header);
    } catch (EOFException e) {
      return null;
    }
    int length = FrameDescriptor.FRAMING_BYTES + ByteBuffer.wrap(header).getInt(8);
    byte[] frame = new byte[length];
    System.arraycopy(header, 0, frame, 0, header.length);
    in.readFully(frame, header.length, length - header.length);
    return frame;
  }

  /** True when the other side closed (or reset) the connection before sending anything more. */
  boolean closedByPeer() throws IOException {
    try {
      return readFrame() == null;
    } catch (java.net.SocketException e) {
      return true;
    }
  }

  /** The dialer's HELLO; returns the acceptor's answer (null when it closed instead). */
  byte[] sendHello(Frame.Hello hello) throws IOException {
    dialerHello = encode(hello);
    send(dialerHello);
    acceptorHello = readFrame();
    return acceptorHello;
  }

  /** The dialer's proof under {@code secret}; returns the acceptor's proof (null when refused). */
  byte[] sendProof(ReplicaSecret secret) throws IOException {
    send(encode(new Frame.Proof(secret.mac(Mesh.DIALER_LABEL, dialerHello, acceptorHello))));
    return readFrame();
  }

  /** A proof made up without the secret; returns what the acceptor sends next (null: closed). */
  byte[] sendMadeUpProof() throws IOException {
    send(encode(new Frame.Proof(Bytes32.random())));
    try {
      return readFrame();
    } catch (java.net.SocketException e) {
      return null;
    }
  }

  /** The whole dialer handshake as rank {@code rank} of {@code worldSize} under {@code secret}. */
  static RawPeer join(InetSocketAddress address, int rank, int worldSize, ReplicaSecret secret)
      throws IOException {
    return joinOver(dial(address), address, rank, worldSize, secret);
  }

  /** {@link #join} over TLS with the key and trust material of {@code context}. */
  static RawPeer joinTls(
      InetSocketAddress address, int rank, int worldSize, ReplicaSecret secret, SSLContext context)
      throws IOException {
    return joinOver(dialTls(address, context), address, rank, worldSize, secret);
  }

  private static RawPeer joinOver(
      RawPeer p, InetSocketAddress address, int rank, int worldSize, ReplicaSecret secret)
      throws IOException {
    try {
      if (p.sendHello(hello(rank, worldSize)) == null || p.sendProof(secret) == null) {
        throw new IOException("the acceptor at " + address + " refused the handshake");
      }
    } catch (IOException e) {
      p.close();
      throw e;
    }
    return p;
  }

  /** Closes the TCP socket as a killed process would: no TLS close_notify. */
  void kill() throws IOException {
    (raw == null ? socket : raw).close();
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }
}

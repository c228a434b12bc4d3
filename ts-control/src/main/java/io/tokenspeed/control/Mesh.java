package io.tokenspeed.control;

import io.tokenspeed.control.MeshException.Reason;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The TCP mesh among a replica's cache-owning ranks: one connection per pair of ranks, and an
 * all-gather of one frame per rank per round.
 *
 * <p><b>Setup.</b> Each rank listens on its configured address. A rank dials every lower rank and
 * accepts every higher one, so each pair has exactly one connection and no two ranks wait on each
 * other in a cycle (rank 0 only accepts). On every connection both sides send a {@link Frame.Hello}
 * and check the other's against their own settings — protocol version, replica id, world size, the
 * rank expected at that address, and the limits that must be equal everywhere — and fail with
 * {@link Reason#HANDSHAKE} naming the field when one disagrees. The acceptor answers before it
 * checks, so that both ends of a bad connection report the mismatch.
 *
 * <p><b>The all-gather.</b> One thread (the event loop) writes its frame to every peer and reads
 * exactly one frame from every peer, all non-blocking under one selector, until all are done or the
 * round's deadline passes. Writing and reading together means no pair of ranks can deadlock on full
 * socket buffers, and never reading past one frame means a peer that is already one round ahead
 * leaves its next frame in the socket for the next round. A peer can be at most one round ahead: it
 * cannot finish a round without this rank's frame of that round. Buffers are bounded: a header's
 * declared length is checked against {@code maxFrameBytes} before the body buffer is allocated.
 *
 * <p><b>Failures</b> name the peer: a deadline that passes with frames missing is {@link
 * Reason#TIMEOUT} naming the silent ranks; end of stream or a reset is {@link Reason#DISCONNECTED};
 * a header the decoder refuses is {@link Reason#MALFORMED_FRAME}. The mesh keeps its sockets open
 * after a failure until {@link #close()}, so that the owner decides when peers see this rank leave.
 */
final class Mesh implements AutoCloseable {

  private static final long DIAL_RETRY_MS = 20;

  private final ControlConfig config;
  private final FrameDecoder decoder;
  private final ServerSocketChannel listener;
  private final Selector selector;
  private final Peer[] peers;
  private final List<Peer> peerList = new ArrayList<>();

  /** One connection to another rank and its per-round transfer state. */
  private static final class Peer {
    final int rank;
    final SocketChannel channel;
    SelectionKey key;
    ByteBuffer out;
    final byte[] header = new byte[FrameDescriptor.HEADER_BYTES];
    final ByteBuffer headerIn = ByteBuffer.wrap(header);
    byte[] frame;
    ByteBuffer frameIn;
    boolean sent;
    boolean received;

    Peer(int rank, SocketChannel channel) {
      this.rank = rank;
      this.channel = channel;
    }

    void startRound(byte[] own) {
      out = ByteBuffer.wrap(own);
      headerIn.clear();
      frame = null;
      frameIn = null;
      sent = false;
      received = false;
    }
  }

  private Mesh(ControlConfig config, ServerSocketChannel listener, Selector selector) {
    this.config = config;
    this.decoder = new FrameDecoder(config.maxFrameBytes());
    this.listener = listener;
    this.selector = selector;
    this.peers = new Peer[config.worldSize()];
  }

  /**
   * Opens the mesh: listens (on {@code listener} when given, already bound, otherwise on this
   * rank's configured address), dials every lower rank, accepts every higher one, and shakes hands
   * on each connection, all within {@code connectTimeoutMs}.
   */
  static Mesh open(ControlConfig config, ServerSocketChannel listener) throws MeshException {
    ServerSocketChannel server = listener;
    if (server == null) {
      InetSocketAddress address = config.addresses().get(config.rank());
      try {
        server = ServerSocketChannel.open();
        server.setOption(StandardSocketOptions.SO_REUSEADDR, true);
        server.bind(address, config.worldSize() * 2);
      } catch (IOException e) {
        closeQuietly(null, server, null);
        throw new MeshException(
            Reason.IO, -1, 0, "rank " + config.rank() + " could not listen on " + address, e);
      }
    }
    Selector selector = null;
    Mesh mesh = null;
    try {
      selector = Selector.open();
      mesh = new Mesh(config, server, selector);
      mesh.connectAll(System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(config.connectTimeoutMs()));
      return mesh;
    } catch (IOException e) {
      closeQuietly(mesh, server, selector);
      throw new MeshException(
          Reason.IO, -1, 0, "rank " + config.rank() + " failed to set up the mesh: " + e, e);
    } catch (MeshException | RuntimeException e) {
      closeQuietly(mesh, server, selector);
      throw e;
    }
  }

  private static void closeQuietly(Mesh mesh, ServerSocketChannel server, Selector selector) {
    if (mesh != null) {
      mesh.close();
      return;
    }
    try {
      if (server != null) {
        server.close();
      }
      if (selector != null) {
        selector.close();
      }
    } catch (IOException ignored) {
      // Already failing; the original error is the one to report.
    }
  }

  private void connectAll(long deadlineNs) throws IOException, MeshException {
    Frame.Hello own = Frame.Hello.of(config);
    byte[] hello = FrameEncoder.encode(own, config.maxFrameBytes());
    for (int peer = 0; peer < config.rank(); peer++) {
      SocketChannel ch = dial(peer, deadlineNs);
      add(peer, ch);
      writeBlocking(ch, hello);
      Frame.Hello theirs = readHello(ch, peer, deadlineNs);
      check(theirs, peer, config.addresses().get(peer).toString());
    }
    int higher = config.worldSize() - 1 - config.rank();
    for (int accepted = 0; accepted < higher; accepted++) {
      SocketChannel ch = accept(deadlineNs);
      String from = String.valueOf(ch.getRemoteAddress());
      Frame.Hello theirs;
      try {
        theirs = readHello(ch, -1, deadlineNs);
        writeBlocking(ch, hello);
      } catch (MeshException | IOException e) {
        ch.close();
        throw e;
      }
      try {
        checkShared(theirs, theirs.rank(), from);
      } catch (MeshException e) {
        ch.close();
        throw e;
      }
      if (theirs.rank() <= config.rank() || peers[theirs.rank()] != null) {
        ch.close();
        throw handshake(
            theirs.rank(),
            "a connection from "
                + from
                + " says rank="
                + theirs.rank()
                + ", but rank "
                + config.rank()
                + " expects only ranks above it, once each");
      }
      add(theirs.rank(), ch);
    }
    for (Peer p : peerList) {
      p.channel.configureBlocking(false);
      p.key = p.channel.register(selector, 0, p);
    }
    // Every peer is connected: nothing else may join this mesh.
    listener.close();
  }

  private void add(int rank, SocketChannel ch) {
    Peer p = new Peer(rank, ch);
    peers[rank] = p;
    peerList.add(p);
  }

  private SocketChannel dial(int peer, long deadlineNs) throws IOException, MeshException {
    InetSocketAddress address = config.addresses().get(peer);
    IOException last = null;
    while (true) {
      long leftMs = TimeUnit.NANOSECONDS.toMillis(deadlineNs - System.nanoTime());
      if (leftMs <= 0) {
        throw new MeshException(
            Reason.TIMEOUT,
            peer,
            0,
            "rank "
                + config.rank()
                + " could not connect to rank "
                + peer
                + " at "
                + address
                + " within connect_timeout_ms="
                + config.connectTimeoutMs()
                + (last == null ? "" : " (last error: " + last + ")"),
            last);
      }
      SocketChannel ch = SocketChannel.open();
      try {
        ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
        ch.socket().connect(address, (int) Math.min(Integer.MAX_VALUE, leftMs));
        return ch;
      } catch (ConnectException | SocketTimeoutException e) {
        // The peer is not listening yet; it may still be starting.
        ch.close();
        last = e;
        sleepBeforeRetry(peer);
      } catch (IOException e) {
        ch.close();
        throw e;
      }
    }
  }

  private void sleepBeforeRetry(int peer) throws MeshException {
    try {
      Thread.sleep(DIAL_RETRY_MS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new MeshException(
          Reason.IO, peer, 0, "rank " + config.rank() + " was interrupted while connecting");
    }
  }

  private SocketChannel accept(long deadlineNs) throws IOException, MeshException {
    long leftMs = TimeUnit.NANOSECONDS.toMillis(deadlineNs - System.nanoTime());
    if (leftMs > 0) {
      listener.socket().setSoTimeout((int) Math.min(Integer.MAX_VALUE, leftMs));
      try {
        Socket s = listener.socket().accept();
        SocketChannel ch = s.getChannel();
        ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
        return ch;
      } catch (SocketTimeoutException e) {
        // fall through to the timeout below
      }
    }
    List<Integer> missing = new ArrayList<>();
    for (int r = config.rank() + 1; r < config.worldSize(); r++) {
      if (peers[r] == null) {
        missing.add(r);
      }
    }
    throw new MeshException(
        Reason.TIMEOUT,
        missing.getFirst(),
        0,
        "rank "
            + config.rank()
            + " heard nothing from rank"
            + (missing.size() == 1 ? " " : "s ")
            + missing
            + " within connect_timeout_ms="
            + config.connectTimeoutMs());
  }

  private static void writeBlocking(SocketChannel ch, byte[] bytes) throws IOException {
    ByteBuffer b = ByteBuffer.wrap(bytes);
    while (b.hasRemaining()) {
      ch.write(b);
    }
  }

  /** Reads one HELLO frame on a blocking channel; {@code peer} is -1 when not yet known. */
  private Frame.Hello readHello(SocketChannel ch, int peer, long deadlineNs)
      throws IOException, MeshException {
    String who = peer < 0 ? "a connecting peer at " + ch.getRemoteAddress() : "rank " + peer;
    byte[] bytes = new byte[FrameDescriptor.FRAMING_BYTES + FrameDescriptor.HELLO_BODY_BYTES];
    Socket socket = ch.socket();
    try {
      long leftMs = TimeUnit.NANOSECONDS.toMillis(deadlineNs - System.nanoTime());
      if (leftMs <= 0) {
        throw new SocketTimeoutException();
      }
      socket.setSoTimeout((int) Math.min(Integer.MAX_VALUE, leftMs));
      InputStream in = socket.getInputStream();
      DataInputStream data = new DataInputStream(in);
      data.readFully(bytes, 0, FrameDescriptor.HEADER_BYTES);
      Decoded.Malformed header = decoder.checkHeader(bytes, 0, FrameDescriptor.HEADER_BYTES);
      if (header != null) {
        throw handshake(peer, who + " sent a handshake this rank cannot read: " + header);
      }
      if (FrameDecoder.frameLength(bytes, 0) != bytes.length) {
        throw handshake(peer, who + " sent a report where a handshake was due");
      }
      data.readFully(
          bytes, FrameDescriptor.HEADER_BYTES, bytes.length - FrameDescriptor.HEADER_BYTES);
      socket.setSoTimeout(0);
    } catch (SocketTimeoutException e) {
      throw new MeshException(
          Reason.TIMEOUT,
          peer,
          0,
          who + " sent no handshake within connect_timeout_ms=" + config.connectTimeoutMs(),
          e);
    } catch (java.io.EOFException e) {
      throw new MeshException(
          Reason.HANDSHAKE, peer, 0, who + " closed the connection during the handshake", e);
    }
    return switch (decoder.decode(bytes)) {
      case Decoded.Ok(Frame.Hello h) -> h;
      case Decoded.Ok(Frame.Report r) ->
          throw handshake(peer, who + " sent a report where a handshake was due");
      case Decoded.Malformed m ->
          throw handshake(peer, who + " sent a handshake this rank cannot read: " + m);
    };
  }

  /** Checks a dialed peer's handshake: the shared settings, then its rank. */
  private void check(Frame.Hello theirs, int peer, String from) throws MeshException {
    checkShared(theirs, peer, from);
    if (theirs.rank() != peer) {
      throw handshake(
          peer,
          "handshake with rank " + peer + " at " + from + ": the peer says rank=" + theirs.rank());
    }
  }

  /** Checks the settings every rank must share: replica, world size and the agreement limits. */
  private void checkShared(Frame.Hello theirs, int peer, String from) throws MeshException {
    String prefix = "handshake with rank " + peer + " at " + from + ": ";
    if (theirs.replicaId() != config.replicaId()) {
      throw handshake(
          peer,
          prefix
              + "replica_id="
              + theirs.replicaId()
              + ", rank "
              + config.rank()
              + " has replica_id="
              + config.replicaId());
    }
    if (theirs.worldSize() != config.worldSize()) {
      throw handshake(
          peer, prefix + "world_size=" + theirs.worldSize() + ", expected " + config.worldSize());
    }
    if (theirs.maxFrameBytes() != config.maxFrameBytes()
        || theirs.maxPendingOperations() != config.maxPendingOperations()
        || theirs.maxPendingKeys() != config.maxPendingKeys()) {
      throw handshake(
          peer,
          prefix
              + "max_frame_bytes="
              + theirs.maxFrameBytes()
              + " max_pending_operations="
              + theirs.maxPendingOperations()
              + " max_pending_keys="
              + theirs.maxPendingKeys()
              + ", expected "
              + config.maxFrameBytes()
              + " "
              + config.maxPendingOperations()
              + " "
              + config.maxPendingKeys()
              + " (these must be equal on every rank)");
    }
  }

  private MeshException handshake(int peer, String message) {
    return new MeshException(Reason.HANDSHAKE, peer, 0, message);
  }

  /**
   * Sends {@code own} to every peer and receives one frame from each.
   *
   * @return the frames indexed by rank; this rank's entry is {@code own}
   */
  byte[][] allGather(long round, byte[] own) throws MeshException {
    byte[][] frames = new byte[config.worldSize()][];
    frames[config.rank()] = own;
    if (peerList.isEmpty()) {
      return frames;
    }
    long timeoutNs = TimeUnit.MILLISECONDS.toNanos(config.roundTimeoutMs());
    long deadlineNs = System.nanoTime() + timeoutNs;
    int open = 0;
    for (Peer p : peerList) {
      p.startRound(own);
      open += 2;
    }
    for (Peer p : peerList) {
      open -= transfer(p, round);
    }
    while (open > 0) {
      for (Peer p : peerList) {
        int ops = (p.sent ? 0 : SelectionKey.OP_WRITE) | (p.received ? 0 : SelectionKey.OP_READ);
        if (p.key.interestOps() != ops) {
          p.key.interestOps(ops);
        }
      }
      long leftNs = deadlineNs - System.nanoTime();
      if (leftNs <= 0) {
        throw timeout(round);
      }
      try {
        selector.select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(leftNs + 999_999)));
      } catch (IOException e) {
        throw new MeshException(Reason.IO, -1, round, "selector failed in round " + round, e);
      }
      if (Thread.interrupted()) {
        Thread.currentThread().interrupt();
        throw new MeshException(
            Reason.IO, -1, round, "rank " + config.rank() + " interrupted in round " + round);
      }
      var ready = selector.selectedKeys();
      if (!ready.isEmpty()) {
        for (SelectionKey k : ready) {
          open -= transfer((Peer) k.attachment(), round);
        }
        ready.clear();
      }
    }
    for (Peer p : peerList) {
      p.key.interestOps(0);
      frames[p.rank] = p.frame;
    }
    return frames;
  }

  /** Moves what can move now on {@code p}'s connection; returns how many directions finished. */
  private int transfer(Peer p, long round) throws MeshException {
    int done = 0;
    try {
      if (!p.sent) {
        p.channel.write(p.out);
        if (!p.out.hasRemaining()) {
          p.sent = true;
          done++;
        }
      }
      if (!p.received && read(p, round)) {
        p.received = true;
        done++;
      }
    } catch (IOException e) {
      throw disconnected(p, round, e.toString(), e);
    }
    return done;
  }

  /** Reads toward one frame without reading past it; true when the frame is complete. */
  private boolean read(Peer p, long round) throws IOException, MeshException {
    if (p.frameIn == null) {
      if (p.channel.read(p.headerIn) < 0) {
        throw disconnected(p, round, "end of stream", null);
      }
      if (p.headerIn.hasRemaining()) {
        return false;
      }
      Decoded.Malformed bad = decoder.checkHeader(p.header, 0, p.header.length);
      if (bad != null) {
        throw new MeshException(
            Reason.MALFORMED_FRAME,
            p.rank,
            round,
            "rank " + p.rank + " sent a malformed frame header in round " + round + ": " + bad);
      }
      p.frame = new byte[FrameDecoder.frameLength(p.header, 0)];
      System.arraycopy(p.header, 0, p.frame, 0, p.header.length);
      p.frameIn = ByteBuffer.wrap(p.frame, p.header.length, p.frame.length - p.header.length);
    }
    if (p.frameIn.hasRemaining() && p.channel.read(p.frameIn) < 0) {
      throw disconnected(p, round, "end of stream", null);
    }
    return !p.frameIn.hasRemaining();
  }

  private MeshException disconnected(Peer p, long round, String what, Throwable cause) {
    return new MeshException(
        Reason.DISCONNECTED,
        p.rank,
        round,
        "rank "
            + p.rank
            + " disconnected in round "
            + round
            + " ("
            + what
            + "); this is rank "
            + config.rank()
            + " of replica "
            + config.replicaId(),
        cause);
  }

  private MeshException timeout(long round) {
    List<Integer> silent = new ArrayList<>();
    List<Integer> notReading = new ArrayList<>();
    for (Peer p : peerList) {
      if (!p.received) {
        silent.add(p.rank);
      } else if (!p.sent) {
        notReading.add(p.rank);
      }
    }
    List<Integer> blamed = silent.isEmpty() ? notReading : silent;
    String what =
        silent.isEmpty() ? " did not take this rank's whole frame" : " sent no complete frame";
    return new MeshException(
        Reason.TIMEOUT,
        blamed.getFirst(),
        round,
        "rank"
            + (blamed.size() == 1 ? " " + blamed.getFirst() : "s " + blamed)
            + what
            + " within round_timeout_ms="
            + config.roundTimeoutMs()
            + " in round "
            + round
            + "; this is rank "
            + config.rank()
            + " of replica "
            + config.replicaId());
  }

  @Override
  public void close() {
    for (Peer p : peerList) {
      try {
        p.channel.close();
      } catch (IOException ignored) {
        // Closing is best effort; the peer sees end of stream either way.
      }
    }
    try {
      selector.close();
    } catch (IOException ignored) {
      // Nothing holds it any more.
    }
    try {
      listener.close();
    } catch (IOException ignored) {
      // The port is released with the process at the latest.
    }
  }
}

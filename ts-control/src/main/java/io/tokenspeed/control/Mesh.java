package io.tokenspeed.control;

import io.tokenspeed.control.MeshException.Reason;
import java.io.EOFException;
import java.io.IOException;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.security.GeneralSecurityException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;

/**
 * The TCP mesh among a replica's cache-owning ranks: one connection per pair of ranks, an
 * all-gather of one frame per rank per round, and the survivors' last word after a failure.
 *
 * <p><b>Setup.</b> Each rank listens on its configured address. A rank dials every lower rank and
 * accepts every higher one, so each pair has exactly one connection and no two ranks wait on each
 * other in a cycle (rank 0 only accepts). Dialing and accepting run at the same time (accepting on
 * a setup thread), and dialing retries until {@code connectTimeoutMs}, so ranks may start in any
 * order. Each connection runs the handshake drawn in {@link ReplicaSecret}: HELLOs both ways, the
 * acceptor checking the dialer's before it answers, then proofs of the replica secret both ways,
 * the dialer's first. Only then, with the claimed rank proven, does the acceptor check that the
 * rank has not joined yet: a connection without the secret learns nothing about who joined (it gets
 * the same HELLO as any dialer and fails at its proof), and a second connection under a joined
 * rank's number is refused, never evicting the rank that joined first.
 *
 * <p><b>What is not a peer is ignored.</b> The acceptor handles every connection without blocking
 * and gives each at most {@code handshakeTimeoutMs}. A connection that sends garbage, another
 * protocol version, another replica's or world's HELLO, a rank that is not expected, a wrong proof,
 * a rank that already joined, or nothing at all is closed and logged (WARNING, naming the remote
 * address and the reason), and accepting goes on until every higher rank joined or {@code
 * connectTimeoutMs} passes; that timeout's message lists the refused connections. A health check
 * that connects and closes is one such connection. The dialer, which reaches a configured address,
 * fails instead, naming the rank it expected there and what that address did.
 *
 * <p><b>The all-gather.</b> One thread (the event loop) writes its frame to every peer and reads
 * exactly one frame from every peer, all non-blocking under one selector, until all are done or the
 * round's deadline passes. Writing and reading together means no pair of ranks can deadlock on full
 * socket buffers, and never reading past one frame means a peer that is already one round ahead
 * leaves its next frame in the socket for the next round. A peer can be at most one round ahead: it
 * cannot finish a round without this rank's frame of that round. Buffers are bounded: a header's
 * declared length is checked against {@code maxFrameBytes} before the body buffer is allocated.
 *
 * <p><b>TLS.</b> With {@link ControlConfig#tls()} set, every connection is a {@link TlsLink} (TLS
 * 1.3, both certificates verified against the trust store) and the handshake above runs inside it;
 * otherwise a {@link Link.Plain} hands every call straight to the socket. Either way the loops
 * below read and write through the link, and since a TLS link may hold a peer's next frame already
 * decrypted, a loop asks {@link Link#hasBufferedInput} before it waits for {@code OP_READ}. A stray
 * whose TLS handshake fails is refused and logged like any other.
 *
 * <p><b>Failures</b> name the peer: a deadline that passes with frames missing is {@link
 * Reason#TIMEOUT} naming the silent ranks; end of stream or a reset is {@link Reason#DISCONNECTED};
 * a header the decoder refuses is {@link Reason#MALFORMED_FRAME}; a peer's FINAL where its report
 * was due is {@link Reason#PEER_STOPPED}. After a failure the owner calls {@link #settle}: every
 * survivor sends its newest gathered round to every peer it still reaches and collects theirs,
 * within {@code roundTimeoutMs}. The mesh keeps its sockets open until {@link #close()}, so that
 * the owner decides when peers see this rank leave.
 */
final class Mesh implements RelayTransport {

  private static final Logger LOG = Logger.getLogger(Mesh.class.getName());

  /** The label of the dialer's proof. */
  static final String DIALER_LABEL = "TSCP2 dialer";

  /** The label of the acceptor's proof. */
  static final String ACCEPTOR_LABEL = "TSCP2 acceptor";

  /** The largest frame a connection may send before it is a peer: a HELLO. */
  static final int MAX_HANDSHAKE_FRAME =
      FrameDescriptor.FRAMING_BYTES
          + Math.max(FrameDescriptor.HELLO_BODY_BYTES, FrameDescriptor.PROOF_BODY_BYTES);

  /** At most this many refusals are quoted in a setup timeout's message. */
  private static final int QUOTED_REFUSALS = 4;

  private static final long DIAL_RETRY_MS = 20;

  private final ControlConfig config;
  private final FrameDecoder decoder;

  /** The context of every connection's TLS engine; null for plain TCP. */
  private final SSLContext tls;

  private final ServerSocketChannel listener;
  private final Selector selector;
  private final Peer[] peers;
  private final List<Peer> peerList = new ArrayList<>();

  /** One connection to another rank and its per-round transfer state. */
  private static final class Peer {
    final int rank;
    final Link link;
    final SocketChannel channel;
    final FrameReader reader;
    SelectionKey key;
    ByteBuffer out;
    byte[] frame;
    boolean sent;
    boolean received;

    /** End of stream, a reset or garbage was seen: nothing more is written or read. */
    boolean dead;

    /** The peer's FINAL, once it arrived. */
    Frame.Final last;

    Peer(int rank, Link link, FrameReader reader) {
      this.rank = rank;
      this.link = link;
      this.channel = link.channel();
      this.reader = reader;
    }

    void startRound(byte[] own) {
      out = ByteBuffer.wrap(own);
      frame = null;
      sent = false;
      received = false;
    }
  }

  private Mesh(
      ControlConfig config, SSLContext tls, ServerSocketChannel listener, Selector selector) {
    this.config = config;
    this.tls = tls;
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
    SSLContext tls = null;
    if (config.tls() != null) {
      try {
        tls = config.tls().load();
        TlsLink.engine(tls, false); // fails now, not per connection, if TLS 1.3 is unsupported
      } catch (IOException | GeneralSecurityException | RuntimeException e) {
        closeQuietly(null, listener, null);
        throw new MeshException(
            Reason.IO,
            -1,
            0,
            "rank " + config.rank() + " could not set up TLS (" + config.tls() + "): " + e,
            e);
      }
    }
    ServerSocketChannel server = listener;
    if (server == null) {
      InetSocketAddress address = config.addresses().get(config.rank());
      try {
        server = ServerSocketChannel.open();
        server.setOption(StandardSocketOptions.SO_REUSEADDR, true);
        server.bind(address, Math.max(64, config.worldSize() * 2));
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
      mesh = new Mesh(config, tls, server, selector);
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
    int higher = config.worldSize() - 1 - config.rank();
    Acceptor acceptor = null;
    Thread acceptThread = null;
    if (higher > 0) {
      acceptor = new Acceptor(deadlineNs);
      acceptThread =
          Thread.ofPlatform()
              .daemon()
              .name("ts-control-accept-rank" + config.rank())
              .start(acceptor::run);
    }
    try {
      for (int peer = 0; peer < config.rank(); peer++) {
        SocketChannel ch = dial(peer, deadlineNs);
        Link link;
        try {
          link = link(ch, true);
          shakeHandsAsDialer(link, peer, deadlineNs);
        } catch (MeshException | IOException | RuntimeException e) {
          ch.close();
          throw e;
        }
        add(peer, link);
      }
    } catch (MeshException | IOException | RuntimeException e) {
      if (acceptor != null) {
        acceptor.stop();
        join(acceptThread);
        acceptor.closeJoined();
      }
      throw e;
    }
    if (acceptor != null) {
      join(acceptThread);
      if (acceptor.failure != null) {
        acceptor.closeJoined();
        throw acceptor.failure;
      }
      for (Map.Entry<Integer, Link> e : acceptor.joined.entrySet()) {
        add(e.getKey(), e.getValue());
      }
    }
    for (Peer p : peerList) {
      p.channel.configureBlocking(false);
      p.key = p.channel.register(selector, 0, p);
    }
    // Every peer is connected: nothing else may join this mesh.
    listener.close();
  }

  private void join(Thread t) throws MeshException {
    try {
      t.join();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new MeshException(
          Reason.IO, -1, 0, "rank " + config.rank() + " was interrupted while connecting");
    }
  }

  /**
   * The link over {@code ch}: plain, or TLS as the dialer ({@code dialer}) or the acceptor. A TLS
   * link needs a non-blocking channel.
   */
  private Link link(SocketChannel ch, boolean dialer) throws IOException {
    if (tls == null) {
      return new Link.Plain(ch);
    }
    ch.configureBlocking(false);
    return dialer ? TlsLink.dialer(tls, ch) : TlsLink.acceptor(tls, ch);
  }

  private void add(int rank, Link link) {
    Peer p = new Peer(rank, link, new FrameReader(decoder, config.maxFrameBytes()));
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

  /**
   * The dialer's side of the handshake: HELLO out, HELLO in (checked), proof out, proof in
   * (checked). Every failure names {@code peer} and its address. A plain link's channel is
   * blocking; a TLS link's is not, and waits on a selector of its own until the deadline.
   */
  private void shakeHandsAsDialer(Link link, int peer, long deadlineNs)
      throws IOException, MeshException {
    if (link instanceof Link.Plain) {
      shakeHandsAsDialer(link, null, peer, deadlineNs);
      return;
    }
    try (Selector waits = Selector.open()) {
      shakeHandsAsDialer(link, link.channel().register(waits, 0), peer, deadlineNs);
    }
  }

  /** The dialer's handshake; {@code waits} is the TLS link's key, null for a plain link. */
  private void shakeHandsAsDialer(Link link, SelectionKey waits, int peer, long deadlineNs)
      throws IOException, MeshException {
    String at = "rank " + peer + " at " + config.addresses().get(peer);
    byte[] helloD =
        FrameEncoder.encode(Frame.Hello.of(config, Bytes32.random()), config.maxFrameBytes());
    writeHandshake(link, waits, helloD, peer, at, "sending its handshake", deadlineNs);
    byte[] helloA =
        readHandshakeFrame(
            link,
            waits,
            FrameDescriptor.TYPE_HELLO,
            peer,
            at,
            deadlineNs,
            "closed the connection without answering this rank's handshake: it refused it"
                + " (another replica_id, world_size, protocol version or limit; "
                + "rank "
                + peer
                + "'s log names the field)");
    Frame.Hello theirs = (Frame.Hello) decodeHandshake(helloA, peer, at);
    checkShared(theirs, peer, at);
    if (theirs.rank() != peer) {
      throw handshake(peer, "handshake with " + at + ": the peer says rank=" + theirs.rank());
    }
    Frame.Proof mine = new Frame.Proof(config.secret().mac(DIALER_LABEL, helloD, helloA));
    writeHandshake(
        link,
        waits,
        FrameEncoder.encode(mine, config.maxFrameBytes()),
        peer,
        at,
        "sending its proof",
        deadlineNs);
    byte[] proofA =
        readHandshakeFrame(
            link,
            waits,
            FrameDescriptor.TYPE_PROOF,
            peer,
            at,
            deadlineNs,
            "closed the connection after this rank's proof of the replica secret: the two ranks"
                + " were not started with the same secret");
    Frame.Proof theirProof = (Frame.Proof) decodeHandshake(proofA, peer, at);
    Bytes32 expected = config.secret().mac(ACCEPTOR_LABEL, helloD, helloA);
    if (!ReplicaSecret.sameMac(expected, theirProof.mac())) {
      throw handshake(
          peer,
          "the process at "
              + config.addresses().get(peer)
              + " answering as rank "
              + peer
              + " could not prove the replica secret (an impostor, or a rank started with another"
              + " secret); rank "
              + config.rank()
              + " does not join it");
    }
  }

  private void writeHandshake(
      Link link,
      SelectionKey waits,
      byte[] bytes,
      int peer,
      String at,
      String doing,
      long deadlineNs)
      throws MeshException {
    ByteBuffer b = ByteBuffer.wrap(bytes);
    try {
      if (waits == null) {
        SocketChannel ch = link.channel();
        while (b.hasRemaining()) {
          ch.write(b);
        }
        return;
      }
      while (!link.send(b)) {
        awaitLink(link, waits, SelectionKey.OP_WRITE, deadlineNs);
      }
    } catch (SocketTimeoutException e) {
      throw new MeshException(
          Reason.TIMEOUT,
          peer,
          0,
          at
              + " did not complete the TLS handshake within connect_timeout_ms="
              + config.connectTimeoutMs(),
          e);
    } catch (SSLException e) {
      throw tlsFailed(peer, at, e);
    } catch (EOFException e) {
      throw new MeshException(
          Reason.HANDSHAKE,
          peer,
          0,
          at
              + " closed the connection during the TLS handshake (it does not speak TLS, or it"
              + " refused this rank's certificate; rank "
              + peer
              + "'s log says why)",
          e);
    } catch (IOException e) {
      throw new MeshException(
          Reason.DISCONNECTED,
          peer,
          0,
          "rank " + config.rank() + " lost the connection to " + at + " while " + doing + ": " + e,
          e);
    }
  }

  /**
   * Reads one handshake frame of {@code type} within the deadline: on a blocking channel, or on a
   * TLS link waiting on {@code waits}.
   */
  private byte[] readHandshakeFrame(
      Link link, SelectionKey waits, int type, int peer, String at, long deadlineNs, String onEof)
      throws IOException, MeshException {
    FrameReader reader = new FrameReader(decoder, MAX_HANDSHAKE_FRAME);
    long leftMs = TimeUnit.NANOSECONDS.toMillis(deadlineNs - System.nanoTime());
    try {
      if (leftMs <= 0) {
        throw new SocketTimeoutException();
      }
      byte[] frame = null;
      if (waits == null) {
        SocketChannel ch = link.channel();
        ch.socket().setSoTimeout((int) Math.min(Integer.MAX_VALUE, leftMs));
        var in = java.nio.channels.Channels.newChannel(ch.socket().getInputStream());
        while (frame == null) {
          frame = reader.read(in);
        }
        ch.socket().setSoTimeout(0);
      } else {
        while ((frame = reader.read(link)) == null) {
          awaitLink(link, waits, SelectionKey.OP_READ, deadlineNs);
        }
      }
      if (FrameDecoder.frameType(frame, 0) != type) {
        throw handshake(
            peer,
            at
                + " sent a "
                + FrameDecoder.typeName(FrameDecoder.frameType(frame, 0))
                + " frame where its "
                + FrameDecoder.typeName(type)
                + " was due");
      }
      return frame;
    } catch (SocketTimeoutException e) {
      throw new MeshException(
          Reason.TIMEOUT,
          peer,
          0,
          at
              + " sent no "
              + FrameDecoder.typeName(type)
              + " within connect_timeout_ms="
              + config.connectTimeoutMs(),
          e);
    } catch (EOFException e) {
      throw new MeshException(Reason.HANDSHAKE, peer, 0, at + " " + onEof, e);
    } catch (FrameReader.BadHeader e) {
      throw handshake(peer, at + " sent a handshake this rank cannot read: " + e.getMessage());
    } catch (SSLException e) {
      throw tlsFailed(peer, at, e);
    } catch (IOException e) {
      throw new MeshException(
          Reason.DISCONNECTED,
          peer,
          0,
          at + " " + onEof.replaceFirst("^closed", "reset") + " (" + e + ")",
          e);
    }
  }

  /**
   * Waits, within the deadline, until {@code link} can move toward what the caller {@code wanted}
   * (or returns at once when what it would wait for is already buffered).
   */
  private static void awaitLink(Link link, SelectionKey waits, int wanted, long deadlineNs)
      throws IOException {
    int ops = link.interestOps(wanted);
    if ((ops & SelectionKey.OP_READ) != 0 && link.hasBufferedInput()) {
      return;
    }
    long leftNs = deadlineNs - System.nanoTime();
    if (leftNs <= 0) {
      throw new SocketTimeoutException("the deadline passed");
    }
    waits.interestOps(ops);
    waits.selector().select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(leftNs + 999_999)));
    waits.selector().selectedKeys().clear();
    if (Thread.currentThread().isInterrupted()) {
      throw new java.io.InterruptedIOException("interrupted while shaking hands");
    }
  }

  private MeshException tlsFailed(int peer, String at, SSLException e) {
    return handshake(
        peer,
        "the TLS handshake with "
            + at
            + " failed: "
            + e.getMessage()
            + " (each rank needs a certificate issued by the CA in the other's trust store)");
  }

  private Frame decodeHandshake(byte[] frame, int peer, String at) throws MeshException {
    return switch (decoder.decode(frame)) {
      case Decoded.Ok(Frame f) -> f;
      case Decoded.Malformed m ->
          throw handshake(peer, at + " sent a handshake this rank cannot read: " + m);
    };
  }

  /**
   * Why {@code theirs} cannot be a peer of this rank, or null: the settings every rank must share
   * (replica, world size and the agreement limits).
   */
  private String sharedMismatch(Frame.Hello theirs) {
    if (theirs.replicaId() != config.replicaId()) {
      return "replica_id="
          + theirs.replicaId()
          + ", rank "
          + config.rank()
          + " has replica_id="
          + config.replicaId();
    }
    if (theirs.worldSize() != config.worldSize()) {
      return "world_size=" + theirs.worldSize() + ", expected " + config.worldSize();
    }
    if (theirs.maxFrameBytes() != config.maxFrameBytes()
        || theirs.maxPendingOperations() != config.windowOperations()
        || theirs.maxPendingKeys() != config.windowKeys()) {
      return "max_frame_bytes="
          + theirs.maxFrameBytes()
          + " max_pending_operations="
          + theirs.maxPendingOperations()
          + " max_pending_keys="
          + theirs.maxPendingKeys()
          + ", expected "
          + config.maxFrameBytes()
          + " "
          + config.windowOperations()
          + " "
          + config.windowKeys()
          + " (these must be equal on every rank)";
    }
    return null;
  }

  private void checkShared(Frame.Hello theirs, int peer, String at) throws MeshException {
    String mismatch = sharedMismatch(theirs);
    if (mismatch != null) {
      throw handshake(peer, "handshake with " + at + ": " + mismatch);
    }
  }

  private MeshException handshake(int peer, String message) {
    return new MeshException(Reason.HANDSHAKE, peer, 0, message);
  }

  /**
   * Accepts the higher ranks' connections without blocking on any one of them. Runs on its own
   * setup thread; its results ({@link #joined}, {@link #failure}) are read after that thread ends.
   */
  private final class Acceptor {
    final long deadlineNs;
    final Map<Integer, Link> joined = new TreeMap<>();
    final List<String> refusals = new ArrayList<>();
    int refused;
    MeshException failure;
    private final Selector accepting;
    private volatile boolean stopped;

    Acceptor(long deadlineNs) throws IOException {
      this.deadlineNs = deadlineNs;
      this.accepting = Selector.open();
    }

    void stop() {
      stopped = true;
      accepting.wakeup();
    }

    void closeJoined() {
      for (Link link : joined.values()) {
        try {
          link.close();
        } catch (IOException ignored) {
          // Setup failed anyway.
        }
      }
    }

    void run() {
      Map<SelectionKey, Handshake> open = new HashMap<>();
      try {
        listener.configureBlocking(false);
        listener.register(accepting, SelectionKey.OP_ACCEPT);
        int higher = config.worldSize() - 1 - config.rank();
        while (joined.size() < higher && !stopped) {
          long now = System.nanoTime();
          if (now - deadlineNs >= 0) {
            failure = setupTimeout();
            break;
          }
          long wakeNs = deadlineNs;
          for (Handshake h : open.values()) {
            if (h.deadlineNs - wakeNs < 0) {
              wakeNs = h.deadlineNs;
            }
          }
          accepting.select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(wakeNs - now + 999_999)));
          for (SelectionKey k : accepting.selectedKeys()) {
            if (!k.isValid()) {
              continue;
            }
            if (k.isAcceptable()) {
              acceptAll(open);
            } else {
              Handshake h = (Handshake) k.attachment();
              step(h, open);
            }
          }
          accepting.selectedKeys().clear();
          long after = System.nanoTime();
          for (Iterator<Handshake> it = open.values().iterator(); it.hasNext(); ) {
            Handshake h = it.next();
            if (after - h.deadlineNs >= 0) {
              it.remove();
              refuse(
                  h,
                  "no complete handshake within handshake_timeout_ms="
                      + config.handshakeTimeoutMs()
                      + (h.stage == Handshake.Stage.READ_HELLO ? " (sent no HELLO)" : ""));
            }
          }
        }
      } catch (IOException | RuntimeException e) {
        failure =
            new MeshException(
                Reason.IO, -1, 0, "rank " + config.rank() + " failed to accept peers: " + e, e);
      } finally {
        for (Handshake h : open.values()) {
          refuse(h, "setup finished before it completed a handshake");
        }
        try {
          accepting.close();
          listener.configureBlocking(true);
        } catch (IOException ignored) {
          // The listener is closed right after setup.
        }
      }
    }

    private void acceptAll(Map<SelectionKey, Handshake> open) throws IOException {
      SocketChannel ch;
      while ((ch = listener.accept()) != null) {
        String from;
        Link link;
        try {
          ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
          ch.configureBlocking(false);
          from = String.valueOf(ch.getRemoteAddress());
          link = link(ch, false);
        } catch (IOException e) {
          ch.close();
          continue;
        }
        long now = System.nanoTime();
        long deadline = now + TimeUnit.MILLISECONDS.toNanos(config.handshakeTimeoutMs());
        if (deadline - deadlineNs > 0) {
          deadline = deadlineNs;
        }
        Handshake h = new Handshake(link, from, deadline);
        h.key = ch.register(accepting, SelectionKey.OP_READ, h);
        open.put(h.key, h);
      }
    }

    private void step(Handshake h, Map<SelectionKey, Handshake> open) {
      try {
        if (h.advance()) {
          open.remove(h.key);
          h.key.cancel();
          // Checked only now that both proofs passed: the rank is proven, and the first to join
          // keeps its place (see the class comment).
          if (joined.containsKey(h.theirs.rank())) {
            refuse(h, "rank " + h.theirs.rank() + " has already joined");
          } else {
            joined.put(h.theirs.rank(), h.link);
            LOG.log(
                Level.FINE,
                "rank {0} accepted rank {1} from {2}",
                new Object[] {config.rank(), h.theirs.rank(), h.from});
          }
        }
      } catch (Refusal r) {
        open.remove(h.key);
        refuse(h, r.getMessage());
      } catch (SSLException e) {
        open.remove(h.key);
        refuse(h, "its TLS handshake failed: " + e.getMessage());
      } catch (IOException e) {
        open.remove(h.key);
        refuse(h, "the connection failed during the handshake: " + e);
      }
    }

    private void refuse(Handshake h, String reason) {
      refused++;
      String line =
          "rank "
              + config.rank()
              + " refused a connection from "
              + h.from
              + (h.theirs == null ? "" : " claiming rank " + h.theirs.rank())
              + ": "
              + reason;
      if (refusals.size() < QUOTED_REFUSALS) {
        refusals.add(line);
      }
      LOG.warning(line);
      h.close();
    }

    private MeshException setupTimeout() {
      List<Integer> missing = new ArrayList<>();
      for (int r = config.rank() + 1; r < config.worldSize(); r++) {
        if (!joined.containsKey(r)) {
          missing.add(r);
        }
      }
      StringBuilder m =
          new StringBuilder("rank ")
              .append(config.rank())
              .append(" heard nothing from rank")
              .append(missing.size() == 1 ? " " : "s ")
              .append(missing)
              .append(" within connect_timeout_ms=")
              .append(config.connectTimeoutMs());
      if (refused > 0) {
        m.append("; it refused ").append(refused).append(" connection(s): ");
        m.append(String.join("; ", refusals));
      }
      return new MeshException(Reason.TIMEOUT, missing.getFirst(), 0, m.toString());
    }
  }

  /** Why an accepted connection is not a peer. */
  private static final class Refusal extends Exception {
    Refusal(String reason) {
      super(reason, null, false, false);
    }
  }

  /** The acceptor's side of one connection's handshake, advanced without blocking. */
  private final class Handshake {
    enum Stage {
      READ_HELLO,
      WRITE_HELLO,
      READ_PROOF,
      WRITE_PROOF
    }

    final Link link;
    final SocketChannel ch;
    final String from;
    final long deadlineNs;
    final FrameReader reader = new FrameReader(decoder, MAX_HANDSHAKE_FRAME);
    SelectionKey key;
    Stage stage = Stage.READ_HELLO;
    ByteBuffer out;
    byte[] helloD;
    byte[] helloA;
    Frame.Hello theirs;

    Handshake(Link link, String from, long deadlineNs) {
      this.link = link;
      this.ch = link.channel();
      this.from = from;
      this.deadlineNs = deadlineNs;
    }

    /** Moves the handshake as far as the socket allows; true once the peer has joined. */
    boolean advance() throws IOException, Refusal {
      while (true) {
        switch (stage) {
          case READ_HELLO -> {
            byte[] f = readFrame(FrameDescriptor.TYPE_HELLO);
            if (f == null) {
              return false;
            }
            Frame.Hello h = (Frame.Hello) decode(f);
            String mismatch = sharedMismatch(h);
            if (mismatch != null) {
              throw new Refusal(mismatch);
            }
            if (h.rank() <= config.rank()) {
              throw new Refusal(
                  "rank="
                      + h.rank()
                      + ", but rank "
                      + config.rank()
                      + " accepts only ranks above it (lower ranks are dialed)");
            }
            theirs = h;
            helloD = f;
            helloA =
                FrameEncoder.encode(
                    Frame.Hello.of(config, Bytes32.random()), config.maxFrameBytes());
            out = ByteBuffer.wrap(helloA);
            stage = Stage.WRITE_HELLO;
          }
          case WRITE_HELLO -> {
            if (!flush()) {
              return false;
            }
            stage = Stage.READ_PROOF;
          }
          case READ_PROOF -> {
            byte[] f = readFrame(FrameDescriptor.TYPE_PROOF);
            if (f == null) {
              return false;
            }
            Frame.Proof p = (Frame.Proof) decode(f);
            Bytes32 expected = config.secret().mac(DIALER_LABEL, helloD, helloA);
            if (!ReplicaSecret.sameMac(expected, p.mac())) {
              throw new Refusal(
                  "its proof of the replica secret is wrong (not a rank of this replica, or"
                      + " started with another secret)");
            }
            Frame.Proof mine = new Frame.Proof(config.secret().mac(ACCEPTOR_LABEL, helloD, helloA));
            out = ByteBuffer.wrap(FrameEncoder.encode(mine, config.maxFrameBytes()));
            stage = Stage.WRITE_PROOF;
          }
          case WRITE_PROOF -> {
            return flush();
          }
        }
      }
    }

    private byte[] readFrame(int type) throws IOException, Refusal {
      byte[] f;
      try {
        while ((f = reader.read(link)) == null && link.hasBufferedInput()) {
          // A TLS link decrypted more than the read took: read on before waiting.
        }
      } catch (EOFException e) {
        throw new Refusal(
            "it closed the connection"
                + (stage == Stage.READ_HELLO && !reader.midFrame()
                    ? " without sending anything"
                    : " during the handshake"));
      } catch (FrameReader.BadHeader e) {
        throw new Refusal("it sent bytes that are not a handshake: " + e.getMessage());
      }
      if (f == null) {
        key.interestOps(link.interestOps(SelectionKey.OP_READ));
      } else if (FrameDecoder.frameType(f, 0) != type) {
        throw new Refusal(
            "it sent a "
                + FrameDecoder.typeName(FrameDecoder.frameType(f, 0))
                + " frame where a "
                + FrameDecoder.typeName(type)
                + " was due");
      }
      return f;
    }

    private Frame decode(byte[] f) throws Refusal {
      return switch (decoder.decode(f)) {
        case Decoded.Ok(Frame frame) -> frame;
        case Decoded.Malformed m -> throw new Refusal("it sent an unreadable handshake: " + m);
      };
    }

    private boolean flush() throws IOException {
      if (!link.send(out)) {
        key.interestOps(link.interestOps(SelectionKey.OP_WRITE));
        return false;
      }
      return true;
    }

    void close() {
      try {
        link.close();
      } catch (IOException ignored) {
        // Nothing more to say to it.
      }
    }
  }

  /**
   * Sends {@code own} to every peer and receives one frame from each.
   *
   * @return the frames indexed by rank; this rank's entry is {@code own}
   */
  @Override
  public byte[][] allGather(long round, byte[] own) throws MeshException {
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
      boolean buffered = false;
      for (Peer p : peerList) {
        int ops =
            p.link.interestOps(
                (p.sent ? 0 : SelectionKey.OP_WRITE) | (p.received ? 0 : SelectionKey.OP_READ));
        if (p.key.interestOps() != ops) {
          p.key.interestOps(ops);
        }
        buffered |= !p.received && p.link.hasBufferedInput();
      }
      long leftNs = deadlineNs - System.nanoTime();
      if (leftNs <= 0) {
        // One last read of whatever has arrived: a rank that was descheduled (or frozen) past its
        // deadline must not call a peer silent whose frame is waiting in the socket.
        for (Peer p : peerList) {
          open -= transfer(p, round);
        }
        if (open == 0) {
          break;
        }
        throw timeout(round);
      }
      if (buffered) {
        // A TLS link already holds some of a peer's frame: read it before waiting on the socket.
        for (Peer p : peerList) {
          if (!p.received && p.link.hasBufferedInput()) {
            open -= transfer(p, round);
          }
        }
        continue;
      }
      select(leftNs, round);
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

  private void select(long leftNs, long round) throws MeshException {
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
  }

  /** Moves what can move now on {@code p}'s connection; returns how many directions finished. */
  private int transfer(Peer p, long round) throws MeshException {
    int done = 0;
    try {
      if (!p.sent && p.link.send(p.out)) {
        p.sent = true;
        done++;
      }
      if (!p.received) {
        byte[] f = p.reader.read(p.link);
        if (f != null) {
          int type = FrameDecoder.frameType(f, 0);
          if (type == FrameDescriptor.TYPE_FINAL) {
            p.last = finalOf(p, f, round);
            throw peerStopped(config, p.rank, round, p.last);
          }
          if (type != FrameDescriptor.TYPE_REPORT) {
            p.dead = true;
            throw notAReport(p.rank, round, type);
          }
          p.frame = f;
          p.received = true;
          done++;
        }
      }
    } catch (EOFException e) {
      p.dead = true;
      throw disconnected(config, p.rank, round, "end of stream", null);
    } catch (FrameReader.BadHeader e) {
      p.dead = true;
      throw new MeshException(
          Reason.MALFORMED_FRAME,
          p.rank,
          round,
          "rank " + p.rank + " sent a malformed frame header in round " + round + ": " + e);
    } catch (IOException e) {
      p.dead = true;
      throw disconnected(config, p.rank, round, e.toString(), e);
    }
    return done;
  }

  private Frame.Final finalOf(Peer p, byte[] f, long round) throws MeshException {
    try {
      return finalOf(decoder, p.rank, f, round);
    } catch (MeshException e) {
      p.dead = true;
      throw e;
    }
  }

  /** The FINAL frame {@code f} of {@code peer}, decoded; MALFORMED_FRAME when it is not one. */
  static Frame.Final finalOf(FrameDecoder decoder, int peer, byte[] f, long round)
      throws MeshException {
    if (decoder.decode(f) instanceof Decoded.Ok(Frame.Final last) && last.rank() == peer) {
      return last;
    }
    throw new MeshException(
        Reason.MALFORMED_FRAME,
        peer,
        round,
        "rank " + peer + " sent an unreadable final frame in round " + round);
  }

  /** This rank's FINAL: it gathered up to {@code gatheredRound} and blames {@code blamedRank}. */
  static byte[] finalFrame(ControlConfig config, long gatheredRound, int blamedRank) {
    return FrameEncoder.encode(
        new Frame.Final(config.rank(), gatheredRound, Math.max(-1, blamedRank)),
        config.maxFrameBytes());
  }

  /** {@code peer} sent its FINAL where its report of {@code round} was due. */
  static MeshException peerStopped(ControlConfig config, int peer, long round, Frame.Final last) {
    return new MeshException(
        Reason.PEER_STOPPED,
        peer,
        round,
        "rank "
            + peer
            + " stopped in round "
            + round
            + (last.blamedRank() >= 0 ? " after losing rank " + last.blamedRank() : "")
            + " (it gathered up to round "
            + last.gatheredRound()
            + "); this is rank "
            + config.rank()
            + " of replica "
            + config.replicaId());
  }

  /** {@code peer} sent a frame of {@code type}, neither a report nor a FINAL, in a round. */
  static MeshException notAReport(int peer, long round, int type) {
    return new MeshException(
        Reason.MALFORMED_FRAME,
        peer,
        round,
        "rank "
            + peer
            + " sent a "
            + FrameDecoder.typeName(type)
            + " frame in round "
            + round
            + " where its report was due");
  }

  /**
   * The survivors' last word after a failure in round {@code round}: sends this rank's newest
   * gathered round (after the rest of its current frame, so that no peer sees a torn frame) to
   * every peer whose connection still works, and reads every such peer's own, skipping reports
   * still in flight, until each has answered, died, or twice {@code roundTimeoutMs} passed.
   *
   * <p>It waits for every peer, the silent ones included: a peer that was silent in this round may
   * itself have failed one round earlier with a smaller gathered round, and its FINAL, sent at most
   * one round timeout after this rank's failure, must lower this rank's last round too. Twice the
   * round timeout leaves a margin over that bound.
   *
   * @return the gathered round of every peer that answered, by rank
   */
  @Override
  public Map<Integer, Long> settle(long round, long gatheredRound, int blamedRank) {
    Map<Integer, Long> heard = new TreeMap<>();
    byte[] last = finalFrame(config, gatheredRound, blamedRank);
    List<Peer> live = new ArrayList<>();
    for (Peer p : peerList) {
      if (p.dead || p.key == null || !p.key.isValid()) {
        continue;
      }
      ByteBuffer rest = p.out == null || p.sent ? ByteBuffer.allocate(0) : p.out.slice();
      ByteBuffer out = ByteBuffer.allocate(rest.remaining() + last.length);
      out.put(rest).put(last).flip();
      p.out = out;
      p.sent = false;
      p.received = p.last != null;
      live.add(p);
    }
    long deadlineNs =
        System.nanoTime() + 2 * TimeUnit.MILLISECONDS.toNanos(config.roundTimeoutMs());
    while (true) {
      boolean pending = false;
      for (Peer p : live) {
        if (p.dead) {
          continue;
        }
        settleStep(p, round);
        if (p.dead) {
          continue;
        }
        int ops = (p.sent ? 0 : SelectionKey.OP_WRITE) | (p.received ? 0 : SelectionKey.OP_READ);
        p.key.interestOps(p.link.interestOps(ops));
        pending |= ops != 0;
      }
      long leftNs = deadlineNs - System.nanoTime();
      if (!pending || leftNs <= 0) {
        break;
      }
      try {
        selector.select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(leftNs + 999_999)));
      } catch (IOException e) {
        break;
      }
      selector.selectedKeys().clear();
      if (Thread.currentThread().isInterrupted()) {
        break;
      }
    }
    for (Peer p : live) {
      if (p.last != null) {
        heard.put(p.rank, p.last.gatheredRound());
      }
      if (p.key.isValid()) {
        p.key.interestOps(0);
      }
    }
    return heard;
  }

  private void settleStep(Peer p, long round) {
    try {
      if (!p.sent) {
        p.sent = p.link.send(p.out);
      }
      while (!p.received) {
        byte[] f = p.reader.read(p.link);
        if (f == null) {
          return;
        }
        int type = FrameDecoder.frameType(f, 0);
        if (type == FrameDescriptor.TYPE_FINAL) {
          p.last = finalOf(p, f, round);
          p.received = true;
        } else if (type != FrameDescriptor.TYPE_REPORT) {
          p.dead = true;
          return;
        }
        // A report still in flight (this round's or the next): skipped.
      }
    } catch (IOException | FrameReader.BadHeader | MeshException e) {
      p.dead = true;
    }
  }

  /** {@code peer}'s connection ended ({@code what}: end of stream, a reset) in {@code round}. */
  static MeshException disconnected(
      ControlConfig config, int peer, long round, String what, Throwable cause) {
    return new MeshException(
        Reason.DISCONNECTED,
        peer,
        round,
        "rank "
            + peer
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
    return timeout(config, round, silent, notReading);
  }

  /**
   * The round timeout: {@code silent} ranks sent no complete frame, else {@code notReading} ranks
   * did not take this rank's whole frame (one of the lists is non-empty).
   */
  static MeshException timeout(
      ControlConfig config, long round, List<Integer> silent, List<Integer> notReading) {
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

  /**
   * Closes every connection: output first (peers read what was sent, a TLS peer then this rank's
   * close_notify, then end of stream), then whatever the peer still sends is drained without
   * waiting, so that closing does not reset a connection whose peer has not yet read this rank's
   * last frames.
   */
  @Override
  public void close() {
    ByteBuffer sink = ByteBuffer.allocate(8192);
    for (Peer p : peerList) {
      try {
        if (p.channel.isOpen() && p.channel.isConnected()) {
          p.link.closeOutbound();
          p.channel.shutdownOutput();
          if (!p.channel.isBlocking()) {
            sink.clear();
            while (p.channel.read(sink) > 0) {
              sink.clear();
            }
          }
        }
      } catch (IOException ignored) {
        // Best effort: the peer sees end of stream or a reset either way.
      }
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

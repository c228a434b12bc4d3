package io.tokenspeed.pd;

import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.channels.SocketChannel;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The prefill side's connection to one decode engine. One virtual thread dials, shakes hands and
 * then writes ({@link #writeLoop}); a second reads once the handshake is done. Frames queued while
 * it dials wait in the queue. When the connection fails, the dialing/writing thread, after it
 * stopped writing, fails every open room with the cause ({@link Transfer#onLinkDown}) and takes the
 * connection out of the sender's table, so the next {@link KvSender#bootstrap} dials afresh.
 */
final class SenderLink extends PdLink {

  final InetSocketAddress address;
  private final KvSender sender;
  private final String peer;
  private final ConcurrentHashMap<Long, Transfer> rooms = new ConcurrentHashMap<>();
  private boolean down;
  private volatile Thread writer;
  private volatile Thread readerThread;

  private SenderLink(KvSender sender, InetSocketAddress address, SocketChannel channel) {
    super(channel, PdFrameReader.Side.PREFILL, sender.settings, sender.counters);
    this.sender = sender;
    this.address = address;
    this.peer = "decode engine at " + address.getHostString() + ":" + address.getPort();
  }

  /** A connection to {@code address}, which dials once {@link #start}ed. */
  static SenderLink create(KvSender sender, InetSocketAddress address) {
    SocketChannel ch;
    try {
      ch = SocketChannel.open();
    } catch (IOException e) {
      throw new java.io.UncheckedIOException("cannot open a socket to dial " + address, e);
    }
    return new SenderLink(sender, address, ch);
  }

  /** Dials, shakes hands and then writes, on a thread of its own. */
  void start() {
    writer = Thread.ofVirtual().name("ts-pd-send-" + address.getPort()).start(this::run);
  }

  @Override
  String peer() {
    return peer;
  }

  @Override
  int roomCount() {
    return rooms.size();
  }

  @Override
  String handshakeTimeoutMessage() {
    return "no complete handshake with "
        + peer
        + " within handshake_timeout_ms="
        + settings.handshakeTimeoutMs()
        + " (it accepts connections but does not answer as a decode engine)";
  }

  /** Opens {@code room} on this connection and queues its BOOTSTRAP; null once it is down. */
  Transfer open(long room, Bootstrap bootstrap) {
    synchronized (this) {
      if (down) {
        return null;
      }
      Transfer t = new Transfer(room, this, bootstrap);
      if (rooms.isEmpty()) {
        quietSinceNs = System.nanoTime();
      }
      if (rooms.putIfAbsent(room, t) != null) {
        throw new IllegalArgumentException(
            "room " + room + " is already open on the connection to " + peer);
      }
      counters.roomOpened();
      enqueue(PdFrameEncoder.bootstrap(room, bootstrap));
      return t;
    }
  }

  void removeRoom(Transfer t, Counters.End end) {
    if (rooms.remove(t.room(), t)) {
      counters.roomEnded(end);
    }
  }

  private void run() {
    try {
      channel.connect(address);
      channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
      PdHandshake.dial(channel, reader, sender.secret, peer);
      onEstablished();
      readerThread =
          Thread.ofVirtual().name("ts-pd-send-read-" + address.getPort()).start(this::readLoop);
      writeLoop();
    } catch (PdException e) {
      fail(e);
    } catch (IOException e) {
      fail(ioFailure(established ? "while writing" : "while connecting", e));
    } catch (RuntimeException e) {
      fail(new PdException(PdException.Kind.HANDSHAKE, "dialing " + peer + " failed: " + e, e));
    } finally {
      onDown();
    }
  }

  private void readLoop() {
    try {
      while (failure() == null) {
        PdFrame f = reader.next(false);
        switch (f) {
          case PdFrame.Accepted a -> room(a.room(), "ACK").onAck(a.ack());
          case PdFrame.Refuse r -> room(r.room(), "REFUSE").onRefuse(r.reason());
          case PdFrame.Received r -> room(r.room(), "RECEIVED").onReceived();
          case PdFrame.Cancel c -> room(c.room(), "CANCEL").onCancel(c.reason());
          case PdFrame.Ping p -> {}
          case PdFrame.Hello h -> throw new IllegalStateException("HELLO passed the type check");
          case PdFrame.Proof p -> throw new IllegalStateException("PROOF passed the type check");
          case PdFrame.Open o -> throw new IllegalStateException("BOOTSTRAP passed the type check");
          case PdFrame.Data d -> throw new IllegalStateException("DATA passed the type check");
          case PdFrame.Done d -> throw new IllegalStateException("DONE passed the type check");
        }
      }
    } catch (EOFException e) {
      fail(closedByPeer(e));
    } catch (PdProtocolException e) {
      fail(protocolBroken(e));
    } catch (IOException e) {
      fail(ioFailure("while reading", e));
    } catch (RuntimeException e) {
      fail(readFailed(e));
    }
  }

  private Transfer room(long room, String frame) throws PdProtocolException {
    Transfer t = rooms.get(room);
    if (t == null) {
      throw new PdProtocolException("sent " + frame + " for room " + room + ", which is not open");
    }
    return t;
  }

  /** Runs on the dialing/writing thread once it stopped: every open room fails with the cause. */
  private void onDown() {
    PdException cause = failure();
    if (cause == null) {
      cause = new PdException(PdException.Kind.CLOSED, "the connection to " + peer + " ended");
      fail(cause);
    }
    synchronized (this) {
      down = true;
    }
    countDown(cause);
    sender.onLinkDown(this);
    for (Transfer t : List.copyOf(rooms.values())) {
      t.onLinkDown(cause);
    }
  }

  /** Waits up to {@code millis} for both threads to end (after {@link #fail}). */
  void join(long millis) throws InterruptedException {
    joinAll(millis, writer, readerThread);
  }
}

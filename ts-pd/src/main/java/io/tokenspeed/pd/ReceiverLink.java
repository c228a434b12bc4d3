package io.tokenspeed.pd;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.net.StandardSocketOptions;
import java.nio.channels.SocketChannel;
import java.util.HashMap;
import java.util.Map;

/**
 * The decode side's end of one accepted connection. Its thread shakes hands, then reads frames
 * until the connection fails, handing each to the {@link KvReceiver}; a DATA frame's bytes are read
 * straight into the destination segment of the block it names. When the connection fails, this
 * thread, after it stopped reading, fails every room on it and releases their destinations.
 */
final class ReceiverLink extends PdLink {

  private final KvReceiver receiver;
  private final String remote;
  private volatile String peer;

  /** The rooms open on this connection, by id; guarded by the receiver's lock. */
  final Map<Long, ReceiverRoom> rooms = new HashMap<>();

  /** {@code rooms.size()}, for the timer. */
  volatile int roomCount;

  private volatile Thread readerThread;
  private volatile Thread writerThread;

  ReceiverLink(KvReceiver receiver, SocketChannel channel, String remote) {
    super(channel, PdFrameReader.Side.DECODE, receiver.settings, receiver.counters);
    this.receiver = receiver;
    this.remote = remote;
    this.peer = "a connection from " + remote;
  }

  void start() {
    readerThread = Thread.ofVirtual().name("ts-pd-receive-" + remote).start(this::serve);
  }

  @Override
  String peer() {
    return peer;
  }

  @Override
  int roomCount() {
    return roomCount;
  }

  @Override
  String handshakeTimeoutMessage() {
    return "the KV receiver refused a connection from "
        + remote
        + ": no complete handshake within handshake_timeout_ms="
        + settings.handshakeTimeoutMs();
  }

  private void serve() {
    try {
      channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
      PdHandshake.accept(channel, reader, receiver.secret);
      peer = "prefill engine at " + remote;
      onEstablished();
      writerThread =
          Thread.ofVirtual().name("ts-pd-receive-write-" + remote).start(this::writeLoop);
      readLoop();
    } catch (PdProtocolException e) {
      fail(
          established
              ? protocolBroken(e)
              : new PdException(
                  PdException.Kind.HANDSHAKE,
                  "the KV receiver refused a connection from " + remote + ": " + e.getMessage()));
    } catch (EOFException e) {
      fail(closedByPeer(e));
    } catch (IOException e) {
      fail(ioFailure(established ? "while reading" : "during the handshake", e));
    } catch (RuntimeException e) {
      fail(readFailed(e));
    } finally {
      PdException cause = failure();
      countDown(cause);
      receiver.onLinkDown(this, cause);
    }
  }

  private void readLoop() throws IOException, PdProtocolException {
    while (failure() == null) {
      PdFrame f = reader.next(false);
      switch (f) {
        case PdFrame.Open o -> receiver.onOpen(this, o);
        case PdFrame.Data d -> land(d);
        case PdFrame.Done d -> receiver.onDone(this, d);
        case PdFrame.Cancel c -> receiver.onCancel(this, c);
        case PdFrame.Ping p -> {}
        case PdFrame.Hello h -> throw new IllegalStateException("HELLO passed the type check");
        case PdFrame.Proof p -> throw new IllegalStateException("PROOF passed the type check");
        case PdFrame.Accepted a -> throw new IllegalStateException("ACK passed the type check");
        case PdFrame.Refuse r -> throw new IllegalStateException("REFUSE passed the type check");
        case PdFrame.Received r ->
            throw new IllegalStateException("RECEIVED passed the type check");
      }
    }
  }

  /** Reads a DATA frame's block straight into its destination and books it. */
  private void land(PdFrame.Data d) throws IOException, PdProtocolException {
    ReceiverRoom r = receiver.roomForData(this, d);
    MemorySegment block = r.destinations.block(d.group(), d.index());
    if (block.byteSize() != d.blockBytes()) {
      throw new IllegalStateException(
          "the engine's destination of room "
              + r.id
              + " block ("
              + d.group()
              + ", "
              + d.index()
              + ") has "
              + block.byteSize()
              + " bytes, the layout says "
              + d.blockBytes());
    }
    reader.readBlock(block);
    r.crc.update(block.asByteBuffer());
    r.landed[d.group()].set(d.index());
    r.landedBlocks++;
    counters.bytesReceived.addAndGet(d.blockBytes());
  }

  /** Waits up to {@code millis} for both threads to end (after {@link #fail}). */
  void join(long millis) throws InterruptedException {
    joinAll(millis, readerThread, writerThread);
  }
}

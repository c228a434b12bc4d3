package io.tokenspeed.pd;

import io.tokenspeed.core.OneLine;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * One KV connection, either end: its channel, the queue its writer drains, its liveness clocks and
 * its failure, which happens once.
 *
 * <p><b>Threads.</b> One reader (the subclass's) and one writer ({@link #writeLoop}) per
 * connection; nothing else touches the channel's I/O. Every frame leaves through the queue, so
 * frames are whole and in queue order, and whoever queues (an engine thread, the reader answering a
 * CANCEL, the timer's PING) never blocks on the socket. The queue holds references (a DATA item is
 * the caller's segment, never a copy); its length is bounded by the rooms a connection may carry
 * times their blocks.
 *
 * <p><b>Failure.</b> {@link #fail} records the first cause, logs it naming the peer, closes the
 * channel (which ends a blocked read or write at once) and stops the writer. Who cleans up after is
 * the side's business: the prefill side fails its rooms from the writer's thread once the writer
 * has stopped (so no segment is read after its fence completed), the decode side from the reader's
 * thread once the reader has stopped (so no destination is written after it was released).
 *
 * <p><b>Liveness.</b> The endpoint's timer calls {@link #tick}: a connection whose handshake
 * overran fails; one with a room open that read nothing for {@code silence_timeout_ms} fails; one
 * with a room open that wrote nothing for {@code ping_interval_ms} queues a PING.
 */
abstract class PdLink {

  private static final Logger LOG = Logger.getLogger(PdLink.class.getName());

  private static final ByteBuffer PING = PdFrameEncoder.ping();

  final SocketChannel channel;
  final PdSettings settings;
  final Counters counters;
  final PdFrameReader reader;

  private final LinkedBlockingQueue<Outbound> outbound = new LinkedBlockingQueue<>();
  private final AtomicReference<PdException> failure = new AtomicReference<>();
  private final ByteBuffer dataPrefix =
      ByteBuffer.allocateDirect(PdFrameDescriptor.DATA_PREFIX_BYTES);
  private final ByteBuffer[] dataFrame = new ByteBuffer[2];

  /** True once both proofs passed. */
  volatile boolean established;

  /** When the handshake must have completed. */
  final long handshakeDeadlineNs;

  /** When the writer last wrote. */
  private volatile long lastWriteNs = System.nanoTime();

  /** When the room count last rose from zero: silence is counted from then at the earliest. */
  volatile long quietSinceNs = System.nanoTime();

  private volatile boolean pingQueued;

  PdLink(SocketChannel channel, PdFrameReader.Side side, PdSettings settings, Counters counters) {
    this.channel = channel;
    this.settings = settings;
    this.counters = counters;
    this.reader = new PdFrameReader(channel, side, settings);
    this.handshakeDeadlineNs =
        System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settings.handshakeTimeoutMs());
  }

  /** The peer as messages name it, for example {@code decode engine at 10.0.0.2:7001}. */
  abstract String peer();

  /** The rooms open on this connection. */
  abstract int roomCount();

  /** The message of a handshake that overran its deadline. */
  abstract String handshakeTimeoutMessage();

  /** Queues {@code o} for the writer (never blocks). */
  final void enqueue(Outbound o) {
    outbound.add(o);
  }

  /** Queues a control frame. */
  final void enqueue(ByteBuffer frame) {
    outbound.add(new Outbound.Control(frame, null));
  }

  /** The first failure, or null while the connection is up. */
  final PdException failure() {
    return failure.get();
  }

  /**
   * Fails the connection with {@code cause} unless it failed already: logs it (a local close only
   * at FINE), closes the channel and stops the writer.
   *
   * @return true when this call was the first
   */
  final boolean fail(PdException cause) {
    if (!failure.compareAndSet(null, cause)) {
      return false;
    }
    LOG.log(
        cause.kind() == PdException.Kind.CLOSED ? Level.FINE : Level.WARNING,
        OneLine.of(cause.getMessage()));
    try {
      channel.close();
    } catch (IOException ignored) {
      // Closing is all that was asked.
    }
    outbound.add(new Outbound.Stop());
    return true;
  }

  /** The failure of an I/O error on this established connection. */
  final PdException ioFailure(String doing, IOException e) {
    PdException first = failure.get();
    if (first != null) {
      return first;
    }
    return new PdException(
        established ? PdException.Kind.CONNECTION : PdException.Kind.HANDSHAKE,
        "the connection with " + peer() + " failed " + doing + ": " + e,
        e);
  }

  /** Both proofs passed: marks the connection established and counts it open. */
  final void onEstablished() {
    established = true;
    counters.connectionsOpened.incrementAndGet();
    counters.connectionsOpen.incrementAndGet();
  }

  /** Counts the end of the connection, once its thread stopped, by how it ended. */
  final void countDown(PdException cause) {
    if (established) {
      counters.connectionsOpen.decrementAndGet();
      if (cause.kind() != PdException.Kind.CLOSED) {
        counters.connectionFailures.incrementAndGet();
      }
    } else if (cause.kind() != PdException.Kind.CLOSED) {
      counters.handshakeFailures.incrementAndGet();
    }
  }

  /** The failure of the peer closing the connection: no failure while no room is open. */
  final PdException closedByPeer(EOFException e) {
    return roomCount() == 0
        // An idle connection's end is no failure: the next room dials afresh.
        ? new PdException(PdException.Kind.CLOSED, peer() + " closed the idle connection")
        : new PdException(
            PdException.Kind.CONNECTION,
            peer() + " closed the connection (" + e.getMessage() + "); its rooms fail");
  }

  /** The failure of a frame that broke the protocol on this established connection. */
  final PdException protocolBroken(PdProtocolException e) {
    return new PdException(
        PdException.Kind.CONNECTION,
        peer() + " broke the protocol and is disconnected: it " + e.getMessage());
  }

  /** The failure of a reader that threw (a broken invariant). */
  final PdException readFailed(RuntimeException e) {
    return new PdException(
        PdException.Kind.CONNECTION, "reading from " + peer() + " failed: " + e, e);
  }

  /** Waits up to {@code millis} in all for {@code threads} (nulls skipped) to end. */
  static void joinAll(long millis, Thread... threads) throws InterruptedException {
    long deadline = System.nanoTime() + millis * 1_000_000L;
    for (Thread t : threads) {
      if (t != null) {
        long left = deadline - System.nanoTime();
        if (left > 0) {
          t.join(Duration.ofNanos(left));
        }
      }
    }
  }

  /** Called by the endpoint's timer; see the class comment. */
  final void tick(long nowNs) {
    if (failure.get() != null) {
      return;
    }
    if (!established) {
      if (nowNs - handshakeDeadlineNs >= 0) {
        fail(new PdException(PdException.Kind.HANDSHAKE, handshakeTimeoutMessage()));
      }
      return;
    }
    int rooms = roomCount();
    if (rooms == 0) {
      return;
    }
    long lastRead = reader.lastReadNs;
    long quietSince = quietSinceNs;
    long heard = lastRead - quietSince > 0 ? lastRead : quietSince;
    long silentNs = nowNs - heard;
    if (silentNs >= TimeUnit.MILLISECONDS.toNanos(settings.silenceTimeoutMs())) {
      fail(
          new PdException(
              PdException.Kind.CONNECTION,
              peer()
                  + " sent nothing for "
                  + TimeUnit.NANOSECONDS.toMillis(silentNs)
                  + " ms while "
                  + rooms
                  + " room(s) were open (silence_timeout_ms="
                  + settings.silenceTimeoutMs()
                  + "); the connection is closed and its rooms fail"));
    } else if (nowNs - lastWriteNs >= TimeUnit.MILLISECONDS.toNanos(settings.pingIntervalMs())
        && !pingQueued) {
      pingQueued = true;
      outbound.add(new Outbound.Ping());
    }
  }

  /**
   * Writes queued frames until the connection fails or {@link Outbound.Stop}; an I/O error fails
   * the connection. Returns normally either way.
   */
  final void writeLoop() {
    try {
      while (failure.get() == null) {
        Outbound o = outbound.take();
        switch (o) {
          case Outbound.Stop s -> {
            return;
          }
          case Outbound.Ping p -> {
            pingQueued = false;
            write(PING.duplicate());
          }
          case Outbound.Control c -> {
            write(c.frame());
            if (c.afterWrite() != null) {
              c.afterWrite().run();
            }
          }
          case Outbound.Block b -> writeBlock(b);
          case Outbound.Finish f -> writeFinish(f);
        }
      }
    } catch (IOException e) {
      fail(ioFailure("while writing", e));
    } catch (InterruptedException e) {
      fail(
          new PdException(PdException.Kind.CLOSED, "the writer to " + peer() + " was interrupted"));
    } catch (RuntimeException e) {
      // A segment that was closed under the writer, or a broken invariant: the connection cannot
      // go on, but the endpoint can.
      fail(
          new PdException(
              PdException.Kind.CONNECTION, "the writer to " + peer() + " failed: " + e, e));
    }
  }

  private void write(ByteBuffer frame) throws IOException {
    while (frame.hasRemaining()) {
      channel.write(frame);
      lastWriteNs = System.nanoTime();
    }
  }

  /** A DATA frame: the 19-byte prefix and the block's own bytes in one gathering write. */
  private void writeBlock(Outbound.Block b) throws IOException {
    Transfer t = b.transfer();
    if (t.stopSending) {
      return;
    }
    ByteBuffer block = b.bytes().asByteBuffer();
    int n = block.remaining();
    dataPrefix.clear();
    PdFrameEncoder.dataPrefix(dataPrefix, t.room(), b.group(), b.index(), n);
    dataPrefix.flip();
    dataFrame[0] = dataPrefix;
    dataFrame[1] = block;
    while (block.hasRemaining()) {
      channel.write(dataFrame);
      lastWriteNs = System.nanoTime();
    }
    dataFrame[1] = null;
    t.crc.update(b.bytes().asByteBuffer());
    counters.bytesSent.addAndGet(n);
  }

  private void writeFinish(Outbound.Finish f) throws IOException {
    Transfer t = f.transfer();
    if (t.stopSending) {
      return;
    }
    write(PdFrameEncoder.done(t.room(), f.info(), (int) t.crc.getValue()));
  }
}

package io.tokenspeed.pd;

import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.util.BitSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.zip.CRC32C;

/**
 * The prefill side of one room: what {@link KvSender#bootstrap} returns.
 *
 * <pre>
 *   bootstrap ──► BOOTSTRAP ─► acknowledged() ─► send(g, i, bytes)… ─► done(info) ─► received()
 *                              (ACK, or REFUSE:                                       (RECEIVED:
 *                               exceptional)                                           the fence)
 *   cancel(reason) at any point ─► CANCEL; received() completes once the peer's CANCEL (or its
 *                                  REFUSE or RECEIVED, which crossed ours) arrives
 * </pre>
 *
 * <p><b>The fence.</b> {@link #received} is the transport completion fence: however it completes
 * (normally on RECEIVED or when this side's cancel is answered; exceptionally on REFUSE, a peer's
 * CANCEL, or the connection's failure), the transport reads none of the segments passed to {@link
 * #send} after that. Until then they must stay valid and unchanged: the writer reads them straight
 * to the socket, with no copy, whenever the queue reaches them.
 *
 * <p><b>Threads.</b> {@code send}, {@code done} and {@code cancel} may be called from any thread,
 * several at once (they are serialized on this object, and DATA frames go out in the order they
 * were queued); none blocks on the network. The stages complete on the connection's reader or
 * writer thread, or on the caller's when it cancels.
 *
 * <p>{@code send} and {@code done} return false once the room stopped accepting frames (cancelled
 * by either side, refused, or failed): a race with the peer or the network, not a bug. Calls that
 * break the protocol (before the ACK, a block out of range or twice, DONE before every block) throw
 * {@link IllegalStateException} or {@link IllegalArgumentException}.
 */
public final class Transfer {

  private final long room;
  private final SenderLink link;
  private final Bootstrap bootstrap;
  private final CompletableFuture<Ack> acknowledged = new CompletableFuture<>();
  private final CompletableFuture<Void> received = new CompletableFuture<>();

  /** Set once nothing more of this room may be written but a CANCEL: the writer skips DATA/DONE. */
  volatile boolean stopSending;

  /** The room's checksum over the DATA bytes written so far; the writer's alone. */
  final CRC32C crc = new CRC32C();

  // Guarded by this.
  private Ack ack;
  private BitSet[] queued;
  private long queuedBlocks;
  private boolean doneQueued;
  private boolean cancelQueued;
  private boolean cancelWritten;
  private boolean cancelRead;
  private String peerCancelReason;
  private boolean closed;

  Transfer(long room, SenderLink link, Bootstrap bootstrap) {
    this.room = room;
    this.link = link;
    this.bootstrap = bootstrap;
  }

  /** The room id. */
  public long room() {
    return room;
  }

  /** The decode engine's KV address. */
  public InetSocketAddress decode() {
    return link.address;
  }

  /** What the BOOTSTRAP carried. */
  public Bootstrap bootstrap() {
    return bootstrap;
  }

  /**
   * Completes with the ACK's block counts; exceptionally with {@link PdException} on REFUSE ({@link
   * PdException.Kind#REFUSED}, with the reason), a cancel ({@link PdException.Kind#CANCELLED}), or
   * a failed connection ({@link PdException.Kind#HANDSHAKE} when it never came up, naming the
   * address, else {@link PdException.Kind#CONNECTION}).
   */
  public CompletionStage<Ack> acknowledged() {
    return acknowledged.minimalCompletionStage();
  }

  /**
   * The transport completion fence (see the class comment): completes normally on RECEIVED, or when
   * this side's cancel has been answered; exceptionally on REFUSE, on the decode side's CANCEL
   * ({@link PdException.Kind#CANCELLED} with its reason, for example a checksum mismatch, or the
   * decode half's client cancelling: {@link PdException#peerClientCancelled}), or when the
   * connection fails.
   */
  public CompletionStage<Void> received() {
    return received.minimalCompletionStage();
  }

  /**
   * Queues the DATA frame of block {@code index} of cache group {@code group}; the connection's
   * writer writes it straight from {@code bytes}, which must hold exactly the group's bytes per
   * block, be readable from any thread, and stay valid until {@link #received} completes.
   *
   * @return true when queued; false when the room no longer accepts frames
   * @throws IllegalStateException before the ACK, or after {@link #done}
   * @throws IllegalArgumentException for a group or block out of the ACK's range, a block queued
   *     before, or a segment of the wrong size
   */
  public boolean send(int group, int index, MemorySegment bytes) {
    synchronized (this) {
      if (!acceptsFrames("send", "send after done")) {
        return false;
      }
      if (group < 0 || group >= ack.numGroups() || index < 0 || index >= ack.numBlocks(group)) {
        throw new IllegalArgumentException(block(group, index) + " is outside the ACK " + ack);
      }
      if (bytes.byteSize() != bootstrap.blockBytes(group)) {
        throw new IllegalArgumentException(
            block(group, index)
                + " has "
                + bytes.byteSize()
                + " bytes, group "
                + group
                + " has "
                + bootstrap.blockBytes(group)
                + " per block");
      }
      if (!bytes.isAccessibleBy(KvReceiver.ANY_OTHER_THREAD)) {
        throw new IllegalArgumentException(
            block(group, index) + " is confined to one thread; the connection's writer reads it");
      }
      if (queued[group].get(index)) {
        throw new IllegalArgumentException(block(group, index) + " sent twice");
      }
      queued[group].set(index);
      queuedBlocks++;
      link.enqueue(new Outbound.Block(this, group, index, bytes));
      return true;
    }
  }

  /**
   * Queues DONE, after every block of the ACK was queued; its CRC32C is taken by the writer over
   * the DATA bytes it wrote.
   *
   * @return true when queued; false when the room no longer accepts frames
   * @throws IllegalStateException before the ACK, with blocks not yet sent, or twice
   */
  public boolean done(DoneInfo info) {
    synchronized (this) {
      if (!acceptsFrames("done", "done twice")) {
        return false;
      }
      if (queuedBlocks != ack.totalBlocks()) {
        throw new IllegalStateException(
            "room "
                + room
                + ": done after "
                + queuedBlocks
                + " of the ACK's "
                + ack.totalBlocks()
                + " blocks");
      }
      doneQueued = true;
      link.enqueue(new Outbound.Finish(this, info));
      return true;
    }
  }

  /**
   * Holding this: false when the room no longer accepts frames; throws when {@code op} comes before
   * the ACK, or after DONE was queued ({@code afterDone} says so).
   */
  private boolean acceptsFrames(String op, String afterDone) {
    if (closed || stopSending) {
      return false;
    }
    if (ack == null) {
      throw new IllegalStateException("room " + room + ": " + op + " before the ACK");
    }
    if (doneQueued) {
      throw new IllegalStateException("room " + room + ": " + afterDone);
    }
    return true;
  }

  /** Block {@code (group, index)} of this room, as messages name it. */
  private String block(int group, int index) {
    return "room " + room + ": block (group=" + group + ", index=" + index + ")";
  }

  /**
   * Cancels the room: queues CANCEL with {@code reason} (blocks queued but not yet written are
   * dropped; a reason of {@link PdFrameDescriptor#clientCancelled} tells the decode side that this
   * half's client cancelled it, any other a failure) and fails {@link #acknowledged} if it is
   * pending. {@link #received} completes when the decode side's answer arrives.
   *
   * @return true when this call cancelled; false when the room was cancelled or ended before
   */
  public boolean cancel(String reason) {
    synchronized (this) {
      if (closed || cancelQueued) {
        return false;
      }
      cancelQueued = true;
      stopSending = true;
      link.enqueue(
          new Outbound.Control(PdFrameEncoder.cancel(room, reason), this::onCancelWritten));
    }
    acknowledged.completeExceptionally(
        new PdException(
            PdException.Kind.CANCELLED, "room " + room + " was cancelled by this side: " + reason));
    return true;
  }

  /** ACK arrived (reader thread). */
  void onAck(Ack a) throws PdProtocolException {
    synchronized (this) {
      if (ack != null) {
        throw new PdProtocolException("sent a second ACK for room " + room);
      }
      if (a.numGroups() != bootstrap.numGroups()) {
        throw new PdProtocolException(
            "sent an ACK for room "
                + room
                + " with "
                + a.numGroups()
                + " cache groups; its BOOTSTRAP has "
                + bootstrap.numGroups());
      }
      ack = a;
      queued = new BitSet[a.numGroups()];
      for (int g = 0; g < queued.length; g++) {
        queued[g] = new BitSet(a.numBlocks(g));
      }
      if (cancelQueued) {
        return;
      }
    }
    acknowledged.complete(a);
  }

  /** REFUSE arrived (reader thread): the decode side forgot the room. */
  void onRefuse(String reason) throws PdProtocolException {
    boolean ownCancel;
    synchronized (this) {
      if (ack != null) {
        throw new PdProtocolException("sent REFUSE for room " + room + " after its ACK");
      }
      ownCancel = cancelQueued;
      close(Counters.End.REFUSED);
    }
    PdException e =
        new PdException(
            PdException.Kind.REFUSED,
            link.peer() + " refused room " + room + ": " + io.tokenspeed.core.OneLine.of(reason),
            PdFrameDescriptor.isClientCancelled(reason));
    acknowledged.completeExceptionally(e);
    if (ownCancel) {
      received.complete(null);
    } else {
      received.completeExceptionally(e);
    }
  }

  /** RECEIVED arrived (reader thread). */
  void onReceived() throws PdProtocolException {
    synchronized (this) {
      if (!doneQueued) {
        throw new PdProtocolException("sent RECEIVED for room " + room + " before its DONE");
      }
      close(Counters.End.LANDED);
    }
    received.complete(null);
  }

  /** CANCEL arrived (reader thread): answer it unless ours went out, then close once both did. */
  void onCancel(String reason) throws PdProtocolException {
    boolean closeNow;
    synchronized (this) {
      if (cancelRead) {
        throw new PdProtocolException("sent a second CANCEL for room " + room);
      }
      cancelRead = true;
      stopSending = true;
      if (!cancelQueued) {
        cancelQueued = true;
        peerCancelReason = io.tokenspeed.core.OneLine.of(reason);
        link.enqueue(
            new Outbound.Control(
                PdFrameEncoder.cancel(room, "answering the decode side's cancel"),
                this::onCancelWritten));
      }
      closeNow = cancelWritten;
      if (closeNow) {
        close(Counters.End.CANCELLED);
      }
    }
    if (closeNow) {
      completeCancelled();
    }
  }

  /** This side's CANCEL was written (writer thread). */
  private void onCancelWritten() {
    boolean closeNow;
    synchronized (this) {
      cancelWritten = true;
      closeNow = cancelRead && !closed;
      if (closeNow) {
        close(Counters.End.CANCELLED);
      }
    }
    if (closeNow) {
      completeCancelled();
    }
  }

  /** The connection failed; called once the writer stopped. */
  void onLinkDown(PdException cause) {
    synchronized (this) {
      if (closed) {
        return;
      }
      close(Counters.End.FAILED);
    }
    acknowledged.completeExceptionally(cause);
    received.completeExceptionally(cause);
  }

  private void completeCancelled() {
    String reason;
    synchronized (this) {
      reason = peerCancelReason;
    }
    if (reason == null) {
      received.complete(null);
      return;
    }
    PdException e =
        new PdException(
            PdException.Kind.CANCELLED,
            link.peer() + " cancelled room " + room + ": " + reason,
            PdFrameDescriptor.isClientCancelled(reason));
    acknowledged.completeExceptionally(e);
    received.completeExceptionally(e);
  }

  /** Holding this: ends the room once. */
  private void close(Counters.End end) {
    closed = true;
    stopSending = true;
    link.removeRoom(this, end);
  }

  synchronized boolean isClosed() {
    return closed;
  }

  @Override
  public String toString() {
    return "Transfer[room=" + room + ", decode=" + link.address + "]";
  }
}

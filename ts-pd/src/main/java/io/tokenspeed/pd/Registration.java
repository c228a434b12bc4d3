package io.tokenspeed.pd;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ScheduledFuture;

/**
 * The decode engine's claim on one room ({@link KvReceiver#expect}), made when the router's request
 * arrives. The BOOTSTRAP of the room may arrive before or after it; whichever comes first waits at
 * most the bootstrap deadline for the other.
 */
public final class Registration {

  final long room;
  final KvReceiver receiver;
  final CompletableFuture<Landed> landed = new CompletableFuture<>();

  // Guarded by the receiver's lock.
  ScheduledFuture<?> deadline;
  ReceiverRoom matched;

  Registration(long room, KvReceiver receiver) {
    this.room = room;
    this.receiver = receiver;
  }

  /** The room id. */
  public long room() {
    return room;
  }

  /**
   * Completes once the room's KV landed (see {@link Landed}); exceptionally with {@link
   * PdException}: {@link PdException.Kind#TIMEOUT} when no BOOTSTRAP came within the deadline,
   * {@link PdException.Kind#REFUSED} when the {@link Landing} refused it, {@link
   * PdException.Kind#CANCELLED} when either side cancelled (at once when the prefill side cancelled
   * the room before this registration came; {@link PdException#peerClientCancelled} when the
   * prefill half's client cancelled it), {@link PdException.Kind#INTEGRITY} when DONE's checksum
   * did not match or blocks were missing (nothing is handed over), {@link
   * PdException.Kind#CONNECTION} when the connection failed, {@link PdException.Kind#CLOSED} when
   * the receiver closed.
   */
  public CompletionStage<Landed> landed() {
    return landed.minimalCompletionStage();
  }

  /**
   * Cancels the room: before its BOOTSTRAP, the room is forgotten (a BOOTSTRAP that arrives later
   * is refused, with reason code {@link PdFrameDescriptor#CLIENT_CANCELLED} when {@code reason} has
   * it, else {@code cancelled}); after it, CANCEL goes to the prefill side with {@code reason} (see
   * {@link PdFrameDescriptor#clientCancelled}), and the reserved destinations are released once no
   * more bytes can land in them (unless they were handed over with {@link Landed}). {@link #landed}
   * fails with {@link PdException.Kind#CANCELLED} if pending.
   *
   * @return true when this call cancelled; false when the room had ended already
   */
  public boolean cancel(String reason) {
    return receiver.cancel(this, reason);
  }

  @Override
  public String toString() {
    return "Registration[room=" + room + "]";
  }
}

package io.tokenspeed.l3.redis;

import io.lettuce.core.codec.RedisCodec;
import io.lettuce.core.output.CommandOutput;
import io.tokenspeed.l3.spi.RowResult;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Decodes the reply of one {@code GET key} straight into its destination segment, and can be
 * abandoned so that it provably never writes there again.
 *
 * <pre>
 *   reply                                row              destination
 *   $N bytes, N == destination length    Ok(N, false)     the N bytes, one copy from the socket
 *                                                         buffer (no intermediate array; a
 *                                                         confined destination: see below)
 *   $N bytes, N != destination length    Invalid(N)       untouched
 *   $-1 (RESP2) or _ (RESP3): no key     Missing          untouched
 *   anything after abandon()             (dropped)        untouched; counted as a late reply
 * </pre>
 *
 * <p><b>Why a lock.</b> Lettuce decodes on its event loop whenever the reply arrives, even for a
 * command whose future already timed out or was cancelled: the command stays on the connection's
 * stack until its reply is read. The copy into the destination and the {@code abandoned} flag are
 * therefore guarded by one lock, the decoder's own monitor. {@link #abandon()} takes it, so when it
 * returns no copy is in progress, and every later reply sees the flag and leaves the destination
 * alone. That is what lets {@link RedisStore#failuresRetire()} be true for GET: after a failed call
 * abandons its decoders, nothing the client does later can touch the caller's Host memory.
 *
 * <p><b>Confined destinations.</b> A segment of a confined arena may only be touched by its owner
 * thread, never by the event loop. For such a destination the decoder keeps an exact-length reply
 * in a private array, and the calling thread copies it in with {@link #finish()} once the call
 * succeeded: two copies instead of one. The executor's Host allocation is shared by its workers, so
 * its slices always take the direct path; the staged path serves single-threaded callers.
 *
 * <p>The lock is uncontended in the normal case (one decode, then one read of the result by the
 * calling thread after the future completed), and a copy holds it for at most one value.
 */
final class SegmentReplyDecoder extends CommandOutput<String, byte[], RowResult> {

  /** A thread that owns no segment: a segment it may access is not confined to one thread. */
  private static final Thread OUTSIDER = Thread.ofPlatform().unstarted(() -> {});

  private final MemorySegment destination;
  private final AtomicLong lateReplies;
  private final boolean direct;

  /** Guarded by this decoder's monitor: an exact-length reply waiting for {@link #finish()}. */
  private byte[] staged;

  /** Guarded by this decoder's monitor. */
  private boolean abandoned;

  /** Guarded by this decoder's monitor: whether a reply was decoded. */
  private boolean decoded;

  SegmentReplyDecoder(
      RedisCodec<String, byte[]> codec, MemorySegment destination, AtomicLong lateReplies) {
    super(codec, null);
    this.destination = destination;
    this.lateReplies = lateReplies;
    this.direct = destination.isAccessibleBy(OUTSIDER);
  }

  @Override
  public void set(ByteBuffer bytes) {
    synchronized (this) {
      if (abandoned) {
        lateReplies.incrementAndGet();
        return;
      }
      if (decoded) {
        // a second bulk string for one GET is no GET reply: whatever landed is unusable
        staged = null;
        output = new RowResult.Invalid(bytes == null ? 0 : bytes.remaining());
        return;
      }
      decoded = true;
      if (bytes == null) {
        output = RowResult.MISSING;
        return;
      }
      int length = bytes.remaining();
      if (length != destination.byteSize()) {
        output = new RowResult.Invalid(length);
        return;
      }
      if (direct) {
        MemorySegment.copy(MemorySegment.ofBuffer(bytes), 0, destination, 0, length);
      } else {
        staged = new byte[length];
        bytes.get(staged);
      }
      output = new RowResult.Ok(length, false);
    }
  }

  /**
   * A simple-string reply ({@code +text}) is not a value this store wrote: report it as an invalid
   * object of that length, without copying.
   */
  @Override
  public void setSingle(ByteBuffer bytes) {
    synchronized (this) {
      if (abandoned) {
        lateReplies.incrementAndGet();
        return;
      }
      decoded = true;
      output = new RowResult.Invalid(bytes == null ? 0 : bytes.remaining());
    }
  }

  /**
   * Stops every later write into the destination. When this returns, no copy is in progress and
   * none will start. Idempotent.
   */
  void abandon() {
    synchronized (this) {
      abandoned = true;
    }
  }

  /**
   * Completes a successful row on the calling thread: copies a staged reply into a confined
   * destination (nothing to do for a direct one). Returns the row, or null when none was decoded.
   */
  RowResult finish() {
    synchronized (this) {
      if (staged != null && !abandoned) {
        MemorySegment.copy(staged, 0, destination, ValueLayout.JAVA_BYTE, 0, staged.length);
      }
      staged = null;
      return output;
    }
  }

  /** The decoded row, or null when no reply was decoded (read after the command completed). */
  RowResult row() {
    synchronized (this) {
      return output;
    }
  }

  @Override
  public RowResult get() {
    return row();
  }
}

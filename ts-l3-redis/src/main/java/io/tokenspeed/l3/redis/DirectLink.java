package io.tokenspeed.l3.redis;

import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.channels.SocketChannel;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * One plain TCP connection of the direct path: a blocking {@link SocketChannel} to one server, its
 * {@link CommandEncoder} and {@link ReplyDecoder}, and the lease that says who uses it.
 *
 * <pre>
 *   holder     meaning                       who moves it
 *   null       idle (in its node's pool)     lease(): a call takes it (CAS null → call)
 *   a Lease    one call's, until deadline    release(): the call gives it back (CAS call → null)
 *   EXPIRED    the deadline passed mid-use   expire(): the reaper (CAS call → EXPIRED), then closes
 *   CLOSED     closed for good               close(): whoever drops it
 * </pre>
 *
 * <p><b>Why blocking I/O and a reaper.</b> All reads and writes happen on the thread of the store
 * call that leased the link, in blocking mode: a reply wakes that thread directly, with no event
 * loop to hand off to and no readiness selection. A blocking channel has no read timeout, so the
 * deadline is enforced from outside: the direct path's reaper thread closes the channel of a link
 * whose lease has expired, which ends the blocked read or write with an exception on the calling
 * thread. The lease is compared and set, never just written, so a reaper that looked at a link just
 * before its call released it cannot close it under the next call.
 *
 * <p>A link whose call failed in any way the decoder cannot prove harmless (an I/O error, a
 * timeout, a malformed reply, unread bytes) is closed, never reused: the next command on it could
 * be answered with an older command's reply.
 */
final class DirectLink {

  /** Who holds a link, with the deadline of that use. */
  interface Lease {
    long deadlineNs();
  }

  private static final Object EXPIRED = new Object();
  private static final Object CLOSED = new Object();
  private static final VarHandle HOLDER;

  static {
    try {
      HOLDER = MethodHandles.lookup().findVarHandle(DirectLink.class, "holder", Object.class);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  /** An error reply to the handshake (AUTH): the server's own words, e.g. {@code WRONGPASS ...}. */
  static final class HandshakeRefused extends IOException {
    HandshakeRefused(String reply) {
      super(reply);
    }
  }

  final DirectPath.Node node;
  final ReplyDecoder replies;
  final CommandEncoder commands = new CommandEncoder();
  private final SocketChannel channel;

  /** Null, a Lease, EXPIRED or CLOSED (see the class comment). */
  @SuppressWarnings("unused") // through HOLDER
  private volatile Object holder;

  /** Whether the current lease took this link from the pool (it may have gone stale there). */
  boolean reused;

  /** The decoder's byte count when the current lease began. */
  long bytesReadAtLease;

  private DirectLink(DirectPath.Node node, SocketChannel channel, Lease lease) {
    this.node = node;
    this.channel = channel;
    this.replies = new ReplyDecoder(channel, node.name());
    this.holder = lease;
  }

  /**
   * Connects to {@code node} and authenticates when a password is set, leased to {@code lease}
   * throughout, so that the reaper bounds the handshake by the lease's deadline. {@code register}
   * makes the link visible to the reaper before anything can block.
   */
  static DirectLink open(
      DirectPath.Node node, RedisStoreSettings settings, Lease lease, Consumer<DirectLink> register)
      throws IOException {
    long remainingMs = TimeUnit.NANOSECONDS.toMillis(lease.deadlineNs() - System.nanoTime());
    int connectMs = (int) Math.max(1, Math.min(settings.connectTimeoutMs(), remainingMs));
    SocketChannel channel = SocketChannel.open();
    DirectLink link = null;
    try {
      channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
      channel.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
      channel.socket().connect(new InetSocketAddress(node.host(), node.port()), connectMs);
      link = new DirectLink(node, channel, lease);
      register.accept(link);
      if (settings.password() != null) {
        link.commands.auth(settings.username(), settings.password());
        link.commands.send(channel);
        ReplyDecoder.Kind kind = link.replies.next();
        if (kind == ReplyDecoder.Kind.ERROR) {
          throw new HandshakeRefused(link.replies.text());
        }
        if (kind != ReplyDecoder.Kind.SIMPLE || !"OK".equals(link.replies.text())) {
          throw new ReplyDecoder.ProtocolException(
              "redis at " + node.name() + " answered AUTH with " + kind + ", not +OK");
        }
      }
      return link;
    } catch (IOException | RuntimeException | Error e) {
      if (link != null) {
        link.close();
      } else {
        closeQuietly(channel);
      }
      throw e;
    }
  }

  SocketChannel channel() {
    return channel;
  }

  /** Takes an idle link for {@code lease}; false when it is not idle (closed or expired). */
  boolean lease(Lease lease) {
    if (!HOLDER.compareAndSet(this, (Object) null, (Object) lease)) {
      return false;
    }
    bytesReadAtLease = replies.bytesRead();
    return true;
  }

  /** Ends {@code lease}'s use; false when the reaper expired it first (the link is closed). */
  boolean release(Lease lease) {
    return HOLDER.compareAndSet(this, (Object) lease, (Object) null);
  }

  /** Whether the reaper closed this link because its lease's deadline passed. */
  boolean expired() {
    return HOLDER.getVolatile(this) == EXPIRED;
  }

  /** Whether the link is closed (expired or dropped). */
  boolean isClosed() {
    Object h = HOLDER.getVolatile(this);
    return h == EXPIRED || h == CLOSED || !channel.isOpen();
  }

  /**
   * The reaper's step: when the link is held by a lease whose deadline has passed at {@code nowNs},
   * marks it expired and closes its channel (ending any blocked read or write). Returns whether it
   * did.
   */
  boolean expireIfDue(long nowNs) {
    Object h = HOLDER.getVolatile(this);
    if (h instanceof Lease lease
        && nowNs - lease.deadlineNs() >= 0
        && HOLDER.compareAndSet(this, h, EXPIRED)) {
      closeQuietly(channel);
      return true;
    }
    return false;
  }

  /** Closes the link for good. Idempotent; an expired link stays marked expired. */
  void close() {
    Object h;
    do {
      h = HOLDER.getVolatile(this);
    } while (h != EXPIRED && h != CLOSED && !HOLDER.compareAndSet(this, h, CLOSED));
    closeQuietly(channel);
    node.path().forget(this);
  }

  private static void closeQuietly(SocketChannel channel) {
    try {
      channel.close();
    } catch (IOException e) {
      // closing a socket that is already broken: nothing to do
    }
  }

  @Override
  public String toString() {
    return "DirectLink[" + node.name() + ", holder=" + HOLDER.getVolatile(this) + "]";
  }
}

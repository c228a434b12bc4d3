package io.tokenspeed.control;

import java.net.InetSocketAddress;
import java.util.List;

/**
 * One rank's control-plane settings: where every cache-owning rank of the replica listens, which of
 * them this rank is, the replica's shared secret, and the bounds of the exchange and of the
 * agreement window.
 *
 * <p>Three settings must be equal on every rank, because the agreement's verdicts depend on them:
 * {@code maxFrameBytes} and the agreement window ({@link #windowOperations}, {@link #windowKeys}).
 * The handshake exchanges and compares them, together with the replica id, the world size and the
 * protocol version, and each side proves that it holds the same {@link ReplicaSecret}. The timeouts
 * are local and may differ.
 *
 * <p><b>The agreement window follows the credits.</b> The window must hold every operation that
 * some owners have reported and others not yet. An operation enters it only after the scheduler
 * issued it, charging an operation credit, and the scheduler returns that credit only when it
 * applies the operation's agreed fact, which the agreement produces as the operation leaves the
 * window. Every rank runs the same scheduler on the same agreed rounds, so after any round the
 * window holds a subset of the operations whose credits are charged: no more than the credits allow
 * in flight, and no more keys than they carry ({@link InFlightBound}). A window of exactly that
 * size therefore needs no margin, and one that overflows proves a broken replica, not load. Left at
 * 0 (the default), {@code maxPendingOperations} and {@code maxPendingKeys} are sized from the
 * credits when the engine starts ({@link #withWindowFor}); set explicitly, they must hold them. A
 * mesh that nothing sized (a replica without L3, whose owners report no operations) holds {@link
 * #UNSIZED_MAX_PENDING_OPERATIONS} and {@link #UNSIZED_MAX_PENDING_KEYS}.
 *
 * @param replicaId the replica (DP rank) whose owners form this mesh; every peer must name the same
 * @param rank this rank's index into {@code addresses} (the attention-TP rank); rank 0 leads
 * @param addresses where each rank listens, indexed by rank; the size is the world size
 * @param secret the replica's shared secret, proven (never sent) in every handshake
 * @param roundTimeoutMs how long one exchange waits for a silent peer before it fails, naming it;
 *     it must exceed the largest skew between ranks entering a round (a forward pass included)
 * @param connectTimeoutMs how long mesh setup waits for every peer to connect and shake hands
 * @param handshakeTimeoutMs how long an accepted connection may take to complete its handshake
 *     before it is closed as not a peer (setup itself goes on until {@code connectTimeoutMs})
 * @param maxFrameBytes the largest frame this rank sends or accepts, header and checksum included;
 *     at least {@link #MIN_MAX_FRAME_BYTES}
 * @param maxPendingOperations the most operations the agreement may retain with partial reports; 0
 *     to size it from the storage credits
 * @param maxPendingKeys the most keys, summed over those operations, it may retain; 0 to size it
 *     from the storage credits
 * @param tls mutual TLS on every mesh connection, or null for plain TCP (see {@link ControlTls})
 */
public record ControlConfig(
    long replicaId,
    int rank,
    List<InetSocketAddress> addresses,
    ReplicaSecret secret,
    long roundTimeoutMs,
    long connectTimeoutMs,
    long handshakeTimeoutMs,
    int maxFrameBytes,
    int maxPendingOperations,
    long maxPendingKeys,
    ControlTls tls) {

  /** Default {@code roundTimeoutMs}: 30 s, well beyond a long forward pass. */
  public static final long DEFAULT_ROUND_TIMEOUT_MS = 30_000;

  /**
   * Default {@code connectTimeoutMs}: 120 s, for ranks of one replica starting at different times.
   */
  public static final long DEFAULT_CONNECT_TIMEOUT_MS = 120_000;

  /**
   * Default {@code handshakeTimeoutMs}: 5 s. A peer sends its HELLO right after connecting, so only
   * something that is not a peer (a health check, a port scan) stays silent that long.
   */
  public static final long DEFAULT_HANDSHAKE_TIMEOUT_MS = 5_000;

  /** Default {@code maxFrameBytes}: 16 MiB, about 670,000 single-key completion records. */
  public static final int DEFAULT_MAX_FRAME_BYTES = 16 << 20;

  /**
   * Default {@code maxPendingOperations}: 0, the operations the storage credits let be in flight
   * ({@code async.max_operations}), once the engine sizes the window ({@link #withWindowFor}).
   */
  public static final int DEFAULT_MAX_PENDING_OPERATIONS = 0;

  /**
   * Default {@code maxPendingKeys}: 0, the keys the storage credits let be in flight, once the
   * engine sizes the window ({@link #withWindowFor}).
   */
  public static final long DEFAULT_MAX_PENDING_KEYS = 0;

  /**
   * The operations a window holds when nothing sized it from storage credits: 65,536, for a mesh
   * whose owners report no storage operations (a replica without L3) or carry their own records.
   */
  public static final int UNSIZED_MAX_PENDING_OPERATIONS = 65_536;

  /** The keys a window holds when nothing sized it from storage credits: 4,194,304. */
  public static final long UNSIZED_MAX_PENDING_KEYS = 4L << 20;

  /** The largest supported world size (ranks of one replica in one mesh). */
  public static final int MAX_WORLD_SIZE = 1024;

  /**
   * The smallest {@code maxFrameBytes} accepted: 32 KiB, room for a handshake, the longest error
   * report ({@link FrameDescriptor#MAX_ERROR_REPORT_FRAME_BYTES}) and a report with the largest
   * status and events but no records ({@link FrameDescriptor#MAX_BARE_REPORT_FRAME_BYTES}), so that
   * a rank's status and events alone never make its report too long for a frame.
   */
  public static final int MIN_MAX_FRAME_BYTES = 32 << 10;

  public ControlConfig {
    if (replicaId < 0) {
      throw new IllegalArgumentException("replica_id=" + replicaId + " must be >= 0");
    }
    if (addresses == null || addresses.isEmpty() || addresses.size() > MAX_WORLD_SIZE) {
      throw new IllegalArgumentException(
          "addresses has "
              + (addresses == null ? "none" : addresses.size() + " entries")
              + ", must have 1.."
              + MAX_WORLD_SIZE);
    }
    for (int r = 0; r < addresses.size(); r++) {
      if (addresses.get(r) == null) {
        throw new IllegalArgumentException("addresses[" + r + "] is missing");
      }
    }
    addresses = List.copyOf(addresses);
    if (rank < 0 || rank >= addresses.size()) {
      throw new IllegalArgumentException(
          "rank=" + rank + " must be in [0, " + addresses.size() + ")");
    }
    if (secret == null) {
      throw new IllegalArgumentException(
          "secret is missing: every rank of a replica needs the replica's secret"
              + " (ReplicaSecret.fromEnvironment reads "
              + ReplicaSecret.FILE_ENV
              + " or "
              + ReplicaSecret.ENV
              + ")");
    }
    if (roundTimeoutMs < 1) {
      throw new IllegalArgumentException("round_timeout_ms=" + roundTimeoutMs + " must be >= 1");
    }
    if (connectTimeoutMs < 1) {
      throw new IllegalArgumentException(
          "connect_timeout_ms=" + connectTimeoutMs + " must be >= 1");
    }
    if (handshakeTimeoutMs < 1) {
      throw new IllegalArgumentException(
          "handshake_timeout_ms=" + handshakeTimeoutMs + " must be >= 1");
    }
    if (maxFrameBytes < MIN_MAX_FRAME_BYTES) {
      throw new IllegalArgumentException(
          "max_frame_bytes=" + maxFrameBytes + " must be >= " + MIN_MAX_FRAME_BYTES);
    }
    if (maxPendingOperations < 0) {
      throw new IllegalArgumentException(
          "max_pending_operations="
              + maxPendingOperations
              + " must be >= 0 (0: sized from the storage credits)");
    }
    if (maxPendingKeys < 0) {
      throw new IllegalArgumentException(
          "max_pending_keys="
              + maxPendingKeys
              + " must be >= 0 (0: sized from the storage credits)");
    }
  }

  /** Settings over plain TCP (no {@code tls}). */
  public ControlConfig(
      long replicaId,
      int rank,
      List<InetSocketAddress> addresses,
      ReplicaSecret secret,
      long roundTimeoutMs,
      long connectTimeoutMs,
      long handshakeTimeoutMs,
      int maxFrameBytes,
      int maxPendingOperations,
      long maxPendingKeys) {
    this(
        replicaId,
        rank,
        addresses,
        secret,
        roundTimeoutMs,
        connectTimeoutMs,
        handshakeTimeoutMs,
        maxFrameBytes,
        maxPendingOperations,
        maxPendingKeys,
        null);
  }

  /** Settings with every default, for rank {@code rank} of the ranks at {@code addresses}. */
  public static ControlConfig of(
      long replicaId, int rank, List<InetSocketAddress> addresses, ReplicaSecret secret) {
    return new ControlConfig(
        replicaId,
        rank,
        addresses,
        secret,
        DEFAULT_ROUND_TIMEOUT_MS,
        DEFAULT_CONNECT_TIMEOUT_MS,
        DEFAULT_HANDSHAKE_TIMEOUT_MS,
        DEFAULT_MAX_FRAME_BYTES,
        DEFAULT_MAX_PENDING_OPERATIONS,
        DEFAULT_MAX_PENDING_KEYS,
        null);
  }

  /** The number of ranks in the mesh. */
  public int worldSize() {
    return addresses.size();
  }

  /** True for the TP leader (rank 0), whose clock is the tick and whose frontend rides along. */
  public boolean leader() {
    return rank == 0;
  }

  /**
   * The most operations the agreement retains with partial reports: {@code maxPendingOperations},
   * or {@link #UNSIZED_MAX_PENDING_OPERATIONS} while it is 0.
   */
  public int windowOperations() {
    return maxPendingOperations == 0 ? UNSIZED_MAX_PENDING_OPERATIONS : maxPendingOperations;
  }

  /**
   * The most keys of those operations the agreement retains: {@code maxPendingKeys}, or {@link
   * #UNSIZED_MAX_PENDING_KEYS} while it is 0.
   */
  public long windowKeys() {
    return maxPendingKeys == 0 ? UNSIZED_MAX_PENDING_KEYS : maxPendingKeys;
  }

  /**
   * These settings with an agreement window that holds what the storage credits let be in flight
   * (see the class comment for why exactly that much suffices): each bound left at 0 becomes the
   * credits' bound, and each one set explicitly is kept if it holds the credits' bound.
   *
   * @throws IllegalArgumentException naming the credit settings, the window they need and the
   *     configured bound, when an explicit bound is smaller
   */
  public ControlConfig withWindowFor(InFlightBound inFlight) {
    long operations =
        sized(
            maxPendingOperations,
            inFlight.operations(),
            inFlight.operationsSource(),
            "operations, control max_pending_operations=");
    long keys =
        sized(
            maxPendingKeys,
            inFlight.keys(),
            inFlight.keysSource(),
            "keys, control max_pending_keys=");
    return withWindow((int) operations, keys);
  }

  /**
   * {@code need} for a bound left at 0, else {@code configured}, refused when below {@code need}.
   */
  private static long sized(long configured, long need, String source, String whatAndField) {
    if (configured == 0) {
      return need;
    }
    if (configured < need) {
      throw new IllegalArgumentException(
          source
              + " needs an agreement window of at least "
              + need
              + " "
              + whatAndField
              + configured);
    }
    return configured;
  }

  /** These settings with {@code roundTimeoutMs} and {@code connectTimeoutMs} replaced. */
  public ControlConfig withTimeouts(long roundTimeoutMs, long connectTimeoutMs) {
    return with(
        d -> {
          d.roundTimeoutMs = roundTimeoutMs;
          d.connectTimeoutMs = connectTimeoutMs;
        });
  }

  /** These settings with {@code handshakeTimeoutMs} replaced. */
  public ControlConfig withHandshakeTimeout(long handshakeTimeoutMs) {
    return with(d -> d.handshakeTimeoutMs = handshakeTimeoutMs);
  }

  /**
   * These settings with the agreement window replaced: explicit bounds, or 0 for a bound sized from
   * the storage credits ({@link #withWindowFor}).
   */
  public ControlConfig withWindow(int maxPendingOperations, long maxPendingKeys) {
    return with(
        d -> {
          d.maxPendingOperations = maxPendingOperations;
          d.maxPendingKeys = maxPendingKeys;
        });
  }

  /** These settings with {@code maxFrameBytes} replaced. */
  public ControlConfig withMaxFrameBytes(int maxFrameBytes) {
    return with(d -> d.maxFrameBytes = maxFrameBytes);
  }

  /** These settings with another {@code secret}. */
  public ControlConfig withSecret(ReplicaSecret secret) {
    return with(d -> d.secret = secret);
  }

  /** These settings with mutual TLS on the mesh ({@code tls}), or plain TCP when null. */
  public ControlConfig withTls(ControlTls tls) {
    return with(d -> d.tls = tls);
  }

  /** A copy with the changes {@code change} makes to a draft of these settings, validated anew. */
  private ControlConfig with(java.util.function.Consumer<Draft> change) {
    Draft d = new Draft(this);
    change.accept(d);
    return d.build();
  }

  /** The components of a config being changed by one of the {@code with} methods. */
  private static final class Draft {
    final long replicaId;
    final int rank;
    final List<InetSocketAddress> addresses;
    ReplicaSecret secret;
    long roundTimeoutMs;
    long connectTimeoutMs;
    long handshakeTimeoutMs;
    int maxFrameBytes;
    int maxPendingOperations;
    long maxPendingKeys;
    ControlTls tls;

    Draft(ControlConfig c) {
      replicaId = c.replicaId;
      rank = c.rank;
      addresses = c.addresses;
      secret = c.secret;
      roundTimeoutMs = c.roundTimeoutMs;
      connectTimeoutMs = c.connectTimeoutMs;
      handshakeTimeoutMs = c.handshakeTimeoutMs;
      maxFrameBytes = c.maxFrameBytes;
      maxPendingOperations = c.maxPendingOperations;
      maxPendingKeys = c.maxPendingKeys;
      tls = c.tls;
    }

    ControlConfig build() {
      return new ControlConfig(
          replicaId,
          rank,
          addresses,
          secret,
          roundTimeoutMs,
          connectTimeoutMs,
          handshakeTimeoutMs,
          maxFrameBytes,
          maxPendingOperations,
          maxPendingKeys,
          tls);
    }
  }
}

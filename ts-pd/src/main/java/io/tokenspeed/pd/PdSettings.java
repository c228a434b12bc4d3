package io.tokenspeed.pd;

/**
 * The settings of one KV-transfer endpoint ({@link KvSender} or {@link KvReceiver}), validated once
 * here and read by every connection of the endpoint. The timings are the protocol's (docs/pd.md,
 * "The KV transfer"); tests shorten them. The limits bound what an authenticated peer can make this
 * process allocate: a BOOTSTRAP's body is at most {@code 47 + 4 * maxPromptTokens + 4 *
 * maxCacheGroups} bytes, a DATA frame at most {@code 15 + maxBlockBytes}, and a connection holds at
 * most {@code maxRoomsPerConnection} rooms; before the handshake completes only HELLO- and
 * PROOF-sized frames are read.
 *
 * @param handshakeTimeoutMs how long a connection may take from accept (or connect) to the second
 *     PROOF; a connection that has not completed it by then is closed
 * @param bootstrapDeadlineMs how long a BOOTSTRAP waits for the engine's registration of its room
 *     (then REFUSE {@code unknown room}), and a registration for its BOOTSTRAP (then its landing
 *     fails with {@link PdException.Kind#TIMEOUT})
 * @param pingIntervalMs a connection with an open room that wrote nothing for this long sends PING
 * @param silenceTimeoutMs a connection with an open room that read nothing for this long fails
 *     every room on it; must exceed {@code pingIntervalMs}, or a live peer's PINGs arrive too late
 * @param maxRoomsPerConnection open rooms one connection carries; further BOOTSTRAPs are refused
 *     with reason {@code busy}
 * @param maxPromptTokens the longest prompt a BOOTSTRAP may carry
 * @param maxCacheGroups the most cache groups a layout may have
 * @param maxBlocksPerGroup the most blocks an ACK may reserve in one cache group
 * @param maxBlockBytes the largest block (bytes per block of one cache group)
 * @param maxConnections the most connections a receiver holds at once, those still in their
 *     handshake included: one more is closed at once, unread, and counted as refused
 */
public record PdSettings(
    long handshakeTimeoutMs,
    long bootstrapDeadlineMs,
    long pingIntervalMs,
    long silenceTimeoutMs,
    int maxRoomsPerConnection,
    int maxPromptTokens,
    int maxCacheGroups,
    int maxBlocksPerGroup,
    int maxBlockBytes,
    int maxConnections) {

  /** Default {@code handshakeTimeoutMs}: 10 s. */
  public static final long DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000;

  /** Default {@code bootstrapDeadlineMs}: 30 s (docs/pd.md). */
  public static final long DEFAULT_BOOTSTRAP_DEADLINE_MS = 30_000;

  /** Default {@code pingIntervalMs}: 1 s (docs/pd.md). */
  public static final long DEFAULT_PING_INTERVAL_MS = 1_000;

  /** Default {@code silenceTimeoutMs}: 10 s (docs/pd.md). */
  public static final long DEFAULT_SILENCE_TIMEOUT_MS = 10_000;

  /** Default {@code maxRoomsPerConnection}: 64 (docs/pd.md). */
  public static final int DEFAULT_MAX_ROOMS_PER_CONNECTION = 64;

  /** Default {@code maxPromptTokens}: 1,048,576 (a 4 MiB BOOTSTRAP). */
  public static final int DEFAULT_MAX_PROMPT_TOKENS = 1 << 20;

  /** Default {@code maxCacheGroups}: 64. */
  public static final int DEFAULT_MAX_CACHE_GROUPS = 64;

  /** Default {@code maxBlocksPerGroup}: 1,048,576. */
  public static final int DEFAULT_MAX_BLOCKS_PER_GROUP = 1 << 20;

  /** Default {@code maxBlockBytes}: 64 MiB. */
  public static final int DEFAULT_MAX_BLOCK_BYTES = 64 << 20;

  /**
   * Default {@code maxConnections}: 256 connections a receiver holds at once, those still in their
   * handshake included (a prefill engine keeps one per decode engine).
   */
  public static final int DEFAULT_MAX_CONNECTIONS = 256;

  /** Upper bound of every timing: one hour. */
  public static final long MAX_TIMING_MS = 3_600_000;

  /** Upper bound of {@code maxPromptTokens}: 16 M tokens (a 64 MiB BOOTSTRAP). */
  public static final int MAX_PROMPT_TOKENS = 1 << 24;

  /** Upper bound of {@code maxCacheGroups}: a u16 on the wire. */
  public static final int MAX_CACHE_GROUPS = 0xFFFF;

  /** Upper bound of {@code maxBlockBytes}: 1 GiB. */
  public static final int MAX_BLOCK_BYTES = 1 << 30;

  public PdSettings {
    check("handshake_timeout_ms", handshakeTimeoutMs, 1, MAX_TIMING_MS);
    check("bootstrap_deadline_ms", bootstrapDeadlineMs, 1, MAX_TIMING_MS);
    check("ping_interval_ms", pingIntervalMs, 1, MAX_TIMING_MS);
    check("silence_timeout_ms", silenceTimeoutMs, pingIntervalMs + 1, MAX_TIMING_MS);
    check("max_rooms_per_connection", maxRoomsPerConnection, 1, 1 << 16);
    check("max_prompt_tokens", maxPromptTokens, 1, MAX_PROMPT_TOKENS);
    check("max_cache_groups", maxCacheGroups, 1, MAX_CACHE_GROUPS);
    check("max_blocks_per_group", maxBlocksPerGroup, 1, 1 << 24);
    check("max_block_bytes", maxBlockBytes, 1, MAX_BLOCK_BYTES);
    check("max_connections", maxConnections, 1, 1 << 16);
  }

  /** The defaults of docs/pd.md. */
  public static PdSettings defaults() {
    return new PdSettings(
        DEFAULT_HANDSHAKE_TIMEOUT_MS,
        DEFAULT_BOOTSTRAP_DEADLINE_MS,
        DEFAULT_PING_INTERVAL_MS,
        DEFAULT_SILENCE_TIMEOUT_MS,
        DEFAULT_MAX_ROOMS_PER_CONNECTION,
        DEFAULT_MAX_PROMPT_TOKENS,
        DEFAULT_MAX_CACHE_GROUPS,
        DEFAULT_MAX_BLOCKS_PER_GROUP,
        DEFAULT_MAX_BLOCK_BYTES,
        DEFAULT_MAX_CONNECTIONS);
  }

  /** These settings with the four timings replaced (tests shorten them). */
  public PdSettings withTimingsMs(
      long handshakeTimeoutMs,
      long bootstrapDeadlineMs,
      long pingIntervalMs,
      long silenceTimeoutMs) {
    return new PdSettings(
        handshakeTimeoutMs,
        bootstrapDeadlineMs,
        pingIntervalMs,
        silenceTimeoutMs,
        maxRoomsPerConnection,
        maxPromptTokens,
        maxCacheGroups,
        maxBlocksPerGroup,
        maxBlockBytes,
        maxConnections);
  }

  /** These settings with {@code maxConnections} replaced. */
  public PdSettings withMaxConnections(int maxConnections) {
    return new PdSettings(
        handshakeTimeoutMs,
        bootstrapDeadlineMs,
        pingIntervalMs,
        silenceTimeoutMs,
        maxRoomsPerConnection,
        maxPromptTokens,
        maxCacheGroups,
        maxBlocksPerGroup,
        maxBlockBytes,
        maxConnections);
  }

  /** These settings with {@code maxRoomsPerConnection} replaced. */
  public PdSettings withMaxRoomsPerConnection(int maxRoomsPerConnection) {
    return new PdSettings(
        handshakeTimeoutMs,
        bootstrapDeadlineMs,
        pingIntervalMs,
        silenceTimeoutMs,
        maxRoomsPerConnection,
        maxPromptTokens,
        maxCacheGroups,
        maxBlocksPerGroup,
        maxBlockBytes,
        maxConnections);
  }

  /** These settings with the four size limits replaced. */
  public PdSettings withLimits(
      int maxPromptTokens, int maxCacheGroups, int maxBlocksPerGroup, int maxBlockBytes) {
    return new PdSettings(
        handshakeTimeoutMs,
        bootstrapDeadlineMs,
        pingIntervalMs,
        silenceTimeoutMs,
        maxRoomsPerConnection,
        maxPromptTokens,
        maxCacheGroups,
        maxBlocksPerGroup,
        maxBlockBytes,
        maxConnections);
  }

  /** The period of an endpoint's timer: a quarter of the shortest timing, within [1, 250] ms. */
  long tickMs() {
    long shortest = Math.min(Math.min(handshakeTimeoutMs, pingIntervalMs), silenceTimeoutMs);
    return Math.clamp(shortest / 4, 1, 250);
  }

  /** The longest BOOTSTRAP frame (the length field's value) these limits accept. */
  long maxBootstrapLength() {
    return PdFrameDescriptor.BOOTSTRAP_FIXED_LENGTH + 4L * maxPromptTokens + 4L * maxCacheGroups;
  }

  private static void check(String field, long value, long min, long max) {
    if (value < min || value > max) {
      throw new IllegalArgumentException(
          "pd setting " + field + "=" + value + " is out of range [" + min + ", " + max + "]");
    }
  }
}

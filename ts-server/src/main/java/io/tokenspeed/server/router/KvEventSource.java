package io.tokenspeed.server.router;

import java.util.Objects;

/**
 * Where a backend publishes its KV events, as its {@code GET /kv-events} says:
 *
 * <pre>
 *   {"endpoint": "tcp://HOST:PORT", "replay_endpoint": "tcp://HOST:PORT", "topic": "...",
 *    "block_size": P, "dp_rank": N, "hash": "sha256-page-prefix-u64"}
 * </pre>
 *
 * @param endpoint the ZeroMQ PUB socket's address, {@code tcp://HOST:PORT}
 * @param replayEndpoint the ROUTER socket that replays retained batches, or null when it has none
 * @param topic the topic its batches carry (a SUB subscribes to it; empty: every topic)
 * @param blockSize P, the tokens of one block (a page)
 * @param dpRank the backend's data-parallel rank, which its batches carry
 */
record KvEventSource(
    String endpoint, String replayEndpoint, String topic, int blockSize, int dpRank) {

  /** The only block hash this router computes: the first 8 bytes of the engine's page hash. */
  static final String HASH = "sha256-page-prefix-u64";

  /** The largest block size taken (the engine's page bound). */
  static final int MAX_BLOCK_SIZE = io.tokenspeed.core.CacheLayout.MAX_PREFIX_GRANULARITY;

  KvEventSource {
    Objects.requireNonNull(endpoint, "endpoint");
    Objects.requireNonNull(topic, "topic");
    if (blockSize < 1 || blockSize > MAX_BLOCK_SIZE) {
      throw new IllegalArgumentException(
          "block_size=" + blockSize + " must be in [1, " + MAX_BLOCK_SIZE + "]");
    }
  }
}

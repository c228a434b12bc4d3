/**
 * The KV events on the wire (docs/kv-events.md): vLLM's format — a ZeroMQ PUB socket sending {@code
 * [topic, 8-byte big-endian sequence number, msgpack payload]}, and a ROUTER socket replaying the
 * batches retained since a sequence number — fed by the engine's {@link
 * io.tokenspeed.engine.kvevents.KvEventSink} through a bounded queue that never blocks the round.
 */
package io.tokenspeed.server.kvevents;

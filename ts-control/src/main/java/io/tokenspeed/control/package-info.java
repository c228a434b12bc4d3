/**
 * The control plane of one replica's cache-owning ranks (attention-TP owners).
 *
 * <p>Every event-loop round, each rank calls {@link io.tokenspeed.control.RelayExchange#exchange}
 * once with its {@link io.tokenspeed.control.LocalReport} — monotonic clock, the executor's
 * pressure observations and newly completed storage records, the leader's frontend messages, or the
 * reason its poll was invalid — and receives the same {@link
 * io.tokenspeed.core.control.AgreedRound} as every other rank: the leader's clock as the tick,
 * MAX-reduced pressure, the leader's frontend messages, and the operations every owner has now
 * reported, reduced by {@link io.tokenspeed.control.Agreement}. The round is then applied at the
 * loop head in the order fixed by {@link io.tokenspeed.core.control.LoopHeadFeedback}.
 *
 * <p>The transport is a TCP mesh ({@code Mesh}); the wire format is drawn in {@link
 * io.tokenspeed.control.FrameDescriptor}; {@link io.tokenspeed.control.FrameDecoder} rejects
 * malformed frames with a value, never an exception. See docs/control-plane.md.
 *
 * <p>This package depends on ts-core only: it never sees the scheduler, the cache or the executor.
 */
package io.tokenspeed.control;

/**
 * The KV transfer of prefill/decode disaggregation (docs/pd.md, "The KV transfer").
 *
 * <p>A prefill engine's {@link io.tokenspeed.pd.KvSender} opens a room per request on the decode
 * engine's {@link io.tokenspeed.pd.KvReceiver} ({@link io.tokenspeed.pd.KvSender#bootstrap}), and
 * streams the prompt's KV blocks from its Host segments once the decode side acknowledged; the
 * decode side matches the room with the engine's {@link io.tokenspeed.pd.KvReceiver#expect
 * registration}, reserves Host staging blocks through the engine's {@link
 * io.tokenspeed.pd.Landing}, reads each block straight into them, and hands them over once DONE's
 * checksum matched ({@link io.tokenspeed.pd.Landed}). The wire format is drawn in {@link
 * io.tokenspeed.pd.PdFrameDescriptor}; every connection proves the {@link
 * io.tokenspeed.pd.PdSecret} both ways first.
 *
 * <p>This package depends on ts-core and ts-control (for the secret's HMAC) only: it never sees the
 * engine, which plugs in through {@link io.tokenspeed.pd.Landing}, {@link
 * io.tokenspeed.pd.Destinations} and the stages of {@link io.tokenspeed.pd.Transfer} and {@link
 * io.tokenspeed.pd.Registration}.
 */
package io.tokenspeed.pd;

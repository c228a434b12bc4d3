/**
 * The engine's KV block events (docs/kv-events.md): what its tiers gain and lose, page by page, as
 * a router reads them. The engine hands each round's events, in order, to a {@link
 * io.tokenspeed.engine.kvevents.KvEventSink} it was started with; the sink's owner (the server)
 * puts them on the wire. Nothing here knows a transport.
 */
package io.tokenspeed.engine.kvevents;

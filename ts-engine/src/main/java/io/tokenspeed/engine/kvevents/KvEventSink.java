package io.tokenspeed.engine.kvevents;

import java.util.List;

/**
 * Where an engine's KV events go ({@code EngineSettings.Builder.kvEvents}). The engine calls it on
 * its loop thread at the end of every round that had events, with that round's events in the order
 * they happened, and never with an empty list. It runs inside the round: it must hand the batch off
 * and return at once, never block and never throw (a throw is logged and the batch is lost). The
 * events are immutable and may be read on any thread afterwards.
 */
@FunctionalInterface
public interface KvEventSink {

  /** One round's events, in order. */
  void publish(List<KvEvent> batch);
}

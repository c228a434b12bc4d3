package io.tokenspeed.core.control;

import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.PressureSnapshot;

/**
 * The event loop's head feedback point: where one {@link AgreedRound} enters the scheduler. {@link
 * AgreedRound#applyTo(LoopHeadFeedback)} calls these handlers in the order of the contract below,
 * on the loop thread, once per round — idle and frozen rounds included.
 *
 * <pre>
 *   1. onTick          the agreed tick (the TP leader's clock) and the MAX-reduced pressure;
 *                      soft deadlines and Ready-hold expiry are processed here
 *   2. onNewRequest /  the leader's frontend messages, in the order the leader drained them
 *      onCancel        (a request created and cancelled in one round is created, then cancelled)
 *   3. onCompletion    agreed completion facts, in ascending operation id
 * </pre>
 *
 * <p>Why this order: a read whose soft deadline passed at this tick, or whose request the client
 * cancelled this round, is detached before its completion fact is applied, so an expired or
 * detached read can never publish a late result (l3-async-design "Completion agreement and
 * ordering", "Client cancellation"). Every rank receives identical rounds and applies them in this
 * order, so every rank's scheduler stays in the same state and builds the same plans.
 */
public interface LoopHeadFeedback {

  /** Step 1: the agreed tick and pressure of round {@code round}. */
  void onTick(long round, long tickNs, PressureSnapshot pressure);

  /** Step 2: a new request from the leader's frontend. */
  void onNewRequest(FrontendMessage message);

  /** Step 2: a client cancellation from the leader's frontend. */
  void onCancel(long requestId);

  /** Step 3: an operation that every owner has reported, reduced to its agreed fact. */
  void onCompletion(AgreedCompletion completion);
}

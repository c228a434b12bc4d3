package io.tokenspeed.pd;

import java.util.concurrent.CompletionStage;

/**
 * The decode engine's side of landing a room, which the {@link KvReceiver} calls once a BOOTSTRAP
 * and the engine's {@link KvReceiver#expect registration} of the same room have both arrived.
 */
@FunctionalInterface
public interface Landing {

  /**
   * Reserves the Host staging blocks the room's KV lands in. Called on a receiver thread; it must
   * not block: the engine reserves on its own thread and completes the stage from there.
   *
   * <p>A stage completed exceptionally refuses the room: the prefill side reads REFUSE with the
   * exception's message as the reason (for example a foreign identity digest, or no room in the
   * cache), and the registration's landing fails with {@link PdException.Kind#REFUSED}. A
   * completion after the room was cancelled is released by the receiver at once.
   *
   * @param room the room id the router chose
   * @param bootstrap the prompt, identity and layout the prefill engine sent
   * @return the reserved blocks, whose shape must match {@code bootstrap}'s layout (else the room
   *     is refused and they are released)
   */
  CompletionStage<Destinations> reserve(long room, Bootstrap bootstrap);
}

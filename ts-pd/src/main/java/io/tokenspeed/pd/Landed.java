package io.tokenspeed.pd;

/**
 * A room whose KV has landed: every reserved block's bytes arrived and DONE's CRC32C matched them.
 * The decode engine copies the blocks Host to Device, then calls {@link #acknowledge}, which writes
 * RECEIVED: the prefill engine's transport fence, after which it frees the request.
 *
 * <p><b>Ownership.</b> From the moment {@link Registration#landed} completes, the {@link
 * Destinations} are the engine's: the receiver never writes or releases them again, whatever
 * happens to the room afterwards (the prefill side's cancel, the connection's failure, the engine's
 * own {@link Registration#cancel}). The engine releases them when done with them.
 */
public final class Landed {

  private final ReceiverRoom room;
  private final DoneInfo done;
  private final Destinations destinations;

  Landed(ReceiverRoom room, DoneInfo done, Destinations destinations) {
    this.room = room;
    this.done = done;
    this.destinations = destinations;
  }

  /** The room id. */
  public long room() {
    return room.id;
  }

  /** What the BOOTSTRAP carried. */
  public Bootstrap bootstrap() {
    return room.bootstrap;
  }

  /** The first token the prefill engine sampled. */
  public int firstToken() {
    return done.firstToken();
  }

  /** The prompt's cached tokens by source, as the prefill engine reported them. */
  public CachedTokens cachedTokens() {
    return done.cachedTokens();
  }

  /** The first token's log probabilities, or null when the prefill engine sent none. */
  public FirstLogprobs logprobs() {
    return done.logprobs();
  }

  /** The blocks, now the engine's (see the class comment). */
  public Destinations destinations() {
    return destinations;
  }

  /**
   * Writes RECEIVED, ending the room: the prefill engine may free its copy. Call it once the landed
   * bytes are no longer needed from the prefill side (the engine's own copies fenced).
   *
   * @return true when RECEIVED was queued; false when the room had ended meanwhile (the prefill
   *     side cancelled, the engine cancelled, or the connection failed), or on a second call. The
   *     landed bytes are intact either way; the destinations stay the engine's.
   */
  public boolean acknowledge() {
    return room.receiver.acknowledge(room);
  }

  @Override
  public String toString() {
    return "Landed[room=" + room.id + ", first_token=" + done.firstToken() + "]";
  }
}

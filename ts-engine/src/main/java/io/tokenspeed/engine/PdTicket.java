package io.tokenspeed.engine;

import java.net.InetSocketAddress;
import java.util.Objects;

/**
 * The disaggregated half of a request a router sent ({@link Engine#submit(int[],
 * io.tokenspeed.model.sampling.SamplingParams, int, PdTicket)}): both halves carry the same room,
 * which the KV transfer matches on the decode engine.
 */
public sealed interface PdTicket {

  /**
   * How the error of a decode half begins when no prefill engine sent the room's BOOTSTRAP within
   * the bootstrap deadline (a server answers it as a gateway timeout, any other transfer failure as
   * a bad gateway).
   */
  String PREFILL_NEVER_CAME = "no prefill engine sent the room within the bootstrap deadline";

  /** The room id the router chose for the request (non-zero). */
  long room();

  /**
   * The prefill half: compute the prompt and the first token, and send them to the decode engine
   * whose KV endpoint is {@code decode}.
   */
  record Prefill(long room, InetSocketAddress decode) implements PdTicket {
    public Prefill {
      checkRoom(room);
      Objects.requireNonNull(decode, "decode");
    }
  }

  /**
   * The decode half: land the prompt's KV that a prefill engine sends for the room, then decode.
   */
  record Decode(long room) implements PdTicket {
    public Decode {
      checkRoom(room);
    }
  }

  private static void checkRoom(long room) {
    if (room == 0) {
      throw new IllegalArgumentException("room=0: a room id is non-zero");
    }
  }
}

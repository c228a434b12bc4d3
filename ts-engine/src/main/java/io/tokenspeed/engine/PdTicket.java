package io.tokenspeed.engine;

import java.net.InetSocketAddress;
import java.util.List;
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
   * The prefill half: compute the prompt and the first token, and send them to the decode replica
   * whose ranks' KV endpoints are {@code decodeRanks}, in rank order (one for a decode engine of
   * one rank).
   */
  record Prefill(long room, List<InetSocketAddress> decodeRanks) implements PdTicket {
    public Prefill {
      checkRoom(room);
      Objects.requireNonNull(decodeRanks, "decodeRanks");
      decodeRanks = List.copyOf(decodeRanks);
      if (decodeRanks.isEmpty()) {
        throw new IllegalArgumentException(
            "a prefill half needs the decode replica's KV endpoints");
      }
    }

    /** The prefill half for a decode engine of one rank at {@code decode}. */
    public Prefill(long room, InetSocketAddress decode) {
      this(room, List.of(Objects.requireNonNull(decode, "decode")));
    }
  }

  /**
   * The decode half: land the prompt's KV that a prefill replica of {@code prefillRanks} ranks
   * sends for the room, then decode.
   */
  record Decode(long room, int prefillRanks) implements PdTicket {
    public Decode {
      checkRoom(room);
      if (prefillRanks < 1) {
        throw new IllegalArgumentException(
            "prefill_ranks=" + prefillRanks + ": a prefill replica has at least one rank");
      }
    }

    /** The decode half of a request a prefill engine of one rank computes. */
    public Decode(long room) {
      this(room, 1);
    }
  }

  private static void checkRoom(long room) {
    if (room == 0) {
      throw new IllegalArgumentException("room=0: a room id is non-zero");
    }
  }
}

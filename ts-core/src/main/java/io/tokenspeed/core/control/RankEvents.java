package io.tokenspeed.core.control;

import java.util.Arrays;

/**
 * Events that happened on one rank only (for example "the KV transfer of request 17 landed on this
 * rank"), which that rank shares with every rank of its replica through the round's relay exchange:
 * opaque bytes that the engine encodes and decodes. Unlike {@link RankStatus}, events are a
 * decision input: every rank applies the agreed consequences of every rank's events, so they travel
 * under the exchange's agreement guarantee.
 *
 * <p><b>The guarantee.</b> The events a rank puts in its report of round n appear in {@link
 * AgreedRound} n, at that rank's index of {@link AgreedRound#events()}, identical on every rank
 * that receives round n, and in no other round: never dropped from a round that is agreed, never
 * delayed to a later round, never repeated. Each rank receives each round at most once, and rounds
 * 1, 2, ... in order without a gap up to the last round it applies, so a rank that receives round n
 * sees every rank's events of round n exactly once. What a failure can do is end the exchange
 * before a round is received, and then that round's events go with it, never apart from it: when
 * any rank's report of round n is invalid (its poll failed, its records contradict the window, it
 * does not fit in a frame), every rank fails round n with the same error and no rank receives round
 * n; after a transport failure the survivors settle on a last round as the relay exchange describes
 * (every survivor that hears from another settles on the same one), and a rank receives no round
 * beyond its own. A rank that has nothing to report sends none, so an idle round's report carries
 * none.
 *
 * <p>The record copies its bytes in and out, so it is immutable and compares by content.
 *
 * @param bytes the events, at most {@link #MAX_BYTES} bytes; empty for none
 */
public record RankEvents(byte[] bytes) {

  /** The longest events a report carries. */
  public static final int MAX_BYTES = 16384;

  /** No events. */
  public static final RankEvents EMPTY = new RankEvents(new byte[0]);

  public RankEvents {
    bytes = OpaqueBytes.copy(bytes, MAX_BYTES, "rank events");
  }

  /** A copy of the bytes. */
  @Override
  public byte[] bytes() {
    return bytes.clone();
  }

  /** The events' length in bytes, without copying them. */
  public int length() {
    return bytes.length;
  }

  /** True for no events. */
  public boolean isEmpty() {
    return bytes.length == 0;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof RankEvents e && Arrays.equals(bytes, e.bytes);
  }

  @Override
  public int hashCode() {
    return Arrays.hashCode(bytes);
  }

  @Override
  public String toString() {
    return OpaqueBytes.describe("RankEvents", bytes);
  }
}

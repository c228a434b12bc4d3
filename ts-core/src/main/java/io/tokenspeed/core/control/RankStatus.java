package io.tokenspeed.core.control;

import java.util.Arrays;

/**
 * A small status one rank shares with every rank of its replica through the round's relay exchange:
 * opaque bytes (the engine encodes its L3 executor's rank-local figures in them, so that the leader
 * can export every rank's I/O). It is an observation, never an input: no scheduling or storage
 * decision may read it. A rank sends one only when it has something new, so an idle round's report
 * carries none.
 *
 * <p>The record copies its bytes in and out, so it is immutable and compares by content.
 *
 * @param bytes the status, at most {@link #MAX_BYTES} bytes; empty for none
 */
public record RankStatus(byte[] bytes) {

  /** The longest status a report carries. */
  public static final int MAX_BYTES = 1024;

  /** No status. */
  public static final RankStatus EMPTY = new RankStatus(new byte[0]);

  public RankStatus {
    bytes = OpaqueBytes.copy(bytes, MAX_BYTES, "rank status");
  }

  /** A copy of the bytes. */
  @Override
  public byte[] bytes() {
    return bytes.clone();
  }

  /** The status's length in bytes, without copying it. */
  public int length() {
    return bytes.length;
  }

  /** True for no status. */
  public boolean isEmpty() {
    return bytes.length == 0;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof RankStatus s && Arrays.equals(bytes, s.bytes);
  }

  @Override
  public int hashCode() {
    return Arrays.hashCode(bytes);
  }

  @Override
  public String toString() {
    return OpaqueBytes.describe("RankStatus", bytes);
  }
}

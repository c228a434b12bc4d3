package io.tokenspeed.core.storage;

import java.nio.ByteBuffer;

/**
 * What a restore and a recomputation cost on this replica, as the scheduler's cost model reads
 * them: the store's per-call latency and restore bandwidth (measured by the L3 executor over real
 * QUERY and GET calls) and the prefill rate of the engine's forward pass (fitted to the forward
 * times of real rounds). The TP leader measures them and sends them to every rank as an agreed
 * command, so every rank's scheduler decides with the same figures in the same round.
 *
 * <p>The prefill model: one forward of a batch costs {@code forwardNs + tokenNs × N + pairNs × Q}
 * where {@code N} is the number of tokens the batch computes and {@code Q} the attention pairs: a
 * chunk of {@code k} tokens starting at position {@code s} has {@code k·s + k(k+1)/2} (every new
 * token attends to every token before it and to itself).
 *
 * <pre>
 *   wire form (big-endian, {@link #BYTES} bytes): five IEEE-754 doubles as raw bits
 *   [storeLatencyNs][storeBytesPerSecond][forwardNs][tokenNs][pairNs]
 * </pre>
 *
 * @param storeLatencyNs the fixed cost of one store call, in nanoseconds (a QUERY's wall time)
 * @param storeBytesPerSecond the restore bandwidth of one owner's bytes; 0 while unknown
 * @param forwardNs the fixed cost of one forward pass, in nanoseconds
 * @param tokenNs the cost of one computed token, in nanoseconds
 * @param pairNs the cost of one attention pair (a new token and a token it attends to), in ns
 */
public record CostFigures(
    double storeLatencyNs,
    double storeBytesPerSecond,
    double forwardNs,
    double tokenNs,
    double pairNs) {

  /** Bytes of the wire form. */
  public static final int BYTES = 5 * Double.BYTES;

  /** Nothing measured yet. */
  public static final CostFigures UNKNOWN = new CostFigures(0, 0, 0, 0, 0);

  public CostFigures {
    check("store_latency_ns", storeLatencyNs);
    check("store_bytes_per_second", storeBytesPerSecond);
    check("forward_ns", forwardNs);
    check("token_ns", tokenNs);
    check("pair_ns", pairNs);
  }

  private static void check(String field, double v) {
    if (!(v >= 0) || Double.isInfinite(v)) {
      throw new IllegalArgumentException(field + "=" + v + " must be finite and >= 0");
    }
  }

  /** Whether the store's bandwidth was measured (or given as a prior). */
  public boolean storeKnown() {
    return storeBytesPerSecond > 0;
  }

  /** Whether the prefill rate was measured. */
  public boolean prefillKnown() {
    return forwardNs > 0 || tokenNs > 0 || pairNs > 0;
  }

  /** These figures with the store's part of {@code store}. */
  public CostFigures withStore(double latencyNs, double bytesPerSecond) {
    return new CostFigures(latencyNs, bytesPerSecond, forwardNs, tokenNs, pairNs);
  }

  /** The wire form. */
  public byte[] encode() {
    return ByteBuffer.allocate(BYTES)
        .putDouble(storeLatencyNs)
        .putDouble(storeBytesPerSecond)
        .putDouble(forwardNs)
        .putDouble(tokenNs)
        .putDouble(pairNs)
        .array();
  }

  /**
   * The figures of a wire form.
   *
   * @throws IllegalArgumentException when {@code bytes} is not {@link #BYTES} long or a value is
   *     out of range
   */
  public static CostFigures decode(byte[] bytes) {
    if (bytes.length != BYTES) {
      throw new IllegalArgumentException(
          "cost figures of " + bytes.length + " bytes, expected " + BYTES);
    }
    ByteBuffer b = ByteBuffer.wrap(bytes);
    return new CostFigures(
        b.getDouble(), b.getDouble(), b.getDouble(), b.getDouble(), b.getDouble());
  }

  /**
   * Whether {@code other} differs from these figures by more than {@code fraction} of a value in
   * any field, or in what is known: the sender's rule for when new figures are worth agreeing on.
   */
  public boolean differsFrom(CostFigures other, double fraction) {
    if (storeKnown() != other.storeKnown() || prefillKnown() != other.prefillKnown()) {
      return true;
    }
    return far(storeLatencyNs, other.storeLatencyNs, fraction)
        || far(storeBytesPerSecond, other.storeBytesPerSecond, fraction)
        || far(forwardNs, other.forwardNs, fraction)
        || far(tokenNs, other.tokenNs, fraction)
        || far(pairNs, other.pairNs, fraction);
  }

  private static boolean far(double a, double b, double fraction) {
    return Math.abs(a - b) > fraction * Math.max(Math.abs(a), Math.abs(b));
  }
}

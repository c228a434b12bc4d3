package io.tokenspeed.l3.spi;

/**
 * What a store says about one object of a call. The executor, not the store, turns these into
 * {@link io.tokenspeed.core.storage.KeyOutcome}s, retirement and health signals (architecture §8):
 *
 * <pre>
 *   result                 meaning                                   retired?   outage?
 *   Ok(bytes, existed)     exists / read bytes / created or existed  yes        no
 *   Missing                not found, before any transfer            yes        no
 *   Invalid(bytes)         exists but unusable (torn, wrong length)  yes        no
 *   Rejected(code)         per-row failure the store proves retired  yes        no
 *                          (e.g. no space for a PUT: re-offer later;
 *                          a PUT refused so is a "write refusal")
 *   Rejected(code, true)   the same, from an unwell backend (an RPC  yes        yes
 *                          to it failed or timed out)
 *   Unknown(code)          anything else: the store may still touch  NO         yes
 *                          the buffer
 * </pre>
 */
public sealed interface RowResult
    permits RowResult.Ok,
        RowResult.Missing,
        RowResult.Invalid,
        RowResult.Rejected,
        RowResult.Unknown {

  /**
   * Success. For GET, {@code bytes} is what landed; for PUT, whether the object already existed.
   */
  record Ok(long bytes, boolean alreadyExisted) implements RowResult {
    public Ok {
      if (bytes < 0) {
        throw new IllegalArgumentException("ok bytes=" + bytes + " must be >= 0");
      }
    }
  }

  /** The object does not exist; nothing was transferred. */
  record Missing() implements RowResult {}

  /**
   * The object exists but cannot be used (short, long or torn); nothing usable landed. {@code
   * bytes} is the payload length the object holds, as far as the store can tell.
   */
  record Invalid(long bytes) implements RowResult {}

  /**
   * A retired per-row failure without object evidence: the store proves it no longer touches the
   * row's buffer (it refused before any transfer, or the transfer finished and the answer still
   * failed), and the object is neither proven missing nor invalid. {@code outage} says whether the
   * failure also reports an unwell backend to the executor's health monitor (for example an RPC
   * timeout), as an ordinary refusal such as no space for a PUT does not. {@code reason} is the
   * store's own words for it, for the executor's log and {@code /ready} (a server's reply such as
   * Redis's {@code OOM ...}, the operating system's text of {@code ENOSPC}, a Mooncake code's
   * name); empty when the store has none. It never names an object key.
   */
  record Rejected(int code, boolean outage, String reason) implements RowResult {
    /** The store has no space for a PUT (Mooncake's NO_AVAILABLE_HANDLE): re-offer it later. */
    public static final int NO_SPACE = -200;

    public Rejected {
      reason = reason == null ? "" : reason;
    }

    /** A refusal that reports no outage and gives no reason. */
    public Rejected(int code) {
      this(code, false, "");
    }

    /** A refusal without a reason. */
    public Rejected(int code, boolean outage) {
      this(code, outage, "");
    }

    /** A PUT the store has no space for ({@link #NO_SPACE}, no outage), in the store's words. */
    public static Rejected noSpace(String reason) {
      return new Rejected(NO_SPACE, false, reason);
    }

    /** The reason, or {@code code=<code>} when the store gave none. */
    public String describe() {
      return reason.isEmpty() ? "code=" + code : reason;
    }
  }

  /** A failure whose retirement is unknown: the row's buffer may still be in use. */
  record Unknown(int code) implements RowResult {}

  /** Shared instance of {@link Missing}. */
  RowResult MISSING = new Missing();
}

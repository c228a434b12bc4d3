package io.tokenspeed.scheduler;

/**
 * Why a request's preparation did not ask L3; it goes straight to ordinary admission. Every reason
 * but {@link #NOT_PERMITTED} is final for the request and counted once ({@link
 * StorageCounters#bypasses}); a request not permitted tries again in the next permitted round.
 */
public enum Bypass {
  /** The local Device/Host hit already covers the reusable bound. */
  LOCAL_HIT,
  /** The longest possible extension is below {@code min_extension_tokens}. */
  SHORT_EXTENSION,
  /** Every candidate boundary needs a key confirmed missing, or nothing is missing. */
  NOTHING_TO_ASK,
  /** No operation credit is free. */
  NO_OPERATION_CREDITS,
  /** No Host credit is free: a query would have nowhere to land. */
  NO_HOST_CREDITS,
  /** The pressure gate is closed. */
  PRESSURE,
  /**
   * The cost model expects recomputing the prefix to be faster than restoring any of it ({@link
   * CostModel}).
   */
  SLOWER_THAN_COMPUTE,
  /** Storage permissions are off this round (frozen or idle). */
  NOT_PERMITTED,
  /** An unproven retirement quarantined L3 until restart. */
  QUARANTINED,
  /** A weight update's fence stands: the namespace is about to change. */
  FENCED
}

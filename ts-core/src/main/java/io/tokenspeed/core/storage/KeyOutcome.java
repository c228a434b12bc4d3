package io.tokenspeed.core.storage;

/**
 * The per-key fact of a completed storage job on one owner.
 *
 * <pre>
 *   outcome   QUERY             GET                          PUT
 *   OK        object exists     exact-length read            created, or already existed
 *   MISSING   -                 confirmed missing object     -
 *   INVALID   -                 confirmed invalid object     -
 *   FAILED    absent/unknown    not read, no object evidence not acknowledged (re-offer later)
 * </pre>
 *
 * <p>Only GET may report object evidence (MISSING, INVALID): a QUERY or PUT record carrying one is
 * malformed.
 */
public enum KeyOutcome {
  OK,
  MISSING,
  INVALID,
  FAILED;

  /** True for confirmed object facts (the only ones negative metadata may record). */
  public boolean objectEvidence() {
    return this == MISSING || this == INVALID;
  }
}

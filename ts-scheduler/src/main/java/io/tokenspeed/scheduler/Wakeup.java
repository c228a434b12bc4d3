package io.tokenspeed.scheduler;

/**
 * A request whose L3 wait ended this round and whose continuation resumes.
 *
 * @param requestId the request
 * @param reason why the wait ended
 * @param ready the Ready hold protecting freshly read Host blocks, or null; the request owns it
 *     until ordinary admission takes the Host sources (or it expires on its own)
 */
public record Wakeup(long requestId, Reason reason, StorageLease ready) {

  /** Why a wait ended. */
  public enum Reason {
    /** Query found nothing usable, or reservation found no legal boundary. */
    NOTHING_RESTORED,
    /** A read published Host blocks; {@code ready} protects them. */
    READ_COMPLETE,
    /** A read ended without publishing (failed rows, unretired, or every row failed). */
    READ_FAILED,
    /** The soft deadline passed. */
    SOFT_TIMEOUT,
    /**
     * The cost model's new figures made recomputing faster than waiting for the rest of the GET (a
     * store reading slower than it did when the restore was chosen).
     */
    SLOWER_THAN_COMPUTE,
    /** The pressure gate closed while the request was in QUERY. */
    PRESSURE,
    /** An administrative clear rejected the operation. */
    CLEARED
  }
}

package io.tokenspeed.scheduler;

/**
 * What a request carries across its pre-admission states (Bootstrapping, Submitted, Prefetching):
 * whether it already considered L3, and the optional Ready hold of a finished read. The hold's Host
 * references stay with the storage ticket; this only owns the lease on it.
 *
 * @param storagePrepared the one-shot bit: L3 was considered once (not that a read succeeded)
 * @param readyHold the Ready hold after a read, or null; closed when ordinary admission acquires
 *     the Host sources, when the request ends, or by expiry
 */
public record AdmissionResources(boolean storagePrepared, StorageLease readyHold) {

  /** A fresh request: L3 not considered, no hold. */
  public static final AdmissionResources FRESH = new AdmissionResources(false, null);

  /** The same resources with the one-shot bit set. */
  public AdmissionResources prepared() {
    return new AdmissionResources(true, readyHold);
  }

  /** Prepared, holding {@code hold}. */
  public AdmissionResources withReady(StorageLease hold) {
    return new AdmissionResources(true, hold);
  }
}

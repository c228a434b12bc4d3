package io.tokenspeed.core.storage;

/** The three kinds of L3 storage job. Cancellation is not a job: it names an existing one. */
public enum StorageKind {
  /** Existence check; touches no Host payload. */
  QUERY,
  /** Read objects into Host destinations. */
  GET,
  /** Create-only write of Host sources. */
  PUT;

  /** True for kinds that move payload bytes. */
  public boolean movesPayload() {
    return this != QUERY;
  }
}

package io.tokenspeed.scheduler;

/**
 * A request state's claim on a storage ticket: the wait on a QUERY or GET, or the Ready hold after
 * it. The state that waits owns the lease; whatever ends that state — admission, a soft deadline,
 * an abort — closes the lease with it, which detaches the request from the ticket. The Host
 * references themselves never move to the request: they stay with the ticket in the {@link
 * StorageTransferManager}, which releases them only when every owner proved retirement.
 *
 * <p>Closing is idempotent. Single-threaded, like its manager.
 */
public final class StorageLease implements AutoCloseable {

  private final StorageTransferManager owner;
  private final long requestId;
  private long operationId;
  private boolean closed;

  StorageLease(StorageTransferManager owner, long requestId, long operationId) {
    this.owner = owner;
    this.requestId = requestId;
    this.operationId = operationId;
  }

  /** The request holding the lease. */
  public long requestId() {
    return requestId;
  }

  /** The ticket the lease is attached to now (a query's lease moves to its GET). */
  public long operationId() {
    return operationId;
  }

  void moveTo(long newOperationId) {
    this.operationId = newOperationId;
  }

  /** True until closed by its owner or ended by the manager (expiry, clear). */
  public boolean live() {
    return !closed;
  }

  void endedByManager() {
    closed = true;
  }

  /** Detaches the request from the ticket (and releases a Ready hold). Idempotent. */
  @Override
  public void close() {
    if (!closed) {
      closed = true;
      owner.onLeaseClosed(this);
    }
  }

  @Override
  public String toString() {
    return "StorageLease{request=" + requestId + ", op=" + operationId + ", live=" + !closed + "}";
  }
}

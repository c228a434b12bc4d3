package io.tokenspeed.core.storage;

import java.util.List;

/**
 * The replica's agreed fact about one storage operation: what the control plane derives from the
 * {@link StorageDone} records of every cache-owning rank once all of them have reported the
 * operation, identically on every rank. The scheduler consumes this record; it never sees the
 * per-owner records.
 *
 * <p>The reduction over owners, key by key (l3-async-design "Completion agreement and ordering"):
 *
 * <pre>
 *   agreed outcome of key i     rule over the owners' outcomes of key i
 *   OK                          every owner reported OK            (validity: AND)
 *   INVALID                     some owner reported INVALID        (object facts: OR)
 *   MISSING                     otherwise, some owner reported MISSING
 *   FAILED                      otherwise (no success everywhere, no object evidence)
 *
 *   retired   = AND over owners        detached = OR over owners
 * </pre>
 *
 * An owner whose outcome for a key is OK (including a row it does not own and so did not read)
 * contributes no object evidence; one owner's confirmed missing or invalid shard is enough to
 * invalidate the shared object. INVALID takes precedence over MISSING only so that the record keeps
 * one outcome per key; both are object failures ({@link #objectFailure(int)}).
 *
 * @param operationId the operation id
 * @param kind the operation's kind, equal on every owner
 * @param outcomes the agreed per-key facts, in the operation's key order
 * @param retired true when every owner proved retirement; false keeps every reference quarantined
 * @param detached true when any owner reports the operation cancelled; a detached result never
 *     publishes
 */
public record AgreedCompletion(
    long operationId,
    StorageKind kind,
    List<KeyOutcome> outcomes,
    boolean retired,
    boolean detached) {

  public AgreedCompletion {
    if (operationId < 0) {
      throw new IllegalArgumentException("operation_id=" + operationId + " must be >= 0");
    }
    if (kind == null || outcomes == null || outcomes.isEmpty()) {
      throw new IllegalArgumentException("agreed operation " + operationId + " is incomplete");
    }
    outcomes = List.copyOf(outcomes);
    if (kind != StorageKind.GET) {
      for (int i = 0; i < outcomes.size(); i++) {
        if (outcomes.get(i).objectEvidence()) {
          throw new IllegalArgumentException(
              "agreed operation "
                  + operationId
                  + " "
                  + kind
                  + " key "
                  + i
                  + " is "
                  + outcomes.get(i)
                  + ": only GET carries object failures");
        }
      }
    }
  }

  /** Number of keys of the operation. */
  public int numKeys() {
    return outcomes.size();
  }

  /** True when every owner reported key {@code key} as a success. */
  public boolean ok(int key) {
    return outcomes.get(key) == KeyOutcome.OK;
  }

  /** True when some owner confirmed key {@code key}'s object missing or invalid. */
  public boolean objectFailure(int key) {
    return outcomes.get(key).objectEvidence();
  }

  /** Number of keys that succeeded on every owner. */
  public int okCount() {
    int n = 0;
    for (KeyOutcome o : outcomes) {
      if (o == KeyOutcome.OK) {
        n++;
      }
    }
    return n;
  }
}

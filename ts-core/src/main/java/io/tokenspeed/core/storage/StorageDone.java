package io.tokenspeed.core.storage;

import java.util.List;

/**
 * One owner's completion record of a storage job: what the executor produces, the control plane
 * agrees across owners, and the scheduler consumes.
 *
 * @param operationId the job's operation id
 * @param kind the job's kind
 * @param outcomes one fact per row, in row order
 * @param retired true when the store has provably stopped touching the job's Host buffers; false
 *     quarantines every reference of the job
 * @param bytes payload bytes moved successfully on this owner
 * @param detached true when the job was cancelled; a detached result never publishes
 */
public record StorageDone(
    long operationId,
    StorageKind kind,
    List<KeyOutcome> outcomes,
    boolean retired,
    long bytes,
    boolean detached) {

  public StorageDone {
    if (operationId < 0) {
      throw new IllegalArgumentException("operation_id=" + operationId + " must be >= 0");
    }
    if (kind == null || outcomes == null || outcomes.isEmpty()) {
      throw new IllegalArgumentException("operation " + operationId + " record is incomplete");
    }
    outcomes = List.copyOf(outcomes);
    if (kind != StorageKind.GET) {
      for (int i = 0; i < outcomes.size(); i++) {
        if (outcomes.get(i).objectEvidence()) {
          throw new IllegalArgumentException(
              "operation "
                  + operationId
                  + " "
                  + kind
                  + " row "
                  + i
                  + " reports "
                  + outcomes.get(i)
                  + ": only GET reports object failures");
        }
      }
    }
    if (bytes < 0) {
      throw new IllegalArgumentException("operation " + operationId + " bytes=" + bytes);
    }
  }

  /** Number of rows with outcome {@link KeyOutcome#OK}. */
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

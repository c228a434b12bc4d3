package io.tokenspeed.core.storage;

import java.util.List;

/**
 * An immutable job for the L3 executor: this rank's translation of one plan storage operation. The
 * keys and Host ranges are fixed when the job is built; no worker ever reads a mutable namespace or
 * a later plan.
 *
 * @param operationId the scheduler's operation id (monotonic, never reused)
 * @param kind QUERY, GET or PUT
 * @param rows the objects, in the operation's key order
 */
public record StorageJob(long operationId, StorageKind kind, List<JobRow> rows) {

  public StorageJob {
    if (operationId < 0) {
      throw new IllegalArgumentException("operation_id=" + operationId + " must be >= 0");
    }
    if (kind == null) {
      throw new IllegalArgumentException("operation " + operationId + " has no kind");
    }
    if (rows == null || rows.isEmpty()) {
      throw new IllegalArgumentException("operation " + operationId + " has no rows");
    }
    rows = List.copyOf(rows);
    for (int i = 0; i < rows.size(); i++) {
      JobRow r = rows.get(i);
      if (kind == StorageKind.QUERY && r.range() != null) {
        throw new IllegalArgumentException(
            "operation " + operationId + " QUERY row " + i + " must not carry a Host range");
      }
      if (kind.movesPayload() && r.owned() && r.range() == null) {
        throw new IllegalArgumentException(
            "operation " + operationId + " " + kind + " row " + i + " is owned but has no range");
      }
    }
  }

  /** Payload bytes this rank moves: the sum of its owned ranges (0 for QUERY). */
  public long payloadBytes() {
    long total = 0;
    for (JobRow r : rows) {
      if (r.range() != null) {
        total += r.range().lengthBytes();
      }
    }
    return total;
  }
}

package io.tokenspeed.control;

import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageKind;
import java.util.List;

/** Short constructors for completion records in tests. */
final class Records {

  private Records() {}

  static StorageDone get(long op, KeyOutcome... outcomes) {
    return new StorageDone(
        op, StorageKind.GET, List.of(outcomes), true, 64L * outcomes.length, false);
  }

  static StorageDone query(long op, KeyOutcome... outcomes) {
    return new StorageDone(op, StorageKind.QUERY, List.of(outcomes), true, 0, false);
  }

  static StorageDone put(long op, KeyOutcome... outcomes) {
    return new StorageDone(
        op, StorageKind.PUT, List.of(outcomes), true, 64L * outcomes.length, false);
  }

  static StorageDone unretired(StorageDone d) {
    return new StorageDone(d.operationId(), d.kind(), d.outcomes(), false, d.bytes(), d.detached());
  }

  static StorageDone detached(StorageDone d) {
    return new StorageDone(d.operationId(), d.kind(), d.outcomes(), d.retired(), d.bytes(), true);
  }

  static KeyOutcome[] ok(int n) {
    KeyOutcome[] out = new KeyOutcome[n];
    java.util.Arrays.fill(out, KeyOutcome.OK);
    return out;
  }
}

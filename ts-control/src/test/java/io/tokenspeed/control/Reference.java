package io.tokenspeed.control;

import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import java.util.ArrayList;
import java.util.List;

/**
 * The brute-force reduction the tests compare {@link Agreement} with: written from the
 * specification's sentences, one key and one rule at a time, with no shared code.
 */
final class Reference {

  private Reference() {}

  /** The agreed fact of one operation from all of its owners' records. */
  static AgreedCompletion reduce(List<StorageDone> owners) {
    StorageDone first = owners.getFirst();
    List<KeyOutcome> agreed = new ArrayList<>();
    for (int key = 0; key < first.outcomes().size(); key++) {
      final int k = key;
      // Validity: AND over owners of "this owner read it successfully (or did not need to)".
      boolean everyOwnerOk = owners.stream().allMatch(d -> d.outcomes().get(k) == KeyOutcome.OK);
      // Object facts: OR over owners of confirmed evidence; OK and FAILED owners contribute none.
      boolean anyInvalid = owners.stream().anyMatch(d -> d.outcomes().get(k) == KeyOutcome.INVALID);
      boolean anyMissing = owners.stream().anyMatch(d -> d.outcomes().get(k) == KeyOutcome.MISSING);
      if (everyOwnerOk) {
        agreed.add(KeyOutcome.OK);
      } else if (anyInvalid) {
        agreed.add(KeyOutcome.INVALID);
      } else if (anyMissing) {
        agreed.add(KeyOutcome.MISSING);
      } else {
        agreed.add(KeyOutcome.FAILED);
      }
    }
    boolean retired = owners.stream().allMatch(StorageDone::retired);
    boolean detached = owners.stream().anyMatch(StorageDone::detached);
    return new AgreedCompletion(first.operationId(), first.kind(), agreed, retired, detached);
  }
}

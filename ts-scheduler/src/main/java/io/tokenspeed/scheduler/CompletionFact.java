package io.tokenspeed.scheduler;

import java.util.BitSet;

/**
 * One operation's completion as every owner agreed it (AND of per-key success and retirement, OR of
 * confirmed object failures and detachment): the only way storage results reach the scheduler.
 *
 * @param operationId the operation
 * @param numKeys the mask length the owners agreed on
 * @param ok per key: success on every owner (QUERY: exists; GET: full-length read; PUT: stored)
 * @param objectFailure per key: some owner confirmed the object missing or invalid (GET only)
 * @param retired every owner proved its native I/O finished
 * @param detached some owner reported the operation cancelled
 */
public record CompletionFact(
    long operationId,
    int numKeys,
    BitSet ok,
    BitSet objectFailure,
    boolean retired,
    boolean detached) {

  public CompletionFact {
    ok = (BitSet) ok.clone();
    objectFailure = (BitSet) objectFailure.clone();
  }

  @Override
  public BitSet ok() {
    return (BitSet) ok.clone();
  }

  @Override
  public BitSet objectFailure() {
    return (BitSet) objectFailure.clone();
  }

  /** True when key {@code i} succeeded everywhere. */
  public boolean ok(int i) {
    return ok.get(i);
  }

  /** True when key {@code i} was confirmed missing or invalid by some owner. */
  public boolean objectFailure(int i) {
    return objectFailure.get(i);
  }
}

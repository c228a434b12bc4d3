package io.tokenspeed.scheduler;

import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;

/** Builds agreed completion facts the way the control plane would deliver them. */
final class Facts {
  private Facts() {}

  static StorageKind kindOf(StorageOp op) {
    return switch (op) {
      case StorageOp.Query q -> StorageKind.QUERY;
      case StorageOp.Get g -> StorageKind.GET;
      case StorageOp.Put p -> StorageKind.PUT;
      case StorageOp.Cancel c -> throw new IllegalArgumentException("a cancel has no facts");
    };
  }

  static int keysOf(StorageOp op) {
    return switch (op) {
      case StorageOp.Query q -> q.keys().size();
      case StorageOp.Get g -> g.keys().size();
      case StorageOp.Put p -> p.keys().size();
      case StorageOp.Cancel c -> throw new IllegalArgumentException("a cancel has no keys");
    };
  }

  /**
   * Keys in {@code ok} succeeded; keys in {@code missing} were confirmed missing; others failed.
   */
  static AgreedCompletion of(
      StorageKind kind,
      long op,
      int n,
      BitSet ok,
      BitSet missing,
      boolean retired,
      boolean detached) {
    List<KeyOutcome> outcomes = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      outcomes.add(
          ok.get(i) ? KeyOutcome.OK : missing.get(i) ? KeyOutcome.MISSING : KeyOutcome.FAILED);
    }
    return new AgreedCompletion(op, kind, outcomes, retired, detached);
  }

  static AgreedCompletion of(
      StorageOp op, BitSet ok, BitSet missing, boolean retired, boolean detached) {
    return of(kindOf(op), op.operationId(), keysOf(op), ok, missing, retired, detached);
  }

  static AgreedCompletion allOk(StorageOp op) {
    BitSet ok = new BitSet();
    ok.set(0, keysOf(op));
    return of(op, ok, new BitSet(), true, false);
  }
}

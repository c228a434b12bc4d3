package io.tokenspeed.scheduler;

import io.tokenspeed.cache.BlockCopy;
import io.tokenspeed.core.storage.StorageOp;
import java.util.List;

/**
 * One round's plan, identical on every rank: the forward batch, the Device copies that must land
 * before it (Host→Device loads and copy-on-write), and the storage commands, which bypass the
 * device FIFO and go to the L3 executor in this order.
 */
public record ExecutionPlan(
    long round, List<ForwardItem> forward, List<BlockCopy> deviceCopies, List<StorageOp> storage) {

  public ExecutionPlan {
    forward = List.copyOf(forward);
    deviceCopies = List.copyOf(deviceCopies);
    storage = List.copyOf(storage);
  }

  /** Tokens {@code [startToken, startToken + numTokens)} of a request run in this forward. */
  public record ForwardItem(long requestId, int startToken, int numTokens, boolean decode) {}
}

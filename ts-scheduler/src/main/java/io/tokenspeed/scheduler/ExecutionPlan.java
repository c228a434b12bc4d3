package io.tokenspeed.scheduler;

import io.tokenspeed.cache.BlockCopy;
import io.tokenspeed.core.storage.StorageOp;
import java.util.List;

/**
 * One round's plan, identical on every rank: the forward batch, the Device copies that must land
 * before it (Host→Device loads and copy-on-write), the demotions (Device→Host copies of cached
 * blocks), and the storage commands, which bypass the device FIFO and go to the L3 executor in this
 * order.
 */
public record ExecutionPlan(
    long round,
    List<ForwardItem> forward,
    List<BlockCopy> deviceCopies,
    List<Demotion> demotions,
    List<StorageOp> storage) {

  public ExecutionPlan {
    forward = List.copyOf(forward);
    deviceCopies = List.copyOf(deviceCopies);
    demotions = List.copyOf(demotions);
    storage = List.copyOf(storage);
  }

  /**
   * A D2H copy of a cached Device block into a fresh Host block (the write transaction's first
   * half). When it completes the Host entry is published, the Device source is freed at once and
   * the key becomes a backup candidate; nothing waits for L3.
   */
  public record Demotion(io.tokenspeed.core.CacheKey key, int deviceBlock, int hostBlock) {}

  /** Tokens {@code [startToken, startToken + numTokens)} of a request run in this forward. */
  public record ForwardItem(long requestId, int startToken, int numTokens, boolean decode) {}
}

package io.tokenspeed.l3;

import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

/** A monotonic clock tests move by hand. */
final class ManualClock implements LongSupplier {
  private final AtomicLong nowNs = new AtomicLong(1_000_000_000L);

  @Override
  public long getAsLong() {
    return nowNs.get();
  }

  void advanceMs(long ms) {
    nowNs.addAndGet(ms * 1_000_000L);
  }
}

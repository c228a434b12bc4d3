package io.tokenspeed.l3;

import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;

/** Waits for an asynchronous condition, bounded; never used to make a race come out right. */
final class Awaits {
  private Awaits() {}

  static void until(String what, BooleanSupplier condition) {
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("timed out waiting for " + what);
      }
      LockSupport.parkNanos(200_000);
    }
  }
}

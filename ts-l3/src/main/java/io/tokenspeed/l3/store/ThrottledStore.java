package io.tokenspeed.l3.store;

import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * A store that reads at a fixed rate: every GET is answered by the inner store and then held until
 * its destination bytes would have taken {@code bytesPerSecond} to arrive. The rate is the store's,
 * not a call's: concurrent GETs (the executor's shares of one job, several jobs) queue on one
 * timeline, so that however many workers read, the bytes arrive no faster than the rate. Queries
 * and writes pass through untouched.
 *
 * <pre>
 *   timeline   |--- GET a: bytes_a / rate ---|--- GET b: bytes_b / rate ---|
 *   GET b      called here ^          answered at the end of its own slot  ^
 * </pre>
 *
 * <p>For benchmarks and tests of the cost model ({@code tokenspeed bench ttft --throttle-mbps}): a
 * store slower than recomputation, whose rate is known.
 */
public class ThrottledStore extends ForwardingStore {
  private final double bytesPerSecond;

  /** The end of the latest reserved slot, in {@link System#nanoTime} (guarded by this). */
  private long timelineNs = Long.MIN_VALUE;

  private boolean timelineStarted;

  /** {@code inner}, its GETs held to {@code bytesPerSecond}. */
  public ThrottledStore(Store inner, double bytesPerSecond) {
    super(inner);
    if (!(bytesPerSecond > 0) || Double.isInfinite(bytesPerSecond)) {
      throw new IllegalArgumentException(
          "throttle bytes_per_second=" + bytesPerSecond + " must be finite and > 0");
    }
    this.bytesPerSecond = bytesPerSecond;
  }

  /** The rate GETs are held to. */
  public double bytesPerSecond() {
    return bytesPerSecond;
  }

  @Override
  public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
    long bytes = 0;
    for (MemorySegment d : destinations) {
      bytes += d.byteSize();
    }
    long slotNs = (long) (bytes / bytesPerSecond * 1e9);
    long endNs;
    synchronized (this) {
      long now = System.nanoTime();
      long start = !timelineStarted || timelineNs - now < 0 ? now : timelineNs;
      endNs = start + slotNs;
      timelineNs = endNs;
      timelineStarted = true;
    }
    StoreResult r = super.get(keys, destinations);
    for (long left; (left = endNs - System.nanoTime()) > 0; ) {
      LockSupport.parkNanos(Math.min(left, TimeUnit.MILLISECONDS.toNanos(100)));
      if (Thread.interrupted()) {
        Thread.currentThread().interrupt();
        throw new InterruptedException("throttled GET interrupted");
      }
    }
    return r;
  }
}

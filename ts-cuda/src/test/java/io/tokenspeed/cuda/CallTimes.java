package io.tokenspeed.cuda;

import java.util.Arrays;

/**
 * Pairs of CUDA events around the calls of a timing loop on a device's compute stream: {@link
 * #start} and {@link #end} record call {@code i}'s pair, {@link #medianMicros} gives the median of
 * the recorded pairs once the stream has run them. The events are created once and destroyed by
 * {@link #close}.
 */
public final class CallTimes implements AutoCloseable {
  private final CudaDevice device;
  private final long[] starts;
  private final long[] ends;

  /** {@code calls} pairs of events on {@code device}. */
  public CallTimes(CudaDevice device, int calls) {
    this.device = device;
    this.starts = new long[calls];
    this.ends = new long[calls];
    for (int i = 0; i < calls; i++) {
      starts[i] = device.api().eventCreate(0);
      ends[i] = device.api().eventCreate(0);
    }
  }

  /** The number of timed calls. */
  public int calls() {
    return starts.length;
  }

  /** Records the start of call {@code i} on the compute stream. */
  public void start(int i) {
    device.api().eventRecord(starts[i], device.stream());
  }

  /** Records the end of call {@code i} on the compute stream. */
  public void end(int i) {
    device.api().eventRecord(ends[i], device.stream());
  }

  /** Waits for the stream, then gives the median of the calls' times, in microseconds. */
  public double medianMicros() {
    device.synchronize();
    double[] t = new double[starts.length];
    for (int i = 0; i < t.length; i++) {
      t[i] = device.api().eventElapsedMs(starts[i], ends[i]) * 1e3;
    }
    Arrays.sort(t);
    return t[t.length / 2];
  }

  @Override
  public void close() {
    for (int i = 0; i < starts.length; i++) {
      device.api().eventDestroy(starts[i]);
      device.api().eventDestroy(ends[i]);
    }
  }
}

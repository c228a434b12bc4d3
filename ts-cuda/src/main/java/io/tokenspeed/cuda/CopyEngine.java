package io.tokenspeed.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Copies between device memory and pinned host memory on a dedicated stream, apart from the compute
 * stream: a batch of block copies goes as one {@code cudaMemcpyAsync} each, or, for many small
 * blocks, as one launch of the {@code copy_blocks} kernel that reads and writes through unified
 * addresses (pinned host memory included). A batch ends with an event: its fence.
 *
 * <p>One thread issues copies at a time (the copy engine's). Addresses are absolute (device
 * pointers, or the addresses of pinned host segments); the caller checks ranges.
 */
public final class CopyEngine implements AutoCloseable {
  private final CudaDevice device;
  private final CudaApi api;
  private final long stream;
  private final long function;
  private DeviceBuffer table;
  private boolean closed;

  public CopyEngine(CudaDevice device) {
    this.device = device;
    this.api = device.api();
    device.bind();
    this.stream = api.streamCreate(CudaApi.STREAM_NON_BLOCKING);
    this.function = device.function("copy_blocks");
  }

  /** The copy stream. */
  public long stream() {
    return stream;
  }

  /** Queues a copy of {@code bytes} from {@code src} to {@code dst} on the copy stream. */
  public void copy(long dst, long src, long bytes) {
    api.memcpyAsync(dst, src, bytes, stream);
  }

  /**
   * Queues {@code count} copies of {@code bytes} each, {@code srcs[i]} to {@code dsts[i]}, as one
   * kernel launch on the copy stream. The copies of one launch run in no particular order: the
   * destinations must be pairwise disjoint and disjoint from the sources.
   */
  public void gather(long[] srcs, long[] dsts, int count, long bytes) {
    if (count == 0) {
      return;
    }
    long need = 2L * count * Long.BYTES;
    if (table == null || table.bytes() < need) {
      api.streamSynchronize(stream); // the old table may still be read
      if (table != null) {
        table.close();
      }
      table = device.allocate(Math.max(need, 4096));
    }
    try (Arena a = Arena.ofConfined()) {
      MemorySegment host = a.allocate(need, 16);
      MemorySegment.copy(srcs, 0, host, ValueLayout.JAVA_LONG, 0, count);
      MemorySegment.copy(dsts, 0, host, ValueLayout.JAVA_LONG, (long) count * Long.BYTES, count);
      api.streamSynchronize(stream); // the table is rewritten: earlier launches must have read it
      table.copyFrom(host, 0);
      MemorySegment params = a.allocate(ValueLayout.ADDRESS, 3);
      params.setAtIndex(
          ValueLayout.ADDRESS, 0, a.allocateFrom(ValueLayout.JAVA_LONG, table.pointer()));
      params.setAtIndex(
          ValueLayout.ADDRESS,
          1,
          a.allocateFrom(ValueLayout.JAVA_LONG, table.pointer() + (long) count * Long.BYTES));
      params.setAtIndex(ValueLayout.ADDRESS, 2, a.allocateFrom(ValueLayout.JAVA_LONG, bytes));
      api.launch(function, count, 1, 1, 256, 0, stream, params, "copy_blocks");
    }
  }

  /** Records a fence after every copy queued so far; {@link Fence#await} or poll it. */
  public Fence fence() {
    long event = api.eventCreate(CudaApi.EVENT_DISABLE_TIMING);
    api.eventRecord(event, stream);
    return new Fence(api, event);
  }

  /** Waits for every copy queued so far. */
  public void synchronize() {
    api.streamSynchronize(stream);
  }

  /** The completion of the copies queued before it: a CUDA event. */
  public static final class Fence implements AutoCloseable {
    private final CudaApi api;
    private final long event;
    private boolean closed;

    Fence(CudaApi api, long event) {
      this.api = api;
      this.event = event;
    }

    /** Whether the copies before it have completed (never blocks). */
    public boolean isDone() {
      return api.eventDone(event);
    }

    /** Blocks until the copies before it have completed. */
    public void await() {
      api.eventSynchronize(event);
    }

    @Override
    public void close() {
      if (!closed) {
        closed = true;
        api.eventDestroy(event);
      }
    }
  }

  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    device.bind();
    api.streamSynchronize(stream);
    if (table != null) {
      table.close();
    }
    api.streamDestroy(stream);
  }
}

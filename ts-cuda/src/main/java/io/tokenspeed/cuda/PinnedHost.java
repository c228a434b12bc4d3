package io.tokenspeed.cuda;

import java.lang.foreign.MemorySegment;

/**
 * Host memory pinned for the device ({@code cudaHostRegister}) so that copies to and from it run
 * asynchronously at the bus's full speed. Pins a segment the caller allocated (an {@link
 * java.lang.foreign.Arena}'s), once; {@link #close()} unpins it before the caller frees it.
 */
public final class PinnedHost implements AutoCloseable {
  private final CudaApi api;
  private final MemorySegment segment;
  private boolean closed;

  private PinnedHost(CudaApi api, MemorySegment segment) {
    this.api = api;
    this.segment = segment;
  }

  /** Pins {@code segment} (native memory) for {@code device}. */
  public static PinnedHost register(CudaDevice device, MemorySegment segment) {
    if (!segment.isNative() || segment.byteSize() == 0) {
      throw new IllegalArgumentException(
          "only a non-empty native segment can be pinned: " + segment);
    }
    device.bind();
    device.api().hostRegister(segment.address(), segment.byteSize());
    return new PinnedHost(device.api(), segment);
  }

  public MemorySegment segment() {
    return segment;
  }

  @Override
  public void close() {
    if (!closed) {
      closed = true;
      api.hostUnregister(segment.address());
    }
  }
}

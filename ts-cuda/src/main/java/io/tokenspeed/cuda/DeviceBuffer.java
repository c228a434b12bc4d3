package io.tokenspeed.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * One {@code cudaMalloc}'d range of device memory, freed by {@link #close()}. It knows its size and
 * checks every copy's range against it, so a wrong offset fails here, naming the range, rather than
 * corrupting another allocation.
 */
public final class DeviceBuffer implements AutoCloseable {
  private final CudaDevice device;
  private final long pointer;
  private final long bytes;
  private boolean closed;

  DeviceBuffer(CudaDevice device, long pointer, long bytes) {
    this.device = device;
    this.pointer = pointer;
    this.bytes = bytes;
  }

  /** The device address of byte 0. */
  public long pointer() {
    if (closed) {
      throw new IllegalStateException("device buffer of " + bytes + " bytes is freed");
    }
    return pointer;
  }

  /** The device address of byte {@code offset}, checked. */
  public long at(long offset) {
    check(offset, 0);
    return pointer() + offset;
  }

  public long bytes() {
    return bytes;
  }

  /** Copies all of {@code src} (host memory) to {@code offset}, synchronously. */
  public void copyFrom(MemorySegment src, long offset) {
    check(offset, src.byteSize());
    device.api().memcpy(pointer() + offset, src.address(), src.byteSize());
  }

  /** Copies {@code dst.byteSize()} bytes from {@code offset} to host memory, synchronously. */
  public void copyTo(long offset, MemorySegment dst) {
    check(offset, dst.byteSize());
    device.api().memcpy(dst.address(), pointer() + offset, dst.byteSize());
  }

  /** Copies {@code values} to element {@code index} (float32), synchronously. */
  public void write(long index, float[] values) {
    try (Arena a = Arena.ofConfined()) {
      copyFrom(a.allocateFrom(ValueLayout.JAVA_FLOAT, values), index * Float.BYTES);
    }
  }

  /** Copies {@code values} to element {@code index} (int32), synchronously. */
  public void write(long index, int[] values) {
    try (Arena a = Arena.ofConfined()) {
      copyFrom(a.allocateFrom(ValueLayout.JAVA_INT, values), index * Integer.BYTES);
    }
  }

  /** Reads {@code count} floats from element {@code index}, synchronously. */
  public float[] readFloats(long index, int count) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment s = a.allocate(ValueLayout.JAVA_FLOAT, count);
      copyTo(index * Float.BYTES, s);
      return s.toArray(ValueLayout.JAVA_FLOAT);
    }
  }

  private void check(long offset, long length) {
    if (offset < 0 || length < 0 || offset > bytes - length) {
      throw new IndexOutOfBoundsException(
          "bytes [" + offset + ", " + (offset + length) + ") outside a buffer of " + bytes);
    }
  }

  @Override
  public void close() {
    if (!closed) {
      closed = true;
      device.api().free(pointer);
    }
  }
}

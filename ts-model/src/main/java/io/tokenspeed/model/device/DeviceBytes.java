package io.tokenspeed.model.device;

import java.lang.foreign.MemorySegment;
import java.util.Optional;

/**
 * The Device tier's bytes on the device that computes: host memory for the CPU backend, GPU memory
 * for CUDA. Offsets count from the tier's first block. Copies are queued in call order and run in
 * that order; {@link #awaitCopies()} returns once every copy queued before it has completed, and
 * host memory handed to a copy must stay untouched until then.
 *
 * <p>One thread queues copies at a time (the engine's copy thread); the model's forward pass reads
 * and writes the same bytes on the loop's thread, ordered against the copies by the engine's
 * fences.
 */
public interface DeviceBytes extends AutoCloseable {

  /** Bytes of the tier's blocks. */
  long byteSize();

  /** Queues a copy of all of {@code src} (host memory) to {@code dstOffset}. */
  void copyFromHost(MemorySegment src, long dstOffset);

  /** Queues a copy of {@code dst.byteSize()} bytes at {@code srcOffset} into {@code dst}. */
  void copyToHost(long srcOffset, MemorySegment dst);

  /** Queues a copy of {@code bytes} bytes from {@code srcOffset} to {@code dstOffset}. */
  void copyWithin(long srcOffset, long dstOffset, long bytes);

  /** Waits until every copy queued so far has completed. */
  void awaitCopies();

  /** The bytes as host memory, when the Device is host memory (the CPU backend); else empty. */
  Optional<MemorySegment> hostSegment();

  /** Frees the bytes; nothing may be queued or computed on them afterwards. */
  @Override
  void close();
}

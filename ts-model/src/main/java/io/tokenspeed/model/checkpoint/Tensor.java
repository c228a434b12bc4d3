package io.tokenspeed.model.checkpoint;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * A read-only view of one tensor inside a memory-mapped checkpoint file: its name, the file it
 * lives in, element type, shape (row-major) and the bytes. Nothing is copied: {@link #data()} is a
 * slice of the file's mapping, valid while the owning {@link Checkpoint} (or {@link
 * SafetensorsFile}) is open. Elements are little-endian, as safetensors stores them; BF16 and F16
 * widen to {@code float} on read, one element or one row at a time.
 */
public final class Tensor {
  /** Little-endian float, no alignment assumed (safetensors offsets need not be aligned). */
  public static final ValueLayout.OfFloat F32_LE =
      ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

  /** Little-endian 16-bit word, unaligned. */
  public static final ValueLayout.OfShort U16_LE =
      ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

  /** Little-endian int, unaligned. */
  public static final ValueLayout.OfInt I32_LE =
      ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

  private final String name;
  private final String file;
  private final DType dtype;
  private final int[] shape;
  private final long numElements;
  private final MemorySegment data;

  Tensor(String name, String file, DType dtype, int[] shape, MemorySegment data) {
    this.name = name;
    this.file = file;
    this.dtype = dtype;
    this.shape = shape.clone();
    long n = 1;
    for (int d : shape) {
      n = Math.multiplyExact(n, d);
    }
    this.numElements = n;
    if (data.byteSize() != n * dtype.byteSize()) {
      throw new IllegalArgumentException(
          "tensor "
              + name
              + " bytes="
              + data.byteSize()
              + " but shape needs "
              + n * dtype.byteSize());
    }
    this.data = data;
  }

  public String name() {
    return name;
  }

  /** The file this tensor was read from, as a path string. */
  public String file() {
    return file;
  }

  public DType dtype() {
    return dtype;
  }

  /** A copy of the shape. */
  public int[] shape() {
    return shape.clone();
  }

  public int rank() {
    return shape.length;
  }

  public int dim(int i) {
    return shape[i];
  }

  public long numElements() {
    return numElements;
  }

  /** The mapped bytes (read-only slice of the file). */
  public MemorySegment data() {
    return data;
  }

  /** Element {@code index} (row-major) widened to float. */
  public float getFloat(long index) {
    long at = index * dtype.byteSize();
    return switch (dtype) {
      case F32 -> data.get(F32_LE, at);
      case BF16 -> bf16ToFloat(data.get(U16_LE, at));
      case F16 -> Float.float16ToFloat(data.get(U16_LE, at));
      case I32 -> data.get(I32_LE, at);
    };
  }

  /** Element {@code index} of an I32 tensor. */
  public int getInt(long index) {
    if (dtype != DType.I32) {
      throw new IllegalStateException("tensor " + name + " dtype=" + dtype + " is not I32");
    }
    return data.get(I32_LE, index * 4);
  }

  /**
   * Widens {@code count} elements starting at element {@code from} into {@code dst[dstOffset..]}.
   * This is how BF16/F16 weights are read: one row at a time into a reused scratch array.
   */
  public void readFloats(long from, float[] dst, int dstOffset, int count) {
    switch (dtype) {
      case F32 -> MemorySegment.copy(data, F32_LE, from * 4, dst, dstOffset, count);
      case BF16 -> {
        for (int i = 0; i < count; i++) {
          dst[dstOffset + i] = bf16ToFloat(data.get(U16_LE, (from + i) * 2));
        }
      }
      case F16 -> {
        for (int i = 0; i < count; i++) {
          dst[dstOffset + i] = Float.float16ToFloat(data.get(U16_LE, (from + i) * 2));
        }
      }
      case I32 -> {
        for (int i = 0; i < count; i++) {
          dst[dstOffset + i] = data.get(I32_LE, (from + i) * 4);
        }
      }
    }
  }

  /**
   * The whole tensor as floats on the heap. Meant for small tensors only (norm weights, biases,
   * reference outputs in tests); weight matrices stay mapped.
   */
  public float[] toFloatArray() {
    if (numElements > Integer.MAX_VALUE) {
      throw new IllegalStateException("tensor " + name + " is too large for an array");
    }
    float[] out = new float[(int) numElements];
    readFloats(0, out, 0, out.length);
    return out;
  }

  /** The whole I32 tensor as an int array. */
  public int[] toIntArray() {
    int[] out = new int[(int) numElements];
    for (int i = 0; i < out.length; i++) {
      out[i] = getInt(i);
    }
    return out;
  }

  /** Widens a bfloat16 bit pattern: the top half of a float32. */
  public static float bf16ToFloat(short bits) {
    return Float.intBitsToFloat((bits & 0xffff) << 16);
  }

  @Override
  public String toString() {
    return name + " " + dtype + Arrays.toString(shape) + " in " + file;
  }
}

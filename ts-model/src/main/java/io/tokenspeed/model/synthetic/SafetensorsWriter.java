package io.tokenspeed.model.synthetic;

import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.TensorShape;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.List;

/**
 * Writes a {@code .safetensors} file, streaming: the header first (every tensor's offsets follow
 * from the shapes), then each tensor's elements in order, asked from an {@link ElementSource} a
 * chunk at a time, so a file of any size is written with one small buffer.
 *
 * <pre>
 *   | u64le N | {"__metadata__":{"format":"pt"},"name":{"dtype":"F32","shape":[r,c],
 *   |           "data_offsets":[begin,end]},...}  padded with spaces to N ≡ 0 (mod 8) |
 *   | tensor 0 | tensor 1 | ...   (little-endian, in the order given)                  |
 * </pre>
 *
 * <p>F32 writes the floats as they are; BF16 rounds each to nearest even, the conversion PyTorch
 * uses. The output is a function of the tensor list, the dtype and the elements: no timestamps, no
 * map ordering.
 */
public final class SafetensorsWriter {

  /** Elements asked from the source per call. */
  static final int CHUNK_ELEMENTS = 1 << 16;

  /** Produces one tensor's elements in row-major order, {@code count} at a time. */
  @FunctionalInterface
  public interface ElementSource {
    void next(float[] dst, int count);
  }

  /** Hands out the element source of each tensor, called once per tensor, in file order. */
  @FunctionalInterface
  public interface Elements {
    ElementSource of(TensorShape tensor);
  }

  private SafetensorsWriter() {}

  /** Writes one F32 tensor {@code name} of {@code shape} holding {@code values}. */
  public static void writeF32(Path file, String name, int[] shape, float[] values) {
    TensorShape t = new TensorShape(name, shape);
    if (t.numElements() != values.length) {
      throw new IllegalArgumentException(
          "tensor " + t + " needs " + t.numElements() + " values, got " + values.length);
    }
    int[] at = {0};
    write(
        file,
        DType.F32,
        List.of(t),
        ignored ->
            (dst, count) -> {
              System.arraycopy(values, at[0], dst, 0, count);
              at[0] += count;
            });
  }

  /**
   * Writes {@code tensors} (F32 or BF16) to {@code file}, replacing it.
   *
   * @throws UncheckedIOException when the file cannot be written
   */
  public static void write(Path file, DType dtype, List<TensorShape> tensors, Elements elements) {
    if (dtype != DType.F32 && dtype != DType.BF16) {
      throw new IllegalArgumentException(
          "dtype=" + dtype + " cannot be written; allowed: F32, BF16");
    }
    byte[] header = header(dtype, tensors);
    try (FileChannel ch =
        FileChannel.open(
            file,
            StandardOpenOption.CREATE,
            StandardOpenOption.TRUNCATE_EXISTING,
            StandardOpenOption.WRITE)) {
      ByteBuffer prefix = ByteBuffer.allocate(8 + header.length).order(ByteOrder.LITTLE_ENDIAN);
      prefix.putLong(header.length).put(header).flip();
      writeFully(ch, prefix);
      float[] chunk = new float[CHUNK_ELEMENTS];
      ByteBuffer out =
          ByteBuffer.allocateDirect(CHUNK_ELEMENTS * dtype.byteSize())
              .order(ByteOrder.LITTLE_ENDIAN);
      for (TensorShape t : tensors) {
        ElementSource source = elements.of(t);
        long left = t.numElements();
        while (left > 0) {
          int n = (int) Math.min(left, CHUNK_ELEMENTS);
          source.next(chunk, n);
          out.clear();
          if (dtype == DType.F32) {
            for (int i = 0; i < n; i++) {
              out.putFloat(chunk[i]);
            }
          } else {
            for (int i = 0; i < n; i++) {
              out.putShort(toBf16(chunk[i]));
            }
          }
          out.flip();
          writeFully(ch, out);
          left -= n;
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException("cannot write " + file + ": " + e.getMessage(), e);
    }
  }

  /** Rounds a float to bfloat16 (nearest, ties to even; NaN stays NaN). */
  static short toBf16(float f) {
    int bits = Float.floatToRawIntBits(f);
    if (Float.isNaN(f)) {
      return (short) ((bits >>> 16) | 0x40);
    }
    int rounded = bits + 0x7fff + ((bits >>> 16) & 1);
    return (short) (rounded >>> 16);
  }

  private static byte[] header(DType dtype, List<TensorShape> tensors) {
    StringBuilder json = new StringBuilder("{\"__metadata__\":{\"format\":\"pt\"}");
    long offset = 0;
    for (TensorShape t : tensors) {
      long end = offset + t.numElements() * dtype.byteSize();
      json.append(",\"").append(escape(t.name())).append("\":{\"dtype\":\"").append(dtype.name());
      json.append("\",\"shape\":").append(Arrays.toString(t.shape()).replace(" ", ""));
      json.append(",\"data_offsets\":[").append(offset).append(',').append(end).append("]}");
      offset = end;
    }
    json.append('}');
    byte[] utf8 = json.toString().getBytes(StandardCharsets.UTF_8);
    byte[] padded = Arrays.copyOf(utf8, (utf8.length + 7) & ~7);
    Arrays.fill(padded, utf8.length, padded.length, (byte) ' ');
    return padded;
  }

  private static String escape(String s) {
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.toString();
  }

  private static void writeFully(FileChannel ch, ByteBuffer buf) throws IOException {
    while (buf.hasRemaining()) {
      ch.write(buf);
    }
  }
}

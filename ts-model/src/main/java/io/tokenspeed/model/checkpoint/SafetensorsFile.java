package io.tokenspeed.model.checkpoint;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One memory-mapped {@code .safetensors} file.
 *
 * <pre>
 *   offset 0        8                      8+N                                   file end
 *          |u64le N | header: N bytes JSON  | data section                          |
 *                   | {"name": {"dtype": "F32", "shape": [r, c],                     |
 *                   |   "data_offsets": [begin, end]}, "__metadata__": {...}}        |
 *                   begin/end are relative to the start of the data section
 * </pre>
 *
 * <p>The whole file is mapped read-only into the caller's {@link Arena}; tensors are slices of that
 * mapping, so nothing is copied onto the heap and the file's pages load on first touch. Every check
 * happens at open: the header length fits the file, the header is strict JSON (UTF-8), every entry
 * has a supported dtype, a non-negative shape and offsets {@code 0 <= begin <= end <= data length}
 * whose size equals the shape's. A failure is a {@link CheckpointException} naming the file and the
 * tensor.
 */
public final class SafetensorsFile {

  /** Largest header accepted (safetensors itself caps headers at 100 MB). */
  public static final long MAX_HEADER_BYTES = 100L << 20;

  private final Path path;
  private final MemorySegment mapping;
  private final Map<String, Tensor> tensors;
  private final Map<String, Object> metadata;

  private SafetensorsFile(
      Path path, MemorySegment mapping, Map<String, Tensor> tensors, Map<String, Object> metadata) {
    this.path = path;
    this.mapping = mapping;
    this.tensors = tensors;
    this.metadata = metadata;
  }

  /**
   * Maps {@code path} into {@code arena} and validates its header.
   *
   * @throws CheckpointException when the file cannot be read or is malformed
   */
  public static SafetensorsFile open(Path path, Arena arena) {
    MemorySegment mapping;
    try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
      mapping = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size(), arena);
    } catch (IOException e) {
      throw new CheckpointException(path + ": cannot map the file: " + e.getMessage(), e);
    }
    String file = path.toString();
    long size = mapping.byteSize();
    if (size < 8) {
      throw new CheckpointException(
          file
              + ": truncated file: size="
              + size
              + " bytes, but the 8-byte header length alone needs 8");
    }
    long headerLength =
        mapping.get(ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 0);
    if (headerLength < 0 || headerLength > size - 8) {
      throw new CheckpointException(
          file
              + ": header length="
              + Long.toUnsignedString(headerLength)
              + " goes beyond the file (size="
              + size
              + " bytes, at most "
              + (size - 8)
              + " available after the length field); the file is truncated or not safetensors");
    }
    if (headerLength > MAX_HEADER_BYTES) {
      throw new CheckpointException(
          file + ": header length=" + headerLength + " exceeds the limit " + MAX_HEADER_BYTES);
    }
    String headerText;
    try {
      byte[] bytes = mapping.asSlice(8, headerLength).toArray(ValueLayout.JAVA_BYTE);
      headerText =
          StandardCharsets.UTF_8
              .newDecoder()
              .onMalformedInput(CodingErrorAction.REPORT)
              .onUnmappableCharacter(CodingErrorAction.REPORT)
              .decode(java.nio.ByteBuffer.wrap(bytes))
              .toString();
    } catch (CharacterCodingException e) {
      throw new CheckpointException(file + ": header is not valid UTF-8", e);
    }
    Map<String, Object> header;
    try {
      header = Json.parseObject(headerText);
    } catch (IllegalArgumentException e) {
      throw new CheckpointException(file + ": header: " + e.getMessage(), e);
    }
    long dataStart = 8 + headerLength;
    long dataLength = size - dataStart;
    MemorySegment dataSection = mapping.asSlice(dataStart, dataLength);
    Map<String, Tensor> tensors = new LinkedHashMap<>();
    Map<String, Object> metadata = Map.of();
    for (Map.Entry<String, Object> e : header.entrySet()) {
      String name = e.getKey();
      if (name.equals("__metadata__")) {
        if (!(e.getValue() instanceof Map<?, ?> m)) {
          throw new CheckpointException(file + ": __metadata__ must be an object");
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> md = (Map<String, Object>) m;
        metadata = Collections.unmodifiableMap(md);
        continue;
      }
      tensors.put(name, entry(file, name, e.getValue(), dataSection, dataLength));
    }
    return new SafetensorsFile(path, mapping, Collections.unmodifiableMap(tensors), metadata);
  }

  private static Tensor entry(
      String file, String name, Object value, MemorySegment dataSection, long dataLength) {
    String where = file + ": tensor " + name + ": ";
    if (!(value instanceof Map<?, ?> m)) {
      throw new CheckpointException(where + "header entry must be an object");
    }
    if (!(m.get("dtype") instanceof String dtypeName)) {
      throw new CheckpointException(where + "dtype is missing or not a string");
    }
    DType dtype;
    try {
      dtype = DType.parse(dtypeName);
    } catch (IllegalArgumentException ex) {
      throw new CheckpointException(where + ex.getMessage(), ex);
    }
    if (!(m.get("shape") instanceof List<?> shapeList)) {
      throw new CheckpointException(where + "shape is missing or not an array");
    }
    int[] shape = new int[shapeList.size()];
    long numElements = 1;
    for (int i = 0; i < shape.length; i++) {
      if (!(shapeList.get(i) instanceof Long d) || d < 0 || d > Integer.MAX_VALUE) {
        throw new CheckpointException(
            where + "shape=" + shapeList + " must hold non-negative integers below 2^31");
      }
      shape[i] = (int) (long) d;
      numElements = multiplyOrFail(where, numElements, d);
    }
    if (!(m.get("data_offsets") instanceof List<?> offsets)
        || offsets.size() != 2
        || !(offsets.get(0) instanceof Long begin)
        || !(offsets.get(1) instanceof Long end)) {
      throw new CheckpointException(where + "data_offsets must be [begin, end] integers");
    }
    if (begin < 0 || end < begin || end > dataLength) {
      throw new CheckpointException(
          where
              + "byte range data_offsets=["
              + begin
              + ", "
              + end
              + ") leaves the data section of "
              + dataLength
              + " bytes");
    }
    long expectedBytes = multiplyOrFail(where, numElements, dtype.byteSize());
    if (end - begin != expectedBytes) {
      throw new CheckpointException(
          where
              + "data_offsets=["
              + begin
              + ", "
              + end
              + ") hold "
              + (end - begin)
              + " bytes, but dtype="
              + dtype
              + " shape="
              + shapeList
              + " needs "
              + expectedBytes);
    }
    return new Tensor(name, file, dtype, shape, dataSection.asSlice(begin, end - begin));
  }

  private static long multiplyOrFail(String where, long a, long b) {
    try {
      return Math.multiplyExact(a, b);
    } catch (ArithmeticException e) {
      throw new CheckpointException(where + "shape is too large", e);
    }
  }

  public Path path() {
    return path;
  }

  /** The whole mapped file, for fingerprinting. */
  public MemorySegment mapping() {
    return mapping;
  }

  /** Tensors by name, in header order. */
  public Map<String, Tensor> tensors() {
    return tensors;
  }

  /** The tensor named {@code name}, or a {@link CheckpointException} naming file and tensor. */
  public Tensor tensor(String name) {
    Tensor t = tensors.get(name);
    if (t == null) {
      throw new CheckpointException(path + ": tensor " + name + " is missing");
    }
    return t;
  }

  /** The header's {@code __metadata__} object (empty when absent). */
  public Map<String, Object> metadata() {
    return metadata;
  }
}

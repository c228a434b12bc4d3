package io.tokenspeed.model.checkpoint;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Writes safetensors files for tests, well-formed or deliberately broken. */
public final class SafetensorsWriter {
  private SafetensorsWriter() {}

  /** One tensor: name, dtype name, shape and raw little-endian bytes. */
  public record Entry(String name, String dtype, long[] shape, byte[] bytes) {
    public Entry withName(String n) {
      return new Entry(n, dtype, shape, bytes);
    }

    public Entry withShape(long... s) {
      return new Entry(name, dtype, s, bytes);
    }
  }

  /** Every tensor of {@code file}, bytes copied. */
  public static List<Entry> read(Path file) {
    try (Arena arena = Arena.ofConfined()) {
      SafetensorsFile f = SafetensorsFile.open(file, arena);
      List<Entry> out = new ArrayList<>();
      for (Map.Entry<String, Tensor> e : f.tensors().entrySet()) {
        Tensor t = e.getValue();
        long[] shape = new long[t.rank()];
        for (int i = 0; i < shape.length; i++) {
          shape[i] = t.dim(i);
        }
        out.add(
            new Entry(
                e.getKey(), t.dtype().name(), shape, t.data().toArray(ValueLayout.JAVA_BYTE)));
      }
      return out;
    }
  }

  /** The header JSON for {@code entries} laid out back to back. */
  public static String header(List<Entry> entries) {
    StringBuilder sb = new StringBuilder("{\"__metadata__\":{\"format\":\"pt\"}");
    long at = 0;
    for (Entry e : entries) {
      sb.append(",\"").append(e.name()).append("\":{\"dtype\":\"").append(e.dtype());
      sb.append("\",\"shape\":[");
      for (int i = 0; i < e.shape().length; i++) {
        sb.append(i > 0 ? "," : "").append(e.shape()[i]);
      }
      sb.append("],\"data_offsets\":[").append(at).append(',').append(at + e.bytes().length);
      sb.append("]}");
      at += e.bytes().length;
    }
    return sb.append('}').toString();
  }

  /** Writes a well-formed file. */
  public static void write(Path file, List<Entry> entries) {
    ByteArrayOutputStream data = new ByteArrayOutputStream();
    for (Entry e : entries) {
      data.writeBytes(e.bytes());
    }
    String header = header(entries);
    while ((header.length() + 8) % 8 != 0) {
      header = header + " ";
    }
    byte[] h = header.getBytes(StandardCharsets.UTF_8);
    writeRaw(file, h.length, h, data.toByteArray());
  }

  /** Writes {@code u64le(headerLength) | header | data} verbatim. */
  public static void writeRaw(Path file, long headerLength, byte[] header, byte[] data) {
    ByteBuffer len = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(headerLength);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.writeBytes(len.array());
    out.writeBytes(header);
    out.writeBytes(data);
    try {
      Files.write(file, out.toByteArray());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** F32 bytes rounded to BF16 (nearest, ties to even). */
  public static byte[] toBf16(byte[] f32) {
    ByteBuffer in = ByteBuffer.wrap(f32).order(ByteOrder.LITTLE_ENDIAN);
    ByteBuffer out = ByteBuffer.allocate(f32.length / 2).order(ByteOrder.LITTLE_ENDIAN);
    while (in.hasRemaining()) {
      int bits = in.getInt();
      int rounded = (bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16;
      out.putShort((short) rounded);
    }
    return out.array();
  }

  /** F32 bytes rounded to F16. */
  public static byte[] toF16(byte[] f32) {
    ByteBuffer in = ByteBuffer.wrap(f32).order(ByteOrder.LITTLE_ENDIAN);
    ByteBuffer out = ByteBuffer.allocate(f32.length / 2).order(ByteOrder.LITTLE_ENDIAN);
    while (in.hasRemaining()) {
      out.putShort(Float.floatToFloat16(in.getFloat()));
    }
    return out.array();
  }

  /** 16-bit floats ({@code BF16} or {@code F16}) widened to F32 bytes, independently of Tensor. */
  public static byte[] widen(byte[] half, String dtype) {
    ByteBuffer in = ByteBuffer.wrap(half).order(ByteOrder.LITTLE_ENDIAN);
    ByteBuffer out = ByteBuffer.allocate(half.length * 2).order(ByteOrder.LITTLE_ENDIAN);
    while (in.hasRemaining()) {
      short s = in.getShort();
      out.putFloat(
          dtype.equals("BF16")
              ? Float.intBitsToFloat((s & 0xffff) << 16)
              : Float.float16ToFloat(s));
    }
    return out.array();
  }
}

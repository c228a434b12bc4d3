package io.tokenspeed.model.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import io.tokenspeed.testkit.DecoderContract;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Map;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;

/**
 * The coverage-guided fuzz target (Jazzer) of {@link SafetensorsFile#open}: the header length
 * field, the header's JSON and its entries. Without {@code JAZZER_FUZZ} it replays the seeds under
 * {@code SafetensorsGuidedFuzzTestInputs/files} as a regression test; with it, it fuzzes
 * (docs/reliability/fuzzing.md has the commands and figures). {@link SafetensorsFuzzTest} is the
 * seeded share.
 *
 * <p>An input is a mode byte and a file. Mode {@code 0} (even) writes the rest of the input as the
 * file; mode {@code 1} (odd) reads it as header text, then (after the first NUL byte, if any) the
 * data section, and writes a file whose length field is the header's true length, so that the
 * fuzzer's edits to the JSON reach the entry checks instead of stopping at the length field.
 *
 * <p>Every file must open or be refused with a {@link CheckpointException} whose message is one
 * line and starts with the file's name; never another exception or error, never a hang, never an
 * allocation out of proportion to the file. A file that opens keeps every tensor inside the data
 * section, with the byte size its dtype and shape need and exactly the file's bytes.
 */
class SafetensorsGuidedFuzzTest {

  private static final Path FILE = file();

  @FuzzTest(maxDuration = "3m")
  void files(byte[] data) throws IOException {
    if (data.length == 0) {
      return;
    }
    byte[] bytes = Arrays.copyOfRange(data, 1, data.length);
    if ((data[0] & 1) == 1) {
      int nul = indexOf(bytes, (byte) 0);
      int headerLength = nul < 0 ? bytes.length : nul;
      byte[] file = new byte[8 + bytes.length - (nul < 0 ? 0 : 1)];
      ByteBuffer.wrap(file).order(ByteOrder.LITTLE_ENDIAN).putLong(0, headerLength);
      System.arraycopy(bytes, 0, file, 8, headerLength);
      if (nul >= 0) {
        System.arraycopy(bytes, nul + 1, file, 8 + headerLength, bytes.length - nul - 1);
      }
      bytes = file;
    }
    byte[] content = bytes;
    Files.write(FILE, content);
    Supplier<String> input =
        () ->
            new String(content, StandardCharsets.UTF_8)
                + " (hex "
                + HexFormat.of().formatHex(content)
                + ")";
    try (Arena arena = Arena.ofConfined()) {
      DecoderContract.Outcome<SafetensorsFile> o =
          DecoderContract.decode(
              CheckpointException.class,
              4L << 20,
              1024,
              content.length,
              input,
              () -> SafetensorsFile.open(FILE, arena));
      if (o.refused()) {
        assertTrue(
            o.refusal().getMessage().startsWith(FILE + ": "),
            () -> "message does not name the file: " + o.refusal().getMessage());
        return;
      }
      check(o.value(), content, input);
    }
  }

  @Test
  void shouldKeepTheMessageOnOneLineWhenADtypeHoldsALineBreak() throws IOException {
    // Found by this target: a dtype (or tensor name) with a CR or LF in it reached the message as
    // is, so the refusal printed as two lines.
    byte[] header =
        "{\"w\\n\": {\"dtype\": \"F\\r32\", \"shape\": [1], \"data_offsets\": [0, 4]}}"
            .getBytes(StandardCharsets.UTF_8);
    byte[] file = new byte[8 + header.length + 4];
    ByteBuffer.wrap(file).order(ByteOrder.LITTLE_ENDIAN).putLong(0, header.length);
    System.arraycopy(header, 0, file, 8, header.length);
    Files.write(FILE, file);
    try (Arena arena = Arena.ofConfined()) {
      CheckpointException e =
          assertThrows(CheckpointException.class, () -> SafetensorsFile.open(FILE, arena));
      assertEquals(
          FILE
              + ": tensor w\\u000a: dtype=F\\u000d32 is not supported; allowed: F32, BF16, F16, I32",
          e.getMessage());
    }
  }

  private static void check(SafetensorsFile f, byte[] content, Supplier<String> input) {
    long dataStart = 8 + ByteBuffer.wrap(content).order(ByteOrder.LITTLE_ENDIAN).getLong(0);
    long base = f.mapping().address();
    assertEquals(content.length, f.mapping().byteSize(), input);
    for (Map.Entry<String, Tensor> e : f.tensors().entrySet()) {
      Tensor t = e.getValue();
      MemorySegment d = t.data();
      long at = d.address() - base;
      Supplier<String> where =
          () -> "tensor " + e.getKey() + " at " + at + " size " + d.byteSize() + ": " + input.get();
      assertTrue(at >= dataStart && at + d.byteSize() <= content.length, where);
      long elements = 1;
      for (int dim : t.shape()) {
        assertTrue(dim >= 0, where);
        elements = Math.multiplyExact(elements, dim);
      }
      assertEquals(elements, t.numElements(), where);
      assertEquals(elements * t.dtype().byteSize(), d.byteSize(), where);
      assertArrayEquals(
          Arrays.copyOfRange(content, (int) at, (int) (at + d.byteSize())),
          d.toArray(ValueLayout.JAVA_BYTE),
          where);
    }
  }

  private static int indexOf(byte[] bytes, byte b) {
    for (int i = 0; i < bytes.length; i++) {
      if (bytes[i] == b) {
        return i;
      }
    }
    return -1;
  }

  private static Path file() {
    try {
      Path shm = Path.of("/dev/shm");
      Path dir =
          Files.isDirectory(shm) && Files.isWritable(shm)
              ? Files.createTempDirectory(shm, "ts-safetensors-fuzz")
              : Files.createTempDirectory("ts-safetensors-fuzz");
      Path file = dir.resolve("model.safetensors");
      Runtime.getRuntime()
          .addShutdownHook(
              Thread.ofPlatform()
                  .unstarted(
                      () -> {
                        file.toFile().delete();
                        dir.toFile().delete();
                      }));
      return file;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}

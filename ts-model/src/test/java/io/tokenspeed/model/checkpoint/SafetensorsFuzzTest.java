package io.tokenspeed.model.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Opens tens of thousands of damaged {@code .safetensors} files. Each must either open, with every
 * tensor's bytes inside the file's data section and of the size its dtype and shape need, or be
 * refused with a {@link CheckpointException} whose message names the file (and, for damage to one
 * header entry, that entry) — never another exception or error, and never a hang.
 *
 * <p>The damage covers the length field, the header's text (truncation, stray or invalid UTF-8
 * bytes, tokens swapped, deep nesting) and its parsed tree (entries dropped, dtype, shape and
 * offsets changed to other types, huge, negative, overlapping or out-of-range values), with the
 * length field recomputed so that the damage reaches the entry checks. A failure message carries
 * the seed, the input's number and its bytes, so it replays.
 */
class SafetensorsFuzzTest {

  private static final long SEED = 20261202L;
  private static final int BATCHES = 8;
  private static final int PER_BATCH = 5_000;

  private static final String[] DTYPES = {"F32", "BF16", "F16", "I32"};
  private static final int[] DTYPE_BYTES = {4, 2, 2, 4};

  private enum Mutation {
    RANDOM_BYTES,
    TRUNCATED,
    BIT_FLIPS,
    LENGTH_FIELD_CHANGED,
    HEADER_TEXT_DAMAGED,
    HEADER_TREE_DAMAGED,
    HEADER_NOT_UTF8,
    DATA_RESIZED,
    VALID
  }

  /** A well-formed file: its entries, header text and header tree. */
  private record Sample(List<SafetensorsWriter.Entry> entries, String header, Object tree) {

    byte[] data() {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      entries.forEach(e -> out.writeBytes(e.bytes()));
      return out.toByteArray();
    }
  }

  @TempDir Path dir;

  @Test
  void shouldOpenOrRefuseWithACheckpointExceptionWhenFuzzedWithDamagedFiles() {
    SplittableRandom rnd = new SplittableRandom(SEED);
    List<Sample> corpus = new ArrayList<>();
    for (int i = 0; i < 200; i++) {
      corpus.add(sample(rnd));
    }
    Path file = dir.resolve("fuzz.safetensors");
    Map<Mutation, int[]> counts = new EnumMap<>(Mutation.class); // [opened, refused]
    for (Mutation m : Mutation.values()) {
      counts.put(m, new int[2]);
    }
    for (int batch = 0; batch < BATCHES; batch++) {
      int first = batch * PER_BATCH;
      assertTimeoutPreemptively(
          Duration.ofSeconds(60),
          () -> {
            for (int i = first; i < first + PER_BATCH; i++) {
              Mutation m = Mutation.values()[rnd.nextInt(Mutation.values().length)];
              Sample s = corpus.get(rnd.nextInt(corpus.size()));
              List<String> touched = new ArrayList<>();
              byte[] bytes = mutate(m, s, rnd, touched);
              counts.get(m)[check(file, bytes, s, m, touched, i) ? 0 : 1]++;
            }
          },
          () -> "seed=" + SEED + ": batch starting at input " + first + " did not finish");
    }
    for (Mutation m : Mutation.values()) {
      int[] c = counts.get(m);
      assertTrue(m == Mutation.VALID ? c[1] == 0 : c[1] > 0, m + " " + Arrays.toString(c));
    }
    // Damage behind a valid length field must reach the entry checks and pass them sometimes.
    assertTrue(counts.get(Mutation.HEADER_TREE_DAMAGED)[0] > 100, "tree damage accepted");
    assertTrue(counts.get(Mutation.HEADER_TREE_DAMAGED)[1] > 1_000, "tree damage refused");
  }

  /** Opens {@code bytes} as a file; true when it opened (and was checked), false when refused. */
  private static boolean check(
      Path file, byte[] bytes, Sample s, Mutation m, List<String> touched, int i) {
    try {
      Files.write(file, bytes);
    } catch (IOException e) {
      throw new AssertionError(e);
    }
    String replay = "seed=" + SEED + " input " + i + " (" + m + "): ";
    try (Arena arena = Arena.ofConfined()) {
      SafetensorsFile f;
      try {
        f = SafetensorsFile.open(file, arena);
      } catch (CheckpointException e) {
        String message = e.getMessage();
        assertTrue(
            message != null && message.startsWith(file.toString() + ": "),
            () -> replay + "message does not name the file: " + message);
        if (!touched.isEmpty()) {
          assertTrue(
              message.contains(touched.getFirst()),
              () -> replay + "message does not name " + touched + ": " + message);
        }
        return false;
      } catch (Throwable t) {
        throw new AssertionError(replay + "threw " + t + "; file=" + hex(bytes), t);
      }
      long headerLength = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).getLong(0);
      long dataStart = 8 + headerLength;
      long base = f.mapping().address();
      assertEquals(bytes.length, f.mapping().byteSize(), replay);
      for (Map.Entry<String, Tensor> e : f.tensors().entrySet()) {
        Tensor t = e.getValue();
        MemorySegment d = t.data();
        long at = d.address() - base;
        String where = replay + "tensor " + e.getKey() + " at " + at + " size " + d.byteSize();
        assertTrue(at >= dataStart && at + d.byteSize() <= bytes.length, where);
        long elements = 1;
        for (int dim : t.shape()) {
          assertTrue(dim >= 0, where);
          elements = Math.multiplyExact(elements, dim);
        }
        assertEquals(elements, t.numElements(), where);
        assertEquals(elements * t.dtype().byteSize(), d.byteSize(), where);
        assertArrayEquals(
            Arrays.copyOfRange(bytes, (int) at, (int) (at + d.byteSize())),
            d.toArray(ValueLayout.JAVA_BYTE),
            where);
      }
      if (m == Mutation.VALID) {
        assertEquals(s.entries().size(), f.tensors().size(), replay);
        for (SafetensorsWriter.Entry e : s.entries()) {
          Tensor t = f.tensor(e.name());
          assertEquals(e.dtype(), t.dtype().name(), replay);
          assertArrayEquals(e.bytes(), t.data().toArray(ValueLayout.JAVA_BYTE), replay);
        }
      }
      return true;
    }
  }

  // ---------------------------------------------------------------- inputs

  private static Sample sample(SplittableRandom rnd) {
    List<SafetensorsWriter.Entry> entries = new ArrayList<>();
    int count = rnd.nextInt(5);
    for (int i = 0; i < count; i++) {
      int d = rnd.nextInt(DTYPES.length);
      long[] shape = new long[rnd.nextInt(4)];
      long elements = 1;
      for (int k = 0; k < shape.length; k++) {
        shape[k] = rnd.nextInt(rnd.nextInt(8) == 0 ? 1 : 5);
        elements *= shape[k];
      }
      byte[] bytes = new byte[(int) elements * DTYPE_BYTES[d]];
      rnd.nextBytes(bytes);
      String name = (rnd.nextBoolean() ? "model.layers." : "t\u00e9nsor_") + i + ".weight";
      entries.add(new SafetensorsWriter.Entry(name, DTYPES[d], shape, bytes));
    }
    String header = SafetensorsWriter.header(entries);
    if (rnd.nextBoolean()) {
      header = header + " ".repeat(rnd.nextInt(8));
    }
    return new Sample(entries, header, Json.parse(header));
  }

  private static byte[] mutate(Mutation m, Sample s, SplittableRandom rnd, List<String> touched) {
    byte[] header = s.header().getBytes(StandardCharsets.UTF_8);
    byte[] valid = file(header.length, header, s.data());
    switch (m) {
      case RANDOM_BYTES -> {
        byte[] b = new byte[rnd.nextInt(300)];
        rnd.nextBytes(b);
        if (b.length >= 8 && rnd.nextBoolean()) {
          ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).putLong(0, rnd.nextInt(b.length));
        }
        return b;
      }
      case TRUNCATED -> {
        return Arrays.copyOf(valid, rnd.nextInt(valid.length));
      }
      case BIT_FLIPS -> {
        int flips = 1 + rnd.nextInt(4);
        for (int i = 0; i < flips; i++) {
          int bit = rnd.nextInt(valid.length * 8);
          valid[bit >>> 3] ^= (byte) (1 << (bit & 7));
        }
        return valid;
      }
      case LENGTH_FIELD_CHANGED -> {
        long size = valid.length;
        long[] lengths = {
          header.length + rnd.nextInt(1, 17),
          header.length - rnd.nextInt(1, 17),
          0,
          size - 8,
          size - 7,
          size,
          -1,
          Long.MIN_VALUE,
          Long.MAX_VALUE,
          SafetensorsFile.MAX_HEADER_BYTES + 1,
          (1L << 32) + header.length,
          rnd.nextLong()
        };
        long length = lengths[rnd.nextInt(lengths.length)];
        if (length == header.length) {
          length++;
        }
        ByteBuffer.wrap(valid).order(ByteOrder.LITTLE_ENDIAN).putLong(0, length);
        return valid;
      }
      case HEADER_TEXT_DAMAGED -> {
        JsonMutator.TextMutation[] all = JsonMutator.TextMutation.values();
        String text = JsonMutator.mutateText(all[rnd.nextInt(all.length)], s.header(), rnd);
        byte[] h = text.getBytes(StandardCharsets.UTF_8);
        return file(h.length, h, s.data());
      }
      case HEADER_TREE_DAMAGED -> {
        JsonMutator.TreeMutation[] all = JsonMutator.TreeMutation.values();
        JsonMutator.Mutated mutated =
            JsonMutator.mutateTree(all[rnd.nextInt(all.length)], s.tree(), rnd);
        touched.addAll(mutated.keys());
        byte[] h = JsonMutator.write(mutated.root()).getBytes(StandardCharsets.UTF_8);
        return file(h.length, h, s.data());
      }
      case HEADER_NOT_UTF8 -> {
        byte[][] invalid = {
          {(byte) 0xff}, {(byte) 0xc3}, {(byte) 0xed, (byte) 0xa0, (byte) 0x80}, {(byte) 0xc0, 0x41}
        };
        byte[] bad = invalid[rnd.nextInt(invalid.length)];
        int at = rnd.nextInt(header.length + 1);
        byte[] h = new byte[header.length + bad.length];
        System.arraycopy(header, 0, h, 0, at);
        System.arraycopy(bad, 0, h, at, bad.length);
        System.arraycopy(header, at, h, at + bad.length, header.length - at);
        return file(h.length, h, s.data());
      }
      case DATA_RESIZED -> {
        byte[] data = s.data();
        int length = Math.max(0, data.length + rnd.nextInt(-16, 17));
        byte[] resized = Arrays.copyOf(data, length == data.length ? length + 1 : length);
        return file(header.length, header, resized);
      }
      case VALID -> {
        return valid;
      }
    }
    throw new AssertionError(m);
  }

  private static byte[] file(long headerLength, byte[] header, byte[] data) {
    ByteBuffer b =
        ByteBuffer.allocate(8 + header.length + data.length).order(ByteOrder.LITTLE_ENDIAN);
    return b.putLong(headerLength).put(header).put(data).array();
  }

  private static String hex(byte[] bytes) {
    return HexFormat.of().formatHex(bytes, 0, Math.min(bytes.length, 4096));
  }
}

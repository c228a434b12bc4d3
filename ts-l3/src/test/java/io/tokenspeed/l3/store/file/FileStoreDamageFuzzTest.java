package io.tokenspeed.l3.store.file;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.StoreTesting;
import io.tokenspeed.l3.store.file.FileStoreSettings.DirectIo;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Object files read back after random damage, many times over: every published object is damaged by
 * one to four random edits (bit flips, byte overwrites, truncation, appended bytes, a header
 * rewritten, the file swapped for another key's or another namespace's object, or left alone) and
 * read into destinations of the right and of wrong sizes. A GET may answer {@code Ok} only when the
 * file is byte for byte the one written and the destination has the payload's size, and then with
 * exactly the written payload; otherwise it answers a per-key fact ({@code Invalid} or {@code
 * Missing}), never an exception, never garbage accepted. The seed and round are in every failure.
 * One seed reads with O_DIRECT (in 4 KiB chunks, so a payload spans several chunks and a damaged
 * byte lands in any of them), the other through the page cache.
 */
class FileStoreDamageFuzzTest {
  private static final int ROUNDS = 1500;

  @TempDir Path temp;

  private enum Edit {
    FLIP_BIT,
    OVERWRITE_BYTES,
    TRUNCATE,
    APPEND,
    RANDOM_HEADER,
    OTHER_KEYS_OBJECT,
    OTHER_NAMESPACES_OBJECT,
    NONE
  }

  @ParameterizedTest(name = "seed={0} direct_io={1}")
  @CsvSource({"20261202, ON", "7, OFF"})
  void shouldAcceptOnlyTheObjectAsWrittenWhateverTheDamage(long seed, DirectIo directIo)
      throws Exception {
    SplittableRandom random = new SplittableRandom(seed);
    FileStore store =
        ReadModes.open(
            FileStoreSettings.of(temp.resolve("s" + seed))
                .withLimits(512, 1 << 20)
                .withReads(directIo, 4, 4096));
    String ns = StoreTesting.namespace("fuzz" + seed);
    String otherNs = StoreTesting.namespace("other" + seed);
    int damaged = 0;
    int accepted = 0;
    try (Arena arena = Arena.ofConfined()) {
      for (int round = 0; round < ROUNDS; round++) {
        String where = "seed " + seed + " round " + round;
        int size = 1 + random.nextInt(3000);
        String key = StoreTesting.key(ns, round);
        String other = StoreTesting.key(ns, ROUNDS + round);
        String foreign = StoreTesting.key(otherNs, round);
        byte[] payload = StoreTesting.bytes(random.nextLong(), size);
        byte[] otherPayload = StoreTesting.bytes(random.nextLong(), size);
        MemorySegment src = arena.allocate(size);
        MemorySegment.copy(payload, 0, src, ValueLayout.JAVA_BYTE, 0, size);
        MemorySegment otherSrc = arena.allocate(size);
        MemorySegment.copy(otherPayload, 0, otherSrc, ValueLayout.JAVA_BYTE, 0, size);
        store.put(List.of(key, other), List.of(src, otherSrc));
        store.put(List.of(foreign), List.of(otherSrc));
        Path file = store.objectPath(key);
        byte[] original = Files.readAllBytes(file);

        int edits = 1 + random.nextInt(4);
        for (int e = 0; e < edits; e++) {
          edit(
              Edit.values()[random.nextInt(Edit.values().length)],
              file,
              store,
              other,
              foreign,
              random);
        }
        boolean intact = Arrays.equals(original, Files.readAllBytes(file));
        if (!intact) {
          damaged++;
        }
        for (long length : new long[] {size, size + 1 + random.nextInt(8), Math.max(1, size - 1)}) {
          MemorySegment dst = arena.allocate(length);
          dst.fill((byte) 0x5a);
          StoreResult result;
          try {
            result = store.get(List.of(key), List.of(dst));
          } catch (Exception ex) {
            fail(where + ": GET threw instead of answering a per-key fact", ex);
            return;
          }
          RowResult row = result.rows().getFirst();
          if (row instanceof RowResult.Ok) {
            accepted++;
            assertTrue(
                intact, where + ": a damaged object was accepted (destination " + length + ")");
            assertTrue(length == size, where + ": accepted into a destination of " + length);
            byte[] got = dst.asSlice(0, size).toArray(ValueLayout.JAVA_BYTE);
            assertArrayEquals(
                payload, got, where + ": accepted bytes differ from the written ones");
          } else if (!intact || length != size) {
            assertTrue(
                row instanceof RowResult.Invalid || row instanceof RowResult.Missing,
                where + ": damaged or mis-sized read answered " + row);
          } else {
            fail(where + ": an intact object read into its own size answered " + row);
          }
        }
        Files.deleteIfExists(file);
      }
    }
    System.out.printf(
        "file-store damage fuzz seed %d (%s): %d objects, %d damaged, %d reads accepted%n",
        seed, store.counters(), ROUNDS, damaged, accepted);
    ReadModes.assertRan(store, directIo);
    assertTrue(damaged > ROUNDS / 2, "most rounds damaged the object: " + damaged);
    assertTrue(accepted > 0, "some intact objects were read back: " + accepted);
  }

  private static void edit(
      Edit edit, Path file, FileStore store, String other, String foreign, SplittableRandom random)
      throws Exception {
    long length = Files.size(file);
    switch (edit) {
      case FLIP_BIT -> {
        if (length > 0) {
          long at = random.nextLong(length);
          byte[] one = read(file, at, 1);
          one[0] ^= (byte) (1 << random.nextInt(8));
          write(file, at, one);
        }
      }
      case OVERWRITE_BYTES -> {
        if (length > 0) {
          long at = random.nextLong(length);
          byte[] noise = new byte[(int) Math.min(length - at, 1 + random.nextInt(16))];
          random.nextBytes(noise);
          write(file, at, noise);
        }
      }
      case TRUNCATE -> {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
          ch.truncate(length == 0 ? 0 : random.nextLong(length));
        }
      }
      case APPEND -> {
        byte[] extra = new byte[1 + random.nextInt(32)];
        random.nextBytes(extra);
        Files.write(file, extra, StandardOpenOption.APPEND);
      }
      case RANDOM_HEADER -> {
        byte[] noise = new byte[(int) Math.min(length, ObjectFileDescriptor.FIXED_HEADER_BYTES)];
        random.nextBytes(noise);
        write(file, 0, noise);
      }
      case OTHER_KEYS_OBJECT ->
          Files.copy(
              store.objectPath(other), file, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
      case OTHER_NAMESPACES_OBJECT ->
          Files.copy(
              store.objectPath(foreign), file, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
      case NONE -> {}
    }
  }

  private static byte[] read(Path file, long at, int n) throws Exception {
    try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
      ByteBuffer b = ByteBuffer.allocate(n);
      ch.read(b, at);
      return b.array();
    }
  }

  private static void write(Path file, long at, byte[] bytes) throws Exception {
    try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
      ch.write(ByteBuffer.wrap(bytes), at);
    }
  }
}

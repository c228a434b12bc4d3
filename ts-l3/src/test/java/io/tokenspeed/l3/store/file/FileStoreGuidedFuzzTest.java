package io.tokenspeed.l3.store.file;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import com.code_intelligence.jazzer.junit.FuzzTest;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.StoreTesting;
import io.tokenspeed.testkit.DecoderContract;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.List;
import java.util.function.Supplier;
import java.util.stream.Stream;
import java.util.zip.CRC32C;

/**
 * The coverage-guided fuzz target (Jazzer) of the {@link FileStore}'s read path: an object file
 * whose bytes come from the fuzzer is read back with {@link FileStore#get}. Without {@code
 * JAZZER_FUZZ} it replays the seeds under {@code FileStoreGuidedFuzzTestInputs/objectsReadBack} as
 * a regression test; with it, it fuzzes (docs/reliability/fuzzing.md has the commands and figures).
 * {@link FileStoreDamageFuzzTest} is the seeded share.
 *
 * <p>An input is a mode byte and the bytes of the file placed where the store looks for the key.
 * The mode's low bits repair the header and payload checksums (so that the fuzzer's edits reach the
 * key, length and size checks instead of stopping at a checksum), the next two pick the
 * destination's size (the payload the file holds, one more, one less, or what the length field
 * says) and the next one which key is read: one of the namespace the seeds were written for, or of
 * another namespace, so an object of the wrong key or namespace is the common case.
 *
 * <p>The read must answer {@code Ok} exactly when the file is the object the store itself writes
 * for that key and payload (or the object it wrote in the old, unaligned format version 1, which it
 * still reads) and the destination has the payload's size, and then the destination holds the
 * payload; every other file is {@code Invalid}. It never throws, never hangs and never allocates
 * out of proportion to the file.
 */
class FileStoreGuidedFuzzTest {

  private static final String NAMESPACE = StoreTesting.namespace("fuzz");
  private static final String OTHER_NAMESPACE = StoreTesting.namespace("other");
  private static final String[] KEYS = {
    StoreTesting.key(NAMESPACE, 1), StoreTesting.key(OTHER_NAMESPACE, 1)
  };

  /** The longest destination the target allocates (the length field may say anything). */
  private static final long MAX_DESTINATION_BYTES = 1 << 16;

  private static final Path ROOT = root();
  private static final FileStore STORE = store();

  @FuzzTest(maxDuration = "3m")
  void objectsReadBack(byte[] data) throws IOException {
    if (data.length == 0) {
      return;
    }
    int mode = Byte.toUnsignedInt(data[0]);
    String key = KEYS[(mode >>> 4) & 1];
    byte[] keyBytes = key.getBytes(StandardCharsets.UTF_8);
    byte[] file = Arrays.copyOfRange(data, 1, data.length);
    boolean version1 =
        file.length >= ObjectFileDescriptor.VERSION_OFFSET + 2
            && ByteBuffer.wrap(file).getShort(ObjectFileDescriptor.VERSION_OFFSET)
                == ObjectFileDescriptor.VERSION_1;
    int headerBytes =
        version1
            ? ObjectFileDescriptor.version1HeaderBytes(keyBytes.length)
            : ObjectFileDescriptor.headerBytes(keyBytes.length);
    if ((mode & 1) != 0 && file.length >= headerBytes) {
      CRC32C crc = new CRC32C();
      if (version1) {
        crc.update(file, 0, ObjectFileDescriptor.VERSION_1_HEADER_CRC_OFFSET);
        crc.update(file, ObjectFileDescriptor.VERSION_1_FIXED_HEADER_BYTES, keyBytes.length);
        ByteBuffer.wrap(file)
            .putInt(ObjectFileDescriptor.VERSION_1_HEADER_CRC_OFFSET, (int) crc.getValue());
      } else {
        crc.update(file, 0, ObjectFileDescriptor.HEADER_CRC_OFFSET);
        crc.update(
            file,
            ObjectFileDescriptor.FIXED_HEADER_BYTES,
            headerBytes - ObjectFileDescriptor.FIXED_HEADER_BYTES);
        ByteBuffer.wrap(file).putInt(ObjectFileDescriptor.HEADER_CRC_OFFSET, (int) crc.getValue());
      }
    }
    if ((mode & 2) != 0 && file.length >= headerBytes) {
      CRC32C crc = new CRC32C();
      crc.update(file, headerBytes, file.length - headerBytes);
      ByteBuffer.wrap(file).putInt(ObjectFileDescriptor.PAYLOAD_CRC_OFFSET, (int) crc.getValue());
    }
    long held = Math.max(0, file.length - headerBytes);
    long destinationBytes =
        switch ((mode >>> 2) & 3) {
          case 0 -> held;
          case 1 -> held + 1;
          case 2 -> Math.max(0, held - 1);
          default ->
              file.length >= ObjectFileDescriptor.VERSION_1_FIXED_HEADER_BYTES
                  ? Math.floorMod(
                      ByteBuffer.wrap(file).getLong(ObjectFileDescriptor.PAYLOAD_LENGTH_OFFSET),
                      MAX_DESTINATION_BYTES)
                  : held;
        };
    Path path = STORE.objectPath(key);
    Files.createDirectories(path.getParent());
    Files.write(path, file);

    byte[] payload = Arrays.copyOfRange(file, Math.min(file.length, headerBytes), file.length);
    byte[] written =
        version1
            ? ObjectFiles.version1(keyBytes, payload)
            : ObjectFiles.version2(keyBytes, payload);
    boolean expectOk = Arrays.equals(file, written) && destinationBytes == payload.length;
    Supplier<String> input =
        () ->
            "mode="
                + mode
                + " destination="
                + destinationBytes
                + " file="
                + HexFormat.of().formatHex(file);

    try (Arena arena = Arena.ofConfined()) {
      MemorySegment destination = arena.allocate(Math.max(1, destinationBytes));
      MemorySegment slice = destination.asSlice(0, destinationBytes);
      DecoderContract.Outcome<StoreResult> o =
          DecoderContract.decode(
              NoRefusal.class,
              1 << 20,
              16,
              file.length,
              input,
              () -> STORE.get(List.of(key), List.of(slice)));
      RowResult row = o.value().rows().getFirst();
      if (expectOk) {
        assertEquals(new RowResult.Ok(payload.length, false), row, input);
        assertArrayEquals(payload, slice.toArray(ValueLayout.JAVA_BYTE), input);
      } else {
        assertInstanceOf(RowResult.Invalid.class, row, input);
      }
    }
  }

  /** No exception is a refusal here: a damaged object is a row, never a throw. */
  private static final class NoRefusal extends RuntimeException {
    private static final long serialVersionUID = 1L;
  }

  private static Path root() {
    try {
      Path shm = Path.of("/dev/shm");
      Path dir =
          Files.isDirectory(shm) && Files.isWritable(shm)
              ? Files.createTempDirectory(shm, "ts-filestore-fuzz")
              : Files.createTempDirectory("ts-filestore-fuzz");
      Runtime.getRuntime().addShutdownHook(Thread.ofPlatform().unstarted(() -> delete(dir)));
      return dir;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static FileStore store() {
    try {
      return new FileStore(
          FileStoreSettings.of(ROOT.resolve("store")).withLimits(512, 1 << 20).withFsync(false));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static void delete(Path dir) {
    try (Stream<Path> files = Files.walk(dir)) {
      files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      // best effort at exit
    }
  }
}

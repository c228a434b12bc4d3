package io.tokenspeed.l3.store.file;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.StoreContractTest;
import io.tokenspeed.l3.store.StoreTesting;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.function.Supplier;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

class FileStoreTest extends StoreContractTest {

  private static final int HEADER = ObjectFileDescriptor.FIXED_HEADER_BYTES;

  @TempDir Path temp;
  private final List<Path> roots = new ArrayList<>();

  @Override
  protected Store newStore(int maxKeyBytes, long maxValueBytes) throws IOException {
    Path root = temp.resolve("store-" + roots.size());
    roots.add(root);
    return new FileStore(FileStoreSettings.of(root).withLimits(maxKeyBytes, maxValueBytes));
  }

  @Override
  protected void assertQuiescent() throws IOException {
    for (Path root : roots) {
      assertEquals(List.of(), temporaryFiles(root), "temporary files left in " + root);
    }
  }

  /** Ways an object file can be damaged after it was published. */
  enum Damage {
    FLIP_FIRST_PAYLOAD_BYTE,
    FLIP_LAST_PAYLOAD_BYTE,
    TRUNCATE_ONE_PAYLOAD_BYTE,
    TRUNCATE_INTO_HEADER,
    EMPTY_FILE,
    APPEND_ONE_BYTE,
    OVERWRITE_MAGIC,
    OVERWRITE_VERSION,
    OVERWRITE_PAYLOAD_LENGTH,
    OVERWRITE_HEADER_WITH_RANDOM_BYTES,
    FLIP_A_KEY_BYTE,
    REPLACE_WITH_OBJECT_OF_ANOTHER_KEY
  }

  @ParameterizedTest(name = "{0}")
  @EnumSource(Damage.class)
  void shouldReportInvalidNeverOkWhenTheObjectFileIsDamaged(Damage damage) throws Exception {
    FileStore files = (FileStore) store;
    String ns = StoreTesting.namespace("damage");
    String key = StoreTesting.key(ns, 1);
    String otherKey = StoreTesting.key(ns, 2);
    int size = 4096;
    MemorySegment source = host.asSlice(64, size);
    StoreTesting.fill(source, damage.ordinal());
    store.put(List.of(key, otherKey), List.of(source, source));
    Path file = files.objectPath(key);
    int keyBytes = key.getBytes(StandardCharsets.UTF_8).length;
    long payloadStart = ObjectFileDescriptor.payloadOffset(keyBytes);

    switch (damage) {
      case FLIP_FIRST_PAYLOAD_BYTE -> flip(file, payloadStart);
      case FLIP_LAST_PAYLOAD_BYTE -> flip(file, payloadStart + size - 1);
      case TRUNCATE_ONE_PAYLOAD_BYTE -> truncate(file, payloadStart + size - 1);
      case TRUNCATE_INTO_HEADER -> truncate(file, HEADER + 3);
      case EMPTY_FILE -> truncate(file, 0);
      case APPEND_ONE_BYTE ->
          Files.write(file, new byte[] {1}, StandardOpenOption.WRITE, StandardOpenOption.APPEND);
      case OVERWRITE_MAGIC -> write(file, ObjectFileDescriptor.MAGIC_OFFSET, "ZZZZ".getBytes());
      case OVERWRITE_VERSION -> write(file, ObjectFileDescriptor.VERSION_OFFSET, new byte[] {0, 9});
      case OVERWRITE_PAYLOAD_LENGTH ->
          write(
              file,
              ObjectFileDescriptor.PAYLOAD_LENGTH_OFFSET,
              ByteBuffer.allocate(8).putLong(size - 1).array());
      case OVERWRITE_HEADER_WITH_RANDOM_BYTES -> {
        byte[] noise = new byte[HEADER + keyBytes];
        new Random(42).nextBytes(noise);
        write(file, 0, noise);
      }
      case FLIP_A_KEY_BYTE -> flip(file, HEADER + keyBytes / 2);
      case REPLACE_WITH_OBJECT_OF_ANOTHER_KEY -> {
        Files.delete(file);
        Files.copy(files.objectPath(otherKey), file);
      }
    }

    assertInstanceOf(RowResult.Ok.class, row(store.exists(List.of(key))), "a file counts");
    long held = Math.max(0, Files.size(file) - payloadStart);
    for (long length : new long[] {size, held, size - 1}) {
      if (length <= 0) {
        continue;
      }
      MemorySegment destination = host.asSlice(1 << 20, length);
      RowResult result = row(store.get(List.of(key), List.of(destination)));
      assertInstanceOf(RowResult.Invalid.class, result, damage + " destination=" + length);
    }
  }

  @Test
  void shouldPlaceTheObjectUnderNamespaceAndHashDirectoriesWhenAKeyIsPut() throws Exception {
    FileStore files = (FileStore) store;
    String ns = StoreTesting.namespace("layout");
    String key = StoreTesting.key(ns, 7);
    MemorySegment source = host.asSlice(64, 300);
    byte[] payload = StoreTesting.fill(source, 7);
    store.put(List.of(key), List.of(source));

    String hash = StoreTesting.sha256Hex(key);
    Path expected = files.settings().root().resolve(ns).resolve(hash.substring(0, 2)).resolve(hash);
    assertEquals(expected, files.objectPath(key));
    byte[] file = Files.readAllBytes(expected);
    byte[] keyBytes = key.getBytes(StandardCharsets.UTF_8);
    int payloadOffset = 4096; // 28 + K rounded up to the alignment
    assertEquals(payloadOffset, ObjectFileDescriptor.payloadOffset(keyBytes.length));
    assertEquals(payloadOffset + payload.length, file.length);
    ByteBuffer header = ByteBuffer.wrap(file);
    assertEquals(ObjectFileDescriptor.MAGIC, header.getInt(0));
    assertEquals(2, header.getShort(4));
    assertEquals(keyBytes.length, header.getShort(6));
    assertEquals(payload.length, header.getLong(8));
    assertEquals(payloadOffset, header.getInt(20));
    assertArrayEquals(keyBytes, Arrays.copyOfRange(file, HEADER, HEADER + keyBytes.length));
    assertArrayEquals(
        new byte[payloadOffset - HEADER - keyBytes.length],
        Arrays.copyOfRange(file, HEADER + keyBytes.length, payloadOffset),
        "zero padding up to the payload");
    assertArrayEquals(payload, Arrays.copyOfRange(file, payloadOffset, file.length));
  }

  @Test
  void shouldKeepEveryObjectInsideTheRootWhenKeysLookLikePaths() throws Exception {
    FileStore files = (FileStore) store;
    Path root = files.settings().root();
    List<String> keys =
        List.of(
            "../../escape_x",
            "/etc_passwd",
            "a/b_c|d",
            "..",
            "no-separator",
            "_empty-namespace",
            "UPPER_case",
            "nul\u0000byte_x",
            "tsl3-ab_..|g0|o0|r0");
    for (int i = 0; i < keys.size(); i++) {
      String key = keys.get(i);
      assertTrue(files.objectPath(key).startsWith(root), key);
      MemorySegment source = host.asSlice(64 + i * 100L, 50 + i);
      assertEquals(new RowResult.Ok(50 + i, false), row(store.put(List.of(key), List.of(source))));
    }
    try (Stream<Path> siblings = Files.list(temp)) {
      assertEquals(List.of(root), siblings.toList(), "nothing outside the root");
    }
    for (int i = 0; i < keys.size(); i++) {
      MemorySegment destination = host.asSlice(1 << 20, 50 + i);
      assertEquals(
          new RowResult.Ok(50 + i, false),
          row(store.get(List.of(keys.get(i)), List.of(destination))),
          keys.get(i));
      assertEquals(-1, destination.mismatch(host.asSlice(64 + i * 100L, 50 + i)), keys.get(i));
    }
    assertEquals(1, store.deleteNamespace("../../escape"));
    assertEquals(1, store.deleteNamespace(""));
    assertEquals(0, store.deleteNamespace("no-separator"));
    assertEquals(RowResult.MISSING, row(store.exists(List.of("../../escape_x"))));
    assertEquals(RowResult.MISSING, row(store.exists(List.of("_empty-namespace"))));
    assertEquals(
        keys.size() - 2,
        store.exists(keys).rows().stream().filter(r -> r instanceof RowResult.Ok).count());
  }

  @Test
  void shouldDeleteOnlyMatchingKeysWhenTheNamespaceHoldsAnUnderscore() throws Exception {
    List<String> keys = List.of("a_b_1", "a_b_2", "a_c_1", "a_1", "a_bb_1");
    for (String key : keys) {
      store.put(List.of(key), List.of(host.asSlice(0, 10)));
    }
    assertEquals(2, store.deleteNamespace("a_b"));
    assertEquals(
        List.of(
            RowResult.MISSING,
            RowResult.MISSING,
            new RowResult.Ok(10, false),
            new RowResult.Ok(10, false),
            new RowResult.Ok(10, false)),
        store.exists(keys).rows());
    assertEquals(3, store.deleteNamespace("a"));
  }

  @Test
  void shouldRemoveLeftoverTemporaryFilesWithoutCountingThemWhenANamespaceIsDeleted()
      throws Exception {
    FileStore files = (FileStore) store;
    String ns = StoreTesting.namespace("leftovers");
    String key = StoreTesting.key(ns, 1);
    store.put(List.of(key), List.of(host.asSlice(0, 10)));
    Path killedWriter = files.objectPath(key).resolveSibling(FileStore.TEMP_PREFIX + "dead-1-2");
    Files.write(killedWriter, new byte[] {1, 2, 3});

    assertEquals(1, store.deleteNamespace(ns));
    assertFalse(Files.exists(files.settings().root().resolve(ns)));
  }

  @ParameterizedTest(name = "hardLinks={0} fsync={1}")
  @CsvSource({"true,true", "true,false", "false,true", "false,false"})
  void shouldStayCreateOnlyWhenPublishedByLinkOrByMove(boolean hardLinks, boolean fsync)
      throws Exception {
    FileStoreSettings settings = FileStoreSettings.of(temp.resolve("publish")).withFsync(fsync);
    try (FileStore files = new FileStore(settings, hardLinks)) {
      String key = StoreTesting.key(StoreTesting.namespace("publish"), 1);
      MemorySegment first = host.asSlice(64, 5000);
      MemorySegment second = host.asSlice(8192, 5000);
      byte[] firstBytes = StoreTesting.fill(first, 1);
      StoreTesting.fill(second, 2);

      assertEquals(new RowResult.Ok(5000, false), row(files.put(List.of(key), List.of(first))));
      assertEquals(new RowResult.Ok(5000, true), row(files.put(List.of(key), List.of(second))));
      MemorySegment destination = host.asSlice(1 << 20, 5000);
      assertEquals(
          new RowResult.Ok(5000, false), row(files.get(List.of(key), List.of(destination))));
      assertArrayEquals(firstBytes, destination.toArray(ValueLayout.JAVA_BYTE));
      assertEquals(List.of(), temporaryFiles(settings.root()));
    }
  }

  /**
   * A read-only file system or a directory this user may not write refuses every PUT: the store
   * reports it as a configuration failure (no outage, so reads go on), while a full disk stays a
   * per-row refusal and any other I/O failure an outage. Regression: a read-only store directory
   * used to make every failed backup an outage, whose cooldowns stopped the reads that still
   * worked.
   */
  @Test
  void shouldTellAWriteRefusalFromAFullDiskAndAnOutageByTheOperatingSystemsReason() {
    assertTrue(FileStore.isWriteRefused(new java.nio.file.AccessDeniedException("/s/.tmp-1")));
    assertTrue(
        FileStore.isWriteRefused(
            new java.nio.file.FileSystemException("/s/.tmp-1", null, "Read-only file system")));
    assertTrue(
        FileStore.isWriteRefused(
            new java.nio.file.FileSystemException("/s/ab", null, "Operation not permitted")));
    for (String other :
        List.of("No space left on device", "File too large", "Input/output error", "closed")) {
      IOException e = new java.nio.file.FileSystemException("/s/.tmp-1", null, other);
      assertFalse(FileStore.isWriteRefused(e), other);
    }
    assertFalse(FileStore.isWriteRefused(new IOException((String) null)));
    // a full disk, a quota and a file-size limit are out of space: a refusal of the row
    for (String full :
        List.of("No space left on device", "Disk quota exceeded", "File too large")) {
      assertTrue(
          FileStore.isOutOfSpace(new java.nio.file.FileSystemException("/s/.tmp-1", null, full)),
          full);
      assertTrue(FileStore.isOutOfSpace(new IOException(full)), full); // no reason: the message
    }
    // anything else is not: a write refusal, or an outage
    for (String other :
        List.of(
            "Read-only file system", "Operation not permitted", "Input/output error", "closed")) {
      assertFalse(
          FileStore.isOutOfSpace(new java.nio.file.FileSystemException("/s/.tmp-1", null, other)),
          other);
    }
    assertFalse(FileStore.isOutOfSpace(new IOException((String) null)));
    assertFalse(FileStore.isOutOfSpace(new java.nio.file.AccessDeniedException("/s/.tmp-1")));
  }

  @Test
  void shouldReadObjectsWrittenByAnEarlierStoreWhenTheRootIsReopened() throws Exception {
    Path root = temp.resolve("reopen");
    String key = StoreTesting.key(StoreTesting.namespace("reopen"), 1);
    MemorySegment source = host.asSlice(64, 1000);
    StoreTesting.fill(source, 3);
    try (FileStore writer = new FileStore(FileStoreSettings.of(root))) {
      writer.put(List.of(key), List.of(source));
    }
    try (FileStore reader = new FileStore(FileStoreSettings.of(root))) {
      MemorySegment destination = host.asSlice(1 << 20, 1000);
      assertEquals(
          new RowResult.Ok(1000, false), row(reader.get(List.of(key), List.of(destination))));
      assertEquals(-1, destination.mismatch(source));
    }
  }

  static Stream<Arguments> invalidSettings() {
    Path root = Path.of("store");
    FileStoreSettings.DirectIo auto = FileStoreSettings.DirectIo.AUTO;
    return Stream.of(
        Arguments.of(
            "root=null must be a directory path",
            (Supplier<?>) () -> new FileStoreSettings(null, 1, 1, true, auto, 1, 4096)),
        Arguments.of(
            "max_key_bytes=0 must be in [1, 65535]",
            (Supplier<?>) () -> new FileStoreSettings(root, 0, 1, true, auto, 1, 4096)),
        Arguments.of(
            "max_key_bytes=65536 must be in [1, 65535]",
            (Supplier<?>) () -> new FileStoreSettings(root, 65_536, 1, true, auto, 1, 4096)),
        Arguments.of(
            "max_value_bytes=0 must be in [1, 1099511627776]",
            (Supplier<?>) () -> new FileStoreSettings(root, 1, 0, true, auto, 1, 4096)),
        Arguments.of(
            "max_value_bytes=1099511627777 must be in [1, 1099511627776]",
            (Supplier<?>)
                () -> new FileStoreSettings(root, 1, (1L << 40) + 1, true, auto, 1, 4096)),
        Arguments.of(
            "direct_io=null must be one of auto, on, off",
            (Supplier<?>) () -> new FileStoreSettings(root, 1, 1, true, null, 1, 4096)),
        Arguments.of(
            "read_threads=-1 must be in [0, 256]",
            (Supplier<?>) () -> new FileStoreSettings(root, 1, 1, true, auto, -1, 4096)),
        Arguments.of(
            "read_threads=257 must be in [0, 256]",
            (Supplier<?>) () -> new FileStoreSettings(root, 1, 1, true, auto, 257, 4096)),
        Arguments.of(
            "read_chunk_bytes=4095 must be in [4096, 268435456]",
            (Supplier<?>) () -> new FileStoreSettings(root, 1, 1, true, auto, 1, 4095)),
        Arguments.of(
            "read_chunk_bytes=268435457 must be in [4096, 268435456]",
            (Supplier<?>) () -> new FileStoreSettings(root, 1, 1, true, auto, 1, (256 << 20) + 1)));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("invalidSettings")
  void shouldNameFieldValueAndRangeWhenSettingsAreOutOfRange(String expected, Supplier<?> build) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, build::get);
    assertEquals(expected, e.getMessage());
  }

  static List<Path> temporaryFiles(Path root) throws IOException {
    if (!Files.exists(root)) {
      return List.of();
    }
    try (Stream<Path> walk = Files.walk(root)) {
      return walk.filter(p -> p.getFileName().toString().startsWith(FileStore.TEMP_PREFIX))
          .toList();
    }
  }

  private static void flip(Path file, long position) throws IOException {
    try (FileChannel channel =
        FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
      ByteBuffer one = ByteBuffer.allocate(1);
      channel.read(one, position);
      one.put(0, (byte) (one.get(0) ^ 0x01)).rewind();
      channel.write(one, position);
    }
  }

  private static void truncate(Path file, long length) throws IOException {
    try (FileChannel channel = FileChannel.open(file, StandardOpenOption.WRITE)) {
      channel.truncate(length);
    }
  }

  private static void write(Path file, long position, byte[] bytes) throws IOException {
    try (FileChannel channel = FileChannel.open(file, StandardOpenOption.WRITE)) {
      channel.write(ByteBuffer.wrap(bytes), position);
    }
  }
}

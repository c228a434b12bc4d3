package io.tokenspeed.l3.store.file;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.sun.nio.file.ExtendedOpenOption;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreConfigurationException;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.StoreTesting;
import io.tokenspeed.l3.store.file.FileStoreSettings.DirectIo;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;
import java.util.zip.CRC32C;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The file store's read path in both of its modes: O_DIRECT ({@code direct_io=on}) and buffered
 * ({@code off}), with {@code auto} where it matters. Every test that asks for O_DIRECT asserts from
 * the store's counters that it ran (or is skipped with the file system's reason); none passes by
 * silently reading through the page cache.
 */
class FileStoreColdReadTest {

  private static final byte SENTINEL = (byte) 0xA5;

  /** Bytes of untouched guard before and after every destination. */
  private static final int GUARD = 8192;

  /** Small chunks, so that a few hundred KiB already span many reads and threads. */
  private static final int CHUNK = 64 << 10;

  @TempDir Path temp;
  private Arena arena;
  private final List<FileStore> stores = new ArrayList<>();

  @BeforeEach
  void openArena() {
    arena = Arena.ofShared();
  }

  @AfterEach
  void close() throws Exception {
    for (FileStore s : stores) {
      s.close();
      assertTrue(s.awaitReadThreads(10_000), "read threads ended");
    }
    arena.close();
    assertEquals(List.of(), FileStoreTest.temporaryFiles(temp), "no temporary file left");
  }

  private FileStore store(Path root, DirectIo directIo, int readThreads, int chunkBytes)
      throws IOException {
    FileStore s =
        ReadModes.open(FileStoreSettings.of(root).withReads(directIo, readThreads, chunkBytes));
    stores.add(s);
    return s;
  }

  /** A block-aligned region with guards: the destination starts {@code shift} bytes into it. */
  private record Target(MemorySegment region, MemorySegment destination) {
    void assertGuardsUntouched(String where) {
      long start = destination.address() - region.address();
      long end = start + destination.byteSize();
      for (long i = 0; i < region.byteSize(); i++) {
        if (i >= start && i < end) {
          i = end - 1;
          continue;
        }
        assertEquals(SENTINEL, region.get(ValueLayout.JAVA_BYTE, i), where + ": guard byte " + i);
      }
    }

    boolean untouched() {
      for (long i = 0; i < destination.byteSize(); i++) {
        if (destination.get(ValueLayout.JAVA_BYTE, i) != SENTINEL) {
          return false;
        }
      }
      return true;
    }
  }

  private Target target(long size, int shift) {
    MemorySegment region = arena.allocate(GUARD + shift + size + GUARD, 4096);
    region.fill(SENTINEL);
    return new Target(region, region.asSlice(GUARD + shift, size));
  }

  private MemorySegment source(byte[] bytes) {
    MemorySegment s = arena.allocate(Math.max(1, bytes.length), 4096).asSlice(0, bytes.length);
    MemorySegment.copy(bytes, 0, s, ValueLayout.JAVA_BYTE, 0, bytes.length);
    return s;
  }

  private static byte[] bytesOf(MemorySegment segment) {
    return segment.toArray(ValueLayout.JAVA_BYTE);
  }

  private static RowResult row(StoreResult result) {
    assertEquals(1, result.rows().size());
    return result.rows().getFirst();
  }

  // ------------------------------------------------------------------ sizes and alignment

  static Stream<Arguments> sizesModesShifts() {
    int[] sizes = {
      0,
      1,
      511,
      512,
      4095,
      4096,
      4097,
      8191,
      8192,
      8193,
      CHUNK - 1,
      CHUNK,
      CHUNK + 1,
      CHUNK + 4096,
      5 * CHUNK + 4097,
      (1 << 20) - 1,
      1 << 20,
      (3 << 20) + 4097,
      4 << 20
    };
    List<Arguments> cases = new ArrayList<>();
    for (int size : sizes) {
      for (DirectIo mode : List.of(DirectIo.ON, DirectIo.OFF)) {
        for (int shift : new int[] {0, 64}) {
          cases.add(Arguments.of(size, mode, shift, 0x5EED_0000L + size));
        }
      }
    }
    return cases.stream();
  }

  /**
   * Every size around the block and chunk boundaries reads back exactly, into a block-aligned
   * destination (O_DIRECT straight into it, only the last partial block through the bounce buffer)
   * and a misaligned one (all through the bounce buffer), and nothing outside the destination is
   * written.
   */
  @ParameterizedTest(name = "size={0} direct_io={1} shift={2} seed={3}")
  @MethodSource("sizesModesShifts")
  void shouldReadEveryByteExactlyWhateverTheSizeAndTheDestinationsAlignment(
      int size, DirectIo mode, int shift, long seed) throws Exception {
    FileStore store = store(temp.resolve("s"), mode, 4, CHUNK);
    String key = StoreTesting.key(StoreTesting.namespace("sizes"), size);
    byte[] payload = StoreTesting.bytes(seed, size);
    assertEquals(
        new RowResult.Ok(size, false), row(store.put(List.of(key), List.of(source(payload)))));
    Target t = target(size, shift);

    RowResult r = row(store.get(List.of(key), List.of(t.destination())));

    String where = "size=" + size + " " + mode + " shift=" + shift;
    assertEquals(new RowResult.Ok(size, false), r, where);
    assertArrayEquals(payload, bytesOf(t.destination()), where);
    t.assertGuardsUntouched(where);
    ReadModes.assertRan(store, mode);
    FileStoreCounters c = store.counters();
    if (mode == DirectIo.ON) {
      int block = store.readMode().blockBytes();
      long expectedBounce = shift % block == 0 ? size % block : size;
      assertEquals(expectedBounce, c.bouncedBytes(), where + " " + c);
    } else {
      assertEquals(0, c.bouncedBytes(), where + " " + c);
    }
  }

  /**
   * Many objects of seeded sizes in one call, read by stores in both modes over the same root and
   * with several numbers of pool threads: every store reads the same bytes, the ones written.
   */
  @ParameterizedTest(name = "seed={0} read_threads={1}")
  @CsvSource({"11, 0", "12, 1", "13, 4", "14, 16"})
  void shouldReadIdenticalBytesInBothModesWhenACallHasManyObjects(long seed, int readThreads)
      throws Exception {
    Path root = temp.resolve("both");
    FileStore direct = store(root, DirectIo.ON, readThreads, CHUNK);
    FileStore buffered = store(root, DirectIo.OFF, readThreads, CHUNK);
    SplittableRandom random = new SplittableRandom(seed);
    String ns = StoreTesting.namespace("both" + seed);
    List<String> keys = new ArrayList<>();
    List<byte[]> payloads = new ArrayList<>();
    List<MemorySegment> sources = new ArrayList<>();
    for (int i = 0; i < 40; i++) {
      int size =
          switch (random.nextInt(4)) {
            case 0 -> random.nextInt(1, 3) * 4096 + random.nextInt(-1, 2);
            case 1 -> random.nextInt(8192);
            case 2 -> random.nextInt(1, 6) * CHUNK + random.nextInt(-1, 2);
            default -> random.nextInt(700_000);
          };
      keys.add(StoreTesting.key(ns, i));
      payloads.add(StoreTesting.bytes(random.nextLong(), size));
      sources.add(source(payloads.getLast()));
    }
    for (RowResult r : direct.put(keys, sources).rows()) {
      assertInstanceOf(RowResult.Ok.class, r);
    }
    List<Target> fromDirect = new ArrayList<>();
    List<Target> fromBuffered = new ArrayList<>();
    for (int i = 0; i < keys.size(); i++) {
      fromDirect.add(target(payloads.get(i).length, (i % 3) * 64));
      fromBuffered.add(target(payloads.get(i).length, 0));
    }

    StoreResult d = direct.get(keys, fromDirect.stream().map(Target::destination).toList());
    StoreResult b = buffered.get(keys, fromBuffered.stream().map(Target::destination).toList());

    for (int i = 0; i < keys.size(); i++) {
      String where = "seed=" + seed + " object " + i + " size=" + payloads.get(i).length;
      assertEquals(new RowResult.Ok(payloads.get(i).length, false), d.rows().get(i), where);
      assertEquals(new RowResult.Ok(payloads.get(i).length, false), b.rows().get(i), where);
      assertArrayEquals(payloads.get(i), bytesOf(fromDirect.get(i).destination()), where);
      assertArrayEquals(payloads.get(i), bytesOf(fromBuffered.get(i).destination()), where);
      fromDirect.get(i).assertGuardsUntouched(where);
    }
    ReadModes.assertRan(direct, DirectIo.ON);
    ReadModes.assertRan(buffered, DirectIo.OFF);
  }

  // ------------------------------------------------------------------ damage

  /** Edits of a published object file, with whether a GET finds them before reading the payload. */
  enum Damage {
    FLIP_FIRST_PAYLOAD_BYTE(false),
    FLIP_A_BYTE_OF_THE_SECOND_CHUNK(false),
    FLIP_THE_LAST_PAYLOAD_BYTE(false),
    FLIP_A_PADDING_BYTE(true),
    FLIP_A_KEY_BYTE(true),
    FLIP_THE_HEADER_CHECKSUM(true),
    FLIP_THE_PAYLOAD_CHECKSUM(false),
    SET_THE_PAYLOAD_OFFSET_TO_THE_KEYS_END(true),
    SET_THE_VERSION_TO_1(true),
    TRUNCATE_ONE_BYTE(true),
    TRUNCATE_ONE_BLOCK(true),
    TRUNCATE_TO_THE_HEADER(true),
    TRUNCATE_INSIDE_THE_HEADER(true),
    APPEND_ONE_BYTE(true),
    APPEND_ONE_BLOCK(true);

    final boolean beforePayload;

    Damage(boolean beforePayload) {
      this.beforePayload = beforePayload;
    }
  }

  static Stream<Arguments> damagesAndModes() {
    List<Arguments> cases = new ArrayList<>();
    for (Damage d : Damage.values()) {
      for (DirectIo mode : List.of(DirectIo.ON, DirectIo.OFF)) {
        cases.add(Arguments.of(d, mode));
      }
    }
    return cases.stream();
  }

  /**
   * A damaged object is {@code Invalid}, never {@code Ok}, in either mode; damage to the header or
   * the length is found before any payload byte reaches the destination.
   */
  @ParameterizedTest(name = "{0} direct_io={1}")
  @MethodSource("damagesAndModes")
  void shouldReportInvalidWhenTheFileIsDamagedInEitherMode(Damage damage, DirectIo mode)
      throws Exception {
    FileStore store = store(temp.resolve("damage"), mode, 4, 4096);
    String key = StoreTesting.key(StoreTesting.namespace("damage"), damage.ordinal());
    int keyBytes = key.getBytes(StandardCharsets.UTF_8).length;
    int size = 3 * 4096 + 100;
    store.put(List.of(key), List.of(source(StoreTesting.bytes(damage.ordinal(), size))));
    Path file = store.objectPath(key);
    long offset = ObjectFileDescriptor.payloadOffset(keyBytes);
    switch (damage) {
      case FLIP_FIRST_PAYLOAD_BYTE -> flip(file, offset);
      case FLIP_A_BYTE_OF_THE_SECOND_CHUNK -> flip(file, offset + 4096 + 17);
      case FLIP_THE_LAST_PAYLOAD_BYTE -> flip(file, offset + size - 1);
      case FLIP_A_PADDING_BYTE -> flip(file, offset - 1);
      case FLIP_A_KEY_BYTE -> flip(file, ObjectFileDescriptor.FIXED_HEADER_BYTES + 3);
      case FLIP_THE_HEADER_CHECKSUM -> flip(file, ObjectFileDescriptor.HEADER_CRC_OFFSET);
      case FLIP_THE_PAYLOAD_CHECKSUM -> flip(file, ObjectFileDescriptor.PAYLOAD_CRC_OFFSET + 3);
      case SET_THE_PAYLOAD_OFFSET_TO_THE_KEYS_END ->
          write(
              file,
              ObjectFileDescriptor.PAYLOAD_OFFSET_OFFSET,
              ByteBuffer.allocate(4).putInt(0, 28 + keyBytes).array());
      case SET_THE_VERSION_TO_1 ->
          write(file, ObjectFileDescriptor.VERSION_OFFSET, new byte[] {0, 1});
      case TRUNCATE_ONE_BYTE -> truncate(file, offset + size - 1);
      case TRUNCATE_ONE_BLOCK -> truncate(file, offset + size - 4096);
      case TRUNCATE_TO_THE_HEADER -> truncate(file, offset);
      case TRUNCATE_INSIDE_THE_HEADER -> truncate(file, 100);
      case APPEND_ONE_BYTE -> append(file, 1);
      case APPEND_ONE_BLOCK -> append(file, 4096);
    }
    Target t = target(size, 0);

    RowResult r = row(store.get(List.of(key), List.of(t.destination())));

    assertInstanceOf(RowResult.Invalid.class, r, damage + " " + mode);
    if (damage.beforePayload) {
      assertTrue(t.untouched(), damage + ": the destination was written");
    }
    t.assertGuardsUntouched(damage.toString());
    ReadModes.assertRan(store, mode);
  }

  // ------------------------------------------------------------------ fallback

  /** A probe that must not run: direct_io=off never tries O_DIRECT. */
  private static final FileStore.DirectProbe NEVER =
      (root, setting) -> fail("direct_io=off probed O_DIRECT in " + root);

  private static final FileStore.DirectProbe REFUSED =
      (root, setting) ->
          ReadMode.buffered("the O_DIRECT probe failed: FileSystemException: Invalid argument");

  /** A root that refuses O_DIRECT reads buffered under auto, says why, and still reads exactly. */
  @Test
  void shouldFallBackToBufferedReadsWhenTheFileSystemRefusesDirectIo() throws Exception {
    FileStoreSettings settings =
        FileStoreSettings.of(temp.resolve("refusing")).withReads(DirectIo.AUTO, 4, CHUNK);
    try (FileStore store = new FileStore(settings, true, REFUSED)) {
      assertFalse(store.readMode().direct());
      assertTrue(store.readMode().reason().contains("Invalid argument"), store.readMode().reason());
      String key = StoreTesting.key(StoreTesting.namespace("refusing"), 1);
      byte[] payload = StoreTesting.bytes(3, 3 * CHUNK + 5);
      store.put(List.of(key), List.of(source(payload)));
      Target t = target(payload.length, 0);
      assertEquals(
          new RowResult.Ok(payload.length, false),
          row(store.get(List.of(key), List.of(t.destination()))));
      assertArrayEquals(payload, bytesOf(t.destination()));
      assertEquals(new FileStoreCounters(0, 0, 1, 0, 0), store.counters());
    }
  }

  /** direct_io=on on a root that refuses O_DIRECT is a configuration error naming both. */
  @Test
  void shouldRefuseToOpenWhenDirectIoIsOnAndTheFileSystemRefusesIt() {
    FileStoreSettings settings =
        FileStoreSettings.of(temp.resolve("on")).withReads(DirectIo.ON, 4, CHUNK);
    StoreConfigurationException e =
        assertThrows(
            StoreConfigurationException.class, () -> new FileStore(settings, true, REFUSED));
    assertTrue(e.getMessage().contains("direct_io=on"), e.getMessage());
    assertTrue(e.getMessage().contains(settings.root().toString()), e.getMessage());
    assertTrue(e.getMessage().contains("Invalid argument"), e.getMessage());
  }

  @Test
  void shouldNotProbeWhenDirectIoIsOff() throws Exception {
    FileStoreSettings settings =
        FileStoreSettings.of(temp.resolve("off")).withReads(DirectIo.OFF, 4, CHUNK);
    try (FileStore store = new FileStore(settings, true, NEVER)) {
      assertEquals(ReadMode.buffered("direct_io=off"), store.readMode());
    }
  }

  /**
   * The real probe on the test's directory and on /dev/shm (tmpfs, which refuses O_DIRECT before
   * Linux 6.6) agrees with an O_DIRECT read the test makes itself, and the reads then run in the
   * mode the probe found; the test prints which.
   */
  @ParameterizedTest(name = "{0}")
  @CsvSource({"tempdir", "/dev/shm"})
  void shouldReadInTheModeTheProbeFoundOnARealFileSystem(String where) throws Exception {
    Path base = where.equals("tempdir") ? temp : Path.of(where);
    Assumptions.assumeTrue(
        Files.isDirectory(base) && Files.isWritable(base), () -> where + " is not writable here");
    Path root = Files.createTempDirectory(base, "ts-cold-probe");
    try {
      boolean expected = directReadWorks(root);
      FileStore store = store(root, DirectIo.AUTO, 4, CHUNK);
      System.out.printf(
          "file store on %s (%s): %s%n", where, Files.getFileStore(root).type(), store.readMode());
      assertEquals(expected, store.readMode().direct(), store.readMode().toString());
      String key = StoreTesting.key(StoreTesting.namespace("probe"), 1);
      byte[] payload = StoreTesting.bytes(5, 2 * CHUNK + 9);
      store.put(List.of(key), List.of(source(payload)));
      Target t = target(payload.length, 0);
      assertEquals(
          new RowResult.Ok(payload.length, false),
          row(store.get(List.of(key), List.of(t.destination()))));
      assertArrayEquals(payload, bytesOf(t.destination()));
      ReadModes.assertRan(store, DirectIo.AUTO);
    } finally {
      try (Stream<Path> walk = Files.walk(root)) {
        walk.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }

  /** Whether this test itself can read a block of a file in {@code dir} with O_DIRECT. */
  private static boolean directReadWorks(Path dir) {
    Path file = dir.resolve("direct-check");
    try (Arena a = Arena.ofConfined()) {
      int block = (int) Files.getFileStore(dir).getBlockSize();
      Files.write(file, new byte[2 * block]);
      try (FileChannel ch =
          FileChannel.open(file, StandardOpenOption.READ, ExtendedOpenOption.DIRECT)) {
        return ch.read(a.allocate(block, block).asByteBuffer(), 0) == block;
      }
    } catch (IOException | UnsupportedOperationException e) {
      return false;
    } finally {
      file.toFile().delete();
    }
  }

  /**
   * A cached object under direct_io=auto is copied from the page cache (it was just written, so
   * every page is cached) unless memory pressure evicted it; either way its bytes are exact.
   */
  @Test
  void shouldReadACachedObjectThroughThePageCacheUnderAuto() throws Exception {
    FileStore store = store(temp.resolve("auto"), DirectIo.AUTO, 4, CHUNK);
    Assumptions.assumeTrue(store.readMode().direct(), () -> "no O_DIRECT: " + store.readMode());
    String key = StoreTesting.key(StoreTesting.namespace("auto"), 1);
    byte[] payload = StoreTesting.bytes(8, 5 * CHUNK);
    store.put(List.of(key), List.of(source(payload)));
    Target t = target(payload.length, 0);
    assertEquals(
        new RowResult.Ok(payload.length, false),
        row(store.get(List.of(key), List.of(t.destination()))));
    assertArrayEquals(payload, bytesOf(t.destination()));
    FileStoreCounters c = store.counters();
    assertEquals(1, c.directObjects() + c.cachedObjects(), c.toString());
    System.out.println("a just-written object under auto: " + c);
  }

  // ------------------------------------------------------------------ concurrency

  /**
   * Threads PUT and GET overlapping keys at once: a GET sees {@code Missing} or exactly the bytes
   * written, never a partial object; every key is created by exactly one PUT.
   */
  @ParameterizedTest(name = "direct_io={0}")
  @EnumSource(DirectIo.class)
  void shouldNeverShowAPartialObjectWhenReadersAndWritersRace(DirectIo mode) throws Exception {
    FileStore store = store(temp.resolve("race"), mode, 4, 16 << 10);
    int threads = 6;
    int keys = 24;
    int opsPerThread = 120;
    String ns = StoreTesting.namespace("race");
    byte[][] payloads = new byte[keys][];
    MemorySegment[] sources = new MemorySegment[keys];
    SplittableRandom sizes = new SplittableRandom(99);
    for (int k = 0; k < keys; k++) {
      payloads[k] = StoreTesting.bytes(1000 + k, sizes.nextInt(0, 200_000));
      sources[k] = source(payloads[k]);
    }
    AtomicInteger created = new AtomicInteger();
    ConcurrentHashMap<Integer, Boolean> createdKeys = new ConcurrentHashMap<>();
    AtomicReference<Throwable> failure = new AtomicReference<>();
    CyclicBarrier start = new CyclicBarrier(threads);
    List<Thread> workers = new ArrayList<>();
    for (int w = 0; w < threads; w++) {
      int worker = w;
      MemorySegment[] destinations = new MemorySegment[keys];
      for (int k = 0; k < keys; k++) {
        destinations[k] = arena.allocate(Math.max(1, payloads[k].length), 4096);
      }
      workers.add(
          Thread.ofPlatform()
              .start(
                  () -> {
                    try {
                      SplittableRandom random = new SplittableRandom(worker);
                      start.await();
                      for (int op = 0; op < opsPerThread; op++) {
                        int k = random.nextInt(keys);
                        String key = StoreTesting.key(ns, k);
                        if (random.nextInt(3) == 0) {
                          RowResult r = row(store.put(List.of(key), List.of(sources[k])));
                          if (r instanceof RowResult.Ok ok && !ok.alreadyExisted()) {
                            created.incrementAndGet();
                            createdKeys.put(k, true);
                          }
                        } else {
                          MemorySegment d = destinations[k].asSlice(0, payloads[k].length);
                          RowResult r = row(store.get(List.of(key), List.of(d)));
                          if (r instanceof RowResult.Ok) {
                            assertArrayEquals(payloads[k], bytesOf(d), "key " + k);
                          } else {
                            assertEquals(RowResult.MISSING, r, "key " + k);
                          }
                        }
                      }
                    } catch (Throwable t) {
                      failure.compareAndSet(null, t);
                    }
                  }));
    }
    for (Thread t : workers) {
      t.join(120_000);
      assertFalse(t.isAlive(), "a worker is stuck");
    }
    if (failure.get() != null) {
      throw new AssertionError("direct_io=" + mode, failure.get());
    }
    assertEquals(createdKeys.size(), created.get(), "each key created exactly once");
  }

  /**
   * A call whose reads fail part-way (a directory where one object's file should be, while pool
   * threads read the chunks of large objects) throws, and once it has thrown no thread writes into
   * any of its destinations: the sentinel written after the throw survives the pool's end.
   */
  @ParameterizedTest(name = "direct_io={0}")
  @EnumSource(
      value = DirectIo.class,
      names = {"ON", "OFF"})
  void shouldLeaveNoThreadInTheDestinationsWhenACallFails(DirectIo mode) throws Exception {
    FileStore store = store(temp.resolve("fail"), mode, 8, 16 << 10);
    String ns = StoreTesting.namespace("fail");
    List<String> keys = new ArrayList<>();
    List<Target> targets = new ArrayList<>();
    for (int i = 0; i < 6; i++) {
      String key = StoreTesting.key(ns, i);
      keys.add(key);
      int size = 1 << 20;
      targets.add(target(size, 0));
      if (i == 3) {
        Files.createDirectories(store.objectPath(key)); // read(2) of a directory: EISDIR
      } else {
        store.put(List.of(key), List.of(source(StoreTesting.bytes(i, size))));
      }
    }
    List<MemorySegment> destinations = targets.stream().map(Target::destination).toList();

    IOException e = assertThrows(IOException.class, () -> store.get(keys, destinations));

    for (MemorySegment d : destinations) {
      d.fill(SENTINEL);
    }
    store.close();
    assertTrue(store.awaitReadThreads(10_000), "read threads ended");
    for (Target t : targets) {
      assertTrue(t.untouched(), "a destination was written after the call threw: " + e);
    }
  }

  // ------------------------------------------------------------------ the old format

  /**
   * Objects in format version 1 (unaligned payload, written before version 2) read exactly in both
   * modes, are found by {@code exists}, damaged ones are {@code Invalid}, and a namespace deletion
   * that reads headers removes them.
   */
  @ParameterizedTest(name = "direct_io={0}")
  @EnumSource(
      value = DirectIo.class,
      names = {"ON", "OFF"})
  void shouldReadObjectsOfTheOldUnalignedFormat(DirectIo mode) throws Exception {
    FileStore store = store(temp.resolve("v1"), mode, 4, 4096);
    String ns = "a_b";
    int[] sizes = {0, 1, 4095, 4096, 4097, 70_000, (1 << 20) + 3};
    long bytes = 0;
    for (int i = 0; i < sizes.length; i++) {
      String key = ns + "_" + i;
      byte[] payload = StoreTesting.bytes(i, sizes[i]);
      Path file = store.objectPath(key);
      Files.createDirectories(file.getParent());
      Files.write(file, ObjectFiles.version1(key.getBytes(StandardCharsets.UTF_8), payload));
      assertInstanceOf(RowResult.Ok.class, row(store.exists(List.of(key))));
      Target t = target(sizes[i], 0);
      assertEquals(
          new RowResult.Ok(sizes[i], false),
          row(store.get(List.of(key), List.of(t.destination()))),
          "size=" + sizes[i]);
      assertArrayEquals(payload, bytesOf(t.destination()), "size=" + sizes[i]);
      t.assertGuardsUntouched("size=" + sizes[i]);
      bytes += sizes[i];
    }
    ReadModes.assertRan(store, mode);
    assertEquals(mode == DirectIo.ON ? bytes : 0, store.counters().bouncedBytes());

    String damaged = ns + "_damaged";
    byte[] file = ObjectFiles.version1(damaged.getBytes(StandardCharsets.UTF_8), new byte[9000]);
    file[file.length - 5000] ^= 1;
    Files.createDirectories(store.objectPath(damaged).getParent());
    Files.write(store.objectPath(damaged), file);
    Target t = target(9000, 0);
    assertInstanceOf(
        RowResult.Invalid.class, row(store.get(List.of(damaged), List.of(t.destination()))));

    assertEquals(sizes.length + 1, store.deleteNamespace(ns));
    assertEquals(RowResult.MISSING, row(store.exists(List.of(ns + "_1"))));
  }

  // ------------------------------------------------------------------ checksums

  /** The combined checksum of random splits equals the checksum of the whole, for any split. */
  @ParameterizedTest(name = "seed={0}")
  @CsvSource({"1", "2", "3", "4"})
  void shouldCombineChunkChecksumsIntoTheChecksumOfTheWhole(long seed) {
    Random random = new Random(seed);
    for (int round = 0; round < 200; round++) {
      int length = random.nextInt(round < 100 ? 20_000 : 3 << 20);
      byte[] bytes = new byte[length];
      random.nextBytes(bytes);
      CRC32C whole = new CRC32C();
      whole.update(bytes);
      int combined = 0;
      int at = 0;
      boolean first = true;
      while (at < length || first) {
        int piece = Math.min(length - at, random.nextInt(4) == 0 ? 0 : random.nextInt(70_000));
        CRC32C part = new CRC32C();
        part.update(bytes, at, piece);
        combined =
            first
                ? (int) part.getValue()
                : Crc32cCombine.combine(combined, (int) part.getValue(), piece);
        first = false;
        at += piece;
      }
      assertEquals((int) whole.getValue(), combined, "seed " + seed + " round " + round);
    }
  }

  // ------------------------------------------------------------------ file edits

  private static void flip(Path file, long position) throws IOException {
    try (FileChannel ch =
        FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
      ByteBuffer one = ByteBuffer.allocate(1);
      ch.read(one, position);
      one.put(0, (byte) (one.get(0) ^ 0x10)).rewind();
      ch.write(one, position);
    }
  }

  private static void write(Path file, long position, byte[] bytes) throws IOException {
    try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
      ch.write(ByteBuffer.wrap(bytes), position);
    }
  }

  private static void truncate(Path file, long length) throws IOException {
    try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
      ch.truncate(length);
    }
  }

  private static void append(Path file, int bytes) throws IOException {
    Files.write(file, new byte[bytes], StandardOpenOption.APPEND);
  }
}

package io.tokenspeed.l3.store.file;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.store.StoreTesting;
import io.tokenspeed.testkit.ChildJvm;
import io.tokenspeed.testkit.CreateRace;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The file store across real operating-system processes: objects outlive their writer, and two
 * processes racing to create the same keys leave exactly one intact object per key.
 */
class FileStoreProcessIT {

  private static final Duration CHILD_TIMEOUT = Duration.ofSeconds(60);

  @TempDir Path temp;

  @Test
  void shouldReadBackInAFreshProcessWhatAnExitedWriterPut() throws Exception {
    Path root = temp.resolve("store");
    int count = 8;
    long seed = 0x5EED_0031L;
    String label = "writer-then-reader";

    ChildJvm.Finished writer;
    try (ChildJvm child = child("writer", args("put", root, label, count, seed))) {
      writer = child.finish(CHILD_TIMEOUT);
    }
    assertEquals(0, writer.exitStatus(), writer.describe());
    assertEquals(range(count), writer.numbers("created"), writer.describe());

    ChildJvm.Finished reader;
    try (ChildJvm child = child("reader", args("get", root, label, count, seed))) {
      reader = child.finish(CHILD_TIMEOUT);
    }
    assertEquals(0, reader.exitStatus(), reader.describe());
    MessageDigest expected = MessageDigest.getInstance("SHA-256");
    for (int i = 0; i < count; i++) {
      expected.update(FileStoreChild.payload(seed, i, FileStoreChild.sizeOf(i)));
    }
    assertEquals(
        List.of("digest " + HexFormat.of().formatHex(expected.digest())),
        reader.lines(),
        reader.describe());
    assertEquals(List.of(), FileStoreTest.temporaryFiles(root));
  }

  @Test
  void shouldLeaveOneIntactObjectPerKeyWhenTwoProcessesRaceToCreateTheSameKeys() throws Exception {
    Path root = temp.resolve("store");
    Path barrier = temp.resolve("go");
    int count = 64;
    long seedA = 0x5EED_00A1L;
    long seedB = 0x5EED_00B2L;
    String label = "race";

    CreateRace.Outcome race;
    try (ChildJvm childA = child("a", args("race", root, label, count, seedA, barrier));
        ChildJvm childB = child("b", args("race", root, label, count, seedB, barrier))) {
      race = CreateRace.run(childA, childB, barrier, CHILD_TIMEOUT);
    }
    race.verify(count);
    Set<Integer> createdByA = race.createdByA();

    try (FileStore store = new FileStore(FileStoreSettings.of(root));
        Arena arena = Arena.ofConfined()) {
      MemorySegment destination = arena.allocate(FileStoreChild.RACE_SIZE + 64L).asSlice(64);
      for (int i = 0; i < count; i++) {
        long seed = createdByA.contains(i) ? seedA : seedB;
        RowResult row =
            store
                .get(
                    List.of(StoreTesting.key(StoreTesting.namespace(label), i)),
                    List.of(destination))
                .rows()
                .get(0);
        assertEquals(new RowResult.Ok(FileStoreChild.RACE_SIZE, false), row, "key " + i);
        assertArrayEquals(
            FileStoreChild.payload(seed, i, FileStoreChild.RACE_SIZE),
            destination.toArray(ValueLayout.JAVA_BYTE),
            "key " + i + " holds the bytes of the process that created it");
      }
    }
    assertEquals(List.of(), FileStoreTest.temporaryFiles(root));
  }

  /** A {@link FileStoreChild} in its own JVM; {@code temp} receives its standard error. */
  private ChildJvm child(String name, List<String> args) throws IOException {
    return ChildJvm.launch(FileStoreChild.class)
        .args(args)
        .maxHeap("128m")
        .classpathFirst(FileStore.class)
        .start(temp, name);
  }

  private static List<String> args(String mode, Path root, String label, int count, long seed) {
    return List.of(mode, root.toString(), label, Integer.toString(count), Long.toString(seed));
  }

  private static List<String> args(
      String mode, Path root, String label, int count, long seed, Path barrier) {
    return List.of(
        mode,
        root.toString(),
        label,
        Integer.toString(count),
        Long.toString(seed),
        barrier.toString());
  }

  private static Set<Integer> range(int count) {
    return IntStream.range(0, count).boxed().collect(Collectors.toSet());
  }
}

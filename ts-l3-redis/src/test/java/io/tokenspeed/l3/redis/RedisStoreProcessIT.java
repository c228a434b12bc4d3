package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.testkit.ChildJvm;
import io.tokenspeed.testkit.CreateRace;
import io.tokenspeed.testkit.RedisCluster;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The redis store across real operating-system processes (each a {@link RedisStoreChild} JVM) and
 * real servers: objects outlive the process that wrote them, another rank restores them into other
 * Host blocks, and two processes racing to create the same keys leave one object per key.
 */
@Tag("live")
class RedisStoreProcessIT {

  private static final Duration CHILD_TIMEOUT = Duration.ofSeconds(60);

  @TempDir Path temp;

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"standalone", "cluster"})
  void shouldRestoreExactBytesInAFreshProcessWhenTheWriterProcessHasExited(String topology)
      throws Exception {
    String uris = uris(topology);
    String label = "outlive-" + topology;
    int count = 6;
    long seed = 0x5EED_0041L;

    ChildJvm.Finished writer =
        run("writer", List.of("put", topology, uris, label, "" + count, "" + seed, "0"));
    assertEquals(0, writer.exitStatus(), writer.describe());
    assertEquals("" + count, writer.value("puts-newly"), writer.describe());

    ChildJvm.Finished reader =
        run("reader", List.of("get", topology, uris, label, "" + count, "" + seed, "0"));
    assertEquals(0, reader.exitStatus(), reader.describe());
    assertEquals(expectedDigest(seed, count), reader.value("digest"), reader.describe());
  }

  @Test
  void shouldRestoreIntoAnotherRanksHostBlocksWhenAnotherProcessWroteTheObjects() throws Exception {
    String topology = "cluster";
    String uris = uris(topology);
    String label = "relocation";
    int count = 6;
    long seed = 0x5EED_0042L;
    // rank 0 and rank 1 of a two-shard page-cyclic group name the same objects (payload replica 0)
    assertEquals(RedisStoreChild.key(label, 3, 0), RedisStoreChild.key(label, 3, 1));

    ChildJvm.Finished writer =
        run("rank0-writer", List.of("put", topology, uris, label, "" + count, "" + seed, "0"));
    assertEquals(0, writer.exitStatus(), writer.describe());
    ChildJvm.Finished reader =
        run("rank1-reader", List.of("get", topology, uris, label, "" + count, "" + seed, "1"));
    assertEquals(0, reader.exitStatus(), reader.describe());

    for (int i = 0; i < count; i++) {
      long readerBlock = Long.parseLong(reader.value("block " + i));
      assertNotEquals(RedisStoreChild.hostOffset(0, count, i), readerBlock, "object " + i);
      assertEquals(RedisStoreChild.hostOffset(1, count, i), readerBlock, "object " + i);
    }
    assertEquals(expectedDigest(seed, count), reader.value("digest"), reader.describe());
  }

  @Test
  void shouldLeaveOneObjectPerKeyAndCountOneNewWriteWhenTwoProcessesRace() throws Exception {
    String topology = "standalone";
    String uris = uris(topology);
    String label = "race";
    Path barrier = temp.resolve("go");
    int count = 48;
    long seedA = 0x5EED_00A1L;
    long seedB = 0x5EED_00B2L;

    CreateRace.Outcome race;
    try (ChildJvm childA =
            ChildJvm.start(
                temp,
                "a",
                RedisStoreChild.class,
                List.of(
                    "race",
                    topology,
                    uris,
                    label,
                    "" + count,
                    "" + seedA,
                    "0",
                    barrier.toString()));
        ChildJvm childB =
            ChildJvm.start(
                temp,
                "b",
                RedisStoreChild.class,
                List.of(
                    "race",
                    topology,
                    uris,
                    label,
                    "" + count,
                    "" + seedB,
                    "0",
                    barrier.toString()))) {
      race = CreateRace.run(childA, childB, barrier, CHILD_TIMEOUT);
    }
    race.verify(count);
    ChildJvm.Finished a = race.a();
    ChildJvm.Finished b = race.b();
    String both = race.describe();
    Set<Integer> createdByA = race.createdByA();
    assertEquals(
        count,
        Long.parseLong(a.value("puts-newly")) + Long.parseLong(b.value("puts-newly")),
        "new writes counted over both processes\n" + both);
    assertEquals(
        count,
        Long.parseLong(a.value("puts-existed")) + Long.parseLong(b.value("puts-existed")),
        "already-existed answers over both processes\n" + both);

    try (RedisStore store = RedisStore.open(RedisStoreChild.settings(topology, uris));
        Arena arena = Arena.ofShared()) {
      MemorySegment destination = arena.allocate(RedisStoreChild.RACE_SIZE + 64L).asSlice(64);
      for (int i = 0; i < count; i++) {
        long seed = createdByA.contains(i) ? seedA : seedB;
        RowResult row =
            store
                .get(List.of(RedisStoreChild.key(label, i, 0)), List.of(destination))
                .rows()
                .getFirst();
        assertEquals(new RowResult.Ok(RedisStoreChild.RACE_SIZE, false), row, "key " + i);
        assertArrayEquals(
            RedisStoreChild.payload(seed, i, RedisStoreChild.RACE_SIZE),
            destination.toArray(ValueLayout.JAVA_BYTE),
            "key " + i + " holds the bytes of the process that created it");
      }
    }
  }

  private ChildJvm.Finished run(String name, List<String> args) throws Exception {
    ChildJvm.Finished finished;
    try (ChildJvm child = ChildJvm.start(temp, name, RedisStoreChild.class, args)) {
      finished = child.finish(CHILD_TIMEOUT);
      assertFalse(ProcessHandle.of(child.pid()).map(ProcessHandle::isAlive).orElse(false));
    }
    return finished;
  }

  /** The servers' URIs, comma-separated; the shared servers are flushed first. */
  private static String uris(String topology) {
    if (topology.equals("cluster")) {
      RedisCluster cluster = RedisServers.sharedCluster();
      cluster.flushAll();
      return String.join(",", cluster.uris());
    }
    RedisServer server = RedisServers.sharedStandalone();
    server.flushAll();
    return server.uri();
  }

  private static String expectedDigest(long seed, int count) throws Exception {
    MessageDigest digest = MessageDigest.getInstance("SHA-256");
    for (int i = 0; i < count; i++) {
      digest.update(RedisStoreChild.payload(seed, i, RedisStoreChild.sizeOf(i)));
    }
    return HexFormat.of().formatHex(digest.digest());
  }
}

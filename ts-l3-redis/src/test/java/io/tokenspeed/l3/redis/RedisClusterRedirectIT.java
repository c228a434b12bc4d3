package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.cluster.SlotHash;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.store.StoreTesting;
import io.tokenspeed.testkit.RedisCluster;
import io.tokenspeed.testkit.RedisErrorReply;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Slots that change hands while a store is open, on a real 3-master cluster of its own: a slot
 * reassigned to another master (the store is answered MOVED, follows it and routes there from then
 * on), and a slot in migration (the old master answers ASK for a key it does not have; the store
 * asks the new one, after ASKING, without changing its slot table).
 */
@Tag("live")
class RedisClusterRedirectIT {

  private static final int SIZE = 64 << 10;

  @TempDir static Path dir;
  private static RedisCluster cluster;

  @BeforeAll
  static void startCluster() {
    cluster = RedisServers.startCluster(dir, 3);
  }

  @AfterAll
  static void stopCluster() {
    cluster.close();
  }

  @Test
  void shouldFollowMovedAndRouteToTheNewMasterWhenASlotIsReassigned() throws Exception {
    String key = StoreTesting.key(StoreTesting.namespace("moved"), 1);
    int slot = SlotHash.getSlot(key);
    RedisServer owner = ownerOf(key);
    RedisServer target = otherThan(owner);
    try (Arena arena = Arena.ofShared();
        RedisStore store = RedisStore.open(RedisStoreSettings.cluster(cluster.uris()))) {
      MemorySegment source = arena.allocate(SIZE);
      byte[] payload = StoreTesting.fill(source, 0x5EED_0101L);
      MemorySegment destination = arena.allocate(SIZE);
      setSlotEverywhere(slot, "NODE", id(target)); // the empty slot changes hands

      assertEquals(
          new RowResult.Ok(SIZE, false),
          store.put(List.of(key), List.of(source)).rows().getFirst());
      assertEquals(1L, target.command("EXISTS", key), "written on the new master");
      long redirects = store.counters().redirects();
      assertTrue(redirects >= 1, "followed a MOVED: " + store.counters());

      assertEquals(
          new RowResult.Ok(SIZE, false),
          store.get(List.of(key), List.of(destination)).rows().getFirst());
      assertEquals(-1, destination.mismatch(MemorySegment.ofArray(payload)));
      assertEquals(redirects, store.counters().redirects(), "straight to the new master now");
      assertEquals(0, store.counters().failedCalls());
    } finally {
      target.command("DEL", key);
      setSlotEverywhere(slot, "NODE", id(owner));
    }
  }

  @Test
  void shouldAskTheImportingMasterWhenASlotIsMigrating() throws Exception {
    String key = StoreTesting.key(StoreTesting.namespace("ask"), 2);
    int slot = SlotHash.getSlot(key);
    RedisServer owner = ownerOf(key);
    RedisServer target = otherThan(owner);
    try (Arena arena = Arena.ofShared();
        RedisStore store = RedisStore.open(RedisStoreSettings.cluster(cluster.uris()))) {
      MemorySegment source = arena.allocate(SIZE);
      byte[] payload = StoreTesting.fill(source, 0x5EED_0102L);
      MemorySegment destination = arena.allocate(SIZE);
      target.command("CLUSTER", "SETSLOT", Integer.toString(slot), "IMPORTING", id(owner));
      owner.command("CLUSTER", "SETSLOT", Integer.toString(slot), "MIGRATING", id(target));

      // the old master lacks the key and answers ASK; the store asks the new one
      assertEquals(
          new RowResult.Ok(SIZE, false),
          store.put(List.of(key), List.of(source)).rows().getFirst());
      assertEquals(
          1L,
          target.command("DBSIZE"),
          "on the importing master (it answers MOVED to" + " a key command without ASKING)");
      assertEquals(0L, owner.command("DBSIZE"));
      assertEquals(
          new RowResult.Ok(SIZE, false),
          store.get(List.of(key), List.of(destination)).rows().getFirst());
      assertEquals(-1, destination.mismatch(MemorySegment.ofArray(payload)));
      assertEquals(new RowResult.Ok(SIZE, false), store.exists(List.of(key)).rows().getFirst());
      assertEquals(3, store.counters().redirects(), "one ASK per call, the slot table unchanged");

      // the migration ends: the slot is the new master's, and the old one says MOVED
      setSlotEverywhere(slot, "NODE", id(target));
      assertEquals(
          new RowResult.Ok(SIZE, true), store.put(List.of(key), List.of(source)).rows().getFirst());
      assertEquals(4, store.counters().redirects());
      assertEquals(0, store.counters().failedCalls());
    } finally {
      setSlotEverywhere(slot, "NODE", id(target)); // whatever state the test left
      target.command("DEL", key);
      setSlotEverywhere(slot, "NODE", id(owner));
    }
  }

  private static RedisServer ownerOf(String key) {
    for (RedisServer node : cluster.nodes()) {
      try {
        node.command("EXISTS", key);
        return node;
      } catch (RedisErrorReply moved) {
        // another node's slot
      }
    }
    throw new AssertionError("no master serves " + key);
  }

  private static RedisServer otherThan(RedisServer owner) {
    for (RedisServer node : cluster.nodes()) {
      if (node != owner) {
        return node;
      }
    }
    throw new AssertionError("a cluster of one");
  }

  private static String id(RedisServer node) {
    String id = String.valueOf(node.command("CLUSTER", "MYID"));
    assertNotEquals("", id);
    return id;
  }

  private static void setSlotEverywhere(int slot, String subcommand, String nodeId) {
    for (RedisServer node : cluster.nodes()) {
      node.command("CLUSTER", "SETSLOT", Integer.toString(slot), subcommand, nodeId);
    }
  }
}

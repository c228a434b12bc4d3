package io.tokenspeed.engine.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.BlockPool;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class BlockGeometryTest {

  static LongStream seeds() {
    return MemoryFixtures.seeds(40);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldGiveBlockPoolOffsetsForEveryAllocatedBlock(long seed) {
    Random rnd = new Random(seed);
    CacheLayout layout = MemoryFixtures.randomLayout(rnd);
    int numParents = 1 + rnd.nextInt(6);
    BlockPool pool = new BlockPool(Tier.DEVICE, layout, numParents);
    BlockGeometry geo = BlockGeometry.of(layout);
    assertEquals(pool.parentBytes(), geo.parentBytes());
    assertEquals(pool.numGroups(), geo.numGroups());
    assertEquals(pool.blockIdLimit(), geo.blockIdLimit(numParents));
    for (int g = 0; g < layout.numGroups(); g++) {
      assertEquals(pool.childrenPerParent(g), geo.childrenPerParent(g));
      assertEquals(layout.group(g).bytesPerBlock(), geo.bytesPerBlock(g));
    }
    List<Integer> held = new ArrayList<>();
    long checked = 0;
    for (int round = 0; round < 30; round++) {
      int[] needs = new int[layout.numGroups()];
      int[][] out = new int[layout.numGroups()][];
      for (int g = 0; g < needs.length; g++) {
        needs[g] = rnd.nextInt(4);
        out[g] = new int[needs[g]];
      }
      if (pool.tryAcquire(needs, out)) {
        for (int[] ids : out) {
          for (int id : ids) {
            held.add(id);
          }
        }
      }
      for (int i = held.size() - 1; i >= 0; i--) {
        if (rnd.nextInt(3) == 0) {
          int id = held.remove(i);
          pool.unref(id);
          pool.free(id);
        }
      }
      for (int id : held) {
        assertEquals(pool.byteOffset(id), geo.byteOffset(pool.groupOf(id), id), "block " + id);
        checked++;
      }
    }
    assertTrue(checked > 0, "no allocated block was compared");
  }

  @Test
  void shouldRejectTheLayoutsBlockPoolRejectsWithTheSameMessage() {
    CacheLayout tooLarge =
        new CacheLayout(
            16,
            "bf16",
            List.of(
                MemoryFixtures.single(7).group(0),
                new CacheGroupSpec(
                    1,
                    new GroupKind.FullHistory(),
                    16,
                    List.of(new CacheField("kv", (1L << 32) - 1)),
                    null)));
    var fromPool =
        assertThrows(IllegalArgumentException.class, () -> new BlockPool(Tier.HOST, tooLarge, 1));
    var fromGeometry =
        assertThrows(IllegalArgumentException.class, () -> BlockGeometry.of(tooLarge));
    assertEquals(fromPool.getMessage(), fromGeometry.getMessage());
    assertTrue(fromGeometry.getMessage().contains("at group 1"), fromGeometry.getMessage());
    assertEquals(
        BlockPool.MAX_PARENT_BYTES,
        BlockGeometry.of(MemoryFixtures.single(1L << 32)).parentBytes());
  }

  @Test
  void shouldRejectIdsThatAreNoBlockOfTheGroup() {
    BlockGeometry geo = BlockGeometry.of(MemoryFixtures.hybrid()); // 20, 12, 5 children
    assertEquals(20, geo.maxChildren());
    assertEquals(1920, geo.parentBytes());
    assertEquals(384, geo.maxBytesPerBlock());

    var nullBlock = assertThrows(IllegalArgumentException.class, () -> geo.byteOffset(0, 0));
    assertTrue(
        nullBlock.getMessage().contains("block 0 is the null block"), nullBlock.getMessage());
    var negative = assertThrows(IllegalArgumentException.class, () -> geo.byteOffset(1, -3));
    assertTrue(negative.getMessage().contains("block id=-3"), negative.getMessage());
    var foreignChild =
        assertThrows(IllegalArgumentException.class, () -> geo.byteOffset(2, 1 + 20 + 5));
    assertTrue(
        foreignChild.getMessage().contains("child 5 of parent 1 but group 2 has 5 children"),
        foreignChild.getMessage());
    var badGroup = assertThrows(IllegalArgumentException.class, () -> geo.byteOffset(3, 1));
    assertTrue(badGroup.getMessage().contains("group id=3 outside [0, 3)"), badGroup.getMessage());
    assertThrows(IllegalArgumentException.class, () -> geo.bytesPerBlock(-1));

    assertEquals(1 * 1920 + 4 * 384, geo.byteOffset(2, 1 + 20 + 4));
    assertEquals(1 + 3 * 20, geo.blockIdLimit(3));
    var noParents = assertThrows(IllegalArgumentException.class, () -> geo.blockIdLimit(0));
    assertTrue(noParents.getMessage().contains("num_parents=0"), noParents.getMessage());
    var idSpace =
        assertThrows(
            IllegalArgumentException.class, () -> geo.blockIdLimit(Integer.MAX_VALUE / 10));
    assertTrue(idSpace.getMessage().contains("block id space"), idSpace.getMessage());
  }

  @Test
  void shouldEqualExactlyTheGeometriesOfTheSameBlockSizes() {
    BlockGeometry a = BlockGeometry.of(MemoryFixtures.hybrid());
    BlockGeometry b = BlockGeometry.of(MemoryFixtures.hybrid());
    assertEquals(a, b);
    assertEquals(a.hashCode(), b.hashCode());
    assertNotEquals(a, BlockGeometry.of(MemoryFixtures.single(96)));
    assertTrue(a.toString().contains("[96, 160, 384]"), a.toString());
  }
}

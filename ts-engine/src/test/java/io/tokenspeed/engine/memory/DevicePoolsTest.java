package io.tokenspeed.engine.memory;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.model.kv.PagedKvPool;
import java.lang.foreign.MemorySegment;
import java.util.HashSet;
import java.util.Random;
import java.util.Set;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class DevicePoolsTest {

  static LongStream seeds() {
    return MemoryFixtures.seeds(30);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldViewEachCacheBlockAsExactlyOneModelBlock(long seed) {
    Random rnd = new Random(seed);
    CacheLayout layout = MemoryFixtures.randomLayout(rnd);
    int numParents = 1 + rnd.nextInt(5);
    try (DevicePools device = new DevicePools(layout, numParents)) {
      BlockGeometry geo = device.geometry();
      for (int g = 0; g < layout.numGroups(); g++) {
        PagedKvPool pool = device.kvCache().pool(g);
        int children = geo.childrenPerParent(g);
        assertEquals(1 + numParents * children, pool.numBlocks());
        Set<Integer> seen = new HashSet<>();
        for (int p = 0; p < numParents; p++) {
          for (int c = 0; c < children; c++) {
            int id = 1 + p * geo.maxChildren() + c;
            int m = device.modelBlock(g, id);
            assertTrue(m >= 1 && m < pool.numBlocks(), "model block " + m);
            assertTrue(seen.add(m), "model block " + m + " twice");
            assertEquals(
                device.memory().block(g, id).address(), pool.block(m).address(), "id " + id);
          }
        }
        assertEquals(pool.numBlocks() - 1, seen.size());
        assertEquals(0, device.modelBlock(g, 0));

        for (int trial = 0; trial < 8; trial++) {
          int id = MemoryFixtures.randomBlock(rnd, geo, g, numParents);
          MemorySegment modelSide = pool.block(device.modelBlock(g, id));
          MemorySegment cacheSide = device.memory().block(g, id);
          byte[] written = MemoryFixtures.fill(modelSide, rnd);
          assertArrayEquals(written, MemoryFixtures.bytes(cacheSide), "model -> cache, id " + id);
          written = MemoryFixtures.fill(cacheSide, rnd);
          assertArrayEquals(written, MemoryFixtures.bytes(modelSide), "cache -> model, id " + id);
        }
      }
    }
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldKeepTheModelNullBlockOutsideTheTierBlocks(long seed) {
    Random rnd = new Random(seed);
    CacheLayout layout = MemoryFixtures.randomLayout(rnd);
    try (DevicePools device = new DevicePools(layout, 1 + rnd.nextInt(3))) {
      MemorySegment blocks = device.memory().segment();
      assertEquals(0, blocks.address() % 64, "tier blocks are 64-byte aligned");
      byte[] before = MemoryFixtures.fill(blocks, rnd);
      for (int g = 0; g < layout.numGroups(); g++) {
        PagedKvPool pool = device.kvCache().pool(g);
        assertEquals(blocks.address(), pool.block(1).address(), "group " + g + " block 1");
        pool.block(0).fill((byte) 0x5A);
      }
      assertArrayEquals(before, MemoryFixtures.bytes(blocks));
    }
  }

  @Test
  void shouldTranslateBlockTablesPerGroup() {
    try (DevicePools device = new DevicePools(MemoryFixtures.hybrid(), 3)) {
      // maxChildren 20; children 20, 12, 5.
      int[][] cache = {{1, 0, 21, 60}, {}, {0, 22, 45}};
      int[][] model = device.modelTables(cache);
      assertArrayEquals(new int[] {1, 0, 21, 60}, model[0]);
      assertArrayEquals(new int[] {}, model[1]);
      assertArrayEquals(new int[] {0, 1 + 5 + 1, 1 + 2 * 5 + 4}, model[2]);
      assertArrayEquals(new int[] {1, 0, 21, 60}, cache[0], "input left as it was");

      var wrongCount =
          assertThrows(IllegalArgumentException.class, () -> device.modelTables(new int[2][]));
      assertEquals(
          "block tables for 2 groups, but the layout has groups=3", wrongCount.getMessage());
      var foreign =
          assertThrows(
              IllegalArgumentException.class, () -> device.modelTables(new int[][] {{}, {13}, {}}));
      assertTrue(
          foreign.getMessage().startsWith("Device tier block id=13 is child 12"),
          foreign.getMessage());
      var beyond = assertThrows(IllegalArgumentException.class, () -> device.modelBlock(2, 61));
      assertTrue(beyond.getMessage().contains("beyond the tier"), beyond.getMessage());
    }
  }

  @Test
  void shouldFreeTheTierAndItsModelViewOnClose() {
    DevicePools device = new DevicePools(MemoryFixtures.hybrid(), 1);
    MemorySegment modelBlock = device.kvCache().pool(0).block(1);
    device.close();
    device.close();
    assertFalse(device.memory().segment().scope().isAlive());
    assertThrows(IllegalStateException.class, () -> modelBlock.fill((byte) 1));
    var noParents =
        assertThrows(
            IllegalArgumentException.class, () -> new DevicePools(MemoryFixtures.hybrid(), 0));
    assertEquals("Device tier num_parents=0 must be at least 1", noParents.getMessage());
  }
}

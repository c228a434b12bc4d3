package io.tokenspeed.engine.memory;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.BlockPool;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.stream.LongStream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Device blocks of every kind of group go to the Host and come back into other Device blocks byte
 * for byte, and nothing else in either tier changes.
 */
class FlatKvRoundTripTest {

  private static final CacheLayout LAYOUT = MemoryFixtures.hybrid();
  private static final int DEVICE_PARENTS = 6;

  static LongStream seeds() {
    return MemoryFixtures.seeds(50);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldStoreAndLoadBackEveryGroupExactly(long seed) throws InterruptedException {
    assertTrue(LAYOUT.group(0).kind() instanceof GroupKind.FullHistory);
    assertTrue(LAYOUT.group(1).kind() instanceof GroupKind.SlidingWindow);
    assertTrue(LAYOUT.group(2).kind() instanceof GroupKind.StateCheckpoints);
    Random rnd = new Random(seed);
    try (DevicePools device = new DevicePools(LAYOUT, DEVICE_PARENTS);
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, DEVICE_PARENTS, 1.5);
        DeviceHandle handle = new DeviceHandle(device, host)) {
      BlockGeometry geo = device.geometry();
      int groups = geo.numGroups();
      // Blocks as the cache hands them out: disjoint within each tier.
      BlockPool devicePool = new BlockPool(Tier.DEVICE, LAYOUT, DEVICE_PARENTS);
      BlockPool hostPool = new BlockPool(Tier.HOST, LAYOUT, host.numParents());
      int[] counts = new int[groups];
      int[][] sources = new int[groups][];
      int[][] destinations = new int[groups][];
      int[][] hostBlocks = new int[groups][];
      for (int g = 0; g < groups; g++) {
        counts[g] = 1 + rnd.nextInt(4);
        sources[g] = new int[counts[g]];
        destinations[g] = new int[counts[g]];
        hostBlocks[g] = new int[counts[g]];
      }
      assertTrue(devicePool.tryAcquire(counts, sources));
      assertTrue(devicePool.tryAcquire(counts, destinations));
      assertTrue(hostPool.tryAcquire(counts, hostBlocks));

      MemorySegment deviceBlocks = device.memory().segment();
      MemorySegment hostSegment = host.memory().segment();
      byte[] expectedDevice = MemoryFixtures.fill(deviceBlocks, rnd);
      byte[] expectedHost = MemoryFixtures.fill(hostSegment, rnd);
      byte[][][] original = new byte[groups][][];
      List<BlockTransfer> stores = new ArrayList<>();
      List<BlockTransfer> loads = new ArrayList<>();
      long bytesPerRound = 0;
      for (int g = 0; g < groups; g++) {
        original[g] = new byte[counts[g]][];
        for (int i = 0; i < counts[g]; i++) {
          original[g][i] = MemoryFixtures.bytes(device.memory().block(g, sources[g][i]));
          stores.add(new BlockTransfer.Store(g, sources[g][i], hostBlocks[g][i]));
          loads.add(new BlockTransfer.Load(g, hostBlocks[g][i], destinations[g][i]));
          bytesPerRound += geo.bytesPerBlock(g);
          put(expectedHost, geo.byteOffset(g, hostBlocks[g][i]), original[g][i]);
        }
      }

      CopyFence stored = handle.submit(stores);
      assertTrue(stored.await(10, TimeUnit.SECONDS));
      assertNull(stored.failure());
      for (int g = 0; g < groups; g++) {
        for (int i = 0; i < counts[g]; i++) {
          byte[] other = MemoryFixtures.fill(device.memory().block(g, sources[g][i]), rnd);
          put(expectedDevice, geo.byteOffset(g, sources[g][i]), other);
          put(expectedDevice, geo.byteOffset(g, destinations[g][i]), original[g][i]);
        }
      }
      CopyFence loaded = handle.submit(loads);
      assertTrue(loaded.await(10, TimeUnit.SECONDS));
      assertNull(loaded.failure());

      for (int g = 0; g < groups; g++) {
        for (int i = 0; i < counts[g]; i++) {
          int dst = destinations[g][i];
          assertArrayEquals(original[g][i], MemoryFixtures.bytes(device.memory().block(g, dst)));
          MemorySegment modelView = device.kvCache().pool(g).block(device.modelBlock(g, dst));
          assertArrayEquals(original[g][i], MemoryFixtures.bytes(modelView), "model view");
        }
      }
      assertEquals(-1, MemorySegment.ofArray(expectedDevice).mismatch(deviceBlocks), "Device");
      assertEquals(-1, MemorySegment.ofArray(expectedHost).mismatch(hostSegment), "Host");
      assertEquals(2 * bytesPerRound, handle.copiedBytes());
      assertEquals(2, handle.completedSequence());
    }
  }

  private static void put(byte[] image, long offset, byte[] block) {
    System.arraycopy(block, 0, image, Math.toIntExact(offset), block.length);
  }
}

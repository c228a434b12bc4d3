package io.tokenspeed.engine.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheLayout;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Staged batches ({@link DeviceHandle#submitStaged}): the bytes they leave are those of the same
 * batch run whole, and a layer's gate opens only once that layer's bytes are in place.
 */
class StagedCopiesTest {
  private static final int PARENTS = 6;

  static LongStream seeds() {
    return MemoryFixtures.seeds(24);
  }

  /**
   * Random batches of loads, stores and Device copies, with chains (an op reading a block an
   * earlier op of the batch wrote) and repeated destinations, over two twin pairs of tiers: one
   * batch staged, the other whole. A thread playing the forward waits on each layer in turn and
   * checks that layer's bytes of every block are then final.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldLeaveTheBytesOfTheWholeBatchAndOpenEachLayerWhenItsBytesAreIn(long seed)
      throws Exception {
    Random rnd = new Random(seed);
    int layers = 2 + rnd.nextInt(7);
    int groups = 1 + rnd.nextInt(Math.min(3, layers));
    int[] groupOf = new int[layers];
    for (int l = 0; l < layers; l++) {
      groupOf[l] = l < groups ? l : rnd.nextInt(groups);
    }
    CacheLayout layout = LoadStagesTest.layered(groupOf, 4 * (1 + rnd.nextInt(6)));
    LoadStages stages = LoadStages.of(layout, 2 + rnd.nextInt(layers)).orElseThrow();
    try (DevicePools stagedDevice = new DevicePools(layout, PARENTS);
        HostCacheStorage stagedHost = HostCacheStorage.ofRatio(layout, PARENTS, 1.0);
        DevicePools wholeDevice = new DevicePools(layout, PARENTS);
        HostCacheStorage wholeHost = HostCacheStorage.ofRatio(layout, PARENTS, 1.0);
        DeviceHandle staged = new DeviceHandle(stagedDevice, stagedHost);
        DeviceHandle whole = new DeviceHandle(wholeDevice, wholeHost)) {
      byte[] d = MemoryFixtures.fill(stagedDevice.memory().segment(), rnd);
      byte[] h = MemoryFixtures.fill(stagedHost.memory().segment(), rnd);
      wholeDevice.memory().segment().copyFrom(MemorySegment.ofArray(d));
      wholeHost.memory().segment().copyFrom(MemorySegment.ofArray(h));
      BlockGeometry geo = stagedDevice.geometry();

      for (int batch = 0; batch < 6; batch++) {
        List<BlockTransfer> ops = randomOps(rnd, geo, 1 + rnd.nextInt(24));
        CopyFence wholeFence = whole.submit(ops);
        assertTrue(wholeFence.await(10, TimeUnit.SECONDS));
        assertNull(wholeFence.failure());
        MemorySegment want = wholeDevice.memory().segment();

        StagedFence gate = staged.submitStaged(ops, stages);
        for (int l = 0; l < layers; l++) {
          gate.awaitLayer(l);
          assertTrue(gate.completedStages() > stages.stageOfLayer(l));
          for (BlockTransfer op : ops) {
            int g = op.groupId();
            long length = stages.length(g, stages.stageOfLayer(l));
            if (length == 0 || op instanceof BlockTransfer.Store) {
              continue;
            }
            int block =
                op instanceof BlockTransfer.Load load
                    ? load.deviceBlock()
                    : ((BlockTransfer.DeviceCopy) op).dstBlock();
            long at = geo.byteOffset(g, block) + stages.offset(g, stages.stageOfLayer(l));
            assertEquals(
                -1,
                stagedDevice
                    .memory()
                    .segment()
                    .asSlice(at, length)
                    .mismatch(want.asSlice(at, length)),
                "seed " + seed + " batch " + batch + ": layer " + l + " of " + op);
          }
        }
        assertTrue(gate.awaitedAll());
        assertTrue(gate.fence().await(10, TimeUnit.SECONDS));
        assertNull(gate.fence().failure());
        assertEquals(-1, stagedDevice.memory().segment().mismatch(want), "Device, batch " + batch);
        assertEquals(
            -1,
            stagedHost.memory().segment().mismatch(wholeHost.memory().segment()),
            "Host, batch " + batch);
      }
      assertEquals(whole.copiedBytes(), staged.copiedBytes());
      assertEquals(whole.loadedBytes(), staged.loadedBytes());
    }
  }

  private static List<BlockTransfer> randomOps(Random rnd, BlockGeometry geo, int n) {
    List<BlockTransfer> ops = new ArrayList<>();
    int[] lastDevice = new int[geo.numGroups()];
    for (int i = 0; i < n; i++) {
      int g = rnd.nextInt(geo.numGroups());
      int device =
          lastDevice[g] != 0 && rnd.nextInt(3) == 0
              ? lastDevice[g] // read or overwrite what an earlier op wrote
              : blockOf(rnd, geo, g);
      int other = blockOf(rnd, geo, g);
      switch (rnd.nextInt(3)) {
        case 0 -> {
          ops.add(new BlockTransfer.Load(g, other, device));
          lastDevice[g] = device;
        }
        case 1 -> ops.add(new BlockTransfer.Store(g, device, other));
        default -> {
          if (other != device) {
            ops.add(new BlockTransfer.DeviceCopy(g, device, other));
            lastDevice[g] = other;
          }
        }
      }
    }
    return ops;
  }

  /**
   * A random block of group {@code g} in a parent of that group alone (parent {@code p} with {@code
   * p mod groups = g}), as the cache hands them out: a parent holds one group's blocks at a time.
   */
  private static int blockOf(Random rnd, BlockGeometry geo, int g) {
    int groups = geo.numGroups();
    int parent = g + groups * rnd.nextInt(PARENTS / groups);
    return 1 + parent * geo.maxChildren() + rnd.nextInt(geo.childrenPerParent(g));
  }

  @Test
  void shouldHoldEachLayerUntilItsStageHasRun() throws Exception {
    CacheLayout layout = LoadStagesTest.layered(new int[] {0, 0, 0, 0}, 8);
    LoadStages stages = LoadStages.of(layout, 4).orElseThrow();
    CountDownLatch release = new CountDownLatch(1);
    try (DevicePools device = new DevicePools(layout, PARENTS);
        HostCacheStorage host = HostCacheStorage.ofRatio(layout, PARENTS, 1.0);
        DeviceHandle handle = new DeviceHandle(device, host, 16, s -> await(release))) {
      StagedFence gate = handle.submitStaged(List.of(new BlockTransfer.Load(0, 1, 2)), stages);
      AtomicReference<Integer> reached = new AtomicReference<>(-1);
      Thread forward =
          Thread.ofPlatform()
              .start(
                  () -> {
                    for (int l = 0; l < 4; l++) {
                      gate.awaitLayer(l);
                      reached.set(l);
                    }
                  });
      forward.join(200);
      assertTrue(forward.isAlive(), "layer 0 waits while its stage has not run");
      assertEquals(-1, reached.get());
      assertEquals(0, gate.completedStages());
      release.countDown();
      forward.join(10_000);
      assertFalse(forward.isAlive());
      assertEquals(3, reached.get());
      assertTrue(gate.awaitedAll());
      assertEquals(4, gate.completedStages());
    }
  }

  @Test
  void shouldNotCountAGateWaitedForOnlyPartly() throws Exception {
    CacheLayout layout = LoadStagesTest.layered(new int[] {0, 0, 0}, 8);
    LoadStages stages = LoadStages.of(layout, 3).orElseThrow();
    try (DevicePools device = new DevicePools(layout, PARENTS);
        HostCacheStorage host = HostCacheStorage.ofRatio(layout, PARENTS, 1.0);
        DeviceHandle handle = new DeviceHandle(device, host)) {
      StagedFence gate = handle.submitStaged(List.of(new BlockTransfer.Load(0, 1, 2)), stages);
      gate.awaitLayer(1);
      assertFalse(gate.awaitedAll(), "a forward that stopped waiting after layer 1");
      gate.awaitLayer(7); // past the last layer: the whole batch
      assertTrue(gate.awaitedAll());
      StagedFence empty = handle.submitStaged(List.of(), stages);
      assertTrue(empty.fence().await(10, TimeUnit.SECONDS));
      assertEquals(3, empty.completedStages(), "an empty batch opens every layer");
      assertThrows(IllegalArgumentException.class, () -> handle.submitStaged(List.of(), null));
    }
  }

  @Test
  void shouldFailTheGateOfABatchWhoseCopyThrowsAndOfEveryLaterOne() throws Exception {
    CacheLayout layout = LoadStagesTest.layered(new int[] {0, 0}, 8);
    LoadStages stages = LoadStages.of(layout, 2).orElseThrow();
    CountDownLatch release = new CountDownLatch(1);
    try (DevicePools device = new DevicePools(layout, PARENTS)) {
      HostCacheStorage host = HostCacheStorage.ofRatio(layout, PARENTS, 1.0);
      DeviceHandle handle = new DeviceHandle(device, host, 16, s -> await(release));
      StagedFence first = handle.submitStaged(List.of(new BlockTransfer.Load(0, 1, 2)), stages);
      StagedFence second = handle.submitStaged(List.of(new BlockTransfer.Load(0, 2, 3)), stages);
      host.close(); // the first batch's loads now read freed memory
      release.countDown();
      var failed = assertThrows(IllegalStateException.class, () -> first.awaitLayer(0));
      assertSame(handle.failure(), failed.getCause());
      var notRun = assertThrows(IllegalStateException.class, () -> second.awaitLayer(1));
      assertSame(handle.failure(), notRun.getCause().getCause());
      assertTrue(second.fence().await(10, TimeUnit.SECONDS));
      StagedFence later = handle.submitStaged(List.of(new BlockTransfer.Load(0, 1, 2)), stages);
      assertThrows(IllegalStateException.class, () -> later.awaitLayer(0));
      handle.close();
    }
  }

  private static void await(CountDownLatch latch) {
    try {
      assertTrue(latch.await(10, TimeUnit.SECONDS));
    } catch (InterruptedException e) {
      throw new AssertionError(e);
    }
  }
}

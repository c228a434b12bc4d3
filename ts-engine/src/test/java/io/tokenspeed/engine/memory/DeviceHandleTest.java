package io.tokenspeed.engine.memory;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
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
import java.util.function.LongConsumer;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class DeviceHandleTest {

  private static final CacheLayout LAYOUT = MemoryFixtures.hybrid(); // 20, 12, 5 children
  private static final int PARENTS = 4;

  static LongStream seeds() {
    return MemoryFixtures.seeds(12);
  }

  /** Where a block lives, for the chain and the reference images. */
  private record At(boolean onDevice, int block) {}

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldRunChainedBatchesInSubmissionOrder(long seed) throws InterruptedException {
    Random rnd = new Random(seed);
    try (DevicePools device = new DevicePools(LAYOUT, PARENTS);
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, PARENTS, 1.0);
        DeviceHandle handle = new DeviceHandle(device, host)) {
      BlockGeometry geo = device.geometry();
      int g = Math.floorMod(seed, geo.numGroups());
      long bpb = geo.bytesPerBlock(g);
      byte[] deviceImage = MemoryFixtures.fill(device.memory().segment(), rnd);
      byte[] hostImage = MemoryFixtures.fill(host.memory().segment(), rnd);
      At start = new At(true, MemoryFixtures.randomBlock(rnd, geo, g, PARENTS));
      byte[] payload = MemoryFixtures.bytes(device.memory().block(g, start.block()));

      // Each op reads the block the op before it wrote: A -> B, B -> C, ... across batches.
      At at = start;
      List<CopyFence> fences = new ArrayList<>();
      int batches = 200;
      for (int b = 0; b < batches; b++) {
        List<BlockTransfer> ops = new ArrayList<>();
        for (int n = 1 + rnd.nextInt(3); n > 0; n--) {
          At next;
          BlockTransfer op;
          if (!at.onDevice()) {
            next = new At(true, MemoryFixtures.randomBlock(rnd, geo, g, PARENTS));
            op = new BlockTransfer.Load(g, at.block(), next.block());
          } else if (rnd.nextBoolean()) {
            next = new At(false, MemoryFixtures.randomBlock(rnd, geo, g, PARENTS));
            op = new BlockTransfer.Store(g, at.block(), next.block());
          } else {
            next = new At(true, MemoryFixtures.randomBlock(rnd, geo, g, PARENTS));
            op = new BlockTransfer.DeviceCopy(g, at.block(), next.block());
          }
          ops.add(op);
          byte[] src = at.onDevice() ? deviceImage : hostImage;
          byte[] dst = next.onDevice() ? deviceImage : hostImage;
          System.arraycopy(
              src,
              (int) geo.byteOffset(g, at.block()),
              dst,
              (int) geo.byteOffset(g, next.block()),
              (int) bpb);
          at = next;
        }
        fences.add(handle.submit(ops));
      }

      long lastSeen = 0;
      CopyFence last = fences.getLast();
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (!last.isDone()) {
        assertTrue(System.nanoTime() < deadline, "the batches did not finish in 10 s");
        long completed = handle.completedSequence();
        assertTrue(completed >= lastSeen, "completedSequence went back");
        lastSeen = completed;
        assertDoneInOrder(fences);
      }
      assertDoneInOrder(fences);
      for (int i = 0; i < batches; i++) {
        assertEquals(i + 1, fences.get(i).sequence());
        assertTrue(fences.get(i).isDone());
        assertNull(fences.get(i).failure());
      }
      assertEquals(batches, handle.completedSequence());
      assertEquals(batches, handle.submittedSequence());
      MemorySegment end =
          at.onDevice() ? device.memory().block(g, at.block()) : host.memory().block(g, at.block());
      assertArrayEquals(payload, MemoryFixtures.bytes(end), "the chain's end holds its start");
      assertEquals(-1, MemorySegment.ofArray(deviceImage).mismatch(device.memory().segment()));
      assertEquals(-1, MemorySegment.ofArray(hostImage).mismatch(host.memory().segment()));
    }
  }

  @Test
  void shouldCountHostToDeviceBytesApartWithTheirShareOfTheCopyTime() throws Exception {
    try (DevicePools device = new DevicePools(LAYOUT, PARENTS);
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, PARENTS, 1.0);
        DeviceHandle handle = new DeviceHandle(device, host)) {
      BlockGeometry geo = device.geometry();
      long bpb = geo.bytesPerBlock(0);
      CopyFence stores =
          handle.submit(
              List.of(new BlockTransfer.Store(0, 1, 1), new BlockTransfer.DeviceCopy(0, 1, 2)));
      assertTrue(stores.await(10, TimeUnit.SECONDS));
      assertEquals(0, handle.loadedBytes(), "no Host->Device copy yet");
      assertEquals(0, handle.loadNanos());
      CopyFence loads =
          handle.submit(List.of(new BlockTransfer.Load(0, 1, 3), new BlockTransfer.Load(0, 1, 4)));
      assertTrue(loads.await(10, TimeUnit.SECONDS));
      assertEquals(2 * bpb, handle.loadedBytes());
      long loadsOnly = handle.loadNanos();
      assertTrue(loadsOnly > 0, "a batch of loads counts its time");
      CopyFence mixed =
          handle.submit(List.of(new BlockTransfer.Store(0, 3, 2), new BlockTransfer.Load(0, 2, 5)));
      assertTrue(mixed.await(10, TimeUnit.SECONDS));
      assertNull(mixed.failure());
      assertEquals(3 * bpb, handle.loadedBytes());
      assertEquals(6 * bpb, handle.copiedBytes());
      assertTrue(handle.loadNanos() >= loadsOnly);
      assertTrue(handle.loadNanos() <= handle.copyNanos(), "the loads' share of the copy time");
    }
  }

  /** Reading from the last fence down: once one is seen done, every earlier one must be. */
  private static void assertDoneInOrder(List<CopyFence> fences) {
    boolean laterDone = false;
    for (int i = fences.size() - 1; i >= 0; i--) {
      boolean done = fences.get(i).isDone();
      assertTrue(done || !laterDone, "fence " + (i + 1) + " not done after a later one");
      laterDone |= done;
    }
  }

  @Test
  void shouldFailTheBatchWhoseCopyThrowsAndEveryLaterOne() throws InterruptedException {
    CountDownLatch release = new CountDownLatch(1);
    AtomicReference<String> threadName = new AtomicReference<>();
    LongConsumer hook =
        sequence -> {
          threadName.set(Thread.currentThread().getName());
          if (sequence == 1) {
            await(release);
          }
        };
    try (DevicePools device = new DevicePools(LAYOUT, PARENTS)) {
      HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, PARENTS, 1.0);
      DeviceHandle handle = new DeviceHandle(device, host, 16, hook);
      byte[] deviceBefore = MemoryFixtures.fill(device.memory().segment(), new Random(1));
      CopyFence store = handle.submit(List.of(new BlockTransfer.Store(0, 1, 2)));
      CopyFence copy = handle.submit(List.of(new BlockTransfer.DeviceCopy(0, 1, 2)));
      CopyFence empty = handle.submit(List.of());
      assertFalse(empty.isDone(), "an empty batch behind pending work waits its turn");
      host.close(); // the Store of batch 1 now touches freed memory
      release.countDown();
      assertTrue(empty.await(10, TimeUnit.SECONDS));

      assertInstanceOf(IllegalStateException.class, store.failure());
      assertSame(store.failure(), handle.failure());
      assertSame(store.failure(), copy.failure().getCause());
      assertTrue(
          copy.failure().getMessage().equals("copy batch 2 did not run: batch 1 failed"),
          copy.failure().getMessage());
      assertSame(store.failure(), empty.failure().getCause());
      assertEquals(3, handle.completedSequence());
      assertEquals(0, handle.copiedBytes());
      assertArrayEquals(deviceBefore, MemoryFixtures.bytes(device.memory().segment()));
      assertEquals(DeviceHandle.THREAD_NAME, threadName.get());

      CopyFence afterFailure = handle.submit(List.of(new BlockTransfer.DeviceCopy(1, 1, 2)));
      assertTrue(afterFailure.await(10, TimeUnit.SECONDS));
      assertSame(store.failure(), afterFailure.failure().getCause());
      assertArrayEquals(deviceBefore, MemoryFixtures.bytes(device.memory().segment()));

      handle.close();
      handle.close();
      var closed = assertThrows(IllegalStateException.class, () -> handle.submit(List.of()));
      assertEquals(
          "DeviceHandle is closed: a batch of 0 transfers is rejected", closed.getMessage());
      var closedBeforeIds =
          assertThrows(
              IllegalStateException.class,
              () -> handle.submit(List.of(new BlockTransfer.DeviceCopy(0, 1, 99_999))));
      assertEquals(
          "DeviceHandle is closed: a batch of 1 transfers is rejected",
          closedBeforeIds.getMessage());
    }
  }

  @Test
  void shouldLeaveBackgroundBatchesOutOfTheForegroundBacklogAndRunEveryBatchInOrder()
      throws InterruptedException {
    CountDownLatch release = new CountDownLatch(1);
    List<Long> ran = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
    LongConsumer hook =
        sequence -> {
          if (sequence == 1) {
            await(release);
          }
          ran.add(sequence);
        };
    try (DevicePools device = new DevicePools(LAYOUT, PARENTS);
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, PARENTS, 1.0);
        DeviceHandle handle = new DeviceHandle(device, host, 16, hook)) {
      CopyFence early = handle.submitBackground(List.of(new BlockTransfer.Load(0, 1, 1)));
      assertEquals(0, handle.foregroundBacklog(), "a background batch is nobody's round");
      CopyFence loop = handle.submit(List.of(new BlockTransfer.Load(0, 2, 2)));
      CopyFence late = handle.submitBackground(List.of(new BlockTransfer.Load(0, 3, 3)));
      assertEquals(1, handle.foregroundBacklog(), "the loop's batch is due");
      assertEquals(3, handle.submittedSequence() - handle.completedSequence());
      release.countDown();
      assertTrue(loop.await(10, TimeUnit.SECONDS));
      assertTrue(early.isDone(), "a batch submitted before it ran before it");
      assertEquals(0, handle.foregroundBacklog());
      assertTrue(late.await(10, TimeUnit.SECONDS));
      assertEquals(List.of(1L, 2L, 3L), ran, "one queue, in submission order");
      assertEquals(3 * device.geometry().bytesPerBlock(0), handle.loadedBytes());
    }
  }

  @Test
  void shouldKeepEarlierBatchesWhenALaterOneFails() throws InterruptedException {
    RuntimeException boom = new RuntimeException("copy engine fault");
    LongConsumer hook =
        sequence -> {
          if (sequence == 2) {
            throw boom;
          }
        };
    try (DevicePools device = new DevicePools(LAYOUT, PARENTS);
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, PARENTS, 1.0);
        DeviceHandle handle = new DeviceHandle(device, host, 16, hook)) {
      MemoryFixtures.fill(device.memory().segment(), new Random(2));
      byte[] payload = MemoryFixtures.bytes(device.memory().block(2, 1));
      CopyFence first = handle.submit(List.of(new BlockTransfer.Store(2, 1, 3)));
      CopyFence second = handle.submit(List.of(new BlockTransfer.Load(2, 3, 2)));
      CopyFence third = handle.submit(List.of(new BlockTransfer.Load(2, 3, 4)));
      assertTrue(third.await(10, TimeUnit.SECONDS));
      assertNull(first.failure());
      assertArrayEquals(payload, MemoryFixtures.bytes(host.memory().block(2, 3)));
      assertSame(boom, second.failure());
      assertSame(boom, third.failure().getCause());
      assertEquals(384, handle.copiedBytes());
    }
  }

  @Test
  void shouldDrainPendingBatchesOnClose() throws InterruptedException {
    CountDownLatch release = new CountDownLatch(1);
    try (DevicePools device = new DevicePools(LAYOUT, PARENTS);
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, PARENTS, 1.0)) {
      DeviceHandle handle =
          new DeviceHandle(
              device,
              host,
              64,
              sequence -> {
                if (sequence == 1) {
                  await(release);
                }
              });
      MemoryFixtures.fill(device.memory().segment(), new Random(3));
      byte[] payload = MemoryFixtures.bytes(device.memory().block(1, 1));
      List<CopyFence> fences = new ArrayList<>();
      for (int b = 1; b <= 5; b++) { // 1 -> 2 -> ... -> 6 on the Device, via the Host
        fences.add(handle.submit(List.of(new BlockTransfer.Store(1, b, b))));
        fences.add(handle.submit(List.of(new BlockTransfer.Load(1, b, b + 1))));
      }
      Thread closer = Thread.ofPlatform().start(handle::close);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (!rejects(handle)) {
        assertTrue(System.nanoTime() < deadline, "close never stopped accepting");
        Thread.onSpinWait();
      }
      assertTrue(closer.isAlive(), "close waits for the pending batches");
      assertFalse(fences.getLast().isDone());
      release.countDown();
      closer.join(TimeUnit.SECONDS.toMillis(10));
      assertFalse(closer.isAlive());
      for (CopyFence f : fences) {
        assertTrue(f.isDone());
        assertNull(f.failure());
      }
      assertArrayEquals(payload, MemoryFixtures.bytes(device.memory().block(1, 6)));
      assertEquals(10 * 160, handle.copiedBytes());
      assertTrue(handle.copyNanos() > 0, "ten batches copied bytes: their time is counted");
      handle.close();
    }
  }

  private static boolean rejects(DeviceHandle handle) {
    try {
      handle.submit(List.of());
      return false;
    } catch (IllegalStateException closed) {
      return true;
    }
  }

  @Test
  void shouldRefuseBatchesBeyondTheBoundInsteadOfBlocking() throws InterruptedException {
    CountDownLatch release = new CountDownLatch(1);
    try (DevicePools device = new DevicePools(LAYOUT, PARENTS);
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, PARENTS, 1.0);
        DeviceHandle handle =
            new DeviceHandle(
                device,
                host,
                3,
                sequence -> {
                  if (sequence == 1) {
                    await(release);
                  }
                })) {
      List<BlockTransfer> op = List.of(new BlockTransfer.DeviceCopy(0, 1, 2));
      handle.submit(op);
      handle.submit(op);
      CopyFence third = handle.submit(op);
      var full = assertThrows(IllegalStateException.class, () -> handle.submit(op));
      assertEquals(
          "copy queue is full: 3 batches pending (max_pending_batches=3)", full.getMessage());
      assertThrows(IllegalStateException.class, () -> handle.submit(List.of()));
      release.countDown();
      assertTrue(third.await(10, TimeUnit.SECONDS));
      CopyFence next = handle.submit(op);
      assertEquals(4, next.sequence(), "a refused batch takes no sequence");
      assertTrue(next.await(10, TimeUnit.SECONDS));
      assertNull(next.failure());
    }
  }

  @Test
  void shouldCompleteAnEmptyBatchAtOnceWhenIdle() {
    try (DevicePools device = new DevicePools(LAYOUT, 1);
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, 1, 1.0);
        DeviceHandle handle = new DeviceHandle(device, host)) {
      CopyFence first = handle.submit(List.of());
      assertTrue(first.isDone());
      assertEquals(1, first.sequence());
      assertEquals(1, handle.completedSequence());
      assertNull(first.failure());
      assertEquals(2, handle.submit(List.of()).sequence());
      assertEquals(0, handle.copiedBytes());
    }
  }

  @Test
  void shouldNameTheOpWhoseIdsAreNoBlocksOfTheTiers() {
    try (DevicePools device = new DevicePools(LAYOUT, 2); // Device ids below 41
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, 2, 0.5); // Host ids below 21
        DeviceHandle handle = new DeviceHandle(device, host)) {
      assertRejected(
          handle,
          new BlockTransfer.Load(0, 21, 1),
          "Load[groupId=0, hostBlock=21, deviceBlock=1]: Host tier block id=21 of group 0 is"
              + " beyond the tier");
      assertRejected(
          handle,
          new BlockTransfer.Store(1, 41, 1),
          "Store[groupId=1, deviceBlock=41, hostBlock=1]: Device tier block id=41 of group 1 is"
              + " beyond the tier");
      assertRejected(
          handle,
          new BlockTransfer.DeviceCopy(2, 1, 6),
          "DeviceCopy[groupId=2, srcBlock=1, dstBlock=6]: Device tier block id=6 is child 5 of"
              + " parent 0 but group 2 has 5 children per parent");
      assertRejected(
          handle,
          new BlockTransfer.DeviceCopy(3, 1, 2),
          "DeviceCopy[groupId=3, srcBlock=1, dstBlock=2]: Device tier group id=3 outside [0, 3)");
      assertRejected(
          handle,
          new BlockTransfer.Store(1, 1, 13),
          "Store[groupId=1, deviceBlock=1, hostBlock=13]: Host tier block id=13 is child 12");

      List<BlockTransfer> withNull = new ArrayList<>();
      withNull.add(null);
      var nullOp = assertThrows(IllegalArgumentException.class, () -> handle.submit(withNull));
      assertEquals("a block transfer is null", nullOp.getMessage());
      assertThrows(IllegalArgumentException.class, () -> handle.submit(null));
      assertEquals(0, handle.completedSequence(), "a rejected batch takes no sequence");
      assertEquals(1, handle.submit(List.of(new BlockTransfer.Load(0, 20, 40))).sequence());
    }
  }

  private static void assertRejected(DeviceHandle handle, BlockTransfer bad, String start) {
    List<BlockTransfer> batch = List.of(new BlockTransfer.DeviceCopy(0, 1, 2), bad);
    var e = assertThrows(IllegalArgumentException.class, () -> handle.submit(batch));
    assertTrue(e.getMessage().startsWith(start), e.getMessage());
  }

  @Test
  void shouldRejectTiersThatDoNotFitTogether() {
    try (DevicePools device = new DevicePools(LAYOUT, 1);
        HostCacheStorage other = HostCacheStorage.ofRatio(MemoryFixtures.single(96), 1, 1.0);
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, 1, 1.0)) {
      var mismatch =
          assertThrows(IllegalArgumentException.class, () -> new DeviceHandle(device, other));
      assertTrue(
          mismatch.getMessage().contains("differs from Host geometry"), mismatch.getMessage());
      var bound =
          assertThrows(IllegalArgumentException.class, () -> new DeviceHandle(device, host, 0));
      assertEquals("max_pending_batches=0 must be at least 1", bound.getMessage());
      HostCacheStorage freedHost = HostCacheStorage.ofRatio(LAYOUT, 1, 1.0);
      freedHost.close();
      var freed =
          assertThrows(IllegalArgumentException.class, () -> new DeviceHandle(device, freedHost));
      assertEquals("Host tier memory is already freed", freed.getMessage());
    }
  }

  private static void await(CountDownLatch latch) {
    try {
      if (!latch.await(10, TimeUnit.SECONDS)) {
        throw new IllegalStateException("the test never released the copy thread");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }
}

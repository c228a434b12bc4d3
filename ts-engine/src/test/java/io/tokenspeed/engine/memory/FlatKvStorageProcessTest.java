package io.tokenspeed.engine.memory;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.BlockPool;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageOp;
import io.tokenspeed.engine.l3.StorageJobs;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.testkit.ChildJvm;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The specification's flat-KV end-to-end case over the file store, across processes: a writer JVM
 * fills Device blocks of packed Full, SWA and State groups, copies them D2H and PUTs them, and
 * exits; only then does this JVM allocate its Host and Device tiers, GET the objects into other
 * Host blocks and H2D them into other Device slots, and find exactly the written bytes there and
 * every other byte of both tiers unchanged. Then it deletes the namespace, and a second GET of the
 * same keys comes back as safely retired misses that write nothing.
 */
class FlatKvStorageProcessTest {
  static final CacheLayout LAYOUT = MemoryFixtures.hybrid();
  static final int DEVICE_PARENTS = 6;
  static final double HOST_RATIO = 1.5;
  static final long SEED = 20261201L;

  /** Blocks per group the writer fills. */
  static final int[] COUNTS = {3, 2, 2};

  static Namespace namespace() {
    return Namespace.of(
        new DeploymentIdentity(
            "flat-kv-test", "0".repeat(64), "1", null, null, LAYOUT, 1, 1, 1, 1, "cpu-reference"));
  }

  /** The keys of the written blocks: group g, row i. */
  static List<CacheKey> keys() {
    List<CacheKey> keys = new ArrayList<>();
    for (int g = 0; g < COUNTS.length; g++) {
      for (int i = 0; i < COUNTS[g]; i++) {
        byte[] digest = new byte[32];
        new Random(SEED * 31 + g * 7 + i).nextBytes(digest);
        keys.add(new CacheKey(g, ContentHash.of(digest), 0));
      }
    }
    return keys;
  }

  /** The payload of key {@code k} (the {@code k}-th of {@link #keys}). */
  static byte[] payload(int k, long bytes) {
    byte[] b = new byte[(int) bytes];
    new Random(SEED + 1000L * k).nextBytes(b);
    return b;
  }

  /** Acquires {@code COUNTS} blocks per group from {@code pool}, after {@code skip} per group. */
  static int[][] blocks(BlockPool pool, int skip) {
    int groups = COUNTS.length;
    if (skip > 0) {
      int[] s = new int[groups];
      Arrays.fill(s, skip);
      int[][] dropped = new int[groups][skip];
      assertTrue(pool.tryAcquire(s, dropped), "room to skip");
    }
    int[][] out = new int[groups][];
    for (int g = 0; g < groups; g++) {
      out[g] = new int[COUNTS[g]];
    }
    assertTrue(pool.tryAcquire(COUNTS, out), "room for the blocks");
    return out;
  }

  static List<Integer> flatten(int[][] blocks) {
    List<Integer> out = new ArrayList<>();
    for (int[] row : blocks) {
      for (int b : row) {
        out.add(b);
      }
    }
    return out;
  }

  /** An executor with the defaults over a file store in {@code store} and {@code host}. */
  static L3Executor fileExecutor(Path store, HostCacheStorage host) throws Exception {
    return L3Executor.start(
        new FileStore(FileStoreSettings.of(store)),
        L3ExecutorConfig.defaults(),
        host.memory().segment(),
        System::nanoTime);
  }

  /** Polls until the completion of {@code op} arrives. */
  static StorageDone await(L3Executor executor, long op) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (System.nanoTime() < deadline) {
      for (StorageDone d : executor.poll().completions()) {
        if (d.operationId() == op) {
          return d;
        }
      }
      Thread.sleep(2);
    }
    throw new AssertionError("no completion for operation " + op);
  }

  @Test
  void shouldRestoreWhatAnExitedWriterPutIntoOtherSlotsExactlyThenMissAfterDeletion(
      @TempDir Path dir) throws Exception {
    Path store = dir.resolve("store");
    ChildJvm.Finished writer =
        ChildJvm.launch(FlatKvStorageWriter.class)
            .args(List.of(store.toString()))
            .maxHeap("256m")
            .failOn("error ")
            .start(dir, "writer")
            .finish(Duration.ofSeconds(60));
    assertEquals(0, writer.exitStatus(), writer::describe);
    assertEquals("true", writer.value("store-closed"), writer::describe);
    List<Integer> writerHost = new ArrayList<>();
    for (String b : writer.value("host-blocks").split(",")) {
      writerHost.add(Integer.parseInt(b));
    }
    List<Integer> writerDevice = new ArrayList<>();
    for (String b : writer.value("device-blocks").split(",")) {
      writerDevice.add(Integer.parseInt(b));
    }

    // the writer has exited: only now are this process's tiers allocated
    List<CacheKey> keys = keys();
    Random rnd = new Random(SEED ^ 0xABCDEF);
    try (DevicePools device = new DevicePools(LAYOUT, DEVICE_PARENTS);
        HostCacheStorage host = HostCacheStorage.ofRatio(LAYOUT, DEVICE_PARENTS, HOST_RATIO);
        DeviceHandle copies = new DeviceHandle(device, host)) {
      BlockGeometry geo = device.geometry();
      byte[] deviceBefore = MemoryFixtures.fill(device.memory().segment(), rnd);
      byte[] hostBefore = MemoryFixtures.fill(host.memory().segment(), rnd);
      int[][] hostBlocks = blocks(new BlockPool(Tier.HOST, LAYOUT, host.numParents()), 1);
      int[][] deviceBlocks = blocks(new BlockPool(Tier.DEVICE, LAYOUT, DEVICE_PARENTS), 1);
      assertTrue(
          !flatten(hostBlocks).equals(writerHost) && !flatten(deviceBlocks).equals(writerDevice),
          "other slots than the writer's");
      List<Integer> destinations = flatten(hostBlocks);

      StorageJobs jobs = new StorageJobs(namespace(), LAYOUT, host.geometry(), 0);
      L3Executor executor = fileExecutor(store, host);
      try {
        executor.submit(jobs.job(new StorageOp.Get(1, keys, destinations)));
        StorageDone got = await(executor, 1);
        assertTrue(got.retired(), got::toString);
        assertEquals(
            List.of(KeyOutcome.OK), got.outcomes().stream().distinct().toList(), got::toString);

        List<BlockTransfer> loads = new ArrayList<>();
        int k = 0;
        for (int g = 0; g < COUNTS.length; g++) {
          for (int i = 0; i < COUNTS[g]; i++, k++) {
            loads.add(new BlockTransfer.Load(g, hostBlocks[g][i], deviceBlocks[g][i]));
          }
        }
        CopyFence fence = copies.submit(loads);
        assertTrue(fence.await(10, TimeUnit.SECONDS));
        assertEquals(null, fence.failure());

        // exact bytes where they were restored, every other byte as it was
        k = 0;
        for (int g = 0; g < COUNTS.length; g++) {
          for (int i = 0; i < COUNTS[g]; i++, k++) {
            byte[] want = payload(k, geo.bytesPerBlock(g));
            assertArrayEquals(
                want, MemoryFixtures.bytes(host.memory().block(g, hostBlocks[g][i])), "host " + k);
            assertArrayEquals(
                want,
                MemoryFixtures.bytes(device.memory().block(g, deviceBlocks[g][i])),
                "device " + k);
            MemorySegment d = device.memory().block(g, deviceBlocks[g][i]);
            MemorySegment h = host.memory().block(g, hostBlocks[g][i]);
            long dOff = d.address() - device.memory().segment().address();
            long hOff = h.address() - host.memory().segment().address();
            System.arraycopy(want, 0, deviceBefore, (int) dOff, want.length);
            System.arraycopy(want, 0, hostBefore, (int) hOff, want.length);
          }
        }
        assertArrayEquals(deviceBefore, MemoryFixtures.bytes(device.memory().segment()), "device");
        assertArrayEquals(hostBefore, MemoryFixtures.bytes(host.memory().segment()), "host");

        // the objects go; the same GET again is a safely retired miss that writes nothing
        try (FileStore admin = new FileStore(FileStoreSettings.of(store))) {
          assertEquals(keys.size(), admin.deleteNamespace(namespace().toString()));
        }
        byte[] hostNow = MemoryFixtures.bytes(host.memory().segment());
        executor.submit(jobs.job(new StorageOp.Get(2, keys, destinations)));
        StorageDone missed = await(executor, 2);
        assertTrue(missed.retired(), missed::toString);
        assertEquals(
            List.of(KeyOutcome.MISSING),
            missed.outcomes().stream().distinct().toList(),
            missed::toString);
        assertArrayEquals(
            hostNow, MemoryFixtures.bytes(host.memory().segment()), "a miss writes nothing");
      } finally {
        assertTrue(executor.close().storeClosed(), "closed cleanly");
      }
    }
  }
}

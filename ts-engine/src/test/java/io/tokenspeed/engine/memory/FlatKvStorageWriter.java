package io.tokenspeed.engine.memory;

import io.tokenspeed.cache.BlockPool;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageOp;
import io.tokenspeed.engine.l3.StorageJobs;
import io.tokenspeed.l3.CloseReport;
import io.tokenspeed.l3.L3Executor;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

/**
 * The writer process of {@link FlatKvStorageProcessTest}: fills Device blocks of every group with
 * the seeded payloads, copies them D2H into Host blocks, PUTs them to the file store at {@code
 * args[0]}, prints its block ids and whether its store closed, and exits.
 */
public final class FlatKvStorageWriter {
  private FlatKvStorageWriter() {}

  public static void main(String[] args) throws Exception {
    Path store = Path.of(args[0]);
    var layout = FlatKvStorageProcessTest.LAYOUT;
    List<CacheKey> keys = FlatKvStorageProcessTest.keys();
    try (DevicePools device = new DevicePools(layout, FlatKvStorageProcessTest.DEVICE_PARENTS);
        HostCacheStorage host =
            HostCacheStorage.ofRatio(
                layout,
                FlatKvStorageProcessTest.DEVICE_PARENTS,
                FlatKvStorageProcessTest.HOST_RATIO);
        DeviceHandle copies = new DeviceHandle(device, host)) {
      BlockGeometry geo = device.geometry();
      int[][] deviceBlocks =
          FlatKvStorageProcessTest.blocks(
              new BlockPool(Tier.DEVICE, layout, FlatKvStorageProcessTest.DEVICE_PARENTS), 0);
      int[][] hostBlocks =
          FlatKvStorageProcessTest.blocks(new BlockPool(Tier.HOST, layout, host.numParents()), 0);
      List<BlockTransfer> stores = new ArrayList<>();
      int k = 0;
      for (int g = 0; g < deviceBlocks.length; g++) {
        for (int i = 0; i < deviceBlocks[g].length; i++, k++) {
          byte[] payload = FlatKvStorageProcessTest.payload(k, geo.bytesPerBlock(g));
          device
              .memory()
              .block(g, deviceBlocks[g][i])
              .copyFrom(java.lang.foreign.MemorySegment.ofArray(payload));
          stores.add(new BlockTransfer.Store(g, deviceBlocks[g][i], hostBlocks[g][i]));
        }
      }
      CopyFence fence = copies.submit(stores);
      if (!fence.await(10, TimeUnit.SECONDS) || fence.failure() != null) {
        System.out.println("error D2H did not complete: " + fence.failure());
        System.exit(1);
      }
      StorageJobs jobs =
          new StorageJobs(FlatKvStorageProcessTest.namespace(), layout, host.geometry(), 0);
      L3Executor executor = FlatKvStorageProcessTest.fileExecutor(store, host);
      executor.submit(
          jobs.job(new StorageOp.Put(1, keys, FlatKvStorageProcessTest.flatten(hostBlocks))));
      StorageDone put = FlatKvStorageProcessTest.await(executor, 1);
      if (!put.retired() || put.outcomes().stream().anyMatch(o -> o != KeyOutcome.OK)) {
        System.out.println("error PUT failed: " + put);
        System.exit(1);
      }
      CloseReport report = executor.close();
      System.out.println("store-closed " + report.storeClosed());
      System.out.println("device-blocks " + join(deviceBlocks));
      System.out.println("host-blocks " + join(hostBlocks));
    }
  }

  private static String join(int[][] blocks) {
    return FlatKvStorageProcessTest.flatten(blocks).stream()
        .map(String::valueOf)
        .collect(Collectors.joining(","));
  }
}

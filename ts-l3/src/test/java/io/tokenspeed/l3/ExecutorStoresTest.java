package io.tokenspeed.l3;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.l3.store.memory.MemoryStore;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** Byte round trips through the executor into the real in-process and file stores. */
class ExecutorStoresTest {

  @TempDir static Path dir;

  static Stream<String> stores() {
    return Stream.of("memory", "file");
  }

  private static Store open(String name) throws Exception {
    return switch (name) {
      case "memory" -> new MemoryStore();
      case "file" -> new FileStore(FileStoreSettings.of(dir.resolve("l3")).withFsync(false));
      default -> throw new IllegalArgumentException(name);
    };
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("stores")
  void shouldRoundTripExactBytesThroughTheExecutor(String name) throws Exception {
    int[] sizes = {1, 4096, 65536, 1 << 20};
    long hostBytes = 4L * (1 << 21) + 8192;
    try (Arena arena = Arena.ofShared()) {
      MemorySegment host = arena.allocate(hostBytes);
      byte[] noise = new byte[(int) hostBytes];
      new Random(42).nextBytes(noise);
      MemorySegment.copy(noise, 0, host, ValueLayout.JAVA_BYTE, 0, noise.length);
      L3Executor ex =
          L3Executor.start(open(name), L3ExecutorConfig.defaults(), host, System::nanoTime);
      List<JobRow> puts = new ArrayList<>();
      List<JobRow> gets = new ArrayList<>();
      long src = 17; // odd offsets on purpose
      long dst = hostBytes / 2 + 3;
      for (int size : sizes) {
        String key = "tsl3-test_" + name + "|" + size;
        puts.add(JobRow.owned(key, new HostRange(src, size)));
        gets.add(JobRow.owned(key, new HostRange(dst, size)));
        src += size + 5;
        dst += size + 5;
      }
      ex.submit(new StorageJob(1, StorageKind.PUT, puts));
      StorageDone p = awaitOne(ex, 1);
      assertEquals(
          List.of(KeyOutcome.OK, KeyOutcome.OK, KeyOutcome.OK, KeyOutcome.OK), p.outcomes());
      ex.submit(new StorageJob(2, StorageKind.GET, gets));
      StorageDone g = awaitOne(ex, 2);
      assertEquals(4, g.okCount());
      assertTrue(g.retired());
      for (int i = 0; i < sizes.length; i++) {
        HostRange a = puts.get(i).range();
        HostRange b = gets.get(i).range();
        assertEquals(
            -1L,
            host.asSlice(a.offset(), a.lengthBytes())
                .mismatch(host.asSlice(b.offset(), b.lengthBytes())),
            name + " object of " + sizes[i] + " bytes");
      }
      assertEquals(4, ex.metrics().putsNewlyWritten());
      assertTrue(ex.close().storeClosed());
    }
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("stores")
  void shouldRefuseValuesLargerThanTheStoreAllows(String name) throws Exception {
    try (Arena arena = Arena.ofShared()) {
      MemorySegment host = arena.allocate(1 << 16);
      Store store =
          name.equals("memory")
              ? new MemoryStore(
                  new io.tokenspeed.l3.store.memory.MemoryStoreSettings(256, 1024, Long.MAX_VALUE))
              : new FileStore(FileStoreSettings.of(dir.resolve("small")).withLimits(256, 1024));
      L3Executor ex = L3Executor.start(store, L3ExecutorConfig.defaults(), host, System::nanoTime);
      StorageJob big =
          new StorageJob(
              1, StorageKind.PUT, List.of(JobRow.owned("tsl3-x_big", new HostRange(0, 2048))));
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> ex.submit(big));
      assertTrue(e.getMessage().contains("limit of 1024"), e.getMessage());
      assertEquals(0, ex.metrics().backendCalls());
      ex.close();
    }
  }

  private static StorageDone awaitOne(L3Executor ex, long id) {
    StorageDone[] found = new StorageDone[1];
    Awaits.until(
        "operation " + id,
        () -> {
          for (StorageDone d : ex.poll().completions()) {
            if (d.operationId() == id) {
              found[0] = d;
            }
          }
          return found[0] != null;
        });
    return found[0];
  }
}

package io.tokenspeed.l3.store.file;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.CloseReport;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.l3.spi.RowResult;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

/**
 * The child process of {@link FileStoreDiskFullIT}: runs in a JVM whose file-size limit ({@code
 * ulimit -f}) is far below {@link #BIG} bytes, so writing a big object fails in the kernel ({@code
 * EFBIG}) exactly as a full disk would ({@code ENOSPC}). Prints one fact per line:
 *
 * <pre>
 *   direct-small ROW     a small PUT straight into the store (fits)
 *   direct-big ROW       a big PUT straight into the store (refused by the file system)
 *   put OUTCOMES retired=B        an executor PUT of [big, small]
 *   get OUTCOMES retired=B bytes=N an executor GET of the small object written directly
 *   health STATE epoch=E outages=O faults=F
 *   writes refused=B keys=N reason=R   the executor's record of the store's write refusals
 *   closed B
 * </pre>
 */
public final class FileStoreDiskFullChild {

  static final int SMALL = 4 << 10;
  static final int BIG = 1 << 20;
  static final String NS = "tsl3-diskfull";

  private FileStoreDiskFullChild() {}

  static String key(String name) {
    return NS + "_" + name + "|g0|o0|r0";
  }

  public static void main(String[] args) throws Exception {
    Path root = Path.of(args[0]);
    try (Arena arena = Arena.ofShared()) {
      MemorySegment host = arena.allocate(4L * BIG, 64);
      for (long i = 0; i < host.byteSize(); i += 8) {
        host.set(java.lang.foreign.ValueLayout.JAVA_LONG, i, i * 0x9E3779B97F4A7C15L);
      }
      FileStore store = new FileStore(FileStoreSettings.of(root));
      RowResult small =
          store.put(List.of(key("small")), List.of(host.asSlice(0, SMALL))).rows().get(0);
      System.out.println("direct-small " + small);
      RowResult big = store.put(List.of(key("big")), List.of(host.asSlice(0, BIG))).rows().get(0);
      System.out.println("direct-big " + big);

      // a cooldown far longer than the test: an outage here would refuse the GET below
      L3ExecutorConfig config = new L3ExecutorConfig(1, 1, 1, 8, 8, 8, 64, 3_600_000, 60_000);
      L3Executor ex = L3Executor.start(store, config, host, System::nanoTime);
      ex.submit(
          new StorageJob(
              1,
              StorageKind.PUT,
              List.of(
                  JobRow.owned(key("big2"), new HostRange(0, BIG)),
                  JobRow.owned(key("small2"), new HostRange(BIG, SMALL)))));
      StorageDone put = await(ex, 1);
      System.out.println("put " + put.outcomes() + " retired=" + put.retired());
      ex.submit(
          new StorageJob(
              2,
              StorageKind.GET,
              List.of(JobRow.owned(key("small"), new HostRange(2L * BIG, SMALL)))));
      StorageDone get = await(ex, 2);
      System.out.println(
          "get " + get.outcomes() + " retired=" + get.retired() + " bytes=" + get.bytes());
      boolean same = host.asSlice(0, SMALL).mismatch(host.asSlice(2L * BIG, SMALL)) == -1;
      System.out.println("same-bytes " + same);
      L3Metrics m = ex.metrics();
      System.out.println(
          "health "
              + m.healthState()
              + " epoch="
              + m.healthEpoch()
              + " outages="
              + m.outages()
              + " faults="
              + m.workerFaults());
      System.out.println(
          "writes refused="
              + m.writesRefused()
              + " keys="
              + m.refusedPutKeys()
              + " reason="
              + m.writesRefusedReason());
      CloseReport closed = ex.close();
      System.out.println("closed " + closed.storeClosed());
    }
  }

  private static StorageDone await(L3Executor ex, long id) {
    long deadline = System.nanoTime() + 120_000_000_000L;
    while (System.nanoTime() - deadline < 0) {
      for (StorageDone d : ex.poll().completions()) {
        if (d.operationId() == id) {
          return d;
        }
      }
      LockSupport.parkNanos(1_000_000);
    }
    throw new IllegalStateException("no record for operation " + id);
  }
}

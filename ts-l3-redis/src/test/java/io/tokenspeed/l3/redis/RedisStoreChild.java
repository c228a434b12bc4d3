package io.tokenspeed.l3.redis;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.ObjectKey;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.store.StoreTesting;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * The child process of {@link RedisStoreProcessIT}: a separate JVM, one attention-TP rank of one
 * replica, that opens a {@link RedisStore} and prints one line per fact on standard output.
 *
 * <pre>
 *   put  TOPOLOGY URIS LABEL COUNT SEED RANK          PUT objects 0..COUNT-1 through an executor,
 *                                                     from this rank's Host blocks; prints
 *                                                     "newly N" and "existed N"
 *   get  TOPOLOGY URIS LABEL COUNT SEED RANK          GET them through an executor into this
 *                                                     rank's Host blocks; prints "block I OFFSET"
 *                                                     and "digest HEX" (SHA-256 of all payloads)
 *   race TOPOLOGY URIS LABEL COUNT SEED RANK BARRIER  prints "ready", waits for the BARRIER file,
 *                                                     then PUTs each key in its own store call;
 *                                                     prints "created I" / "existed I"
 *                                                     and the store's counters as above
 * </pre>
 *
 * <p>Keys are real object keys of a page-cyclic group with two shards: the payload replica is
 * {@code rank / 2}, so ranks 0 and 1 name the same objects (owner relocation), and each rank uses
 * its own Host blocks. Exit status 0 on success, 2 when a row is not OK, 3 when the barrier never
 * appears.
 */
public final class RedisStoreChild {

  /** Object sizes by index: 4 KiB, 64 KiB, 1 MiB, then again. */
  private static final int[] SIZES = {4 << 10, 64 << 10, 1 << 20};

  /** Size of every object of a race. */
  static final int RACE_SIZE = 16 << 10;

  /** Page-cyclic shard count of the test group: ranks 2k and 2k+1 share payload replica k. */
  static final Sharding.PageCyclic SHARDING = new Sharding.PageCyclic(2);

  /** One Host block: the largest object plus room for an odd offset. */
  static final long BLOCK_BYTES = (1 << 20) + 4096;

  private static final Duration WAIT = Duration.ofSeconds(30);

  private RedisStoreChild() {}

  static int sizeOf(int index) {
    return SIZES[index % SIZES.length];
  }

  static byte[] payload(long seed, int index, int size) {
    return StoreTesting.bytes(seed * 1_000_003L + index, size);
  }

  /**
   * The object key of page {@code index} of {@code label}'s namespace as stored by {@code rank}.
   */
  static String key(String label, int index, int rank) {
    Namespace namespace = new Namespace(StoreTesting.namespace(label));
    ContentHash hash = ContentHash.fromHex(StoreTesting.sha256Hex("page " + index));
    int payloadReplica = rank / SHARDING.shardCount();
    return new ObjectKey(namespace, new CacheKey(0, hash, index), payloadReplica).toString();
  }

  /** Where object {@code index} lives in {@code rank}'s Host blocks: ranks never share a block. */
  static long hostOffset(int rank, int count, int index) {
    return ((long) rank * count + index) * BLOCK_BYTES + 7 + 13L * rank;
  }

  static RedisStoreSettings settings(String topology, String uris) {
    List<String> list = Arrays.asList(uris.split(","));
    return switch (topology) {
      case "standalone" -> RedisStoreSettings.standalone(list.getFirst());
      case "cluster" -> RedisStoreSettings.cluster(list);
      default -> throw new IllegalArgumentException("topology=" + topology);
    };
  }

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    RedisStoreSettings settings = settings(args[1], args[2]);
    String label = args[3];
    int count = Integer.parseInt(args[4]);
    long seed = Long.parseLong(args[5]);
    int rank = Integer.parseInt(args[6]);
    int status;
    try (Arena arena = Arena.ofShared()) {
      MemorySegment host = arena.allocate((rank + 1L) * count * BLOCK_BYTES + 4096, 64);
      RedisStore store = RedisStore.open(settings);
      try {
        status =
            switch (mode) {
              case "put" -> put(store, host, label, count, seed, rank);
              case "get" -> get(store, host, label, count, rank);
              case "race" -> {
                System.out.println("ready");
                System.out.flush();
                yield awaitBarrier(Path.of(args[7]))
                    ? race(store, host, label, count, seed, rank)
                    : 3;
              }
              default -> throw new IllegalArgumentException("mode=" + mode);
            };
      } finally {
        store.close();
      }
    }
    System.out.flush();
    System.exit(status);
  }

  private static int put(
      RedisStore store, MemorySegment host, String label, int count, long seed, int rank)
      throws Exception {
    L3Executor ex = L3Executor.start(store, L3ExecutorConfig.defaults(), host, System::nanoTime);
    ExecutorDriver driver = new ExecutorDriver(ex);
    List<JobRow> rows = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      int size = sizeOf(i);
      long offset = hostOffset(rank, count, i);
      MemorySegment.copy(payload(seed, i, size), 0, host, ValueLayout.JAVA_BYTE, offset, size);
      rows.add(JobRow.owned(key(label, i, rank), new HostRange(offset, size)));
    }
    ex.submit(new StorageJob(1, StorageKind.PUT, rows));
    StorageDone done = driver.await(1, WAIT);
    L3Metrics m = ex.metrics();
    System.out.println("puts-newly " + m.putsNewlyWritten());
    System.out.println("puts-existed " + m.putsAlreadyExisted());
    ex.close();
    if (done.okCount() != count || !done.retired()) {
      System.out.println("record " + done);
      return 2;
    }
    return 0;
  }

  private static int get(RedisStore store, MemorySegment host, String label, int count, int rank)
      throws Exception {
    L3Executor ex = L3Executor.start(store, L3ExecutorConfig.defaults(), host, System::nanoTime);
    ExecutorDriver driver = new ExecutorDriver(ex);
    List<JobRow> rows = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      long offset = hostOffset(rank, count, i);
      System.out.println("block " + i + " " + offset);
      rows.add(JobRow.owned(key(label, i, rank), new HostRange(offset, sizeOf(i))));
    }
    ex.submit(new StorageJob(1, StorageKind.GET, rows));
    StorageDone done = driver.await(1, WAIT);
    ex.close();
    for (int i = 0; i < count; i++) {
      if (done.outcomes().get(i) != KeyOutcome.OK) {
        System.out.println("row " + i + " " + done.outcomes().get(i));
        return 2;
      }
    }
    MessageDigest digest = MessageDigest.getInstance("SHA-256");
    for (int i = 0; i < count; i++) {
      digest.update(host.asSlice(hostOffset(rank, count, i), sizeOf(i)).asByteBuffer());
    }
    System.out.println("digest " + HexFormat.of().formatHex(digest.digest()));
    return 0;
  }

  private static int race(
      RedisStore store, MemorySegment host, String label, int count, long seed, int rank)
      throws Exception {
    for (int i = 0; i < count; i++) {
      MemorySegment source = host.asSlice(hostOffset(rank, count, i), RACE_SIZE);
      MemorySegment.copy(
          payload(seed, i, RACE_SIZE), 0, source, ValueLayout.JAVA_BYTE, 0, RACE_SIZE);
      RowResult row = store.put(List.of(key(label, i, rank)), List.of(source)).rows().getFirst();
      if (!(row instanceof RowResult.Ok ok) || ok.bytes() != RACE_SIZE) {
        System.out.println("row " + i + " " + row);
        return 2;
      }
      System.out.println((ok.alreadyExisted() ? "existed " : "created ") + i);
    }
    RedisCounters c = store.counters();
    System.out.println("puts-newly " + c.putsNewlyWritten());
    System.out.println("puts-existed " + c.putsAlreadyExisted());
    return 0;
  }

  private static boolean awaitBarrier(Path barrier) {
    long deadlineNs = System.nanoTime() + WAIT.toNanos();
    while (!Files.exists(barrier)) {
      if (System.nanoTime() - deadlineNs > 0) {
        System.err.println("barrier " + barrier + " did not appear within " + WAIT);
        return false;
      }
      LockSupport.parkNanos(TimeUnit.MICROSECONDS.toNanos(200));
    }
    return true;
  }
}

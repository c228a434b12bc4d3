package io.tokenspeed.engine.l3;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageOp;
import io.tokenspeed.engine.memory.BlockGeometry;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.store.memory.MemoryStore;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A page-cyclic group over D owners through the storage path: each owner's executor copies only the
 * pages it owns (virtual block v to owner (v−1) mod D, at its virtual block's range of that owner's
 * Host allocation; the other owners' allocations never hold the page) and reports the others as not
 * owned; every owner names an object by its payload replica ({@code rank / D}, the same for all D
 * owners), so after a new Host allocation deals the same pages to other owners, each is restored by
 * its new owner from the object its old owner wrote, byte for byte.
 */
class PageCyclicStorageTest {
  private static final int PAGES = 6;
  private static final Namespace NS = new Namespace("tsl3-" + "5a".repeat(32));

  private static CacheLayout layout(int owners) {
    return new CacheLayout(
        4,
        "float32",
        List.of(
            new CacheGroupSpec(
                0,
                new GroupKind.FullHistory(),
                4,
                List.of(new CacheField("layers.0.k", 96), new CacheField("layers.0.v", 96)),
                new Sharding.PageCyclic(owners))));
  }

  /** One owner: its executor over its own Host allocation and its own client of the store. */
  private record Owner(StorageJobs jobs, L3Executor executor, MemorySegment host) {}

  private static Owner owner(CacheLayout layout, MemoryStore store, int rank, Arena arena)
      throws Exception {
    BlockGeometry g = BlockGeometry.of(layout);
    MemorySegment host = arena.allocate(g.parentBytes() * (PAGES + 2), 64);
    ForwardingStore client =
        new ForwardingStore(store) {
          @Override
          public void close() {}
        };
    L3Executor ex = L3Executor.start(client, L3ExecutorConfig.defaults(), host, System::nanoTime);
    return new Owner(new StorageJobs(NS, layout, g, rank), ex, host);
  }

  private static StorageDone run(Owner o, StorageOp op) throws Exception {
    StorageJob job = o.jobs().job(op);
    assertTrue(o.executor().submit(job).accepted(), "accepted");
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (System.nanoTime() < deadline) {
      for (StorageDone d : o.executor().poll().completions()) {
        if (d.operationId() == op.operationId()) {
          return d;
        }
      }
      Thread.sleep(2);
    }
    throw new AssertionError("operation " + op.operationId() + " did not complete");
  }

  private static byte[] bytesOf(Owner o, int virtualBlock) {
    BlockGeometry g = BlockGeometry.of(o.jobs().layout());
    long at = g.byteOffset(0, virtualBlock);
    return o.host().asSlice(at, g.bytesPerBlock(0)).toArray(ValueLayout.JAVA_BYTE);
  }

  @ParameterizedTest(name = "D={0}")
  @ValueSource(ints = {2, 3})
  void shouldRestoreEveryPageOnItsNewOwnerByteForByte(int owners) throws Exception {
    CacheLayout layout = layout(owners);
    MemoryStore store = new MemoryStore();
    SplittableRandom random = new SplittableRandom(owners);
    List<CacheKey> keys = new ArrayList<>();
    for (int p = 0; p < PAGES; p++) {
      keys.add(new CacheKey(0, new ContentHash(random.nextLong(), p, 7, 11), 0));
    }
    List<Integer> written = new ArrayList<>();
    List<Integer> restored = new ArrayList<>();
    for (int p = 0; p < PAGES; p++) {
      written.add(p + 1); // pages 1..6: page p on owner p mod D
      restored.add(p + 2); // a new allocation: page p on owner (p+1) mod D
    }
    List<byte[]> pages = new ArrayList<>();
    try (Arena arena = Arena.ofShared()) {
      List<Owner> writers = new ArrayList<>();
      for (int r = 0; r < owners; r++) {
        writers.add(owner(layout, store, r, arena));
      }
      for (int p = 0; p < PAGES; p++) {
        byte[] bytes = new byte[(int) BlockGeometry.of(layout).bytesPerBlock(0)];
        random.nextBytes(bytes);
        pages.add(bytes);
        int v = written.get(p);
        Owner o = writers.get((v - 1) % owners);
        long at = BlockGeometry.of(layout).byteOffset(0, v);
        MemorySegment.copy(bytes, 0, o.host(), ValueLayout.JAVA_BYTE, at, bytes.length);
      }
      for (int r = 0; r < owners; r++) {
        Owner o = writers.get(r);
        List<JobRow> rows = o.jobs().job(new StorageOp.Put(1, keys, written)).rows();
        for (int p = 0; p < PAGES; p++) {
          assertEquals((p % owners) == r, rows.get(p).owned(), "rank " + r + " page " + p);
        }
        StorageDone d = run(o, new StorageOp.Put(1, keys, written));
        assertTrue(d.retired());
        assertTrue(d.outcomes().stream().allMatch(x -> x == KeyOutcome.OK), d.toString());
      }
      assertEquals(
          PAGES * BlockGeometry.of(layout).bytesPerBlock(0),
          store.usedBytes(),
          "one object per page, whoever wrote it");

      List<Owner> readers = new ArrayList<>();
      for (int r = 0; r < owners; r++) {
        readers.add(owner(layout, store, r, arena)); // a new, zeroed Host allocation
      }
      long bytesRead = 0;
      for (int r = 0; r < owners; r++) {
        StorageDone d = run(readers.get(r), new StorageOp.Get(2, keys, restored));
        assertTrue(d.retired());
        assertTrue(d.outcomes().stream().allMatch(x -> x == KeyOutcome.OK), d.toString());
        bytesRead += d.bytes();
      }
      assertEquals(PAGES * BlockGeometry.of(layout).bytesPerBlock(0), bytesRead, "each page once");
      for (int p = 0; p < PAGES; p++) {
        int v = restored.get(p);
        int newOwner = (v - 1) % owners;
        assertFalse(newOwner == p % owners, "page " + p + " moved to another owner");
        assertArrayEquals(pages.get(p), bytesOf(readers.get(newOwner), v), "page " + p);
        for (int r = 0; r < owners; r++) {
          if (r != newOwner) {
            assertArrayEquals(
                new byte[pages.get(p).length],
                bytesOf(readers.get(r), v),
                "page " + p + " is not written on rank " + r + ", which does not own it");
          }
        }
      }
      for (Owner o : writers) {
        o.executor().close();
      }
      for (Owner o : readers) {
        o.executor().close();
      }
    }
  }
}

package io.tokenspeed.l3.store;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

/**
 * A throttled store answers what its inner store answers, and no faster than its rate: one GET, and
 * concurrent GETs together (only lower bounds on time are asserted: a loaded machine is slower,
 * never faster).
 */
class ThrottledStoreTest {

  private static final double RATE = 20e6; // 20 MB/s: 1 MiB takes 52 ms

  @Test
  void shouldReadTheInnerStoresBytesNoFasterThanItsRate() throws Exception {
    try (Arena arena = Arena.ofShared()) {
      MemoryStore inner = new MemoryStore();
      ThrottledStore store = new ThrottledStore(inner, RATE);
      MemorySegment src = arena.allocate(1 << 20);
      for (int i = 0; i < 1 << 20; i += 4096) {
        src.set(ValueLayout.JAVA_BYTE, i, (byte) (i >> 12));
      }
      store.put(List.of("ns_a", "ns_b"), List.of(src, src));
      MemorySegment dst = arena.allocate(1 << 20);
      long t0 = System.nanoTime();
      StoreResult r = store.get(List.of("ns_a"), List.of(dst));
      long oneNs = System.nanoTime() - t0;
      assertTrue(r.rows().getFirst() instanceof RowResult.Ok, r.toString());
      assertArrayEquals(src.toArray(ValueLayout.JAVA_BYTE), dst.toArray(ValueLayout.JAVA_BYTE));
      assertTrue(oneNs >= (long) ((1 << 20) / RATE * 1e9), "one GET took " + oneNs + " ns");
      MemorySegment d1 = arena.allocate(1 << 20);
      MemorySegment d2 = arena.allocate(1 << 20);
      ExecutorService pool = Executors.newFixedThreadPool(2);
      try {
        long t1 = System.nanoTime();
        Future<StoreResult> a = pool.submit(() -> store.get(List.of("ns_a"), List.of(d1)));
        Future<StoreResult> b = pool.submit(() -> store.get(List.of("ns_b"), List.of(d2)));
        a.get();
        b.get();
        long bothNs = System.nanoTime() - t1;
        assertTrue(
            bothNs >= (long) (2 * (1 << 20) / RATE * 1e9),
            "two concurrent GETs share the rate: " + bothNs + " ns");
      } finally {
        pool.shutdown();
      }
    }
  }

  @Test
  void shouldRefuseARateThatIsNotPositive() {
    assertThrows(IllegalArgumentException.class, () -> new ThrottledStore(new MemoryStore(), 0));
    assertThrows(
        IllegalArgumentException.class,
        () -> new ThrottledStore(new MemoryStore(), Double.POSITIVE_INFINITY));
  }
}

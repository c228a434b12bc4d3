package io.tokenspeed.engine.l3;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.scheduler.StorageConfig;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The warm-up's store exercise calls the store as an engine does: through an executor over a Host
 * allocation registered with the store, with keys under the given namespace, and closes it.
 */
class StorageExerciseTest {

  /** Three groups of different block sizes (96, 160 and 384 bytes): parents of 1,920 bytes. */
  private static CacheLayout hybrid() {
    return new CacheLayout(
        64,
        "bf16",
        List.of(
            new CacheGroupSpec(
                0,
                new GroupKind.FullHistory(),
                16,
                List.of(new CacheField("k", 48), new CacheField("v", 48)),
                null),
            new CacheGroupSpec(
                1,
                new GroupKind.SlidingWindow(80),
                32,
                List.of(new CacheField("k", 80), new CacheField("v", 80)),
                null),
            new CacheGroupSpec(
                2,
                new GroupKind.StateCheckpoints(),
                64,
                List.of(new CacheField("ssm", 384)),
                null)));
  }

  /**
   * A memory store that, like the Mooncake binding, takes payloads only inside the allocation
   * registered with it, and notes what it was given.
   */
  private static final class RegisteredOnlyStore extends ForwardingStore {
    MemorySegment registered;
    final List<String> keys = Collections.synchronizedList(new ArrayList<>());
    final List<String> outside = Collections.synchronizedList(new ArrayList<>());
    volatile int puts;
    volatile int gets;
    volatile boolean closed;

    RegisteredOnlyStore() {
      super(new MemoryStore());
    }

    @Override
    public void registerHostBuffer(MemorySegment hostAllocation) throws Exception {
      registered = hostAllocation;
      super.registerHostBuffer(hostAllocation);
    }

    private void check(List<String> keys, List<MemorySegment> segments) {
      this.keys.addAll(keys);
      for (MemorySegment s : segments) {
        long offset = registered == null ? -1 : s.address() - registered.address();
        if (offset < 0 || offset + s.byteSize() > registered.byteSize()) {
          outside.add(s.toString());
        }
      }
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      gets++;
      check(keys, destinations);
      return super.get(keys, destinations);
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      puts++;
      check(keys, sources);
      return super.put(keys, sources);
    }

    @Override
    public void close() throws Exception {
      closed = true;
      super.close();
    }
  }

  @Test
  void shouldCallTheStoreOnlyWithSlicesOfTheAllocationItRegistered() throws Exception {
    CacheLayout layout = hybrid();
    Namespace namespace =
        Namespace.of(
            new DeploymentIdentity(
                "m", "0".repeat(64), "warm-up", null, null, layout, 1, 1, 1, 1, "cpu-reference"));
    RegisteredOnlyStore store = new RegisteredOnlyStore();

    StorageExercise.Outcome outcome =
        StorageExercise.run(
            new L3Settings(
                store, StorageRuntimeConfig.defaults(), L3Settings.CPU_ATTENTION_BACKEND),
            layout,
            namespace,
            6,
            5,
            TimeUnit.SECONDS.toNanos(30));

    assertEquals(new StorageExercise.Outcome(6, 5, 6, 30, true), outcome);
    assertTrue(store.registered != null, "the executor registered its Host allocation");
    assertEquals(List.of(), store.outside, "every payload lies inside the registered allocation");
    assertEquals(1, store.puts);
    assertEquals(5, store.gets);
    assertFalse(store.keys.isEmpty());
    for (String key : store.keys) {
      assertTrue(key.startsWith(namespace + "_"), key);
    }
    assertTrue(store.closed, "the exercise owns its store and closes it");
  }

  @Test
  void shouldEndAtItsBudgetAndKeepTheStoreWhenACallHangs() throws Exception {
    CountDownLatch release = new CountDownLatch(1);
    ForwardingStore hanging =
        new ForwardingStore(new MemoryStore()) {
          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
            release.await();
            throw new IOException("released by the test");
          }
        };
    L3ExecutorConfig d = L3ExecutorConfig.defaults();
    L3ExecutorConfig closeAt100Ms =
        new L3ExecutorConfig(
            d.queryWorkers(),
            d.getWorkers(),
            d.putWorkers(),
            d.queryQueueCapacity(),
            d.getQueueCapacity(),
            d.putQueueCapacity(),
            d.maxOutstandingOperations(),
            d.healthCooldownMs(),
            100);
    long start = System.nanoTime();
    try {
      StorageExercise.Outcome outcome =
          StorageExercise.run(
              new L3Settings(
                  hanging,
                  new StorageRuntimeConfig(StorageConfig.defaults(), closeAt100Ms),
                  L3Settings.CPU_ATTENTION_BACKEND),
              hybrid(),
              new Namespace("tsl3-" + "7e".repeat(32)),
              4,
              400,
              TimeUnit.MILLISECONDS.toNanos(200));

      assertEquals(new StorageExercise.Outcome(4, 0, 0, 0, false), outcome);
      assertTrue(
          System.nanoTime() - start < TimeUnit.SECONDS.toNanos(10),
          "the budget and the executor's close deadline bound it");
    } finally {
      release.countDown();
    }
  }
}

package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineL3Test.SharedStore;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.testkit.LiveTree;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A weight update with storage I/O in flight (issue 21, defect 6): it must fence and wait for the
 * outstanding PUTs to retire before it deletes the old namespace, so that no object lands there
 * once the update has returned; it must not fail half-way on a file store whose directories a PUT
 * is still writing; and two concurrent updates are serialized, leaving objects under no namespace
 * but the last one's. Objects are counted by namespace in the store itself.
 */
class EngineL3WeightUpdateTest extends WithContextLlama {
  private Engine engine(Checked rec, Store store) {
    Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(rec)
                .l3(EngineL3FaultsTest.settings(store))
                .paused()
                .conclude());
    e.resume();
    return e;
  }

  private int[] prompt(long seed) {
    return new SplittableRandom(seed).ints(41, 0, model.vocabSize()).toArray();
  }

  /** Waits (up to {@code ms}) until the engine has no L3 work pending. */
  private static void awaitStorageIdle(Engine e, long ms) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
    while (e.storageBusyNow() && System.nanoTime() < deadline) {
      Thread.sleep(2);
    }
  }

  /** Runs {@code e.updateWeightVersion(version)} on its own thread. */
  private static CompletableFuture<Long> updateAsync(Engine e, String version) {
    CompletableFuture<Long> f = new CompletableFuture<>();
    Thread.ofPlatform()
        .name("weight-update-" + version)
        .daemon(true)
        .start(
            () -> {
              try {
                f.complete(e.updateWeightVersion(version));
              } catch (Throwable t) {
                f.completeExceptionally(t);
              }
            });
    return f;
  }

  /** Objects of {@code namespace} in a memory store (counted by deleting them: at the end only). */
  private static long takeObjects(SharedStore store, String namespace) {
    return store.inner.deleteNamespace(namespace);
  }

  /** Objects of a plain-named {@code namespace} in a file store under {@code root}. */
  private static long objectFiles(Path root, String namespace) throws IOException {
    Path dir = root.resolve(namespace);
    if (!Files.isDirectory(dir)) {
      return 0;
    }
    return LiveTree.publishedFiles(dir).size();
  }

  /**
   * A finished prompt's write-through PUT is inside a slow store when the weight update starts; it
   * returns (its objects land) 100 ms later. Once the update has returned and the PUT has landed,
   * the old namespace holds no object. On 66f0a4f the update deletes the (still empty) old
   * namespace at once and switches; the late PUT then leaves its 20 objects there.
   */
  @Test
  void shouldLeaveNoObjectInTheOldNamespaceWhenAPutLandsAfterTheWeightUpdateStarted()
      throws Exception {
    SharedStore shared = new SharedStore();
    CountDownLatch inside = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    ForwardingStore slow =
        new ForwardingStore(shared) {
          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
            inside.countDown();
            release.await(); // the PUT reads the Host until released
            return super.put(keys, sources);
          }
        };
    Checked rec = new Checked();
    String old;
    Throwable failed = null;
    try (Engine e = engine(rec, slow)) {
      old = e.storageNamespace().orElseThrow().toString();
      rec.await(e.submit(prompt(79), SamplingParams.greedy(8)));
      assertTrue(inside.await(10, TimeUnit.SECONDS), "the finished prompt's PUT is in the store");
      CompletableFuture<Long> update = updateAsync(e, "2");
      long fencedBy = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (!e.view().control().fenced() && System.nanoTime() - fencedBy < 0) {
        Thread.sleep(1); // the loop applies the fence in its next round
      }
      assertTrue(e.view().control().fenced(), "the update fenced storage");
      release.countDown(); // the PUT lands while the update waits for it to retire
      try {
        update.get(10, TimeUnit.SECONDS);
      } catch (Exception ex) {
        failed = ex;
      }
      awaitStorageIdle(e, 10_000);
      assertEquals("2", e.weightVersion(), "the update switched the version");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    Throwable thrown = failed;
    assertNull(thrown, () -> "the update failed: " + thrown);
    assertEquals(
        0,
        takeObjects(shared, old),
        "objects left in the old namespace once the update returned and the PUT landed");
  }

  /**
   * The same over a file store: a second prompt's PUT writes its objects one by one (2 ms apart)
   * while the update deletes the old namespace's directory tree, which already holds the first
   * prompt's objects. The update must neither fail part-way (on 66f0a4f the tree walk can meet a
   * directory the PUT has just written into: DirectoryNotEmptyException, nothing switched) nor
   * leave objects under the old namespace.
   */
  @Test
  void shouldNotFailPartWayNorOrphanObjectsWhenAFileStorePutRunsDuringTheWeightUpdate(
      @TempDir Path root) throws Exception {
    FileStore files = new FileStore(FileStoreSettings.of(root));
    AtomicBoolean slowPuts = new AtomicBoolean();
    CountDownLatch inside = new CountDownLatch(1);
    AtomicInteger running = new AtomicInteger();
    ForwardingStore store =
        new ForwardingStore(files) {
          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
            if (!slowPuts.get()) {
              return super.put(keys, sources);
            }
            running.incrementAndGet();
            inside.countDown();
            try {
              List<io.tokenspeed.l3.spi.RowResult> rows = new ArrayList<>();
              for (int i = 0; i < keys.size(); i++) {
                rows.addAll(super.put(List.of(keys.get(i)), List.of(sources.get(i))).rows());
                Thread.sleep(2);
              }
              return StoreResult.of(rows);
            } finally {
              running.decrementAndGet();
            }
          }
        };
    Checked rec = new Checked();
    String old;
    long before;
    Throwable failed = null;
    try (Engine e = engine(rec, store)) {
      old = e.storageNamespace().orElseThrow().toString();
      rec.await(e.submit(prompt(83), SamplingParams.greedy(8)));
      awaitStorageIdle(e, 10_000);
      before = objectFiles(root, old);
      assertTrue(before > 0, "the first prompt's objects are files under " + root.resolve(old));
      slowPuts.set(true);
      rec.await(e.submit(prompt(89), SamplingParams.greedy(8)));
      assertTrue(inside.await(10, TimeUnit.SECONDS), "the second prompt's PUT is in the store");
      try {
        e.updateWeightVersion("2");
      } catch (Exception ex) {
        failed = ex;
      }
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (running.get() > 0 && System.nanoTime() < deadline) {
        Thread.sleep(2);
      }
      awaitStorageIdle(e, 10_000);
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    Throwable thrown = failed;
    long left = objectFiles(root, old);
    assertAll(
        () -> assertNull(thrown, () -> "the update failed part-way: " + thrown),
        () ->
            assertEquals(
                0,
                left,
                "objects left under the old namespace ("
                    + before
                    + " before the update) once it returned and the PUT finished"));
  }

  /**
   * The old namespace's deletion is a synchronous call on the loop thread between two rounds (issue
   * 38): the store sees the thread that runs the rounds, no round ends while it deletes (a request
   * submitted meanwhile waits), and the caller gets the deletion's outcome. Before, the deletion
   * ran on the calling thread.
   */
  @Test
  void shouldDeleteTheOldNamespaceOnTheLoopThreadWhileNoRoundRuns() throws Exception {
    SharedStore shared = new SharedStore();
    CountDownLatch deleting = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    AtomicReference<Thread> deleter = new AtomicReference<>();
    long[] roundsAround = new long[2];
    AtomicReference<Thread> loopThread = new AtomicReference<>();
    Checked rec =
        new Checked() {
          @Override
          public void afterRound(EngineView view) {
            loopThread.set(Thread.currentThread());
            super.afterRound(view);
          }
        };
    ForwardingStore store =
        new ForwardingStore(shared) {
          @Override
          public io.tokenspeed.l3.spi.NamespaceDeletion purgeNamespace(String namespace)
              throws Exception {
            deleter.set(Thread.currentThread());
            roundsAround[0] = rec.rounds.get();
            deleting.countDown();
            release.await();
            roundsAround[1] = rec.rounds.get();
            return super.purgeNamespace(namespace);
          }
        };
    try (Engine e = engine(rec, store)) {
      rec.await(e.submit(prompt(103), SamplingParams.greedy(8)));
      awaitStorageIdle(e, 10_000);
      CompletableFuture<Long> update = updateAsync(e, "2");
      try {
        assertTrue(deleting.await(10, TimeUnit.SECONDS), "the deletion started");
        RequestHandle meanwhile = e.submit(prompt(107), SamplingParams.greedy(8));
        assertFalse(meanwhile.result().isDone(), "no round serves it while the store deletes");
        release.countDown();
        assertTrue(update.get(10, TimeUnit.SECONDS) > 0, "the old namespace's objects went");
        rec.await(meanwhile);
      } finally {
        release.countDown();
      }
      assertEquals("2", e.weightVersion());
    }
    assertAll(
        () -> assertSame(loopThread.get(), deleter.get(), "the deletion ran on the loop thread"),
        () -> assertEquals(roundsAround[0], roundsAround[1], "rounds ended while it deleted"),
        () -> assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString()));
  }

  /**
   * Two concurrent updates are serialized: the first is held inside the store's namespace deletion
   * while the second is called and a prompt is served; once both return, no namespace but the final
   * version's holds an object. On 66f0a4f the second reads the same current version as the first,
   * deletes it and switches at once; the prompt served meanwhile writes under the second's
   * namespace; the first then switches to its own version, orphaning those objects.
   */
  @Test
  void shouldSerializeTwoConcurrentWeightUpdatesAndOrphanNoObject() throws Exception {
    SharedStore shared = new SharedStore();
    Set<String> namespaces = ConcurrentHashMap.newKeySet();
    CountDownLatch deleting = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    AtomicInteger deletions = new AtomicInteger();
    ForwardingStore store =
        new ForwardingStore(shared) {
          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
            for (String k : keys) {
              namespaces.add(k.substring(0, k.indexOf('_')));
            }
            return super.put(keys, sources);
          }

          @Override
          public io.tokenspeed.l3.spi.NamespaceDeletion purgeNamespace(String namespace)
              throws Exception {
            // the engine deletes through purgeNamespace: route it through this deleteNamespace
            return io.tokenspeed.l3.spi.NamespaceDeletion.complete(deleteNamespace(namespace));
          }

          @Override
          public long deleteNamespace(String namespace) throws Exception {
            if (deletions.incrementAndGet() == 1) {
              deleting.countDown();
              release.await(); // the first update's deletion is slow
            }
            return super.deleteNamespace(namespace);
          }
        };
    Checked rec = new Checked();
    String last;
    List<Throwable> failures = new ArrayList<>();
    try (Engine e = engine(rec, store)) {
      rec.await(e.submit(prompt(97), SamplingParams.greedy(8)));
      awaitStorageIdle(e, 10_000);
      CompletableFuture<Long> first = updateAsync(e, "2");
      assertTrue(deleting.await(10, TimeUnit.SECONDS), "the first update is deleting");
      CompletableFuture<Long> second = updateAsync(e, "3");
      try {
        second.get(1, TimeUnit.SECONDS); // serialized: it waits for the first (a time-out)
      } catch (java.util.concurrent.TimeoutException waiting) {
        // expected once the updates are serialized
      } catch (Exception ex) {
        failures.add(ex);
      }
      // a prompt meanwhile (not awaited here: an update may hold the loop while it deletes)
      // queued while the loop deletes (the deletion runs on the loop thread), served after it
      RequestHandle meanwhile = e.submit(prompt(101), SamplingParams.greedy(8));
      release.countDown();
      rec.await(meanwhile);
      for (CompletableFuture<Long> f : List.of(first, second)) {
        try {
          f.get(10, TimeUnit.SECONDS);
        } catch (Exception ex) {
          if (!failures.contains(ex)) {
            failures.add(ex);
          }
        }
      }
      awaitStorageIdle(e, 10_000);
      last = e.storageNamespace().orElseThrow().toString();
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    Map<String, Long> orphans = new TreeMap<>();
    for (String ns : namespaces) {
      if (!ns.equals(last)) {
        long n = takeObjects(shared, ns);
        if (n != 0) {
          orphans.put(ns, n);
        }
      }
    }
    assertAll(
        () -> assertTrue(failures.isEmpty(), () -> "both updates complete: " + failures),
        () ->
            assertTrue(
                orphans.isEmpty(),
                "objects under namespaces other than the final one ("
                    + last
                    + "): "
                    + orphans
                    + " of the "
                    + namespaces.size()
                    + " namespaces written"));
  }
}

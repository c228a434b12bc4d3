package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineL3FaultsTest.Forwarding;
import io.tokenspeed.engine.EngineL3Test.SharedStore;
import io.tokenspeed.engine.EngineTest.Recorder;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * Storage administration as engine calls, with L3 I/O in flight: a full clear rejects outstanding
 * operations without waiting for them and keeps the store's objects; an L1-only clear leaves the
 * Host and its I/O alone; a weight-version update deletes the old namespace remotely before it
 * clears and switches, and a failed deletion changes nothing. Outputs always equal recomputation;
 * invariants hold after every round.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineL3AdminTest {
  private static final int P = 4;
  private CausalLm model;
  private int[] prompt;
  private Run want;

  @BeforeAll
  void load(@TempDir Path dir) throws Exception {
    model = CausalLm.load(Fixtures.extract("llama", dir));
    prompt = new SplittableRandom(43).ints(81, 0, model.vocabSize()).toArray();
    Recorder rec = new Recorder();
    try (Engine e =
        Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(rec).conclude())) {
      want = serve(e, rec);
    }
  }

  @AfterAll
  void close() {
    model.close();
  }

  private Run serve(Engine e, Recorder rec) throws Exception {
    return EngineTest.await(e.submit(prompt, SamplingParams.greedy(8)), rec);
  }

  private Engine engine(Recorder rec, io.tokenspeed.l3.spi.Store store) {
    Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(rec)
                .l3(store == null ? null : EngineL3FaultsTest.settings(store))
                .paused()
                .conclude());
    e.resume();
    return e;
  }

  /** A stepped engine over {@code store} (its turns, store calls and clock are the test's). */
  private SteppedEngine stepped(Recorder rec, io.tokenspeed.l3.spi.Store store) {
    return new SteppedEngine(
        EngineSettings.of(model, EngineTest.small(256))
            .observer(rec)
            .l3(EngineL3FaultsTest.settings(store)));
  }

  private Run serve(SteppedEngine e, Recorder rec) throws Exception {
    return EngineTest.await(e.serve(prompt, SamplingParams.greedy(8)), rec);
  }

  /** Waits until the engine's write-through of finished prompts has reached the store. */
  private static void awaitPuts(SharedStore store) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (store.puts.get() == 0 && System.nanoTime() < deadline) {
      Thread.sleep(2);
    }
    assertTrue(store.puts.get() > 0, "the prefix was put");
  }

  /**
   * The store keeps a prefix; after a full clear the repeat queries it, and its GET stays inside
   * the store, unanswered; a full clear meanwhile rejects the operation without waiting for it, the
   * repeat is recomputed, and the late GET's rows are never published.
   */
  @Test
  void shouldClearEverythingLocalWhileAReadHangsAndThenRestoreFromTheStore() throws Exception {
    SharedStore shared = new SharedStore();
    Recorder rec = new Recorder();
    try (SteppedEngine e = stepped(rec, shared)) {
      EngineTest.assertSame(want, serve(e, rec), "cold");
      e.settle(); // the write-through's PUTs are in the store
      assertTrue(shared.puts.get() > 0, "the prefix was put");
      e.await(e.engine.clearCache());
      var handle = e.engine.submit(prompt, SamplingParams.greedy(8));
      e.stepUntil(
          () -> e.engine.storageTransferManager().counters().getsIssued() > 0,
          "the repeat's query found the prefix and its GET was issued");
      e.holdStore(); // the GET stays inside the store
      e.stepUntil(() -> e.heldStoreCalls() > 0, "the repeat's GET is inside the store");
      int gets = shared.gets.get();
      e.await(e.engine.clearCache());
      e.finish(handle);
      Run again = EngineTest.await(handle, rec);
      EngineTest.assertSame(want, again, "recomputed after the clears");
      assertEquals(gets, shared.gets.get(), "the GET was still inside the store meanwhile");
      assertEquals(0, again.result().metrics().reusedStorageTokens(), "nothing was restored");
      e.releaseStore(); // the hung GET retires late: its rows are never published
      Run third = serve(e, rec);
      EngineTest.assertSame(want, third, "after the late GET");
      e.settle();
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  /**
   * Clears the Device only (the call does not wait for the Host's storage I/O), serves the prompt
   * again and checks that the output is unchanged, nothing came from the Device and the Host kept
   * every full page of the prefix.
   */
  private void assertL1OnlyClearKeepsTheHost(SteppedEngine e, Recorder rec, String when)
      throws Exception {
    e.await(e.engine.clearDeviceCache());
    Run again = serve(e, rec);
    EngineTest.assertSame(want, again, when);
    assertEquals(0, again.result().metrics().reusedDeviceTokens(), "the Device was cleared");
    assertEquals(
        (prompt.length - 1) / P * P,
        again.result().metrics().reusedHostTokens(),
        "the Host kept the prefix");
  }

  @Test
  void shouldKeepTheHostOnAnL1OnlyClear() throws Exception {
    Recorder rec = new Recorder();
    try (SteppedEngine e = stepped(rec, new SharedStore())) {
      serve(e, rec);
      e.stepUntil(() -> rec.hostCached > 0, "the finished prefix is written through to the Host");
      assertL1OnlyClearKeepsTheHost(e, rec, "after an L1-only clear");
      e.settle();
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  @Test
  void shouldClearOnlyTheDeviceWhileAHostPutIsInsideTheStoreAndLetThePutFinish() throws Exception {
    SharedStore shared = new SharedStore();
    Recorder rec = new Recorder();
    try (SteppedEngine e = stepped(rec, shared)) {
      serve(e, rec);
      assertEquals(0, shared.puts.get(), "nothing was put yet");
      e.holdStore(); // the write-through's PUT reads the Host until released
      e.stepUntil(() -> e.heldStoreCalls() > 0, "the finished prefix's PUT is inside the store");
      assertL1OnlyClearKeepsTheHost(e, rec, "after an L1-only clear with a PUT in flight");
      assertEquals(0, shared.puts.get(), "the PUT is still inside the store");
      e.releaseStore();
      e.settle();
      assertTrue(shared.puts.get() > 0, "the prefix was put");
    }
    // what the PUT wrote after the clear is the prefix: a fresh engine restores it from the store
    Recorder fresh = new Recorder();
    try (Engine e = engine(fresh, shared)) {
      Run restored = serve(e, fresh);
      EngineTest.assertSame(want, restored, "restored from what the late PUT wrote");
      assertEquals((prompt.length - 1) / P * P, restored.result().metrics().reusedStorageTokens());
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    assertTrue(fresh.broken.isEmpty(), () -> fresh.broken.toString());
  }

  @Test
  void shouldDeleteTheOldNamespaceThenSwitchOnAWeightUpdate() throws Exception {
    SharedStore shared = new SharedStore();
    Recorder rec = new Recorder();
    try (Engine e = engine(rec, shared)) {
      serve(e, rec);
      awaitPuts(shared);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (e.storageBusyNow() && System.nanoTime() < deadline) {
        Thread.sleep(2); // every write of the finished prompt done: nothing lands after the delete
      }
      long before = shared.inner.usedBytes();
      assertTrue(before > 0);
      long deleted = e.updateWeightVersion("2");
      assertTrue(deleted > 0, "the old namespace's objects were deleted: " + deleted);
      assertEquals(0, shared.inner.usedBytes(), "nothing of the old namespace is left");
      assertEquals("2", e.weightVersion());
      Run again = serve(e, rec);
      EngineTest.assertSame(want, again, "after the update");
      assertEquals(0, again.result().metrics().reusedDeviceTokens(), "the cache was cleared");
      assertEquals(0, again.result().metrics().reusedStorageTokens(), "nothing to restore");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    // the new version's objects are under another namespace than version 1's
    Recorder r2 = new Recorder();
    try (Engine e = engine(r2, shared)) {
      Run fresh = serve(e, r2);
      assertEquals(0, fresh.result().metrics().reusedStorageTokens(), "version 1 finds nothing");
    }
  }

  @Test
  void shouldSwitchAndReportWhatStayedWhenTheStoreLeavesLeasedObjectsBehind() throws Exception {
    // Mooncake's removal skips objects under a read lease: a purge can end with objects left,
    // which must not fail the update, and must never be read under the new version
    SharedStore shared = new SharedStore();
    io.tokenspeed.l3.spi.NamespaceDeletion leftAll =
        new io.tokenspeed.l3.spi.NamespaceDeletion(0, -1, 2, 20, "every object was leased");
    Forwarding leasing =
        new Forwarding(shared) {
          @Override
          public io.tokenspeed.l3.spi.NamespaceDeletion purgeNamespace(String namespace) {
            return leftAll; // removes nothing: every object of the old namespace stays
          }
        };
    Recorder rec = new Recorder();
    try (Engine e = engine(rec, leasing)) {
      serve(e, rec);
      awaitPuts(shared);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (e.storageBusyNow() && System.nanoTime() < deadline) {
        Thread.sleep(2); // the finished prompt's writes done, so the old namespace holds them
      }
      long stored = shared.inner.usedBytes();
      assertTrue(stored > 0, "the prefix was written under the old version");
      io.tokenspeed.l3.spi.NamespaceDeletion deletion = e.updateWeights("2");
      assertEquals(leftAll, deletion, "the store's report comes back as it was");
      assertEquals("2", e.weightVersion());
      assertEquals(stored, shared.inner.usedBytes(), "the old namespace's objects stayed");
      int getsBefore = shared.gets.get();
      Run again = serve(e, rec);
      EngineTest.assertSame(want, again, "after the update");
      assertEquals(0, again.result().metrics().reusedDeviceTokens(), "the cache was cleared");
      assertEquals(0, again.result().metrics().reusedStorageTokens(), "no stale object was read");
      assertEquals(getsBefore, shared.gets.get(), "no GET of the old namespace's objects");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  @Test
  void shouldChangeNothingWhenTheDeletionFails() throws Exception {
    SharedStore shared = new SharedStore();
    Forwarding failing =
        new Forwarding(shared) {
          @Override
          public io.tokenspeed.l3.spi.NamespaceDeletion purgeNamespace(String namespace)
              throws Exception {
            // the engine deletes through purgeNamespace: route it through this deleteNamespace
            return io.tokenspeed.l3.spi.NamespaceDeletion.complete(deleteNamespace(namespace));
          }

          @Override
          public long deleteNamespace(String namespace) {
            throw new IllegalStateException("the store refuses to delete " + namespace);
          }
        };
    Recorder rec = new Recorder();
    try (Engine e = engine(rec, failing)) {
      serve(e, rec);
      awaitPuts(shared);
      var error = assertThrows(IllegalStateException.class, () -> e.updateWeightVersion("2"));
      assertTrue(error.getMessage().startsWith("the store refuses"), error::getMessage);
      assertEquals(model.identity().weightVersion(), e.weightVersion(), "not switched");
      Run again = serve(e, rec);
      EngineTest.assertSame(want, again, "after the failed update");
      assertEquals(
          (prompt.length - 1) / P * P,
          again.result().metrics().reusedDeviceTokens(),
          "nothing was cleared: a Device hit");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  @Test
  void shouldClearAndRecordTheVersionWithoutL3() throws Exception {
    Recorder rec = new Recorder();
    try (Engine e = engine(rec, null)) {
      serve(e, rec);
      assertEquals(0, e.updateWeightVersion("7"));
      assertEquals("7", e.weightVersion());
      Run again = serve(e, rec);
      assertEquals(0, again.result().metrics().reusedDeviceTokens(), "cleared");
      EngineTest.assertSame(want, again, "after the update");
      e.close();
      var late = e.clearCache();
      assertThrows(
          java.util.concurrent.ExecutionException.class, () -> late.get(1, TimeUnit.SECONDS));
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }
}

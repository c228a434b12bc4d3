package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.tokenspeed.engine.EngineL3Test.SharedStore;
import io.tokenspeed.engine.EngineL3WorkloadTest.Observer;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.testkit.LiveTree;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collection;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.NullAndEmptySource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A namespace rotation ({@link Engine#rotateNamespace}) over a real store. The rotation clears the
 * cache as a full clear does and builds every later key under the new weight version's namespace,
 * but, unlike a weight update, it deletes nothing: replicas still on the old version go on reading
 * the old namespace. With storage I/O in flight it returns without waiting for it, and nothing the
 * rejected I/O reads is ever published.
 *
 * <p>The model is the untied Llama of {@link ContextModels}, whose output depends on the KV of the
 * context, so a restore of wrong bytes would change the logits; every output is compared bit for
 * bit with a recomputation. Invariants of the scheduler, the storage transfer manager and the cache
 * are checked after every round. Objects are counted in the store itself: files under the namespace
 * directory of a file store, or the keys a PUT answered Ok for.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineL3RotationTest {
  private static final int P = 4;

  private CausalLm model;
  private int[] prompt;
  private Run want;

  /** Another prompt, sharing no page with {@link #prompt}, and its recomputation. */
  private int[] other;

  private Run wantOther;

  /** Every full page of {@link #prompt} but the one holding its last token (computed always). */
  private int restorable;

  @BeforeAll
  void load(@TempDir Path dir) throws Exception {
    model = ContextModels.llama(dir);
    prompt = new SplittableRandom(61).ints(81, 0, model.vocabSize()).toArray();
    restorable = (prompt.length - 1) / P * P;
    Checked rec = new Checked();
    try (Engine e =
        Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(rec).conclude())) {
      want = rec.await(e.submit(prompt, SamplingParams.greedy(8)));
      other = new SplittableRandom(67).ints(81, 0, model.vocabSize()).toArray();
      wantOther = rec.await(e.submit(other, SamplingParams.greedy(8)));
      assertEquals(0, wantOther.result().metrics().reusedDeviceTokens(), "no page in common");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  @AfterAll
  void close() {
    model.close();
  }

  private Engine engine(EngineObserver observer, L3Settings l3) {
    Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(observer)
                .l3(l3)
                .paused()
                .conclude());
    e.resume();
    return e;
  }

  private static RequestHandle submit(Engine e, int[] prompt) {
    return e.submit(prompt, SamplingParams.greedy(8));
  }

  /** A store that passes every call on and records the keys asked for, by call kind. */
  static class Recording extends ForwardingStore {
    final Collection<String> queried = new ConcurrentLinkedQueue<>();
    final Collection<String> read = new ConcurrentLinkedQueue<>();

    /** Keys a PUT answered Ok for (created, or found already there). */
    final Set<String> written = ConcurrentHashMap.newKeySet();

    Recording(Store inner) {
      super(inner);
    }

    @Override
    public StoreResult exists(List<String> keys) throws Exception {
      queried.addAll(keys);
      return super.exists(keys);
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      read.addAll(keys);
      return super.get(keys, destinations);
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      StoreResult result = super.put(keys, sources);
      for (int i = 0; i < keys.size(); i++) {
        if (result.rows().get(i) instanceof RowResult.Ok) {
          written.add(keys.get(i));
        }
      }
      return result;
    }

    void forget() {
      queried.clear();
      read.clear();
      written.clear();
    }
  }

  /** The namespace of an object key: its text before the first {@code _}. */
  private static String namespaceOf(String key) {
    return key.substring(0, key.indexOf('_'));
  }

  private static Set<String> namespaces(Collection<String> keys) {
    return keys.stream().map(EngineL3RotationTest::namespaceOf).collect(Collectors.toSet());
  }

  /** The keys of {@code namespace} without it: what names an object in any namespace. */
  private static Set<String> objectsUnder(String namespace, Collection<String> keys) {
    return keys.stream()
        .filter(k -> namespaceOf(k).equals(namespace))
        .map(k -> k.substring(k.indexOf('_')))
        .collect(Collectors.toCollection(TreeSet::new));
  }

  /**
   * The object files of {@code namespace} in a file store under {@code root} (a namespace of this
   * engine is a plain name: its directory is the namespace itself), PUTs in progress left out.
   */
  private static Set<String> objectFiles(Path root, String namespace) throws IOException {
    assertTrue(namespace.matches("[a-z0-9][a-z0-9-]*"), () -> "a plain name: " + namespace);
    Path dir = root.resolve(namespace);
    if (!Files.isDirectory(dir)) {
      return Set.of();
    }
    return LiveTree.publishedFiles(dir).stream()
        .map(p -> dir.relativize(p).toString())
        .collect(Collectors.toCollection(TreeSet::new));
  }

  /** The namespace directories of a file store under {@code root}. */
  private static Set<String> namespaceDirectories(Path root) throws IOException {
    try (Stream<Path> list = Files.list(root)) {
      return list.filter(Files::isDirectory)
          .map(p -> p.getFileName().toString())
          .collect(Collectors.toCollection(TreeSet::new));
    }
  }

  /** Waits (up to 10 s) until the engine has no L3 work pending, and checks that it has none. */
  private static void awaitStorageIdle(Engine e) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (e.storageBusyNow() && System.nanoTime() - deadline < 0) {
      Thread.sleep(2);
    }
    assertFalse(e.storageBusyNow(), "L3 work still pending after 10 s");
  }

  /** What is off a fresh engine's baseline, checked on the loop thread in one idle round. */
  private static List<String> offBaseline(Engine e, Observer obs) throws Exception {
    CompletableFuture<List<String>> b = new CompletableFuture<>();
    obs.baseline = b;
    e.cancel(Long.MAX_VALUE); // no such request: the idle loop runs one round, which checks
    return b.get(10, TimeUnit.SECONDS);
  }

  /** Runs {@code e.rotateNamespace(version)} on its own thread. */
  private static CompletableFuture<Void> rotateAsync(Engine e, String version) {
    CompletableFuture<Void> f = new CompletableFuture<>();
    Thread.ofPlatform()
        .name("rotation-" + version)
        .daemon(true)
        .start(
            () -> {
              try {
                e.rotateNamespace(version);
                f.complete(null);
              } catch (Throwable t) {
                f.completeExceptionally(t);
              }
            });
    return f;
  }

  private static String namespace(Engine e) {
    return e.storageNamespace().orElseThrow().toString();
  }

  /**
   * The prompt is written under v1; after the rotation to v2 the version and the namespace change,
   * every one of v1's object files is still there and none was added, the repeat asks the store
   * only under v2 (empty: nothing restored, the output equals recomputation) and its backups are
   * the same objects as v1's, under v2 only.
   */
  @Test
  void shouldKeepTheOldNamespaceAndWriteOnlyUnderTheNewOneWhenRotated(@TempDir Path root)
      throws Exception {
    Recording store = new Recording(new FileStore(FileStoreSettings.of(root)));
    Checked rec = new Checked();
    try (Engine e = engine(rec, EngineL3FaultsTest.settings(store))) {
      String v1 = e.weightVersion();
      String ns1 = namespace(e);
      assertNotEquals("v2", v1, "the model starts at another version than the rotation's");
      EngineTest.assertSame(want, rec.await(submit(e, prompt)), "cold under v1");
      awaitStorageIdle(e);
      Set<String> v1Files = objectFiles(root, ns1);
      Set<String> v1Objects = objectsUnder(ns1, store.written);
      assertEquals(Set.of(ns1), namespaces(store.written), "v1's backups are under v1 only");
      assertFalse(v1Objects.isEmpty(), "the prompt was written through under v1");
      assertEquals(v1Objects.size(), v1Files.size(), "one file per object under " + ns1);

      store.forget();
      e.rotateNamespace("v2");
      String ns2 = namespace(e);
      assertEquals("v2", e.weightVersion(), "the rotation recorded the version");
      assertNotEquals(ns1, ns2, "the rotation switched the namespace");

      Run again = rec.await(submit(e, prompt));
      EngineTest.assertSame(want, again, "after the rotation");
      assertEquals(0, again.result().metrics().reusedDeviceTokens(), "the Device was cleared");
      assertEquals(0, again.result().metrics().reusedHostTokens(), "the Host was cleared");
      assertEquals(0, again.result().metrics().reusedStorageTokens(), "v2 holds nothing yet");
      awaitStorageIdle(e);

      assertFalse(store.queried.isEmpty(), "the repeat asked the store");
      assertEquals(Set.of(ns2), namespaces(store.queried), "queried under v2 only");
      assertTrue(store.read.isEmpty(), () -> "nothing to read under v2: " + store.read.size());
      assertEquals(Set.of(ns2), namespaces(store.written), "backups under v2 only");
      assertEquals(v1Objects, objectsUnder(ns2, store.written), "the same objects as v1's");
      assertEquals(v1Files, objectFiles(root, ns1), "v1's objects all stay, and none is added");
      assertEquals(v1Objects.size(), objectFiles(root, ns2).size(), "one file per v2 object");
      assertEquals(
          new TreeSet<>(Set.of(ns1, ns2)), namespaceDirectories(root), "no other namespace");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  /**
   * An engine rotates from v1 to v2 and serves again (its objects now under both); a fresh replica
   * still on v1, over the same directory, then restores the whole prefix from v1's objects and
   * reads nothing else; the rotated engine, once cleared, restores from v2's. Both outputs equal
   * recomputation.
   */
  @Test
  void shouldLetAReplicaStillOnTheOldVersionRestoreFromTheOldNamespaceAfterARotation(
      @TempDir Path root) throws Exception {
    Checked rec = new Checked();
    Checked replicaRec = new Checked();
    try (Engine rotated =
        engine(rec, EngineL3FaultsTest.settings(new FileStore(FileStoreSettings.of(root))))) {
      String v1 = rotated.weightVersion();
      String ns1 = namespace(rotated);
      EngineTest.assertSame(want, rec.await(submit(rotated, prompt)), "cold under v1");
      awaitStorageIdle(rotated);
      rotated.rotateNamespace("v2");
      String ns2 = namespace(rotated);
      EngineTest.assertSame(want, rec.await(submit(rotated, prompt)), "recomputed under v2");
      awaitStorageIdle(rotated);
      assertFalse(objectFiles(root, ns2).isEmpty(), "v2 has the prompt's objects too");

      Recording replicaStore = new Recording(new FileStore(FileStoreSettings.of(root)));
      try (Engine replica = engine(replicaRec, EngineL3FaultsTest.settings(replicaStore))) {
        assertEquals(v1, replica.weightVersion(), "the replica is still on v1");
        assertEquals(ns1, namespace(replica), "and reads v1's namespace");
        Run restored = replicaRec.await(submit(replica, prompt));
        EngineTest.assertSame(want, restored, "the replica restored from v1's objects");
        assertEquals(
            restorable,
            restored.result().metrics().reusedStorageTokens(),
            "the whole prefix came from the store");
        assertFalse(replicaStore.read.isEmpty(), "the replica read the store");
        assertEquals(Set.of(ns1), namespaces(replicaStore.read), "it read v1's objects only");
        awaitStorageIdle(replica);
      }

      rotated.clearCache().get(10, TimeUnit.SECONDS);
      Run own = rec.await(submit(rotated, prompt));
      EngineTest.assertSame(want, own, "the rotated engine restored from v2's objects");
      assertEquals(
          restorable, own.result().metrics().reusedStorageTokens(), "restored from v2's objects");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    assertTrue(replicaRec.broken.isEmpty(), () -> replicaRec.broken.toString());
  }

  /**
   * The local tiers are cleared, so a repeat of the written prompt asks the store and its GET of
   * v1's objects is held inside the store (soft deadline 60 s: only a rejection ends its wait). The
   * rotation returns within 2 s while the GET is still held, and the request is then served by
   * recomputation, its backups landing under v2. Until the GET returns it keeps what it holds (the
   * engine is off its baseline); it then fills its Host blocks with garbage, as if it had read a
   * wrong object, and returns Ok. The local tiers were cleared once more before that, so if any of
   * those blocks were published the next repeat would find them on the Host and its output would
   * differ; it must instead restore from v2's objects, and the engine be back at its baseline.
   */
  @Test
  void shouldRejectAGetHeldInsideTheStoreWithoutWaitingAndPublishNothingItReadsWhenRotated()
      throws Exception {
    SharedStore shared = new SharedStore();
    CountDownLatch inside = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    AtomicBoolean taken = new AtomicBoolean();
    AtomicBoolean returned = new AtomicBoolean();
    AtomicReference<String> holdUnder = new AtomicReference<>();
    Recording store =
        new Recording(shared) {
          @Override
          public StoreResult get(List<String> keys, List<MemorySegment> destinations)
              throws Exception {
            String hold = holdUnder.get();
            if (hold == null
                || !namespaceOf(keys.getFirst()).equals(hold)
                || !taken.compareAndSet(false, true)) {
              return super.get(keys, destinations); // only the first GET of v1 is held
            }
            inside.countDown();
            release.await();
            StoreResult result = super.get(keys, destinations);
            for (MemorySegment d : destinations) {
              d.fill((byte) 0x3f); // what the late GET read is garbage
            }
            returned.set(true);
            return result;
          }
        };
    L3Settings l3 =
        EngineL3Test.l3(
            store, StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(60_000));
    Observer obs = new Observer();
    try (Engine e = engine(obs, l3)) {
      String ns1 = namespace(e);
      EngineTest.assertSame(want, obs.await(submit(e, prompt)), "cold under v1");
      awaitStorageIdle(e);
      Set<String> v1Objects = objectsUnder(ns1, store.written);
      assertFalse(v1Objects.isEmpty(), "the prompt was written through under v1");
      e.clearCache().get(10, TimeUnit.SECONDS);

      holdUnder.set(ns1);
      RequestHandle waiting = submit(e, prompt);
      assertTrue(inside.await(10, TimeUnit.SECONDS), "the repeat's GET of v1 is in the store");
      assertFalse(waiting.result().isDone(), "the repeat waits for its GET");
      long startNs = System.nanoTime();
      CompletableFuture<Void> rotation = rotateAsync(e, "v2");
      try {
        rotation.get(2, TimeUnit.SECONDS);
      } catch (TimeoutException t) {
        release.countDown();
        fail("the rotation waited for the GET held inside the store");
      }
      long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs);
      assertTrue(tookMs < 2_000, "the rotation took " + tookMs + " ms");
      assertFalse(returned.get(), "the GET was still held when the rotation returned");
      String ns2 = namespace(e);
      assertNotEquals(ns1, ns2, "the rotation switched the namespace");

      try {
        waiting.result().get(10, TimeUnit.SECONDS);
      } catch (TimeoutException t) {
        fail("the repeat still waits for the GET the rotation rejected");
      }
      Run served = obs.await(waiting);
      EngineTest.assertSame(want, served, "served after the rotation rejected its GET");
      assertEquals(0, served.result().metrics().reusedStorageTokens(), "nothing was restored");
      assertFalse(returned.get(), "served while the GET was still held");

      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (!objectsUnder(ns2, store.written).equals(v1Objects)
          && System.nanoTime() - deadline < 0) {
        Thread.sleep(2);
      }
      assertEquals(v1Objects, objectsUnder(ns2, store.written), "its backups landed under v2");
      // once its backups have retired, the rejected GET is the one operation left, and it still
      // holds its Host blocks
      long settleBy = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      List<String> held = offBaseline(e, obs);
      while (!held.contains("operation credits in use: 1") && System.nanoTime() - settleBy < 0) {
        Thread.sleep(2);
        held = offBaseline(e, obs);
      }
      List<String> off = held;
      assertTrue(off.contains("operation credits in use: 1"), () -> "one operation left: " + off);
      assertTrue(
          off.stream().anyMatch(o -> o.startsWith("Host references held by tickets: ")),
          () -> "the rejected GET keeps its Host blocks until it retires: " + off);
      assertTrue(e.storageBusyNow(), "the held GET is still outstanding");

      e.clearCache().get(10, TimeUnit.SECONDS); // from now on the late GET is the only local source
      release.countDown();
      awaitStorageIdle(e);
      assertTrue(returned.get(), "the held GET returned");
      assertEquals(List.of(), offBaseline(e, obs), "back at the baseline once the GET retired");

      store.read.clear();
      Run again = obs.await(submit(e, prompt));
      EngineTest.assertSame(want, again, "after the late GET retired");
      assertEquals(
          restorable, again.result().metrics().reusedStorageTokens(), "restored from v2's objects");
      assertEquals(Set.of(ns2), namespaces(store.read), "and read nothing of v1");
      awaitStorageIdle(e);
      assertEquals(List.of(), offBaseline(e, obs), "back at the baseline at the end");
    }
    assertTrue(obs.broken.isEmpty(), () -> obs.broken.toString());
  }

  /**
   * The write-through PUT of the prompt (v1) is held inside the store when the rotation starts: the
   * rotation returns within 2 s, and another prompt is served and written through under v2 while
   * the PUT is still held. Released, the PUT finishes under v1 (the old namespace is kept), the
   * engine is back at its baseline, and a fresh replica still on v1 restores from what that PUT
   * wrote with output equal to recomputation: the PUT read the prompt's Host blocks after the
   * rotation, so they were not handed to the other prompt meanwhile.
   */
  @Test
  void shouldLetAPutHeldInsideTheStoreFinishUnderTheOldNamespaceWhenRotated() throws Exception {
    SharedStore shared = new SharedStore();
    CountDownLatch inside = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    AtomicBoolean taken = new AtomicBoolean();
    AtomicBoolean returned = new AtomicBoolean();
    Collection<String> heldKeys = new ConcurrentLinkedQueue<>();
    Recording store =
        new Recording(shared) {
          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
            if (!taken.compareAndSet(false, true)) {
              return super.put(keys, sources);
            }
            heldKeys.addAll(keys);
            inside.countDown();
            release.await(); // the PUT reads the Host only once released
            StoreResult result = super.put(keys, sources);
            returned.set(true);
            return result;
          }
        };
    Observer obs = new Observer();
    String ns1;
    try (Engine e = engine(obs, EngineL3FaultsTest.settings(store))) {
      ns1 = namespace(e);
      EngineTest.assertSame(want, obs.await(submit(e, prompt)), "cold under v1");
      assertTrue(inside.await(10, TimeUnit.SECONDS), "the prompt's PUT is in the store");
      CompletableFuture<Void> rotation = rotateAsync(e, "v2");
      try {
        rotation.get(2, TimeUnit.SECONDS);
      } catch (TimeoutException t) {
        release.countDown();
        fail("the rotation waited for the PUT held inside the store");
      }
      assertFalse(returned.get(), "the PUT was still held when the rotation returned");
      String ns2 = namespace(e);
      assertNotEquals(ns1, ns2, "the rotation switched the namespace");

      Run served = obs.await(submit(e, other));
      EngineTest.assertSame(wantOther, served, "the other prompt after the rotation");
      assertEquals(0, served.result().metrics().reusedStorageTokens(), "nothing to restore");
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (objectsUnder(ns2, store.written).isEmpty() && System.nanoTime() - deadline < 0) {
        Thread.sleep(2);
      }
      assertFalse(
          objectsUnder(ns2, store.written).isEmpty(),
          "the other prompt was written through under v2 while the PUT was held");
      assertFalse(returned.get(), "the PUT was still held meanwhile");

      release.countDown();
      awaitStorageIdle(e);
      assertTrue(returned.get(), "the held PUT returned");
      assertEquals(List.of(), offBaseline(e, obs), "back at the baseline once the PUT retired");
      Set<String> v1Objects = objectsUnder(ns1, store.written);
      Set<String> v2Objects = objectsUnder(ns2, store.written);
      assertEquals(objectsUnder(ns1, heldKeys), v1Objects, "the held PUT finished under v1");
      assertFalse(v2Objects.isEmpty(), "the other prompt was written through under v2");
      assertTrue(
          v1Objects.stream().noneMatch(v2Objects::contains),
          "the prompt's objects are under v1 only, the other prompt's under v2 only");
    }
    assertTrue(obs.broken.isEmpty(), () -> obs.broken.toString());

    Recording replicaStore = new Recording(shared);
    Checked replicaRec = new Checked();
    try (Engine replica = engine(replicaRec, EngineL3FaultsTest.settings(replicaStore))) {
      assertEquals(ns1, namespace(replica), "the replica is still on v1");
      Run restored = replicaRec.await(submit(replica, prompt));
      EngineTest.assertSame(want, restored, "restored from what the late PUT wrote under v1");
      assertEquals(
          restorable,
          restored.result().metrics().reusedStorageTokens(),
          "the whole prefix came from the late PUT");
    }
    assertTrue(replicaRec.broken.isEmpty(), () -> replicaRec.broken.toString());
  }

  /**
   * A missing or blank version is refused before anything happens: the message names
   * weight_version, the version and the namespace stay, and nothing is cleared (a Device hit).
   */
  @ParameterizedTest(name = "version=[{0}]")
  @NullAndEmptySource
  @ValueSource(strings = {" ", "\t\n"})
  void shouldRefuseAMissingWeightVersionAndChangeNothing(String version) throws Exception {
    Checked rec = new Checked();
    try (Engine e = engine(rec, EngineL3FaultsTest.settings(new SharedStore()))) {
      String v1 = e.weightVersion();
      String ns1 = namespace(e);
      EngineTest.assertSame(want, rec.await(submit(e, prompt)), "cold");
      var error = assertThrows(IllegalArgumentException.class, () -> e.rotateNamespace(version));
      assertTrue(error.getMessage().contains("weight_version"), error::getMessage);
      assertEquals(v1, e.weightVersion(), "the version stays");
      assertEquals(ns1, namespace(e), "the namespace stays");
      Run again = rec.await(submit(e, prompt));
      EngineTest.assertSame(want, again, "after the refusal");
      assertEquals(
          restorable,
          again.result().metrics().reusedDeviceTokens(),
          "nothing was cleared: a Device hit");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  /** Without L3 the rotation clears the cache and records the version; there is no namespace. */
  @Test
  void shouldClearAndRecordTheVersionWithoutL3() throws Exception {
    Checked rec = new Checked();
    try (Engine e = engine(rec, null)) {
      EngineTest.assertSame(want, rec.await(submit(e, prompt)), "cold");
      assertThrows(IllegalArgumentException.class, () -> e.rotateNamespace(null));
      e.rotateNamespace("7");
      assertEquals("7", e.weightVersion());
      assertTrue(e.storageNamespace().isEmpty(), "no namespace without L3");
      Run again = rec.await(submit(e, prompt));
      EngineTest.assertSame(want, again, "after the rotation");
      assertEquals(0, again.result().metrics().reusedDeviceTokens(), "the Device was cleared");
      assertEquals(0, again.result().metrics().reusedHostTokens(), "the Host was cleared");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }
}

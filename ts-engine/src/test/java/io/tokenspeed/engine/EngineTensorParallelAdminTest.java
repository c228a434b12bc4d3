package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineTensorParallelFaultsTest.RankClient;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Administration of a tensor-parallel replica with L3 (TP = 2, ranks as threads, the real mesh, one
 * shared memory store reached by a client per rank): a namespace rotation and a weight-version
 * update reach every rank in one agreed round; an update waits while one rank's store call hangs,
 * requests going on meanwhile without L3, and leaves nothing in the old namespace; a failed
 * deletion lifts the fence on every rank; a cache clear returns while one rank's GET hangs. Every
 * output equals the single-rank engine's; every rank checks the scheduler's, the storage transfer
 * manager's and the cache's invariants after every round, and ends with no block held.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineTensorParallelAdminTest {
  private static final int P = 4;

  @TempDir static Path dir;
  private Path folder;
  private CausalLm single;
  private Engine reference;

  @BeforeAll
  void load() {
    folder = Fixtures.extract("llama", dir);
    single = CausalLm.load(folder);
    reference = Engine.start(EngineSettings.of(single, EngineTest.small(256)).conclude());
  }

  @AfterAll
  void close() {
    reference.close();
    single.close();
  }

  /** The single-rank engine's output for {@code prompt} (its caches cleared first). */
  private int[] want(int[] prompt) throws Exception {
    reference.clearCache().get(10, TimeUnit.SECONDS);
    GenerationResult r =
        reference.submit(prompt, SamplingParams.greedy(8)).result().get(60, TimeUnit.SECONDS);
    assertNull(r.error(), r::error);
    return r.tokens();
  }

  private int[] prompt(SplittableRandom random, int tokens) {
    return random.ints(tokens, 0, single.vocabSize()).toArray();
  }

  /**
   * A replica of two ranks over {@code clients}, each rank checked by its own observer; one-page
   * extensions and a 5 s soft deadline (restores on a loaded machine do not fall back).
   */
  private TpReplica replica(RankClient[] clients, Checked[] checks) throws Exception {
    return replica(clients, checks, 5_000);
  }

  private TpReplica replica(RankClient[] clients, Checked[] checks, long softDeadlineMs)
      throws Exception {
    StorageConfig scheduling =
        StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(softDeadlineMs);
    return TpReplica.start(
        folder,
        2,
        r -> EngineTest.small(256),
        r -> EngineL3Test.l3(clients[r], scheduling),
        r -> checks[r]);
  }

  private static RankClient[] clients(MemoryStore shared) {
    return new RankClient[] {new RankClient(shared), new RankClient(shared)};
  }

  private static Checked[] checks() {
    return new Checked[] {new Checked(), new Checked()};
  }

  private static GenerationResult serve(TpReplica r, int[] prompt) throws Exception {
    GenerationResult g =
        r.leader().submit(prompt, SamplingParams.greedy(8)).result().get(60, TimeUnit.SECONDS);
    assertNull(g.error(), g::error);
    return g;
  }

  /** Waits up to 10 s for {@code condition}; fails naming {@code what} if it never holds. */
  private static void await(BooleanSupplier condition, String what) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!condition.getAsBoolean()) {
      assertTrue(System.nanoTime() < deadline, "never happened: " + what);
      Thread.sleep(5);
    }
  }

  /**
   * Every rank agrees on the weight version and the namespace (a follower applies the agreed round
   * a moment after the leader), no invariant broke, no rank failed, and once idle no rank holds a
   * Device or Host block.
   */
  private static void assertConsistentAndIdle(TpReplica r, Checked[] checks, String version)
      throws Exception {
    for (Engine e : r.engines) {
      await(() -> version.equals(e.weightVersion()), "rank " + e.tpRank() + " at " + version);
      assertEquals(
          r.leader().storageNamespace(), e.storageNamespace(), "rank " + e.tpRank() + " namespace");
      assertTrue(e.failure().isEmpty(), () -> "rank " + e.tpRank() + ": " + e.failure());
    }
    r.awaitStorageIdle();
    for (Engine e : r.engines) {
      await(
          () -> {
            EngineMetrics m = e.metrics();
            return m.idle() && m.device().usedParents() == 0 && m.host().usedParents() == 0;
          },
          "rank " + e.tpRank() + " holds no block once idle: " + e.metrics());
    }
    for (Checked c : checks) {
      assertTrue(c.broken.isEmpty(), () -> c.broken.toString());
    }
  }

  /** The keys of {@code clients}' PUTs under {@code namespace}, rank by rank. */
  private static List<List<String>> putKeysUnder(RankClient[] clients, String namespace) {
    List<List<String>> out = new ArrayList<>();
    for (RankClient c : clients) {
      out.add(c.putKeys.stream().filter(k -> k.startsWith(namespace + "_")).toList());
    }
    return out;
  }

  /** How many of {@code keys} the store holds now. */
  private static long present(MemoryStore store, List<String> keys) {
    if (keys.isEmpty()) {
      return 0;
    }
    return store.exists(keys).rows().stream().filter(row -> row instanceof RowResult.Ok).count();
  }

  private static CompletableFuture<Long> updateAsync(Engine leader, String version) {
    CompletableFuture<Long> f = new CompletableFuture<>();
    Thread.ofPlatform()
        .daemon(true)
        .start(
            () -> {
              try {
                f.complete(leader.updateWeightVersion(version));
              } catch (Throwable t) {
                f.completeExceptionally(t);
              }
            });
    return f;
  }

  /**
   * A rotation switches both ranks in the same round: later keys on every rank are built under the
   * new namespace (each rank's own, {@code r{rank}}), the old namespace's objects stay in the
   * store, and a prompt served before is recomputed (the caches were cleared on both ranks, or
   * their plans would have diverged), its output unchanged.
   */
  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {3, 7})
  void shouldRotateEveryRankAndWriteLaterKeysUnderTheNewNamespace(long seed) throws Exception {
    SplittableRandom random = new SplittableRandom(seed);
    int[] a = prompt(random, 33 + random.nextInt(16));
    int[] b = prompt(random, 33 + random.nextInt(16));
    int[] wantA = want(a);
    int[] wantB = want(b);
    MemoryStore shared = new MemoryStore();
    RankClient[] clients = clients(shared);
    Checked[] checks = checks();
    try (TpReplica r = replica(clients, checks)) {
      String old = r.leader().storageNamespace().orElseThrow().toString();
      assertArrayEquals(wantA, serve(r, a).tokens(), "before the rotation");
      r.awaitStorageIdle();
      List<List<String>> written = putKeysUnder(clients, old);

      r.leader().rotateNamespace("rotated-" + seed);
      assertConsistentAndIdle(r, checks, "rotated-" + seed);
      String rotated = r.leader().storageNamespace().orElseThrow().toString();
      assertNotEquals(old, rotated);

      assertArrayEquals(wantB, serve(r, b).tokens(), "after the rotation");
      GenerationResult again = serve(r, a);
      assertArrayEquals(wantA, again.tokens(), "the first prompt again");
      assertEquals(0, again.metrics().reusedDeviceTokens(), "the Device was cleared");
      assertEquals(0, again.metrics().reusedStorageTokens(), "nothing under the new namespace");
      assertConsistentAndIdle(r, checks, "rotated-" + seed);

      List<List<String>> later = putKeysUnder(clients, rotated);
      for (int rank = 0; rank < 2; rank++) {
        assertFalse(written.get(rank).isEmpty(), "rank " + rank + " wrote before the rotation");
        assertEquals(
            written.get(rank).size(),
            present(shared, written.get(rank)),
            "rank " + rank + "'s objects of the old namespace stay");
        assertFalse(later.get(rank).isEmpty(), "rank " + rank + " wrote after the rotation");
        String own = "|r" + rank;
        List<String> after =
            clients[rank].putKeys.subList(written.get(rank).size(), clients[rank].putKeys.size());
        assertEquals(later.get(rank), after, "rank " + rank + " wrote only under " + rotated);
        assertTrue(
            after.stream().allMatch(k -> k.endsWith(own)),
            "rank " + rank + " wrote only its own objects: " + after);
      }
    }
  }

  /**
   * A weight update fences both ranks, deletes every rank's objects of the old namespace and
   * switches both: the store holds none of them afterwards, later keys use the new namespace on
   * both ranks, and outputs equal the single-rank engine's.
   */
  @Test
  void shouldDeleteEveryRanksOldObjectsAndSwitchEveryRankOnAWeightUpdate() throws Exception {
    SplittableRandom random = new SplittableRandom(11);
    int[] a = prompt(random, 45);
    int[] wantA = want(a);
    MemoryStore shared = new MemoryStore();
    RankClient[] clients = clients(shared);
    Checked[] checks = checks();
    try (TpReplica r = replica(clients, checks)) {
      String old = r.leader().storageNamespace().orElseThrow().toString();
      assertArrayEquals(wantA, serve(r, a).tokens(), "before the update");
      r.awaitStorageIdle();
      List<List<String>> written = putKeysUnder(clients, old);
      assertFalse(written.get(0).isEmpty() || written.get(1).isEmpty(), "both ranks wrote");

      long deleted = r.leader().updateWeightVersion("2");
      assertConsistentAndIdle(r, checks, "2");
      String now = r.leader().storageNamespace().orElseThrow().toString();
      assertNotEquals(old, now);
      assertEquals(
          written.get(0).size() + written.get(1).size(),
          deleted,
          "the leader deleted every rank's objects");
      for (int rank = 0; rank < 2; rank++) {
        assertEquals(0, present(shared, written.get(rank)), "rank " + rank + "'s old objects");
      }

      GenerationResult again = serve(r, a);
      assertArrayEquals(wantA, again.tokens(), "recomputed after the update");
      assertEquals(0, again.metrics().reusedStorageTokens(), again.metrics().toString());
      assertConsistentAndIdle(r, checks, "2");
      List<List<String>> later = putKeysUnder(clients, now);
      for (int rank = 0; rank < 2; rank++) {
        assertFalse(later.get(rank).isEmpty(), "rank " + rank + " writes under " + now);
        assertEquals(0, present(shared, putKeysUnder(clients, old).get(rank)), "nothing old");
      }
    }
  }

  /**
   * Rank 1's write-through PUT hangs inside the store when the update starts: the update waits for
   * it (the leader learns rank 1's operation has not retired from the agreed completions), requests
   * are served meanwhile without L3 on either rank (the fence), and once the PUT lands the update
   * deletes it with the rest and switches; afterwards both ranks use L3 again (the fence lifted).
   */
  @Test
  void shouldWaitForAHangingStoreCallOnOneRankWhileRequestsGoOn() throws Exception {
    SplittableRandom random = new SplittableRandom(13);
    int[] a = prompt(random, 41);
    int[] b = prompt(random, 37);
    int[] c = prompt(random, 43);
    int[] wantA = want(a);
    int[] wantB = want(b);
    int[] wantC = want(c);
    MemoryStore shared = new MemoryStore();
    RankClient[] clients = clients(shared);
    Checked[] checks = checks();
    CountDownLatch release = new CountDownLatch(1);
    clients[1].putGate = release;
    try (TpReplica r = replica(clients, checks)) {
      String old = r.leader().storageNamespace().orElseThrow().toString();
      assertArrayEquals(wantA, serve(r, a).tokens());
      await(() -> clients[1].putsEntered.get() > 0, "rank 1's PUT is inside the store");

      CompletableFuture<Long> update = updateAsync(r.leader(), "2");
      Thread.sleep(300);
      assertFalse(update.isDone(), "the update waits for rank 1's PUT");
      int[] queries = {clients[0].queries.get(), clients[1].queries.get()};
      assertArrayEquals(wantB, serve(r, b).tokens(), "served while the update waits");
      assertEquals(queries[0], clients[0].queries.get(), "rank 0 fenced: no query");
      assertEquals(queries[1], clients[1].queries.get(), "rank 1 fenced: no query");
      assertFalse(update.isDone(), "the update still waits for rank 1's PUT");

      release.countDown();
      long deleted = update.get(30, TimeUnit.SECONDS);
      assertTrue(deleted > 0, "deleted " + deleted);
      assertConsistentAndIdle(r, checks, "2");
      List<List<String>> written = putKeysUnder(clients, old);
      assertFalse(written.get(1).isEmpty(), "rank 1's late PUT reached the store");
      for (int rank = 0; rank < 2; rank++) {
        assertEquals(0, present(shared, written.get(rank)), "rank " + rank + ": none left");
      }

      int[] after = {clients[0].queries.get(), clients[1].queries.get()};
      assertArrayEquals(wantC, serve(r, c).tokens(), "after the update");
      assertTrue(clients[0].queries.get() > after[0], "rank 0 queries again: fence lifted");
      assertTrue(clients[1].queries.get() > after[1], "rank 1 queries again: fence lifted");
      assertConsistentAndIdle(r, checks, "2");
    }
  }

  /**
   * The store refuses the old namespace's deletion: the update fails, nothing is switched on either
   * rank, the fence lifts on both (a new prompt queries L3 on both ranks), and a prompt served
   * before is still found in the cache.
   */
  @Test
  void shouldLiftTheFenceOnEveryRankWhenTheDeletionFails() throws Exception {
    SplittableRandom random = new SplittableRandom(17);
    int[] a = prompt(random, 41);
    int[] b = prompt(random, 39);
    int[] wantA = want(a);
    int[] wantB = want(b);
    MemoryStore shared = new MemoryStore();
    RankClient[] clients = clients(shared);
    clients[0].failDeletes = true;
    Checked[] checks = checks();
    try (TpReplica r = replica(clients, checks)) {
      String version = r.leader().weightVersion();
      var namespace = r.leader().storageNamespace();
      assertArrayEquals(wantA, serve(r, a).tokens());
      r.awaitStorageIdle();

      assertThrows(
          IllegalStateException.class,
          () -> r.engines.get(1).updateWeightVersion("2"),
          "a follower takes no administration");
      assertThrows(
          IllegalStateException.class,
          () -> r.engines.get(1).rotateNamespace("2"),
          "a follower takes no administration");
      Exception e = assertThrows(Exception.class, () -> r.leader().updateWeightVersion("2"));
      assertTrue(String.valueOf(e.getMessage()).contains("refused by the test"), e.toString());
      assertConsistentAndIdle(r, checks, version);
      assertEquals(namespace, r.leader().storageNamespace(), "nothing switched");

      int[] queries = {clients[0].queries.get(), clients[1].queries.get()};
      assertArrayEquals(wantB, serve(r, b).tokens());
      assertTrue(clients[0].queries.get() > queries[0], "rank 0 queries: the fence lifted");
      assertTrue(clients[1].queries.get() > queries[1], "rank 1 queries: the fence lifted");
      GenerationResult again = serve(r, a);
      assertArrayEquals(wantA, again.tokens());
      assertTrue(again.metrics().reusedDeviceTokens() > 0, "nothing was cleared");
      assertConsistentAndIdle(r, checks, version);
    }
  }

  /**
   * A full clear while rank 1's GET hangs inside the store returns at once; the waiting request
   * falls back to recomputation with the single-rank output; once the GET retires every rank's Host
   * references are released, and after another clear the stored prefix is restored.
   */
  @Test
  void shouldClearWhileOneRanksGetHangsAndRestoreAfterwards() throws Exception {
    SplittableRandom random = new SplittableRandom(19);
    int[] written = prompt(random, 41);
    int[] extended = EngineL3Test.extend(written, 53, single.vocabSize(), random);
    int[] wantExtended = want(extended);
    MemoryStore shared = new MemoryStore();
    RankClient[] writers = clients(shared);
    Checked[] writerChecks = checks();
    try (TpReplica w = replica(writers, writerChecks)) {
      serve(w, written);
      w.awaitStorageIdle();
    }
    RankClient[] readers = clients(shared);
    CountDownLatch release = new CountDownLatch(1);
    readers[1].getGate = release;
    Checked[] checks = checks();
    try (TpReplica r = replica(readers, checks)) {
      String version = r.leader().weightVersion();
      RequestHandle h = r.leader().submit(extended, SamplingParams.greedy(8));
      await(() -> readers[1].getsEntered.get() > 0, "rank 1's GET is inside the store");
      r.leader().clearCache().get(5, TimeUnit.SECONDS);
      GenerationResult g = h.result().get(30, TimeUnit.SECONDS); // the GET still hangs
      assertNull(g.error(), g::error);
      assertEquals(1, release.getCount(), "answered while rank 1's GET still hung");
      assertArrayEquals(wantExtended, g.tokens(), "recomputed after the clear");
      assertEquals(0, g.metrics().reusedStorageTokens(), g.metrics().toString());

      release.countDown();
      assertConsistentAndIdle(r, checks, version);
      r.leader().clearCache().get(5, TimeUnit.SECONDS); // the recomputed prefix goes too
      GenerationResult again = serve(r, extended);
      assertArrayEquals(wantExtended, again.tokens(), "restored after the clear");
      assertTrue(
          again.metrics().reusedStorageTokens() >= written.length / P * P,
          "the stored prefix is restored: "
              + again.metrics()
              + " "
              + r.leader().metrics()
              + " gets "
              + readers[0].getsEntered
              + "/"
              + readers[1].getsEntered
              + " queries "
              + readers[0].queries
              + "/"
              + readers[1].queries);
      assertConsistentAndIdle(r, checks, version);
    }
    for (Checked c : writerChecks) {
      assertTrue(c.broken.isEmpty(), () -> c.broken.toString());
    }
  }

  /**
   * The leader's metrics snapshot carries rank 1's executor figures, as rank 1's executor counts
   * them (its I/O is its own: the leader cannot count it), once rank 1 has sent them through the
   * exchange; a follower's own snapshot carries no other rank's.
   */
  @Test
  void shouldShowEveryRanksExecutorFiguresOnTheLeader() throws Exception {
    SplittableRandom random = new SplittableRandom(29);
    MemoryStore shared = new MemoryStore();
    RankClient[] clients = clients(shared);
    Checked[] checks = checks();
    try (TpReplica r = replica(clients, checks)) {
      serve(r, prompt(random, 41));
      r.awaitStorageIdle();
      Engine follower = r.engines.get(1);
      io.tokenspeed.l3.L3Metrics own = follower.storageExecutorMetrics().orElseThrow();
      assertTrue(own.put().jobs() > 0, "rank 1 wrote: " + own);
      await(
          () -> {
            var relayed = r.leader().metrics().storage().orElseThrow().otherRanks().get(1);
            return relayed != null
                && relayed.put().jobs() == own.put().jobs()
                && relayed.query().jobs() == own.query().jobs()
                && relayed.backendCalls() == own.backendCalls();
          },
          "the leader shows rank 1's figures "
              + own
              + ", not "
              + r.leader().metrics().storage().orElseThrow().otherRanks());
      assertEquals(
          java.util.Set.of(1),
          r.leader().metrics().storage().orElseThrow().otherRanks().keySet(),
          "only the other rank's");
      assertTrue(
          follower.metrics().storage().orElseThrow().otherRanks().isEmpty(),
          "a follower shows only its own");
      assertConsistentAndIdle(r, checks, r.leader().weightVersion());
    }
  }

  /**
   * A fresh replica serves an unrelated prompt, idles past its 600 ms soft deadline, then a prompt
   * extending a stored prefix: every rank restores it (0 ms is the control), its output the
   * single-rank engine's. Were the first round after the gap to carry the tick of the last round
   * before it, the query would be past its deadline before it was issued.
   */
  @ParameterizedTest(name = "idle {0} ms")
  @ValueSource(longs = {0, 1500})
  void shouldRestoreAfterAnIdleGapLongerThanTheSoftDeadline(long idleMs) throws Exception {
    SplittableRandom random = new SplittableRandom(23 + idleMs);
    int[] written = prompt(random, 41);
    int[] extended = EngineL3Test.extend(written, 53, single.vocabSize(), random);
    int[] unrelated = prompt(random, 23);
    int[] wantExtended = want(extended);
    MemoryStore shared = new MemoryStore();
    try (TpReplica w = replica(clients(shared), checks())) {
      serve(w, written);
      w.awaitStorageIdle();
    }
    RankClient[] readers = clients(shared);
    Checked[] checks = checks();
    try (TpReplica r = replica(readers, checks, 600)) {
      serve(r, unrelated);
      r.awaitStorageIdle();
      Thread.sleep(idleMs);
      int[] gets = {readers[0].okGets.get(), readers[1].okGets.get()};
      GenerationResult g = serve(r, extended);
      assertArrayEquals(wantExtended, g.tokens(), "idle " + idleMs + " ms");
      assertEquals(
          written.length / P * P,
          g.metrics().reusedStorageTokens(),
          "after " + idleMs + " ms idle the stored prefix is restored: " + g.metrics());
      assertTrue(readers[0].okGets.get() > gets[0], "rank 0 read its rows");
      assertTrue(readers[1].okGets.get() > gets[1], "rank 1 read its rows");
      assertConsistentAndIdle(r, checks, r.leader().weightVersion());
    }
  }
}

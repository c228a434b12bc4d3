package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Several retractions in one round on a tensor-parallel replica (TP = 2, ranks as threads, the real
 * mesh). 24 short requests enter the leader's same round on a Device that only just holds each
 * prompt plus its first decode headroom, over a Host of about 1 % of the Device: as they decode
 * they outgrow the Device and retract each other, several in one round, on both ranks alike (their
 * plans are compared every round). Every output equals the request's alone run on a single-rank
 * engine; both ranks check the scheduler's and the cache's invariants after every round, retract as
 * often, and end holding no Device or Host block.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineTensorParallelRetractionTest {
  private static final int P = 4;
  private static final int BLOCK = 2;
  private static final int REQUESTS = 24;

  @TempDir static Path dir;
  private Path folder;
  private CausalLm single;

  @BeforeAll
  void load() {
    folder = Fixtures.extract("llama", dir);
    single = CausalLm.load(folder);
  }

  @AfterAll
  void close() {
    single.close();
  }

  /** The fewest Device parents that hold every prompt plus its admission headroom at once. */
  private int parentsAdmittingAll(List<int[]> prompts, List<Integer> maxTokens) {
    var layout = single.cacheLayout(P, BLOCK);
    var pool = new CacheCoordinator(layout, 2, 1, 16).device().pool();
    int parents = 0;
    for (var g : layout.groups()) {
      long rows = 0;
      for (int i = 0; i < prompts.size(); i++) {
        int headroom =
            Math.min(
                io.tokenspeed.scheduler.Scheduler.Config.DEFAULT_HEADROOM_TOKENS, maxTokens.get(i));
        rows += g.rowsFor(prompts.get(i).length + headroom);
      }
      parents += (int) Math.ceilDiv(rows, pool.childrenPerParent(g.groupId()));
    }
    return Math.max(2, parents);
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 6, 10})
  void shouldGiveEveryRequestItsAloneOutputWhenSeveralAreRetractedInOneRound(long seed)
      throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    List<int[]> prompts = new ArrayList<>();
    List<Integer> maxTokens = new ArrayList<>();
    for (int i = 0; i < REQUESTS; i++) {
      prompts.add(rnd.ints(4 + rnd.nextInt(5), 0, single.vocabSize()).toArray());
      maxTokens.add(24 + rnd.nextInt(17));
    }
    List<int[]> alone = new ArrayList<>();
    try (Engine e = Engine.start(EngineSettings.of(single, EngineTest.small(256)).conclude())) {
      for (int i = 0; i < REQUESTS; i++) {
        e.clearCache().get(10, TimeUnit.SECONDS);
        GenerationResult r =
            e.submit(prompts.get(i), SamplingParams.greedy(maxTokens.get(i)))
                .result()
                .get(60, TimeUnit.SECONDS);
        assertNull(r.error(), r::error);
        alone.add(r.tokens());
      }
    }
    int parents = parentsAdmittingAll(prompts, maxTokens);
    EngineConfig config = new EngineConfig(P, BLOCK, parents, 0.01, 4096, REQUESTS, 0, 2, 64);
    AtomicInteger severalInOneRound = new AtomicInteger();
    Checked[] checks = {new Checked(), new Checked()};
    CountDownLatch held = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    AtomicBoolean hold = new AtomicBoolean();
    Checked leaderCheck =
        new Checked() {
          @Override
          public void afterRound(EngineView e) {
            if (e.scheduler().retractedThisRound().size() > 1) {
              severalInOneRound.incrementAndGet();
            }
            checks[0].afterRound(e);
            if (hold.compareAndSet(true, false)) {
              held.countDown(); // the leader's loop waits here while the requests queue up
              try {
                release.await(5, TimeUnit.SECONDS);
              } catch (InterruptedException ex) {
                Thread.currentThread().interrupt();
              }
            }
          }
        };
    try (TpReplica r =
        TpReplica.start(
            folder, 2, rank -> config, null, rank -> rank == 0 ? leaderCheck : checks[1])) {
      hold.set(true);
      assertTrue(held.await(10, TimeUnit.SECONDS), "the leader's idle round ran");
      List<RequestHandle> handles = new ArrayList<>();
      for (int i = 0; i < REQUESTS; i++) {
        handles.add(r.leader().submit(prompts.get(i), SamplingParams.greedy(maxTokens.get(i))));
      }
      release.countDown(); // the leader's next round takes every request
      for (int i = 0; i < REQUESTS; i++) {
        GenerationResult g = handles.get(i).result().get(120, TimeUnit.SECONDS);
        assertNull(g.error(), g::error);
        assertArrayEquals(alone.get(i), g.tokens(), "seed=" + seed + " request " + i);
      }
      for (Engine e : r.engines) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (System.nanoTime() < deadline
            && !(e.metrics().idle()
                && e.metrics().device().usedParents() == 0
                && e.metrics().host().usedParents() == 0
                && e.stats().endedRequests() == REQUESTS)) {
          Thread.sleep(10);
        }
        EngineMetrics m = e.metrics();
        assertEquals(REQUESTS, e.stats().endedRequests(), "rank " + e.tpRank() + " ended all");
        assertEquals(0, m.device().usedParents(), "rank " + e.tpRank() + " Device: " + m);
        assertEquals(0, m.host().usedParents(), "rank " + e.tpRank() + " Host: " + m);
        assertTrue(e.failure().isEmpty(), () -> "rank " + e.tpRank() + ": " + e.failure());
      }
      long retractions = r.leader().stats().retractions();
      assertEquals(
          retractions, r.engines.get(1).stats().retractions(), "both ranks retracted alike");
      assertTrue(
          retractions >= 5 && severalInOneRound.get() >= 1,
          "the Device retracted "
              + retractions
              + " times, in "
              + severalInOneRound.get()
              + " rounds several at once (Device "
              + parents
              + " parents)");
    }
    for (Checked c : checks) {
      assertTrue(c.broken.isEmpty(), () -> c.broken.toString());
    }
  }
}

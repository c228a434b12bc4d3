package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.Scheduler;
import io.tokenspeed.scheduler.StorageConfig;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A retraction keeps its exact image while L3 holds every Host credit it can (issue 38, item 5).
 *
 * <p>A store claims every object and never answers a GET: each long prompt ("filler") reserves Host
 * destinations for its GET and waits in Prefetching, its blocks pinned, until L3 can take no more.
 * Then short prompts that bypass L3 decode until they outgrow the Device and retract each other.
 * Before Host credits were counted against the Host tier, the default 8,192 credits let the hung
 * reads pin every Host parent, so each retracted request found no room for its image and recomputed
 * (no image block was ever saved); with the credits capped to the parents the retraction reserve
 * leaves, the images fit, and every output still equals the request's alone run (the untied model
 * of {@link ContextModels}, whose outputs depend on the KV it reads).
 */
class EngineL3RetractionReserveTest extends WithContextLlama {
  private static final int P = 4;
  private static final int BLOCK = 2;
  private static final int SHORT = 4;
  private static final int MAX_TOKENS = 40;

  /** Claims every key exists; every GET waits for {@link #answer}, then reads nothing. */
  private static final class HungReads extends ForwardingStore {
    final CountDownLatch answer = new CountDownLatch(1);

    HungReads() {
      super(new MemoryStore());
    }

    @Override
    public StoreResult exists(List<String> keys) {
      return StoreResult.of(keys.stream().<RowResult>map(k -> new RowResult.Ok(1, false)).toList());
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      answer.await();
      return super.get(keys, destinations);
    }
  }

  /**
   * After every round: the invariants, the GETs issued and Host credits held so far, and a permit
   * for the test.
   */
  private static final class Watch extends Checked {
    final Semaphore rounds = new Semaphore(0);
    volatile long gets;
    volatile int hostCredits;

    @Override
    public void afterRound(EngineView e) {
      super.afterRound(e);
      gets = e.storageTransferManager().counters().getsIssued();
      hostCredits = e.storageTransferManager().hostCreditsInUse();
      rounds.release();
    }
  }

  /**
   * Device parents that admit {@code requests} short prompts with their decode headroom at once.
   */
  private int parentsAdmitting(int requests) {
    var layout = model.cacheLayout(P, BLOCK);
    var pool = new CacheCoordinator(layout, 2, 1, 16).device().pool();
    int parents = 0;
    for (var g : layout.groups()) {
      long rows = (long) requests * g.rowsFor(SHORT + Scheduler.Config.DEFAULT_HEADROOM_TOKENS);
      parents += (int) Math.ceilDiv(rows, pool.childrenPerParent(g.groupId()));
    }
    return parents;
  }

  private static L3Settings settings(HungReads store) {
    StorageConfig scheduling =
        StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(600_000);
    return new L3Settings(
        store,
        new StorageRuntimeConfig(scheduling, L3ExecutorConfig.defaults()),
        L3Settings.CPU_ATTENTION_BACKEND);
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2})
  void shouldSaveRetractionImagesWhileHungReadsHoldEveryHostCredit(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    int requests = 4;
    List<int[]> prompts = new ArrayList<>();
    for (int i = 0; i < requests; i++) {
      prompts.add(rnd.ints(SHORT, 0, model.vocabSize()).toArray());
    }
    List<Run> alone = new ArrayList<>();
    for (int[] prompt : prompts) {
      Checked rec = new Checked();
      try (Engine e =
          Engine.start(EngineSettings.of(model, EngineTest.small(256)).observer(rec).conclude())) {
        alone.add(rec.await(e.submit(prompt, SamplingParams.greedy(MAX_TOKENS))));
      }
    }
    int parents = parentsAdmitting(requests);
    EngineConfig config = new EngineConfig(P, BLOCK, parents, 8.0, 4096, requests, 0, 2, 64);
    HungReads store = new HungReads();
    Watch watch = new Watch();
    List<RequestHandle> fillers = new ArrayList<>();
    List<Run> got = new ArrayList<>();
    long retractions;
    long imageBlocks;
    int heldCredits;
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, config).observer(watch).l3(settings(store)).conclude())) {
      int fillerTokens = e.maxRequestTokens() - 8;
      boolean full = false;
      while (!full) { // one filler at a time, until L3 takes no more
        long gets = watch.gets;
        int[] prompt = rnd.ints(fillerTokens, 0, model.vocabSize()).toArray();
        RequestHandle h = e.submit(prompt, SamplingParams.greedy(1));
        while (watch.gets == gets && !h.result().isDone()) {
          assertTrue(watch.rounds.tryAcquire(60, TimeUnit.SECONDS), "the loop stopped");
        }
        full = watch.gets == gets;
        fillers.add(h);
        assertTrue(fillers.size() < 64, "L3 took " + fillers.size() + " fillers and no end");
      }
      assertTrue(fillers.size() > 1, "no read was left hanging");
      heldCredits = watch.hostCredits;
      List<RequestHandle> handles = new ArrayList<>();
      for (int[] prompt : prompts) {
        handles.add(e.submit(prompt, SamplingParams.greedy(MAX_TOKENS)));
      }
      for (RequestHandle h : handles) {
        got.add(watch.await(h));
      }
      retractions = e.scheduler().retractions();
      imageBlocks = e.stats().imageBlocks();
      fillers.forEach(RequestHandle::cancel);
      store.answer.countDown();
    }
    assertTrue(watch.broken.isEmpty(), () -> watch.broken.toString());
    assertTrue(retractions >= 1, "the Device never retracted (" + parents + " parents)");
    assertTrue(
        imageBlocks > 0,
        retractions
            + " retractions saved no image while hung reads held "
            + heldCredits
            + " Host credits: every one recomputed");
    for (int i = 0; i < requests; i++) {
      EngineTest.assertSame(alone.get(i), got.get(i), "request " + i);
    }
  }

  /** Host credits beyond what the Host tier holds after the reserve stop the engine at startup. */
  @Test
  void shouldRejectHostCreditsTheHostTierCannotHoldAtStartup() {
    HungReads store = new HungReads();
    L3Settings l3 = settings(store);
    L3Settings tooMany =
        new L3Settings(
            store,
            new StorageRuntimeConfig(
                l3.runtime().scheduling().withCredits(64, 8192), l3.runtime().executor()),
            L3Settings.CPU_ATTENTION_BACKEND);
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                Engine.start(
                    EngineSettings.of(model, EngineTest.small(256))
                        .observer(new Checked())
                        .l3(tooMany)
                        .paused()
                        .conclude()));
    assertTrue(e.getMessage().startsWith("max_host_blocks=8192 exceeds"), e.getMessage());
    assertTrue(e.getMessage().contains("1024 parents less the 256"), e.getMessage());
  }
}

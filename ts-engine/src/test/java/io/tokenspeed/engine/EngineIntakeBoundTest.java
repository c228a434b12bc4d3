package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code max_queued} bounds every request that waits for admission — in the intake queue and in the
 * scheduler, taken in by the loop but not running — so that an overload is refused at the door
 * instead of piling up behind it (a soak at ten times the sustainable rate once left 6,877 requests
 * waiting with max_queued 1,024, each one waiting longer than the last).
 */
class EngineIntakeBoundTest {
  @TempDir Path dir;

  /** Holds the loop after its first round, so that what waits where is known exactly. */
  private static final class HoldAfterFirstRound implements EngineObserver {
    final Semaphore held = new Semaphore(0);
    final Semaphore release = new Semaphore(0);
    volatile boolean first = true;

    @Override
    public void afterRound(EngineView engine) {
      if (first) {
        first = false;
        held.release();
        release.acquireUninterruptibly();
      }
    }
  }

  /**
   * Holds the loop twice in its first round: while it samples the first token (after it took the
   * queued requests in, before it published how many wait), then after the round.
   */
  private static final class HoldInAndAfterFirstRound implements EngineObserver {
    final Semaphore inRound = new Semaphore(0);
    final Semaphore continueRound = new Semaphore(0);
    final Semaphore afterRound = new Semaphore(0);
    final Semaphore continueLoop = new Semaphore(0);
    volatile boolean firstLogits = true;
    volatile boolean firstRound = true;

    @Override
    public boolean wantsLogits() {
      return true;
    }

    @Override
    public void onLogits(long requestId, int step, float[] logits) {
      if (firstLogits) {
        firstLogits = false;
        inRound.release();
        continueRound.acquireUninterruptibly();
      }
    }

    @Override
    public void afterRound(EngineView engine) {
      if (firstRound) {
        firstRound = false;
        afterRound.release();
        continueLoop.acquireUninterruptibly();
      }
    }
  }

  /**
   * The requests the loop takes in count against the bound from the moment it takes them, not only
   * from the end of the round: submitters that race with a round cannot fill the queue again while
   * the requests just taken are counted nowhere.
   */
  @Test
  void shouldHoldTheBoundWhileTheLoopTakesRequestsInDuringARound() throws Exception {
    CausalLm model = ContextModels.llama(dir);
    int maxQueued = 4;
    EngineConfig config = new EngineConfig(4, 2, 256, 4.0, 64, 1, 2, 1, maxQueued);
    HoldInAndAfterFirstRound hold = new HoldInAndAfterFirstRound();
    int[] prompt = {1, 2, 3, 4, 5, 6, 7, 8};
    List<RequestHandle> handles = new ArrayList<>();
    ExecutorService submitters = Executors.newFixedThreadPool(8);
    try (Engine e =
        Engine.start(EngineSettings.of(model, config).observer(hold).paused().conclude())) {
      try {
        for (int i = 0; i < maxQueued; i++) {
          handles.add(e.submit(prompt, SamplingParams.greedy(64)));
        }
        e.resume();
        assertTrue(hold.inRound.tryAcquire(30, TimeUnit.SECONDS), "the first round samples");
        // the round took the four in; eight threads submit at once while it runs
        AtomicInteger accepted = new AtomicInteger();
        CountDownLatch start = new CountDownLatch(1);
        List<Future<List<RequestHandle>>> tries = new ArrayList<>();
        for (int t = 0; t < 8; t++) {
          tries.add(
              submitters.submit(
                  () -> {
                    start.await();
                    List<RequestHandle> mine = new ArrayList<>();
                    for (int i = 0; i < 4; i++) {
                      try {
                        mine.add(e.submit(prompt, SamplingParams.greedy(2)));
                        accepted.incrementAndGet();
                      } catch (IntakeFullException full) {
                        // refused at the door: the bound
                      }
                    }
                    return mine;
                  }));
        }
        start.countDown();
        for (Future<List<RequestHandle>> f : tries) {
          handles.addAll(f.get(30, TimeUnit.SECONDS));
        }
        hold.continueRound.release();
        assertTrue(hold.afterRound.tryAcquire(30, TimeUnit.SECONDS), "the first round ended");
        EngineMetrics m = e.metrics();
        assertEquals(1, m.runningRequests(), "running after the first round");
        assertTrue(
            m.waitingRequests() <= maxQueued,
            "accepted and not running: "
                + m.waitingRequests()
                + " (of which "
                + accepted.get()
                + " accepted during the round) must not exceed max_queued="
                + maxQueued);
        assertEquals(
            0, accepted.get(), "the four taken in fill the bound until the round says one runs");
      } finally {
        hold.continueRound.release(); // never leave the loop held, even when a check failed
        hold.continueLoop.release();
        for (RequestHandle h : handles) {
          h.cancel();
        }
      }
    } finally {
      submitters.shutdownNow();
    }
  }

  @Test
  void shouldRefuseWhenMaxQueuedRequestsWaitInTheQueueAndTheScheduler() throws Exception {
    CausalLm model = ContextModels.llama(dir);
    int maxQueued = 4;
    EngineConfig config = new EngineConfig(4, 2, 256, 4.0, 64, 1, 2, 1, maxQueued);
    HoldAfterFirstRound hold = new HoldAfterFirstRound();
    int[] prompt = {1, 2, 3, 4, 5, 6, 7, 8};
    List<RequestHandle> handles = new ArrayList<>();
    try (Engine e =
        Engine.start(EngineSettings.of(model, config).observer(hold).paused().conclude())) {
      for (int i = 0; i < maxQueued; i++) {
        handles.add(e.submit(prompt, SamplingParams.greedy(64)));
      }
      e.resume();
      assertTrue(hold.held.tryAcquire(30, TimeUnit.SECONDS), "the first round ran");
      // the round took the four into the scheduler: one runs (max_running 1), three wait there
      EngineMetrics m = e.metrics();
      assertEquals(1, m.runningRequests(), "running after the first round");
      assertEquals(3, m.waitingRequests(), "waiting after the first round");
      handles.add(e.submit(prompt, SamplingParams.greedy(2))); // 3 waiting + 1 queued = 4
      IntakeFullException full =
          assertThrows(
              IntakeFullException.class,
              () -> e.submit(prompt, SamplingParams.greedy(2)),
              "with three waiting in the scheduler and one queued, a fifth is refused");
      assertTrue(full.getMessage().contains("intake is full (max_queued=4"), full.getMessage());
      hold.release.release();
      for (RequestHandle h : handles) {
        h.cancel();
      }
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      RequestHandle again = null;
      while (again == null && System.nanoTime() < deadline) {
        try {
          again = e.submit(prompt, SamplingParams.greedy(2));
        } catch (IntakeFullException stillFull) {
          Thread.sleep(10);
        }
      }
      assertTrue(again != null, "the door opens again once the others ended");
      assertEquals(
          2, again.result().get(30, TimeUnit.SECONDS).tokens().length, "and the request is served");
    }
  }
}

package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;
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

  @Test
  void shouldRefuseWhenMaxQueuedRequestsWaitInTheQueueAndTheScheduler() throws Exception {
    CausalLm model = ContextModels.llama(dir);
    int maxQueued = 4;
    int maxRunning = 1;
    EngineConfig config = new EngineConfig(4, 2, 256, 4.0, 64, maxRunning, 2, 1, maxQueued);
    List<RequestHandle> accepted = new ArrayList<>();
    int refused = 0;
    try (Engine e = Engine.start(model, config, OptionalInt.empty())) {
      int[] prompt = {1, 2, 3, 4, 5, 6, 7, 8};
      for (int i = 0; i < 40; i++) {
        try {
          accepted.add(e.submit(prompt, SamplingParams.greedy(200)));
        } catch (IllegalStateException full) {
          assertTrue(full.getMessage().contains("intake is full"), full.getMessage());
          refused++;
        }
        Thread.sleep(20); // rounds run: the loop takes the queue into the scheduler
      }
      // one runs; the others wait, in the queue or in the scheduler: at most max_queued of them,
      // plus what was offered between the loop's last count and its next round
      assertTrue(refused > 0, "an overload is refused at the door");
      assertTrue(
          accepted.size() <= maxRunning + 2 * maxQueued,
          accepted.size() + " requests accepted with max_running 1 and max_queued 4");
      EngineMetrics m = e.metrics();
      assertTrue(m.waitingRequests() <= 2 * maxQueued, "waiting requests: " + m.waitingRequests());
      for (RequestHandle h : accepted) {
        h.cancel();
      }
      long deadline = System.nanoTime() + 10_000_000_000L;
      while (e.metrics().runningRequests() + e.metrics().waitingRequests() > 0
          && System.nanoTime() < deadline) {
        Thread.sleep(10);
      }
      Thread.sleep(50); // a round after the last end publishes the count
      RequestHandle again = e.submit(prompt, SamplingParams.greedy(2));
      assertEquals(
          2,
          again.result().get(30, java.util.concurrent.TimeUnit.SECONDS).tokens().length,
          "the door opens again once they ended");
    }
  }
}

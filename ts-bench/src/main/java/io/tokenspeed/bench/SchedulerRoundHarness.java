package io.tokenspeed.bench;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.scheduler.ExecutionPlan;
import io.tokenspeed.scheduler.RoundInput;
import io.tokenspeed.scheduler.Scheduler;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.util.List;
import java.util.Locale;
import org.HdrHistogram.Histogram;

/**
 * The scheduler's cost per round with storage enabled versus disabled, in the same run, and the
 * cost of query planning against prompt length.
 *
 * <p>Rounds: 1,000 requests wait for a full Device (admission is attempted and fails every round)
 * and, with storage enabled, 200 more wait in Prefetching on queries carrying 10,000 keys in all.
 * The baseline has the same 1,200 requests waiting with storage disabled. Query planning: one
 * {@code prepare} of a cold prompt of 1k to 128k tokens (P = 64, three groups), keys hashed
 * beforehand.
 *
 * <pre>
 *   ./mvnw -q -pl ts-core,ts-cache,ts-l3,ts-scheduler,ts-bench -am package -DskipTests
 *   java -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.SchedulerRoundHarness
 * </pre>
 */
public final class SchedulerRoundHarness {

  private SchedulerRoundHarness() {}

  private static CacheCoordinator cache(CacheLayout layout) {
    return new CacheCoordinator(layout, 64, 200_000, 1024);
  }

  /** Rounds per second for one configuration; returns the histogram of round times in ns. */
  private static Histogram rounds(boolean storage, int rounds) {
    CacheLayout layout = BenchLayouts.threeGroups();
    CacheCoordinator cache = cache(layout);
    StorageConfig config = StorageConfig.defaults().withCredits(400, 0).withMinExtensionTokens(64);
    StorageTransferManager stm = storage ? new StorageTransferManager(config, cache) : null;
    Scheduler s = new Scheduler(cache, stm, new Scheduler.Config(256, 8, 16));
    long id = 1;
    // One long request fills the Device so that every other request waits.
    s.submit(id++, PromptKeys.of(layout, BenchLayouts.prompt(1_500, 1), List.of()), 400, false);
    long now = 0;
    ExecutionPlan first = s.round(RoundInput.tick(now));
    if (storage) { // the filler asks L3 first: nothing exists, so it is admitted next round
      java.util.List<io.tokenspeed.core.storage.AgreedCompletion> facts =
          new java.util.ArrayList<>();
      for (var op : first.storage()) {
        if (op instanceof io.tokenspeed.core.storage.StorageOp.Query q) {
          facts.add(
              new io.tokenspeed.core.storage.AgreedCompletion(
                  q.operationId(),
                  io.tokenspeed.core.storage.StorageKind.QUERY,
                  java.util.Collections.nCopies(
                      q.keys().size(), io.tokenspeed.core.storage.KeyOutcome.FAILED),
                  true,
                  false));
        }
      }
      s.onForwardDone(first);
      first = s.round(new RoundInput(++now, PressureSnapshot.IDLE, List.of(), facts, true, true));
    }
    // 200 requests whose queries ask 50 keys each: prompts of 13 pages -> 13*4 + window + ckpt.
    if (storage) {
      for (int i = 0; i < 200; i++) {
        s.submit(
            id++, PromptKeys.of(layout, BenchLayouts.prompt(800, 100 + i), List.of()), 8, false);
      }
      s.round(RoundInput.tick(++now));
    }
    for (int i = 0; i < (storage ? 1_000 : 1_200); i++) {
      s.submit(
          id++, PromptKeys.of(layout, BenchLayouts.prompt(200, 10_000 + i), List.of()), 8, false);
    }
    if (first.forward().isEmpty()) {
      throw new IllegalStateException("the filler request was not admitted");
    }
    // Let every new request consider L3 once (bypass or Prefetching) before timing.
    s.round(new RoundInput(++now, PressureSnapshot.IDLE, List.of(), List.of(), false, true));
    Histogram h = new Histogram(3);
    for (int r = 0; r < rounds; r++) {
      long t0 = System.nanoTime();
      ExecutionPlan p =
          s.round(new RoundInput(++now, PressureSnapshot.IDLE, List.of(), List.of(), true, true));
      long t = System.nanoTime() - t0;
      s.onForwardDone(p);
      h.recordValue(t);
    }
    if (storage && stm.operationsInUse() < 200) {
      throw new IllegalStateException("only " + stm.operationsInUse() + " queries outstanding");
    }
    return h;
  }

  private static long planOnce(int tokens, long seed) {
    CacheLayout layout = BenchLayouts.threeGroups();
    CacheCoordinator cache = cache(layout);
    StorageTransferManager stm =
        new StorageTransferManager(
            StorageConfig.defaults().withCredits(64, 0).withMinExtensionTokens(64), cache);
    PromptKeys prompt = PromptKeys.of(layout, BenchLayouts.prompt(tokens, seed), List.of());
    long t0 = System.nanoTime();
    StorageTransferManager.Preparation p = stm.prepare(1, prompt, true);
    long t = System.nanoTime() - t0;
    if (!p.waiting()) {
      throw new IllegalStateException("expected a query for " + tokens + " tokens: " + p.bypass());
    }
    return t;
  }

  public static void main(String[] args) {
    for (int warm = 0; warm < 3; warm++) {
      rounds(true, 200);
      rounds(false, 200);
    }
    Histogram on = rounds(true, 1_000);
    Histogram off = rounds(false, 1_000);
    System.out.println("| storage | rounds | p50 µs | p99 µs | mean µs |");
    System.out.println("|---|---:|---:|---:|---:|");
    for (var e :
        List.of(java.util.Map.entry("enabled", on), java.util.Map.entry("disabled", off))) {
      Histogram h = e.getValue();
      System.out.printf(
          Locale.ROOT,
          "| %s | %d | %.1f | %.1f | %.1f |%n",
          e.getKey(),
          h.getTotalCount(),
          h.getValueAtPercentile(50) / 1e3,
          h.getValueAtPercentile(99) / 1e3,
          h.getMean() / 1e3);
    }
    System.out.printf(
        Locale.ROOT,
        "storage overhead at p50: %.2fx of the disabled round%n",
        (double) on.getValueAtPercentile(50) / off.getValueAtPercentile(50));
    System.out.println();
    System.out.println("| prompt tokens | prepare p50 µs | µs per 1k tokens |");
    System.out.println("|---:|---:|---:|");
    for (int tokens : new int[] {1_024, 4_096, 16_384, 32_768, 65_536, 131_072}) {
      for (int i = 0; i < 5; i++) {
        planOnce(tokens, i); // warm
      }
      Histogram h = new Histogram(3);
      for (int i = 0; i < 15; i++) {
        h.recordValue(planOnce(tokens, 100 + i));
      }
      double p50 = h.getValueAtPercentile(50) / 1e3;
      System.out.printf(
          Locale.ROOT, "| %d | %.1f | %.2f |%n", tokens, p50, p50 / (tokens / 1024.0));
    }
  }
}

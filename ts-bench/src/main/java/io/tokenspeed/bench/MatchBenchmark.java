package io.tokenspeed.bench;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.Probe;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.cache.TierCache;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.PromptKeys;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

/**
 * Matching on a warm cache, hashing excluded (the prompt's keys are built once in setup): three
 * groups (full bg 16, window 1024 bg 32, state bg 64), P = 64, every block of the prompt's longest
 * page-aligned prefix published. {@code localMatch} is one hybrid match against the warm tier;
 * {@code probe} is the two-tier probe (a Device match, then Device and Host together), as admission
 * runs it. Divide by {@code numTokens / 64} pages and by 3 groups for ns per page per group.
 *
 * <pre>
 *   ./mvnw -q -pl ts-core,ts-cache,ts-bench -am package -DskipTests
 *   java -jar ts-bench/target/benchmarks.jar MatchBenchmark -f 1 -wi 3 -i 5
 * </pre>
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class MatchBenchmark {

  @Param({"8192", "32768"})
  int numTokens;

  @Param({"DEVICE", "HOST"})
  Tier warmTier;

  private CacheCoordinator cache;
  private PromptKeys keys;
  private int[] candidates;
  private int max;

  @Setup(Level.Trial)
  public void setUp() {
    CacheLayout layout = BenchLayouts.threeGroups();
    int[] tokens = BenchLayouts.prompt(numTokens + 1, 7);
    keys = PromptKeys.of(layout, tokens, List.of());
    max = keys.reusableBound();
    int pages = numTokens / 64;
    cache = new CacheCoordinator(layout, 4 * pages + 64, 4 * pages + 64, 1024);
    TierCache tier = cache.tier(warmTier);
    // Publish every Full row and every window row up to max, and a checkpoint at every page.
    for (int b = 64; b <= numTokens; b += 64) {
      for (CacheKey k : cache.neededKeys(keys, b)) {
        if (!tier.contains(k)) {
          int[] needs = new int[layout.numGroups()];
          needs[k.groupId()] = 1;
          int block = tier.allocate(needs)[k.groupId()][0];
          tier.publish(k, block);
          tier.unref(block);
        }
      }
    }
    candidates = cache.candidates(keys, 0, max);
    if (cache.probe(keys, max).hostHit() != numTokens) {
      throw new IllegalStateException("the warm cache must cover the whole aligned prefix");
    }
  }

  @Benchmark
  public int localMatch() {
    return cache.matchAssuming(keys, candidates, k -> false);
  }

  @Benchmark
  public Probe probe() {
    return cache.probe(keys, max);
  }
}

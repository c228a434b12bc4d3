package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.core.storage.CostFigures;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The cost model's decision against a brute-force reference: seeded random layouts, prompts, local
 * hits, chunk sizes and figures; the reference prices every boundary by walking the prefill chunk
 * by chunk and token by token and the restored rows one by one, independently of the model's closed
 * forms.
 */
class CostModelTest {

  static LongStream seeds() {
    return LongStream.range(0, 300);
  }

  /** One random situation: a layout, a prompt, its local hit and candidate boundaries. */
  record Situation(
      CacheLayout layout, int promptTokens, int local, int[] candidates, int tokenBudget) {}

  static CacheLayout layout(SplittableRandom rnd) {
    List<CacheGroupSpec> groups = new ArrayList<>();
    groups.add(
        new CacheGroupSpec(
            0,
            new GroupKind.FullHistory(),
            16,
            List.of(new CacheField("kv", 1 + rnd.nextInt(1 << 16))),
            rnd.nextBoolean() ? null : new Sharding.PageCyclic(1 + rnd.nextInt(4))));
    if (rnd.nextBoolean()) {
      groups.add(
          new CacheGroupSpec(
              groups.size(),
              new GroupKind.SlidingWindow(1 + rnd.nextInt(300)),
              32,
              List.of(new CacheField("kv", 1 + rnd.nextInt(1 << 16))),
              null));
    }
    if (rnd.nextBoolean()) {
      groups.add(
          new CacheGroupSpec(
              groups.size(),
              new GroupKind.StateCheckpoints(),
              64,
              List.of(new CacheField("ssm", 1 + rnd.nextInt(1 << 20))),
              null));
    }
    return new CacheLayout(64, "bf16", groups);
  }

  static Situation situation(SplittableRandom rnd) {
    CacheLayout layout = layout(rnd);
    int n = 2 + rnd.nextInt(rnd.nextBoolean() ? 600 : 20_000);
    int bound = n - 1;
    int local = rnd.nextInt(4) == 0 ? 0 : rnd.nextInt(bound) / 16 * 16;
    List<Integer> c = new ArrayList<>();
    c.add(local);
    for (int b = (local / 64 + 1) * 64; b <= bound; b += 64) {
      c.add(b);
    }
    if (bound % 64 != 0 && bound > local) {
      c.add(bound);
    }
    int[] cands = c.stream().mapToInt(Integer::intValue).toArray();
    return new Situation(layout, n, local, cands, 1 << (4 + rnd.nextInt(9)));
  }

  /** A value spread over several orders of magnitude. */
  static double logUniform(SplittableRandom rnd, double lo, double hi) {
    return lo * Math.pow(hi / lo, rnd.nextDouble());
  }

  static CostFigures figures(SplittableRandom rnd) {
    return new CostFigures(
        logUniform(rnd, 1e3, 1e8),
        logUniform(rnd, 1e6, 1e11),
        rnd.nextInt(3) == 0 ? 0 : logUniform(rnd, 1e3, 1e8),
        rnd.nextInt(3) == 0 ? 0 : logUniform(rnd, 1, 1e6),
        rnd.nextInt(3) == 0 ? 0 : logUniform(rnd, 1e-3, 1e3));
  }

  static CostModel model(Situation s, CostFigures f, int marginPercent) {
    StorageConfig config =
        StorageConfig.defaults()
            .withCostModel(true, marginPercent, StorageConfig.DEFAULT_COST_MODEL_EXPLORE_MS, 0);
    CostModel m = new CostModel(config, s.layout());
    m.tokenBudget(s.tokenBudget());
    m.onFigures(f);
    return m;
  }

  // ---------------------------------------------------------------- the brute-force reference

  /** The prefill of tokens [from, to), chunk by chunk and token by token. */
  static double refPrefill(CostFigures f, CacheLayout layout, int budget, int from, int to) {
    double ns = 0;
    for (int start = from; start < to; start += budget) {
      int end = Math.min(to, start + budget);
      ns += f.forwardNs();
      for (int i = start; i < end; i++) {
        ns += f.tokenNs() + f.pairNs() * refPairs(layout, i);
      }
    }
    return ns;
  }

  /**
   * The keys token {@code i} attends to, over the attention groups weighted by their bytes per
   * token: 0..i in a full-history group, the last W of them in a window, none in a state group.
   */
  static double refPairs(CacheLayout layout, int i) {
    double keys = 0;
    double total = 0;
    for (CacheGroupSpec g : layout.groups()) {
      double w = (double) g.bytesPerBlock() / g.blockGranularity();
      switch (g.kind()) {
        case GroupKind.FullHistory f -> keys += w * (i + 1);
        case GroupKind.SlidingWindow(int window) -> keys += w * Math.min(i + 1, window);
        case GroupKind.StateCheckpoints c -> w = 0;
      }
      total += w;
    }
    return total == 0 ? 0 : keys / total;
  }

  /** One owner's bytes from local to b, row by row: the rows b needs that the local hit lacks. */
  static double refBytes(CacheLayout layout, int local, int b) {
    double bytes = 0;
    for (CacheGroupSpec g : layout.groups()) {
      int shards = g.sharding() instanceof Sharding.PageCyclic pc ? pc.shardCount() : 1;
      int localRows = Math.ceilDiv(local, g.blockGranularity());
      for (int row = 0; row < Math.ceilDiv(b, g.blockGranularity()); row++) {
        if (row >= g.firstNeededRow(b) && row >= localRows) {
          bytes += (double) g.bytesPerBlock() / shards;
        }
      }
    }
    return bytes;
  }

  /** The expected time of restoring up to {@code b} ({@code b == local}: computing everything). */
  static double refCost(Situation s, CostFigures f, int margin, int b) {
    double compute = refPrefill(f, s.layout(), s.tokenBudget(), b, s.promptTokens());
    if (b == s.local()) {
      return compute;
    }
    double restore =
        2 * f.storeLatencyNs() + refBytes(s.layout(), s.local(), b) / f.storeBytesPerSecond() * 1e9;
    return restore * (1 + margin / 100.0) + compute;
  }

  // ---------------------------------------------------------------- properties

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldChooseTheBoundaryOfLeastExpectedTime(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    Situation s = situation(rnd);
    CostFigures f = figures(rnd);
    int margin = rnd.nextInt(50);
    int chosen = model(s, f, margin).chooseBoundary(s.promptTokens(), s.local(), s.candidates());
    double best = Double.MAX_VALUE;
    for (int b : s.candidates()) {
      best = Math.min(best, refCost(s, f, margin, b));
    }
    double got = refCost(s, f, margin, chosen);
    assertTrue(
        got <= best * (1 + 1e-9),
        "chose " + chosen + " at " + got + " ns, the best costs " + best + " ns");
    for (int b : s.candidates()) {
      if (b < chosen) {
        assertTrue(
            refCost(s, f, margin, b) > got * (1 - 1e-9),
            "a tie goes to the shorter boundary: " + b + " costs as little as " + chosen);
      }
    }
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldNeverBypassWhenRestoringIsClearlyFaster(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    Situation s = situation(rnd);
    int top = s.candidates()[s.candidates().length - 1];
    if (top == s.local()) {
      return; // nothing above the local hit to restore
    }
    CostFigures p = figures(rnd);
    double saved =
        refPrefill(p, s.layout(), s.tokenBudget(), s.local(), s.promptTokens())
            - refPrefill(p, s.layout(), s.tokenBudget(), top, s.promptTokens());
    if (saved <= 0) {
      p = new CostFigures(0, 0, 0, 1 + rnd.nextInt(1000), 0);
      saved =
          refPrefill(p, s.layout(), s.tokenBudget(), s.local(), s.promptTokens())
              - refPrefill(p, s.layout(), s.tokenBudget(), top, s.promptTokens());
    }
    // the whole restore at most a quarter of what it saves, margin included
    double bytes = refBytes(s.layout(), s.local(), top);
    CostFigures f =
        new CostFigures(
            saved / 64, bytes / (saved / 16) * 1e9, p.forwardNs(), p.tokenNs(), p.pairNs());
    CostModel m = model(s, f, 50);
    assertTrue(m.decides());
    int chosen = m.chooseBoundary(s.promptTokens(), s.local(), s.candidates());
    assertTrue(chosen > s.local(), "restoring " + bytes + " bytes pays; chose " + chosen);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldAlwaysBypassWhenRestoringIsClearlySlower(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    Situation s = situation(rnd);
    CostFigures p = figures(rnd);
    // the bandwidth at which every boundary's restore takes twice what it saves
    double nsPerByte = 0;
    for (int b : s.candidates()) {
      if (b > s.local()) {
        double saved =
            refPrefill(p, s.layout(), s.tokenBudget(), s.local(), s.promptTokens())
                - refPrefill(p, s.layout(), s.tokenBudget(), b, s.promptTokens());
        nsPerByte = Math.max(nsPerByte, 2 * saved / refBytes(s.layout(), s.local(), b));
      }
    }
    CostFigures f =
        new CostFigures(
            p.storeLatencyNs(),
            nsPerByte == 0 ? 1e9 : 1e9 / nsPerByte,
            p.forwardNs(),
            p.tokenNs(),
            p.pairNs());
    if (!f.prefillKnown()) {
      f = new CostFigures(f.storeLatencyNs(), f.storeBytesPerSecond(), 0, 1, 0);
    }
    int chosen =
        model(s, f, rnd.nextInt(20)).chooseBoundary(s.promptTokens(), s.local(), s.candidates());
    assertEquals(s.local(), chosen, "every restore is slower than computing");
  }

  /**
   * A partial restore: one token too many for one chunk of 256. Restoring the first page leaves the
   * rest to one forward instead of three; restoring more reads bytes that save nothing.
   */
  @Test
  void shouldRestoreOnlyThePagesThatSaveAForward() {
    CacheLayout layout = StmFixture.layout();
    int n = 2 * 256 + 1;
    int[] cands = {0, 64, 128, 192, 256, 320, 384, 448, 512};
    Situation s = new Situation(layout, n, 0, cands, 256);
    // a forward costs 1 s whatever it computes; reading a page costs 1 ms
    double pageBytes = refBytes(layout, 0, 64);
    CostFigures f = new CostFigures(0, pageBytes * 1000, 1e9, 0, 0);
    int chosen = model(s, f, 0).chooseBoundary(n, 0, cands);
    assertEquals(320, chosen, "the least restore that leaves one chunk: 193 tokens");
    assertTrue(chosen < cands[cands.length - 1], "partial");
  }

  @Test
  void shouldDecideNothingWhileOffOrUnmeasured() {
    CacheLayout layout = StmFixture.layout();
    CostFigures both = new CostFigures(1e3, 1e9, 1e6, 1e3, 1);
    CostModel off = new CostModel(StorageConfig.defaults().withCostModel(false), layout);
    off.onFigures(both);
    assertFalse(off.decides(), "off");
    CostModel on = new CostModel(StorageConfig.defaults().withCostModel(true), layout);
    assertFalse(on.decides(), "nothing measured");
    on.onFigures(new CostFigures(1e3, 0, 1e6, 1e3, 1));
    assertFalse(on.decides(), "the store not measured");
    on.onFigures(new CostFigures(1e3, 1e9, 0, 0, 0));
    assertFalse(on.decides(), "the prefill not measured");
    on.onFigures(both);
    assertTrue(on.decides());
    CostModel prior =
        new CostModel(StorageConfig.defaults().withCostModel(true, 10, 60_000, 500), layout);
    prior.onFigures(new CostFigures(0, 0, 1e6, 1e3, 1));
    assertTrue(prior.decides(), "a prior stands in for the store");
    assertEquals(500e6, prior.figures().storeBytesPerSecond());
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldExportTheBandwidthAtWhichRestoringTiesRecomputing(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    CacheLayout layout = layout(rnd);
    int r = 1 + rnd.nextInt(30_000);
    CostFigures p = figures(rnd);
    if (!p.prefillKnown()) {
      p = new CostFigures(p.storeLatencyNs(), p.storeBytesPerSecond(), 0, 1, 0);
    }
    int budget = 1 << (4 + rnd.nextInt(9));
    Situation s = new Situation(layout, r + 1, 0, new int[] {0, r}, budget);
    double breakEven = model(s, p, 0).breakEvenBytesPerSecond(r);
    double saved =
        refPrefill(p, layout, budget, 0, r + 1) - refPrefill(p, layout, budget, r, r + 1);
    if (saved <= 2 * p.storeLatencyNs()) {
      assertEquals(Double.POSITIVE_INFINITY, breakEven, "the latency alone costs more");
      return;
    }
    CostFigures atBreakEven =
        new CostFigures(p.storeLatencyNs(), breakEven, p.forwardNs(), p.tokenNs(), p.pairNs());
    assertEquals(
        refCost(s, atBreakEven, 0, 0),
        refCost(s, atBreakEven, 0, r),
        1e-6 * refCost(s, atBreakEven, 0, 0),
        "at the break-even bandwidth both paths take as long");
  }

  @Test
  void shouldHaveNoBreakEvenBeforeThePrefillIsMeasured() {
    CostModel m = new CostModel(StorageConfig.defaults().withCostModel(true), StmFixture.layout());
    assertTrue(Double.isNaN(m.breakEvenBytesPerSecond(8192)));
    m.onFigures(new CostFigures(0, 0, 0, 100, 0));
    assertTrue(m.breakEvenBytesPerSecond(8192) > 0, "before the store: latency 0");
  }
}

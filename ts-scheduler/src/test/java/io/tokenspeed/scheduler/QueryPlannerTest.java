package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.cache.TierCache;
import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.stream.LongStream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The linear planner against the rule applied literally, boundary by boundary, over random cases.
 */
class QueryPlannerTest {

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 6).map(i -> 0x9E0_0000L + i * 7_919);
  }

  /** The specification's rule, evaluated from scratch at every boundary (quadratic). */
  private static List<CacheKey> reference(
      CacheCoordinator cache, PromptKeys prompt, int[] cands, Set<CacheKey> negative, int max) {
    LinkedHashSet<CacheKey> chosen = new LinkedHashSet<>();
    for (int i = cands.length - 1; i >= 1; i--) {
      List<CacheKey> missing = cache.missingKeys(prompt, cands[i]);
      if (missing.stream().anyMatch(negative::contains)) {
        continue;
      }
      List<CacheKey> add = missing.stream().filter(k -> !chosen.contains(k)).distinct().toList();
      if (!add.isEmpty() && chosen.size() + add.size() <= max) {
        chosen.addAll(add);
      }
    }
    return new ArrayList<>(chosen);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldChooseExactlyTheKeysTheRuleChooses(long seed) {
    Random rnd = new Random(seed);
    int nonEmpty = 0;
    for (int c = 0; c < 200; c++) {
      int p = 1 << (2 + rnd.nextInt(4));
      List<CacheGroupSpec> groups = new ArrayList<>();
      int n = 1 + rnd.nextInt(3);
      for (int g = 0; g < n; g++) {
        int bg = p >> rnd.nextInt(Integer.numberOfTrailingZeros(p) + 1);
        GroupKind kind =
            switch (rnd.nextInt(3)) {
              case 0 -> new GroupKind.FullHistory();
              case 1 -> new GroupKind.SlidingWindow(1 + rnd.nextInt(3 * p));
              default -> new GroupKind.StateCheckpoints();
            };
        groups.add(new CacheGroupSpec(g, kind, bg, List.of(new CacheField("f", 8)), null));
      }
      CacheLayout layout = new CacheLayout(p, "bf16", groups);
      CacheCoordinator cache = new CacheCoordinator(layout, 64, 4096, 16);
      int[] tokens = StmFixture.tokens(2 + rnd.nextInt(8 * p), c);
      PromptKeys prompt = PromptKeys.of(layout, tokens, List.of());
      int bound = prompt.reusableBound();
      // Some blocks are local, some confirmed missing.
      List<CacheKey> all = cache.neededKeys(prompt, bound);
      Set<CacheKey> negative = new HashSet<>();
      TierCache host = cache.tier(Tier.HOST);
      for (CacheKey k : all) {
        int roll = rnd.nextInt(10);
        if (roll < 3 && !host.contains(k)) {
          int[] needs = new int[layout.numGroups()];
          needs[k.groupId()] = 1;
          int b = host.allocate(needs)[k.groupId()][0];
          host.publish(k, b);
          host.unref(b);
        } else if (roll == 3) {
          negative.add(k);
        }
      }
      int floor = rnd.nextInt(bound + 1);
      floor -= floor % p;
      int[] cands = cache.candidates(prompt, floor, bound);
      int max = 1 + rnd.nextInt(3 * all.size() + 1);
      List<CacheKey> expected = reference(cache, prompt, cands, negative, max);
      List<CacheKey> actual =
          QueryPlanner.plan(
              prompt, cands, k -> cache.device().contains(k) || host.contains(k), negative, max);
      assertEquals(
          new HashSet<>(expected),
          new HashSet<>(actual),
          "case " + c + " seed " + seed + " " + layout);
      assertEquals(expected.size(), actual.size(), "no duplicates");
      nonEmpty += expected.isEmpty() ? 0 : 1;
    }
    assertTrue(nonEmpty > 50, "the cases must ask for something: " + nonEmpty);
  }
}

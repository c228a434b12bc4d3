package io.tokenspeed.bench;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import java.util.List;
import java.util.SplittableRandom;

/** The layout and prompts the cache benchmarks share. */
final class BenchLayouts {
  private BenchLayouts() {}

  /** P = 64 with three groups: full history (bg 16), a 1024-token window (bg 32), state (bg 64). */
  static CacheLayout threeGroups() {
    return new CacheLayout(
        64,
        "bf16",
        List.of(
            new CacheGroupSpec(
                0, new GroupKind.FullHistory(), 16, List.of(new CacheField("kv", 4096)), null),
            new CacheGroupSpec(
                1,
                new GroupKind.SlidingWindow(1024),
                32,
                List.of(new CacheField("kv", 8192)),
                null),
            new CacheGroupSpec(
                2,
                new GroupKind.StateCheckpoints(),
                64,
                List.of(new CacheField("ssm", 16384)),
                null)));
  }

  /** A prompt of random token ids below a 150k vocabulary, fixed by the seed. */
  static int[] prompt(int numTokens, long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int[] t = new int[numTokens];
    for (int i = 0; i < numTokens; i++) {
      t[i] = rnd.nextInt(150_000);
    }
    return t;
  }
}

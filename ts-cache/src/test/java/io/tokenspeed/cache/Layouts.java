package io.tokenspeed.cache;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import java.util.ArrayList;
import java.util.List;

/** Layouts for cache tests. */
final class Layouts {
  private Layouts() {}

  static CacheGroupSpec full(int id, int bg, long bytes) {
    return new CacheGroupSpec(
        id, new GroupKind.FullHistory(), bg, List.of(new CacheField("kv", bytes)), null);
  }

  static CacheGroupSpec swa(int id, int window, int bg, long bytes) {
    return new CacheGroupSpec(
        id, new GroupKind.SlidingWindow(window), bg, List.of(new CacheField("kv", bytes)), null);
  }

  static CacheGroupSpec state(int id, int bg, long bytes) {
    return new CacheGroupSpec(
        id, new GroupKind.StateCheckpoints(), bg, List.of(new CacheField("ssm", bytes)), null);
  }

  /** P=64 with granularities 16, 32 and 64: full, SWA (window 80) and state. */
  static CacheLayout mixed() {
    return new CacheLayout(
        64,
        "bf16",
        new ArrayList<>(List.of(full(0, 16, 64), swa(1, 80, 32, 128), state(2, 64, 256))));
  }

  static int[] tokens(int n, int seed) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = Math.floorMod(i * 7919 + seed * 104729, 32000);
    }
    return t;
  }
}

package io.tokenspeed.core;

import java.util.List;

/** Small layouts and identities shared by the core tests. */
final class TestLayouts {
  private TestLayouts() {}

  static CacheGroupSpec full(int id, int bg, long bytes) {
    return new CacheGroupSpec(
        id, new GroupKind.FullHistory(), bg, List.of(new CacheField("kv", bytes)), null);
  }

  static CacheLayout hybrid() {
    return new CacheLayout(
        64,
        "bf16",
        List.of(
            full(0, 16, 4096),
            new CacheGroupSpec(
                1,
                new GroupKind.SlidingWindow(128),
                32,
                List.of(new CacheField("k", 2048), new CacheField("v", 2048)),
                new Sharding.HeadPartitioned()),
            new CacheGroupSpec(
                2,
                new GroupKind.StateCheckpoints(),
                64,
                List.of(new CacheField("ssm", 8192)),
                new Sharding.Replicated())));
  }

  static DeploymentIdentity identity(CacheLayout layout) {
    return new DeploymentIdentity(
        "tiny-hybrid", "rev-1", "w1", null, null, layout, 2, 1, 1, 1, "cpu-reference");
  }
}

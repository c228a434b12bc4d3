package io.tokenspeed.engine.l3;

import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.scheduler.StorageConfig;

/**
 * The scheduler's read-only storage contract (credits, deadlines, pressure watermarks) plus the
 * executor's worker counts, queue bounds and health settings: everything the JSON {@code async}
 * object tunes.
 */
public record StorageRuntimeConfig(StorageConfig scheduling, L3ExecutorConfig executor) {
  public StorageRuntimeConfig {
    if (scheduling == null || executor == null) {
      throw new IllegalArgumentException(
          "the storage scheduling and executor settings are both required");
    }
  }

  /** Every documented default. */
  public static StorageRuntimeConfig defaults() {
    return new StorageRuntimeConfig(StorageConfig.defaults(), L3ExecutorConfig.defaults());
  }
}

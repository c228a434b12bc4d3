package io.tokenspeed.engine.l3;

import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.scheduler.StorageConfig;

/**
 * What an engine needs to put L3 under its Host tier: the store client (the engine owns it from
 * then on and closes it through the executor), the scheduling contract (credits, deadlines,
 * pressure watermarks) and the executor's workers, queues and health settings.
 *
 * @param store the backend client, not yet registered with any Host allocation
 * @param scheduling the scheduler's read-only storage contract
 * @param executor the executor's worker counts, queue bounds and health settings
 * @param attentionBackend the attention implementation named in the deployment identity
 */
public record L3Settings(
    Store store, StorageConfig scheduling, L3ExecutorConfig executor, String attentionBackend) {

  /** The attention implementation of this engine's CPU kernels, as the identity names it. */
  public static final String CPU_ATTENTION_BACKEND = "cpu-reference";

  public L3Settings {
    if (store == null) {
      throw new IllegalArgumentException("an L3 store is required");
    }
    if (scheduling == null || executor == null) {
      throw new IllegalArgumentException(
          "the storage scheduling and executor settings are required");
    }
    if (attentionBackend == null || attentionBackend.isBlank()) {
      throw new IllegalArgumentException("attention_backend is required");
    }
  }

  /** Every default, over {@code store}. */
  public static L3Settings defaults(Store store) {
    return new L3Settings(
        store, StorageConfig.defaults(), L3ExecutorConfig.defaults(), CPU_ATTENTION_BACKEND);
  }
}

package io.tokenspeed.engine.l3;

import io.tokenspeed.l3.spi.Store;

/**
 * What an engine needs to put L3 under its Host tier: the store client (the engine owns it from
 * then on and closes it through the executor), the runtime settings (the scheduler's storage
 * contract and the executor's) and the attention implementation the deployment identity names.
 *
 * @param store the backend client, not yet registered with any Host allocation
 * @param runtime the scheduling contract and the executor's workers, queues and health settings
 * @param attentionBackend the attention implementation named in the deployment identity
 */
public record L3Settings(Store store, StorageRuntimeConfig runtime, String attentionBackend) {

  /** The attention implementation of this engine's CPU kernels, as the identity names it. */
  public static final String CPU_ATTENTION_BACKEND = "cpu-reference";

  public L3Settings {
    if (store == null) {
      throw new IllegalArgumentException("an L3 store is required");
    }
    if (runtime == null) {
      throw new IllegalArgumentException("the storage runtime settings are required");
    }
    if (attentionBackend == null || attentionBackend.isBlank()) {
      throw new IllegalArgumentException("attention_backend is required");
    }
  }

  /** Opens {@code backend}'s client, with the CPU kernels' attention backend. */
  public static L3Settings open(StorageBackend backend, StorageRuntimeConfig runtime)
      throws Exception {
    return new L3Settings(backend.open(), runtime, CPU_ATTENTION_BACKEND);
  }
}

package io.tokenspeed.engine.kvevents;

/** The tier a KV event is about: where the page is (or was) held. */
public enum KvMedium {
  /** L1, the Device tier (GPU memory, or the CPU backend's Device arena). */
  DEVICE,
  /** L2, the Host tier. */
  HOST,
  /** L3, the store shared by every replica of the deployment. */
  STORAGE
}

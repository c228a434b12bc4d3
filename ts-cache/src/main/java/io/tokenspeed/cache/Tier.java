package io.tokenspeed.cache;

/** The two local cache tiers the coordinator owns. */
public enum Tier {
  /** L1: the accelerator's memory (a CPU arena in the reference engine). */
  DEVICE,
  /** L2: the shared off-heap Host allocation of this rank. */
  HOST
}

package io.tokenspeed.engine;

/**
 * How one engine replica (TP = 1) is sized.
 *
 * @param prefixGranularity P: tokens per content page, the unit of reuse
 * @param blockGranularity tokens per attention block (a divisor of P)
 * @param deviceParents Device capacity in LCM parents
 * @param hostRatio Host capacity as a multiple of the Device's (whole parents, at least one)
 * @param tokenBudget most tokens one forward batch computes (chunked prefill above it)
 * @param maxRunning most admitted requests at once
 * @param demoteBelowFreeParents cached Device blocks move to the Host while fewer Device parents
 *     are free
 * @param computeThreads threads of the forward pass
 * @param maxQueued most requests accepted and not running yet: those in the intake queue and those
 *     the loop holds waiting for admission; {@link Engine#submit} refuses more
 */
public record EngineConfig(
    int prefixGranularity,
    int blockGranularity,
    int deviceParents,
    double hostRatio,
    int tokenBudget,
    int maxRunning,
    int demoteBelowFreeParents,
    int computeThreads,
    int maxQueued) {

  public EngineConfig {
    if (prefixGranularity < 1
        || blockGranularity < 1
        || prefixGranularity % blockGranularity != 0) {
      throw new IllegalArgumentException(
          "prefix_granularity="
              + prefixGranularity
              + " must be a positive multiple of block_granularity="
              + blockGranularity);
    }
    if (deviceParents < 2) {
      throw new IllegalArgumentException("device_parents=" + deviceParents + " must be >= 2");
    }
    if (!(hostRatio > 0) || Double.isInfinite(hostRatio)) {
      throw new IllegalArgumentException("host_ratio=" + hostRatio + " must be finite and > 0");
    }
    if (tokenBudget < 1 || maxRunning < 1 || computeThreads < 1 || maxQueued < 1) {
      throw new IllegalArgumentException(
          "token_budget="
              + tokenBudget
              + ", max_running="
              + maxRunning
              + ", compute_threads="
              + computeThreads
              + " and max_queued="
              + maxQueued
              + " must be >= 1");
    }
    if (demoteBelowFreeParents < 0) {
      throw new IllegalArgumentException(
          "demote_below_free_parents=" + demoteBelowFreeParents + " must be >= 0");
    }
  }

  /** A small default: P = 64, 16-token blocks, a 512-token budget, every core. */
  public static EngineConfig defaults(int deviceParents) {
    return new EngineConfig(
        64,
        16,
        deviceParents,
        2.0,
        512,
        16,
        Math.max(1, deviceParents / 8),
        Runtime.getRuntime().availableProcessors(),
        1024);
  }

  public EngineConfig withComputeThreads(int threads) {
    return new EngineConfig(
        prefixGranularity,
        blockGranularity,
        deviceParents,
        hostRatio,
        tokenBudget,
        maxRunning,
        demoteBelowFreeParents,
        threads,
        maxQueued);
  }
}

package io.tokenspeed.server.cli;

/**
 * What one concurrency level of {@code bench serve --mode throughput} served, set against what the
 * engine's forward pass alone would have delivered at the same batch. The figures are deltas over
 * the level: the tokens the clients received, the level's wall time, and the engine's {@link
 * io.tokenspeed.engine.EngineStats} (rounds, forward and round nanoseconds) and the process's CPU
 * time between its start and its end.
 *
 * <pre>
 *   served tokens/s   = output tokens / wall
 *   mean batch        = output tokens / rounds       every round counts, those that prefilled too
 *   forward per round = forward ns / rounds          the model's forward pass alone
 *   raw tokens/s      = mean batch / forward per round
 *                     = output tokens / forward ns
 *   served / raw      = forward ns / wall            the share of the wall inside the forward
 * </pre>
 *
 * <p>The mean batch is an approximation of the decode batch: a round that prefilled (or ran no
 * forward) counts as a round and a prompt's first token counts as output, so a level whose requests
 * prefill often reads a batch below the clients decoding together. Raw throughput divides it out
 * again: it is the output over the forward time, whatever the batches were, so served ÷ raw is the
 * fraction of the level's wall time that the forward pass took; the rest went to the loop's own
 * work (intake, scheduling, sampling, logprobs), to HTTP and to the clients.
 *
 * @param outputTokens tokens the clients received over the level
 * @param wallNs the level's wall time, the first request sent to the last one's end (positive)
 * @param rounds the engine's rounds over the level
 * @param forwardNanos of the rounds' time, the part inside the model's forward pass
 * @param roundNanos the rounds' time (idle waits excluded)
 * @param copyWaitNanos of the rounds' time outside the forward pass, the part the loop spent
 *     waiting for Device/Host copies
 * @param cpuNanos the process's CPU time over the level, or {@code -1} where the JVM cannot say
 */
record ServedThroughput(
    long outputTokens,
    long wallNs,
    long rounds,
    long forwardNanos,
    long roundNanos,
    long copyWaitNanos,
    long cpuNanos) {

  ServedThroughput {
    if (outputTokens < 0
        || wallNs <= 0
        || rounds < 0
        || forwardNanos < 0
        || roundNanos < 0
        || copyWaitNanos < 0) {
      throw new IllegalArgumentException(
          "outputTokens="
              + outputTokens
              + " wallNs="
              + wallNs
              + " rounds="
              + rounds
              + " forwardNanos="
              + forwardNanos
              + " roundNanos="
              + roundNanos
              + " copyWaitNanos="
              + copyWaitNanos
              + ": counts must be >= 0 and the wall time > 0");
    }
    if (cpuNanos < -1) {
      throw new IllegalArgumentException("cpuNanos=" + cpuNanos + " must be >= 0, or -1");
    }
  }

  /** Output tokens per second of wall time. */
  double servedTokensPerS() {
    return outputTokens / (wallNs / 1e9);
  }

  /** The mean forward pass per round, ms; NaN without rounds. */
  double forwardMsPerRound() {
    return rounds == 0 ? Double.NaN : forwardNanos / 1e6 / rounds;
  }

  /** The mean round, ms; NaN without rounds. */
  double roundMs() {
    return rounds == 0 ? Double.NaN : roundNanos / 1e6 / rounds;
  }

  /** The loop's mean wait for Device/Host copies per round, ms; NaN without rounds. */
  double copyWaitMsPerRound() {
    return rounds == 0 ? Double.NaN : copyWaitNanos / 1e6 / rounds;
  }

  /**
   * Output tokens per round: the decode batch, approximately (see the class); NaN without rounds.
   */
  double meanBatch() {
    return rounds == 0 ? Double.NaN : (double) outputTokens / rounds;
  }

  /**
   * The tokens per second the forward pass alone would deliver at the mean batch: the mean batch
   * over the mean forward per round; NaN without forward time.
   */
  double rawTokensPerS() {
    return forwardNanos == 0 ? Double.NaN : meanBatch() / (forwardMsPerRound() / 1e3);
  }

  /** Served over raw tokens per second: the share of the wall time inside the forward pass. */
  double servedOverRaw() {
    return servedTokensPerS() / rawTokensPerS();
  }

  /** The process's CPU time over the wall time, in percent of one core; NaN where unknown. */
  double hostCpuPercent() {
    return cpuNanos < 0 ? Double.NaN : 100.0 * cpuNanos / wallNs;
  }
}

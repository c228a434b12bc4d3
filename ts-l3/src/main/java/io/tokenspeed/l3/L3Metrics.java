package io.tokenspeed.l3;

import java.util.Map;

/**
 * A point-in-time snapshot of the executor's rank-local counters and gauges; plain values, for an
 * exporter to publish. It carries no request ids and no object keys. Metrics never feed decisions.
 *
 * @param query QUERY counters and gauges
 * @param get GET counters and gauges
 * @param put PUT counters and gauges
 * @param healthState HEALTHY, COOLDOWN or PROBING
 * @param healthEpoch advances on every outage signal
 * @param outages outage signals seen
 * @param unprovenRetirements jobs whose retirement is unknown (quarantined)
 * @param quarantined whether the executor refuses all new work
 * @param backendCalls store invocations
 * @param putsNewlyWritten PUT rows the store created
 * @param putsAlreadyExisted PUT rows that found the object already there (idempotent success)
 * @param rejections submissions rejected, by {@link SubmitResult} name
 * @param workerFaults throwables caught around store calls (configuration failures excluded)
 * @param configurationFailures store calls the backend refused because of the deployment's
 *     configuration ({@link io.tokenspeed.l3.spi.StoreConfigurationException}); never outages
 * @param lastConfigurationFailure the message of the latest of them, or empty
 * @param queuedRejectedByOutage queued jobs completed as rejected, without a store call, because an
 *     outage was recorded before a worker took them
 * @param writesRefused whether the store refuses writes: its latest PUT call that refused or wrote
 *     a row refused one for capacity (no space; not an outage, see {@code WriteRefusals})
 * @param refusedPutKeys PUT rows the store refused for capacity
 * @param writesRefusedReason the store's reason for the refusal that started the current refusing
 *     state (e.g. Redis's {@code OOM} reply); empty while writes are accepted
 */
public record L3Metrics(
    Kind query,
    Kind get,
    Kind put,
    String healthState,
    long healthEpoch,
    long outages,
    long unprovenRetirements,
    boolean quarantined,
    long backendCalls,
    long putsNewlyWritten,
    long putsAlreadyExisted,
    Map<String, Long> rejections,
    long workerFaults,
    long configurationFailures,
    String lastConfigurationFailure,
    long queuedRejectedByOutage,
    boolean writesRefused,
    long refusedPutKeys,
    String writesRefusedReason) {

  public L3Metrics {
    rejections = Map.copyOf(rejections);
    lastConfigurationFailure = lastConfigurationFailure == null ? "" : lastConfigurationFailure;
    writesRefusedReason = writesRefusedReason == null ? "" : writesRefusedReason;
  }

  /**
   * Counters and gauges of one kind.
   *
   * @param jobs jobs that finished a store call (or skipped it: nothing owned)
   * @param keys rows of those jobs
   * @param okKeys rows with outcome OK
   * @param payloadBytes successful payload bytes (adapter bytes, not wire bytes)
   * @param queueNanos cumulative time jobs waited for a worker
   * @param backendNanos cumulative time inside store calls
   * @param queuedJobs jobs waiting now
   * @param queuedBytes their payload bytes
   * @param runningJobs jobs inside a store call now
   * @param runningBytes their payload bytes
   * @param completedJobs finished jobs whose records were not polled yet
   * @param completedBytes their payload bytes
   */
  public record Kind(
      long jobs,
      long keys,
      long okKeys,
      long payloadBytes,
      long queueNanos,
      long backendNanos,
      int queuedJobs,
      long queuedBytes,
      int runningJobs,
      long runningBytes,
      int completedJobs,
      long completedBytes) {}
}

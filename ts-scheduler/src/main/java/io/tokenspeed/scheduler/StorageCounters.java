package io.tokenspeed.scheduler;

import java.util.EnumMap;
import java.util.Map;

/**
 * The scheduler's L3 counters and gauges (values only; an exporter publishes them). Scheduler
 * values are mirrored on every TP owner and must not be summed across owners. They never feed a
 * decision.
 */
public final class StorageCounters {

  /** Why a backup candidate key was dropped ({@code tokenspeed:l3_dropped_backup_keys}). */
  public enum DropReason {
    /** The pressure gate closed on it, or was closed when it was offered or refused. */
    PRESSURE,
    /** The bounded candidate queue (held-back refusals included) dropped its oldest entry. */
    OVERFLOW,
    /** Its Host data was gone at dispatch, or the engine could not copy it to the Host. */
    UNAVAILABLE,
    /**
     * Writes are disabled: no backup budget, or quarantine (which stops new L3 work until restart;
     * the quarantine gauges tell the two apart).
     */
    DISABLED,
    /** A clear or a frozen round's cleanup discarded it. */
    CLEANUP,
    /**
     * The store refused it (a retired refusal) as many times as a key may be tried, probes aside: a
     * page the store keeps refusing while it takes others.
     */
    REFUSED
  }

  long softTimeouts;
  long readyExpired;
  long clientDetaches;
  long satisfiedLocally;
  long pressureBypasses;
  final Map<Bypass, Long> bypasses = new EnumMap<>(Bypass.class);
  long partialRestores;
  long costExplorations;
  long restoresAbandoned;
  long queriesIssued;
  long getsIssued;
  long earlyH2dGets;
  long earlyH2dSkipped;
  long earlyH2dBlocks;
  long putsIssued;
  long publishedBlocks;
  long negativeFacts;
  final Map<DropReason, Long> droppedBackupKeys = new EnumMap<>(DropReason.class);

  void bypass(Bypass reason) {
    bypasses.merge(reason, 1L, Long::sum);
  }

  void drop(DropReason reason, long keys) {
    droppedBackupKeys.merge(reason, keys, Long::sum);
  }

  public long softTimeouts() {
    return softTimeouts;
  }

  public long readyExpired() {
    return readyExpired;
  }

  /** Waits ended by the request itself (abort, admission of a waiting request): neither counter. */
  public long clientDetaches() {
    return clientDetaches;
  }

  /** Waits ended early because another request's local publication covered them. */
  public long satisfiedLocally() {
    return satisfiedLocally;
  }

  public long pressureBypasses() {
    return pressureBypasses;
  }

  /**
   * Requests whose preparation ended in {@code reason} (never {@link Bypass#NOT_PERMITTED}, which
   * is tried again): each request counted once, by the reason that sent it to ordinary admission.
   */
  public long bypasses(Bypass reason) {
    return bypasses.getOrDefault(reason, 0L);
  }

  /**
   * Queries the cost model shortened to a partial restore: the first blocks from L3, the rest
   * computed.
   */
  public long partialRestores() {
    return partialRestores;
  }

  /**
   * Queries issued although the cost model expected recomputing to be faster, because no restore
   * was issued for {@code async.cost_model_explore_ms}: the store is measured again.
   */
  public long costExplorations() {
    return costExplorations;
  }

  /**
   * Restores whose requests stopped waiting on a GET under way because new cost figures (a store
   * that read slower than expected) made recomputing the prefix faster than waiting for the rest.
   */
  public long restoresAbandoned() {
    return restoresAbandoned;
  }

  public long queriesIssued() {
    return queriesIssued;
  }

  public long getsIssued() {
    return getsIssued;
  }

  /** GETs issued with early Device destinations (copied to the Device as their rows land). */
  public long earlyH2dGets() {
    return earlyH2dGets;
  }

  /** GETs issued without them because the Device had no room. */
  public long earlyH2dSkipped() {
    return earlyH2dSkipped;
  }

  /** Device blocks published by GETs' early copies (Device entries admission needs not load). */
  public long earlyH2dBlocks() {
    return earlyH2dBlocks;
  }

  public long putsIssued() {
    return putsIssued;
  }

  public long publishedBlocks() {
    return publishedBlocks;
  }

  public long negativeFacts() {
    return negativeFacts;
  }

  public long droppedBackupKeys(DropReason reason) {
    return droppedBackupKeys.getOrDefault(reason, 0L);
  }

  /** Every counter by name (diagnostics and test messages). */
  @Override
  public String toString() {
    return "queries="
        + queriesIssued
        + " gets="
        + getsIssued
        + " early_h2d_gets="
        + earlyH2dGets
        + " early_h2d_skipped="
        + earlyH2dSkipped
        + " early_h2d_blocks="
        + earlyH2dBlocks
        + " puts="
        + putsIssued
        + " published="
        + publishedBlocks
        + " negative="
        + negativeFacts
        + " soft_timeouts="
        + softTimeouts
        + " ready_expired="
        + readyExpired
        + " satisfied_locally="
        + satisfiedLocally
        + " pressure_bypasses="
        + pressureBypasses
        + " bypasses="
        + bypasses
        + " partial_restores="
        + partialRestores
        + " cost_explorations="
        + costExplorations
        + " restores_abandoned="
        + restoresAbandoned
        + " dropped="
        + droppedBackupKeys;
  }
}

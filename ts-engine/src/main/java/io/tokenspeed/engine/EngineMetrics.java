package io.tokenspeed.engine;

import io.tokenspeed.core.storage.CostFigures;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.scheduler.Bypass;
import io.tokenspeed.scheduler.CostModel;
import io.tokenspeed.scheduler.StorageCounters;
import io.tokenspeed.scheduler.StorageCounters.DropReason;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.util.Collections;
import java.util.EnumMap;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.TreeMap;

/**
 * A snapshot of the engine's gauges and L3 counters that the loop thread publishes for an exporter
 * ({@link Engine#metrics}); plain immutable values, safe to read from any thread. Reading one
 * touches no loop state, consumes no health probe and feeds no decision. It carries no request id
 * and no object key.
 *
 * <p>When the loop takes one: after a round, at most once a second; and, whatever the time since
 * the last, after the round in which the loop turns idle (no request running or waiting) or busy
 * again, and after the round in which storage turns pending or idle. An idle loop that ran rounds
 * since its last snapshot (housekeeping, a clear) takes one more at most a second later, so an idle
 * engine's gauges read idle. So two consecutive snapshots are at least a second apart unless {@link
 * #idle} or {@link Storage#pending} differs between them.
 *
 * <p>Tier usage counts LCM parents, the unit in which the cache coordinator counts free space and
 * every credit charges (one referenced child pins its whole parent):
 *
 * <pre>
 *   totalParents = usedParents + cachedParents + freeParents
 *     used    at least one block referenced (requests, copies, storage operations, Ready holds)
 *     cached  claimed by a group, holding only cached blocks no one references (reclaimable)
 *     free    claimed by no group
 * </pre>
 *
 * @param timeNs when the snapshot was taken ({@link System#nanoTime})
 * @param runningRequests admitted requests: those holding Device blocks (Prefilling, PrefillDone,
 *     Decoding)
 * @param waitingRequests the other requests the engine holds: in the intake queue, waiting for
 *     admission, for L3 or after a retraction
 * @param device the Device tier's usage
 * @param host the Host tier's usage
 * @param storage L3's figures; empty without a storage backend
 */
public record EngineMetrics(
    long timeNs,
    int runningRequests,
    int waitingRequests,
    TierUsage device,
    TierUsage host,
    Optional<Storage> storage) {

  public EngineMetrics {
    if (runningRequests < 0 || waitingRequests < 0) {
      throw new IllegalArgumentException(
          "running_requests="
              + runningRequests
              + " waiting_requests="
              + waitingRequests
              + " must be >= 0");
    }
    Objects.requireNonNull(device, "device");
    Objects.requireNonNull(host, "host");
    Objects.requireNonNull(storage, "storage");
  }

  /** No request running or waiting. */
  public boolean idle() {
    return runningRequests == 0 && waitingRequests == 0;
  }

  /**
   * One tier's parents (see the class essay).
   *
   * @param totalParents the tier's parents
   * @param usedParents parents holding at least one referenced block
   * @param freeParents parents claimed by no group
   */
  public record TierUsage(int totalParents, int usedParents, int freeParents) {
    public TierUsage {
      if (totalParents < 0
          || usedParents < 0
          || freeParents < 0
          || (long) usedParents + freeParents > totalParents) {
        throw new IllegalArgumentException(
            "total_parents="
                + totalParents
                + " used_parents="
                + usedParents
                + " free_parents="
                + freeParents
                + ": each must be >= 0 and used + free <= total");
      }
    }

    /** Parents holding only cached blocks: claimed, but reclaimable by eviction. */
    public int cachedParents() {
      return totalParents - usedParents - freeParents;
    }

    /** The used fraction of the tier, in [0, 1] (0 for a tier without parents). */
    public double usedFraction() {
      return totalParents == 0 ? 0 : (double) usedParents / totalParents;
    }
  }

  /**
   * L3's figures: the executor's (rank-local I/O) and the scheduler's (mirrored on every TP owner:
   * never summed across owners).
   *
   * @param pending whether storage work is pending: operations without an agreed completion, backup
   *     candidates not yet written, or backups held back after a refusal, waiting for their probe
   *     (not those of a store that refuses persistently)
   * @param executor this rank's executor's counters and gauges, health included
   * @param transfers the storage transfer manager's counters and gauges
   * @param otherRanks on the leader of a tensor-parallel replica, the other ranks' executor figures
   *     by rank, as each last sent them through the exchange (a follower sends its figures when it
   *     takes a snapshot of its own, at most about once a second while busy; so they are at most a
   *     couple of seconds older than this snapshot); empty elsewhere and before they arrive
   * @param lateCompletionReports completion reports of operations already agreed, which the
   *     replica's agreement dropped (an owner's second report, arriving late): the same on every
   *     rank, never agreed twice
   */
  public record Storage(
      boolean pending,
      L3Metrics executor,
      Transfers transfers,
      Map<Integer, L3Metrics> otherRanks,
      long lateCompletionReports) {
    public Storage {
      Objects.requireNonNull(executor, "executor");
      Objects.requireNonNull(transfers, "transfers");
      otherRanks = Collections.unmodifiableMap(new TreeMap<>(otherRanks));
      if (lateCompletionReports < 0) {
        throw new IllegalArgumentException(
            "late_completion_reports=" + lateCompletionReports + " must be >= 0");
      }
    }

    /** Figures with the other ranks' executors and no late completion report. */
    public Storage(
        boolean pending,
        L3Metrics executor,
        Transfers transfers,
        Map<Integer, L3Metrics> otherRanks) {
      this(pending, executor, transfers, otherRanks, 0);
    }

    /** A single rank's figures (no other ranks, no late completion report). */
    public Storage(boolean pending, L3Metrics executor, Transfers transfers) {
      this(pending, executor, transfers, Map.of(), 0);
    }
  }

  /**
   * An immutable copy of the storage transfer manager's counters ({@link StorageCounters}) and
   * gauges. Every value is mirrored on every TP owner of a replica.
   *
   * @param softTimeouts waits for L3 ended by their soft deadline
   * @param readyExpirations Ready holds that expired before admission used them
   * @param pressureBypasses requests that skipped L3 because the pressure gate was closed
   * @param queriesIssued QUERY operations issued
   * @param getsIssued GET operations issued
   * @param putsIssued PUT operations issued
   * @param publishedBlocks Host blocks published from completed GETs
   * @param earlyH2dBlocks Device blocks published from completed GETs through their early copies
   *     ({@code async.early_h2d}): restored blocks admission did not load
   * @param earlyH2dSkipped GETs issued without early Device destinations because the Device had no
   *     room for them
   * @param droppedBackupKeys backup candidate keys dropped, by reason; every reason is present
   * @param readyHolds Ready holds alive
   * @param quarantinedRefs Host references held by quarantined operations
   * @param gateClosed whether the pressure (admission) gate is closed
   * @param quarantined whether an unproven retirement stopped new L3 work until restart
   * @param operationsInUse operation credits in use
   * @param hostCreditsInUse Host credits in use: Host block references, each one LCM parent
   * @param queuedCandidates backup candidates a permitted round would dispatch
   * @param deferredCandidates backup candidates held back after the store refused a PUT, waiting
   *     for the probe (pending work)
   * @param heldCandidates backup candidates held back while the store refuses persistently (five
   *     refusals in a row): probed, but no pending work
   * @param backupBackoffMs the current hold after the store's consecutive refusals; 0 while its
   *     latest answers were successes
   * @param costs the cost model's bypasses, partial restores and figures
   */
  public record Transfers(
      long softTimeouts,
      long readyExpirations,
      long pressureBypasses,
      long queriesIssued,
      long getsIssued,
      long putsIssued,
      long publishedBlocks,
      long earlyH2dBlocks,
      long earlyH2dSkipped,
      Map<DropReason, Long> droppedBackupKeys,
      int readyHolds,
      int quarantinedRefs,
      boolean gateClosed,
      boolean quarantined,
      int operationsInUse,
      int hostCreditsInUse,
      int queuedCandidates,
      int deferredCandidates,
      int heldCandidates,
      long backupBackoffMs,
      Costs costs) {

    public Transfers {
      Objects.requireNonNull(costs, "costs");
      for (DropReason r : DropReason.values()) {
        if (!droppedBackupKeys.containsKey(r)) {
          throw new IllegalArgumentException(
              "dropped_backup_keys has no value for reason=" + r + ": " + droppedBackupKeys);
        }
      }
      droppedBackupKeys = Map.copyOf(droppedBackupKeys);
    }

    /** Every drop reason at 0. */
    public static Map<DropReason, Long> noDrops() {
      Map<DropReason, Long> m = new EnumMap<>(DropReason.class);
      for (DropReason r : DropReason.values()) {
        m.put(r, 0L);
      }
      return m;
    }

    /** A copy of {@code stm}'s figures (on its owner's thread). */
    static Transfers of(StorageTransferManager stm) {
      StorageCounters c = stm.counters();
      Map<DropReason, Long> drops = noDrops();
      for (DropReason r : DropReason.values()) {
        drops.put(r, c.droppedBackupKeys(r));
      }
      return new Transfers(
          c.softTimeouts(),
          c.readyExpired(),
          c.pressureBypasses(),
          c.queriesIssued(),
          c.getsIssued(),
          c.putsIssued(),
          c.publishedBlocks(),
          c.earlyH2dBlocks(),
          c.earlyH2dSkipped(),
          drops,
          stm.readyHolds(),
          stm.quarantinedRefs(),
          stm.gateClosed(),
          stm.quarantined(),
          stm.operationsInUse(),
          stm.hostCreditsInUse(),
          stm.queuedCandidates(),
          stm.deferredCandidates(),
          stm.heldCandidates(),
          java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(stm.backupBackoffNs()),
          Costs.of(stm));
    }
  }

  /**
   * What the L3 cost model decided and decides with (mirrored on every TP owner: the agreed
   * figures, the same decisions).
   *
   * @param enabled whether the model weighs restores ({@code async.cost_model})
   * @param bypasses requests by the reason their preparation sent them to ordinary admission
   *     without asking L3; every reason but {@link Bypass#NOT_PERMITTED} (never final) is present
   * @param partialRestores queries the model shortened to a partial restore
   * @param explorations queries issued although the model expected recomputing to win, to measure
   *     the store again
   * @param abandoned restores whose requests stopped waiting on their GET because new figures made
   *     recomputing faster than the rest of the read ({@code slower_than_compute})
   * @param figures the agreed figures the model decides with (a configured prior in place of a
   *     store not yet measured)
   * @param referenceTokens the prefix length the break-even bandwidth is for
   * @param breakEvenBytesPerSecond the restore bandwidth at which restoring {@code referenceTokens}
   *     tokens takes as long as recomputing them ({@link CostModel#breakEvenBytesPerSecond}): NaN
   *     while the prefill rate is unknown, infinite when the store's latency alone exceeds the
   *     recomputation
   * @param referencePrefillSeconds the expected recomputation of those tokens; NaN while unknown
   */
  public record Costs(
      boolean enabled,
      Map<Bypass, Long> bypasses,
      long partialRestores,
      long explorations,
      long abandoned,
      CostFigures figures,
      int referenceTokens,
      double breakEvenBytesPerSecond,
      double referencePrefillSeconds) {

    public Costs {
      Objects.requireNonNull(figures, "figures");
      for (Bypass b : finalBypasses()) {
        if (!bypasses.containsKey(b)) {
          throw new IllegalArgumentException(
              "bypasses has no value for reason=" + b + ": " + bypasses);
        }
      }
      bypasses = Collections.unmodifiableMap(new EnumMap<>(bypasses));
    }

    /** Every reason a preparation can end in (all but {@link Bypass#NOT_PERMITTED}). */
    public static java.util.List<Bypass> finalBypasses() {
      return java.util.Arrays.stream(Bypass.values())
          .filter(b -> b != Bypass.NOT_PERMITTED)
          .toList();
    }

    /** Every final reason at 0. */
    public static Map<Bypass, Long> noBypasses() {
      Map<Bypass, Long> m = new EnumMap<>(Bypass.class);
      for (Bypass b : finalBypasses()) {
        m.put(b, 0L);
      }
      return m;
    }

    /** A model that decided nothing and knows nothing, {@code enabled} or not. */
    public static Costs none(boolean enabled) {
      return new Costs(
          enabled,
          noBypasses(),
          0,
          0,
          0,
          CostFigures.UNKNOWN,
          io.tokenspeed.scheduler.StorageConfig.DEFAULT_COST_MODEL_REFERENCE_TOKENS,
          Double.NaN,
          Double.NaN);
    }

    /** A copy of {@code stm}'s figures (on its owner's thread). */
    static Costs of(StorageTransferManager stm) {
      StorageCounters c = stm.counters();
      Map<Bypass, Long> bypasses = noBypasses();
      for (Bypass b : finalBypasses()) {
        bypasses.put(b, c.bypasses(b));
      }
      CostModel model = stm.costModel();
      int reference = model.referenceTokens();
      return new Costs(
          model.enabled(),
          bypasses,
          c.partialRestores(),
          c.costExplorations(),
          c.restoresAbandoned(),
          model.figures(),
          reference,
          model.breakEvenBytesPerSecond(reference),
          model.figures().prefillKnown()
              ? (model.prefillNs(0, reference + 1) - model.prefillNs(reference, reference + 1))
                  / 1e9
              : Double.NaN);
    }
  }
}

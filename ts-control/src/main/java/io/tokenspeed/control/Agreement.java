package io.tokenspeed.control;

import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageKind;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * Owner agreement on storage completion facts: the window of operations that some but not all
 * owners have reported, and the reduction that turns a complete set of owner records into one
 * {@link AgreedCompletion}.
 *
 * <p><b>What it guarantees.</b> Every rank holds its own instance and feeds it the same gathered
 * reports in the same order (rank by rank, each report's records in order), so every rank's window
 * and output are identical, and so is any {@link ProtocolException} it throws. Records are keyed by
 * (operation id, rank) and collected as sets: an operation completes in the round in which its last
 * owner reports it, whatever the order of the owners and whatever other operations are still
 * pending. A slow earlier operation therefore never blocks a later complete one, and the window is
 * never truncated to a prefix of operation ids: it is bounded by {@code maxPendingOperations} and
 * {@code maxPendingKeys} instead, and overflowing either is an agreed protocol error. The engine
 * sizes both from the storage credits ({@link ControlConfig#withWindowFor}), which bound what can
 * be in flight, so a window over its bounds means a broken replica, never load.
 *
 * <p><b>The reduction</b>, per key: OK when every owner reports OK (AND); otherwise an object
 * failure when any owner confirmed the object missing or invalid (OR; INVALID before MISSING);
 * otherwise FAILED. Retirement is AND-reduced, detachment OR-reduced. An owner that did not read a
 * row reports it OK and so contributes no object evidence.
 *
 * <p><b>What it refuses</b> (each a {@link ProtocolException} naming the operation and ranks): an
 * owner reporting a pending operation twice, owners disagreeing on an operation's kind or key count
 * (the masks must have equal lengths), and a window over its bounds. Before the exchange, {@link
 * #checkLocal} applies the same checks to this rank's own records against the window, so that an
 * invalid local report can join the exchange as an error instead.
 *
 * <p><b>Never agreed twice; a late report is dropped.</b> Completions may arrive late or twice. An
 * operation agreed once has been reported by every owner, so any later record of it is a second
 * report by an owner whose first already counted: it is dropped and counted ({@link #lateReports}),
 * never agreed again and never an error. Every rank sees the same gathered records, so every rank
 * drops the same ones.
 *
 * <p><b>Remembering what was agreed.</b> The agreed ids are kept as runs of consecutive ids, each
 * its first and last id (here 0..41, 43..97 and 100..130):
 *
 * <pre>
 *   id   0 ......... 41   42   43 ......... 97   98  99   100 ....... 130   131 ...
 *        [ agreed run  ]  gap  [ agreed run  ]   gaps     [ agreed run  ]   none agreed yet
 *                     in flight              in flight
 * </pre>
 *
 * A gap is an id not agreed below the newest agreed one. The scheduler issues ids densely (one per
 * ticket, never reused) and holds an operation credit for each until its agreed fact, so the gaps
 * are operations in flight: at most {@code async.max_operations}, whatever the replica's age, and
 * the runs at most one more. Should the runs ever exceed {@link #agreedMemory} (ids skipped for
 * good, which the scheduler never does), the two oldest runs merge and the ids between them count
 * as agreed ({@link #forgottenIds}). {@code agreedMemory} is four times the window, at least 65,536
 * and at most 4 Mi runs, above the 1 Mi operation credits {@code async.max_operations} accepts, so
 * with the window sized from the credits this never happens to an operation in flight.
 *
 * <p>Single-threaded: owned by the event loop thread.
 */
public final class Agreement {

  private final int worldSize;
  private final int maxPendingOperations;
  private final long maxPendingKeys;
  private final Map<Long, Pending> pending = new HashMap<>();
  private long pendingKeys;
  private final int agreedMemory;

  /** The agreed ids, as runs: the first id of each run to its last. */
  private final TreeMap<Long, Long> agreedRuns = new TreeMap<>();

  private long lateReports;
  private String firstLateReport;
  private long forgottenIds;

  /** Records of one operation reported by some owners so far. */
  private static final class Pending {
    final long operationId;
    final StorageKind kind;
    final int numKeys;
    final StorageDone[] byRank;
    int reported;

    Pending(long operationId, StorageKind kind, int numKeys, int worldSize) {
      this.operationId = operationId;
      this.kind = kind;
      this.numKeys = numKeys;
      this.byRank = new StorageDone[worldSize];
    }

    int firstRank() {
      for (int r = 0; r < byRank.length; r++) {
        if (byRank[r] != null) {
          return r;
        }
      }
      return -1;
    }
  }

  /**
   * An empty window for {@code worldSize} owners.
   *
   * @param maxPendingOperations the most operations that may stay partially reported after a round
   * @param maxPendingKeys the most keys those operations may hold together
   */
  /**
   * A planted bug for the engine's simulation (never set outside its tests): an operation counts as
   * retired when any one of its owners retired it, instead of all of them.
   */
  private boolean retiredByAnyRank;

  /** Plants the bug above (the simulation's planted-bug tests only). */
  void plantRetiredByAnyRank() {
    retiredByAnyRank = true;
  }

  private static boolean anyRetired(StorageDone[] owners) {
    for (StorageDone d : owners) {
      if (d.retired()) {
        return true;
      }
    }
    return false;
  }

  public Agreement(int worldSize, int maxPendingOperations, long maxPendingKeys) {
    if (worldSize < 1 || maxPendingOperations < 1 || maxPendingKeys < 1) {
      throw new IllegalArgumentException(
          "agreement world_size="
              + worldSize
              + " max_pending_operations="
              + maxPendingOperations
              + " max_pending_keys="
              + maxPendingKeys
              + " must all be >= 1");
    }
    this.worldSize = worldSize;
    this.maxPendingOperations = maxPendingOperations;
    this.maxPendingKeys = maxPendingKeys;
    this.agreedMemory = (int) Math.min(1 << 22, Math.max(1 << 16, 4L * maxPendingOperations));
  }

  /** How many runs of agreed ids are remembered before the two oldest merge. */
  int agreedMemory() {
    return agreedMemory;
  }

  /** True when {@code operationId} has been agreed (or lies in a gap merged away). */
  public boolean agreed(long operationId) {
    Map.Entry<Long, Long> run = agreedRuns.floorEntry(operationId);
    return run != null && operationId <= run.getValue();
  }

  /** Records {@code operationId}, not agreed before, as agreed. */
  private void rememberAgreed(long operationId) {
    long first = operationId;
    long last = operationId;
    Map.Entry<Long, Long> below = agreedRuns.floorEntry(operationId);
    if (below != null && below.getValue() == operationId - 1) {
      first = below.getKey(); // the common case: ids agreed in order extend the newest run
    }
    if (operationId < Long.MAX_VALUE) {
      Long aboveLast = agreedRuns.remove(operationId + 1);
      if (aboveLast != null) {
        last = aboveLast;
      }
    }
    agreedRuns.put(first, last);
    if (agreedRuns.size() > agreedMemory) {
      Map.Entry<Long, Long> oldest = agreedRuns.pollFirstEntry();
      Map.Entry<Long, Long> next = agreedRuns.pollFirstEntry();
      forgottenIds += next.getKey() - oldest.getValue() - 1;
      agreedRuns.put(oldest.getKey(), next.getValue());
    }
  }

  /**
   * Records dropped because their operation was already agreed: an owner's second report, arriving
   * late. The same on every rank.
   */
  public long lateReports() {
    return lateReports;
  }

  /** The first of those records (operation, rank and round), or null when none was dropped. */
  public String firstLateReport() {
    return firstLateReport;
  }

  /** Ids never agreed that count as agreed because the runs outgrew {@link #agreedMemory}. */
  public long forgottenIds() {
    return forgottenIds;
  }

  /** Operations some but not all owners have reported. */
  public int pendingOperations() {
    return pending.size();
  }

  /** Keys of those operations. */
  public long pendingKeys() {
    return pendingKeys;
  }

  /**
   * Validates this rank's records before the exchange, against each other and the window. A record
   * of an operation already agreed passes: every rank drops it from the gathered reports.
   *
   * @return null when they may be sent, otherwise the reason (which the error report carries)
   */
  public String checkLocal(int rank, List<StorageDone> records) {
    Set<Long> seen = new HashSet<>();
    for (int i = 0; i < records.size(); i++) {
      StorageDone d = records.get(i);
      if (d == null) {
        return "record " + i + " is null";
      }
      long op = d.operationId();
      if (!seen.add(op)) {
        return "operation " + op + " appears twice in one report";
      }
      if (agreed(op)) {
        continue; // a late second report: every rank drops it from the gathered reports
      }
      if (d.outcomes().size() > maxPendingKeys) {
        return "operation "
            + op
            + " has "
            + d.outcomes().size()
            + " keys, more than max_pending_keys="
            + maxPendingKeys;
      }
      Pending p = pending.get(op);
      if (p != null) {
        String conflict = conflict(p, rank, d);
        if (conflict != null) {
          return conflict;
        }
      }
    }
    return null;
  }

  /**
   * Adds one round's gathered records and returns the operations that are now reported by every
   * owner, reduced, in ascending operation id. Records of operations already agreed are dropped and
   * counted ({@link #lateReports}).
   *
   * @param byRank each rank's records, indexed by rank
   * @throws ProtocolException when records contradict each other or the window overflows
   */
  public List<AgreedCompletion> apply(long round, List<List<StorageDone>> byRank)
      throws ProtocolException {
    if (byRank.size() != worldSize) {
      throw new IllegalArgumentException(
          "round " + round + " has " + byRank.size() + " reports for " + worldSize + " ranks");
    }
    List<Pending> complete = new ArrayList<>();
    for (int rank = 0; rank < worldSize; rank++) {
      for (StorageDone d : byRank.get(rank)) {
        long op = d.operationId();
        if (agreed(op)) {
          if (lateReports++ == 0) {
            firstLateReport = "operation " + op + " from rank " + rank + " in round " + round;
          }
          continue;
        }
        Pending p = pending.get(op);
        if (p == null) {
          p = new Pending(op, d.kind(), d.outcomes().size(), worldSize);
          pending.put(op, p);
          pendingKeys += p.numKeys;
        } else {
          String conflict = conflict(p, rank, d);
          if (conflict != null) {
            throw new ProtocolException(round, conflict);
          }
        }
        p.byRank[rank] = d;
        if (++p.reported == worldSize) {
          complete.add(p);
        }
      }
    }
    List<AgreedCompletion> out = new ArrayList<>(complete.size());
    if (!complete.isEmpty()) {
      complete.sort((a, b) -> Long.compare(a.operationId, b.operationId));
      for (Pending p : complete) {
        pending.remove(p.operationId);
        pendingKeys -= p.numKeys;
        rememberAgreed(p.operationId);
        AgreedCompletion c = reduce(p.operationId, p.kind, Arrays.asList(p.byRank));
        if (retiredByAnyRank) {
          c =
              new AgreedCompletion(
                  c.operationId(), c.kind(), c.outcomes(), anyRetired(p.byRank), c.detached());
        }
        out.add(c);
      }
    }
    if (pending.size() > maxPendingOperations) {
      throw new ProtocolException(
          round,
          pending.size()
              + " operations await owner reports, more than max_pending_operations="
              + maxPendingOperations);
    }
    if (pendingKeys > maxPendingKeys) {
      throw new ProtocolException(
          round,
          pendingKeys
              + " keys of partially reported operations exceed max_pending_keys="
              + maxPendingKeys);
    }
    return out;
  }

  /**
   * The agreed fact of one operation from the records of all its owners (every record non-null, of
   * the same kind and key count).
   */
  public static AgreedCompletion reduce(
      long operationId, StorageKind kind, List<StorageDone> owners) {
    int numKeys = owners.getFirst().outcomes().size();
    KeyOutcome[] agreed = new KeyOutcome[numKeys];
    for (int i = 0; i < numKeys; i++) {
      boolean allOk = true;
      boolean missing = false;
      boolean invalid = false;
      for (StorageDone d : owners) {
        switch (d.outcomes().get(i)) {
          case OK -> {}
          case MISSING -> {
            allOk = false;
            missing = true;
          }
          case INVALID -> {
            allOk = false;
            invalid = true;
          }
          case FAILED -> allOk = false;
        }
      }
      agreed[i] =
          allOk
              ? KeyOutcome.OK
              : invalid ? KeyOutcome.INVALID : missing ? KeyOutcome.MISSING : KeyOutcome.FAILED;
    }
    boolean retired = true;
    boolean detached = false;
    for (StorageDone d : owners) {
      retired &= d.retired();
      detached |= d.detached();
    }
    return new AgreedCompletion(operationId, kind, Arrays.asList(agreed), retired, detached);
  }

  /** Why {@code rank}'s record {@code d} cannot join pending operation {@code p}, or null. */
  private static String conflict(Pending p, int rank, StorageDone d) {
    if (p.byRank[rank] != null) {
      return "operation " + p.operationId + " reported twice by rank " + rank;
    }
    if (p.kind != d.kind()) {
      return "operation "
          + p.operationId
          + " is "
          + d.kind()
          + " on rank "
          + rank
          + " but "
          + p.kind
          + " on rank "
          + p.firstRank();
    }
    if (p.numKeys != d.outcomes().size()) {
      return "operation "
          + p.operationId
          + " has "
          + d.outcomes().size()
          + " keys on rank "
          + rank
          + " but "
          + p.numKeys
          + " on rank "
          + p.firstRank()
          + ": per-key masks must have equal lengths";
    }
    return null;
  }
}

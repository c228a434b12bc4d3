package io.tokenspeed.scheduler;

/**
 * The scheduler's read-only L3 contract: credits, deadlines, bounds and pressure watermarks. It
 * tunes the one asynchronous path; nothing here selects another mode. Every default is a documented
 * constant and every field is checked once, with the field, the value and the range.
 *
 * @param maxOperations operation credits: tickets alive at once (queries, reads, backups)
 * @param maxHostBlocks Host credits: logical Host block references held by tickets, Ready holds and
 *     quarantine, each charged as one potentially pinned LCM parent of the Host tier; at most the
 *     Host tier's parents less the retraction reserve, and 0 (the default) for exactly that many
 *     (see {@link #forHost})
 * @param retractionReservePercent the share of the Host tier's parents, in percent and rounded down
 *     to whole parents, kept for the exact images of retracted requests (the specification's
 *     retraction snapshots): no Host credit reaches it, so an image finds room however many credits
 *     L3 holds
 * @param softDeadlineMs how long a request waits for QUERY and GET, from query issue (the first
 *     tick after the round that issued the query: the clock of that round)
 * @param readyHoldMs how long a finished read's Ready hold protects its blocks, from the first tick
 *     after the round that published it
 * @param minExtensionTokens an L3 extension shorter than this bypasses L3
 * @param lookaheadTokens how far beyond the local hit a query may look
 * @param maxQueryKeys keys one query may ask for
 * @param negativeMetadataCapacity confirmed-missing keys remembered (FIFO)
 * @param backupCandidateCapacity non-owning backup candidates queued (drop-oldest)
 * @param maxPutKeys keys one PUT operation may carry
 * @param highQueuedJobs pressure closes at this many queued executor jobs
 * @param lowQueuedJobs and reopens at or below this many
 * @param highQueuedBytes pressure closes at this many queued payload bytes
 * @param lowQueuedBytes and reopens at or below this many
 * @param highOldestAgeMs pressure closes when the oldest job is this old
 * @param lowOldestAgeMs and reopens at or below this age
 * @param maxBackupBackoffMs the longest time backups are held back after the store refused a PUT:
 *     the hold starts at {@link #DEFAULT_BACKUP_RETRY_BACKOFF_MS} and doubles with each consecutive
 *     refusal up to this, and ends in a probe of one page (see {@code BackupPacer})
 * @param costModel {@code on}: a preparation weighs the expected restore against the expected
 *     recomputation ({@link CostModel}); {@code off}: the fixed rules alone decide, exactly
 * @param costModelMarginPercent a restore is chosen only when its expected time, raised by this
 *     share, still beats recomputing the same tokens
 * @param costModelReferenceTokens the prefix length the exported break-even bandwidth is for
 * @param costModelExploreMs while the model bypasses L3, a restore is still issued when none was
 *     for this long, so that a store that became faster is measured again; 0 never
 * @param costModelPriorMbps the restore bandwidth, in 10^6 bytes per second of one owner's bytes,
 *     assumed until the store's first GET is measured; 0 assumes nothing (restores go ahead and are
 *     measured)
 * @param earlyH2d a GET also reserves Device blocks (when the Device has room) and copies each row
 *     there as soon as it lands ({@link #DEFAULT_EARLY_H2D})
 */
public record StorageConfig(
    int maxOperations,
    int maxHostBlocks,
    int retractionReservePercent,
    long softDeadlineMs,
    long readyHoldMs,
    int minExtensionTokens,
    int lookaheadTokens,
    int maxQueryKeys,
    int negativeMetadataCapacity,
    int backupCandidateCapacity,
    int maxPutKeys,
    int highQueuedJobs,
    int lowQueuedJobs,
    long highQueuedBytes,
    long lowQueuedBytes,
    long highOldestAgeMs,
    long lowOldestAgeMs,
    long maxBackupBackoffMs,
    boolean costModel,
    int costModelMarginPercent,
    int costModelReferenceTokens,
    long costModelExploreMs,
    long costModelPriorMbps,
    boolean earlyH2d) {

  public static final int DEFAULT_MAX_OPERATIONS = 64;

  /**
   * Host credits follow the Host tier: every parent the retraction reserve leaves ({@link
   * #forHost}). A fixed count would either exceed a small Host tier, letting L3 pin the memory
   * retraction images need, or leave a large one unused.
   */
  public static final int DEFAULT_MAX_HOST_BLOCKS = 0;

  /**
   * The retraction snapshots' share of the Host tier. The specification sizes the Host allocation
   * from actual rounded pinned sizes for L2, retraction snapshots and slot-state arenas, but leaves
   * how many snapshots open. A retraction images what its victim held on the Device, so a quarter
   * of a Host twice the Device (the default ratio) holds the image of a request that filled half
   * the Device, while L3 keeps three quarters of the Host for its credits. With zero, images
   * compete with L3 for every parent.
   */
  public static final int DEFAULT_RETRACTION_RESERVE_PERCENT = 25;

  /**
   * The soft deadline's default. A restore takes at least four rounds whatever the store (its
   * QUERY's fact is agreed two rounds after the issue, its GET's two rounds after that), and under
   * load a round is a forward pass. With 8 and 16 clients on two CPU cores every prefix the store
   * held was restored from 1,000 ms on (500 ms with 8 clients), 50 to 88 % of them at 200 ms; the
   * store's own calls were a few percent of the wait (docs/benchmarks/2026-12-05-soft-deadline.md).
   * A wait the store answers ends with its fact, so a longer deadline costs only when the store is
   * slow or hung: then a request waits this long before it computes its prefix
   * (docs/l3-configuration.md).
   */
  public static final long DEFAULT_SOFT_DEADLINE_MS = 2_000;

  public static final long DEFAULT_READY_HOLD_MS = 1_000;
  public static final int DEFAULT_MIN_EXTENSION_TOKENS = 256;
  public static final int DEFAULT_LOOKAHEAD_TOKENS = 131_072;
  public static final int DEFAULT_MAX_QUERY_KEYS = 4096;
  public static final int DEFAULT_NEGATIVE_METADATA_CAPACITY = 16_384;
  public static final int DEFAULT_BACKUP_CANDIDATE_CAPACITY = 4096;
  public static final int DEFAULT_MAX_PUT_KEYS = 256;
  public static final int DEFAULT_HIGH_QUEUED_JOBS = 192;
  public static final int DEFAULT_LOW_QUEUED_JOBS = 64;
  public static final long DEFAULT_HIGH_QUEUED_BYTES = 4L << 30;
  public static final long DEFAULT_LOW_QUEUED_BYTES = 1L << 30;
  public static final long DEFAULT_HIGH_OLDEST_AGE_MS = 2_000;
  public static final long DEFAULT_LOW_OLDEST_AGE_MS = 500;
  public static final long DEFAULT_MAX_BACKUP_BACKOFF_MS = 10_000;

  /**
   * How long every backup is held back after the store refused a PUT (a retired refusal: no space,
   * an ACL, a cooldown rejection), from the first tick after the refusal; the hold doubles with
   * each consecutive refusal up to {@code max_backup_backoff_ms} and ends in a probe of one page.
   * Fixed in this version (not a setting).
   */
  public static final long DEFAULT_BACKUP_RETRY_BACKOFF_MS = 100;

  /**
   * PUT attempts per backup key, the first included, probes not counted: the refusal of the last
   * one drops the key (counted as {@code refused}), so a key the store keeps refusing while it
   * takes others is not retried forever. It is also the number of consecutive refusals (at 0, 100,
   * 300, 700 and 1,500 ms) after which the store is taken to refuse persistently: the backups it
   * holds are then no pending work. Fixed in this version.
   */
  public static final int DEFAULT_MAX_BACKUP_ATTEMPTS = 5;

  /**
   * Off by default until its decisions are validated where they matter (a GPU prefill against a
   * slow store): on the CPU demo's small model it chose partial restores of prefixes that a full
   * restore serves faster (docs/design-decisions.md). A cold model (nothing measured) leaves
   * preparation to the fixed rules; a restore is bypassed only once the store measured slower than
   * recomputing by the margin.
   */
  public static final boolean DEFAULT_COST_MODEL = false;

  /** Restores must beat recomputation by 10 %: a near tie goes to the path that reads nothing. */
  public static final int DEFAULT_COST_MODEL_MARGIN_PERCENT = 10;

  /** The break-even gauge's prefix length: the 8k prefixes of the TTFT benchmarks. */
  public static final int DEFAULT_COST_MODEL_REFERENCE_TOKENS = 8192;

  /** A store the model bypasses is measured again at most a minute later. */
  public static final long DEFAULT_COST_MODEL_EXPLORE_MS = 60_000;

  /** No prior: the first restores are issued and measured. */
  public static final long DEFAULT_COST_MODEL_PRIOR_MBPS = 0;

  /**
   * A GET also reserves the Device blocks its rows will be admitted into and copies each row on to
   * the Device as soon as it lands, while the rest of the read runs, instead of after the last row
   * at admission (docs/l3-configuration.md, docs/design-decisions.md). Only when the Device has
   * room: at most {@link #EARLY_H2D_MAX_REFERENCED_PERCENT} of its parents referenced afterwards,
   * and at most {@link #EARLY_H2D_MAX_HELD_PERCENT} held by early destinations.
   */
  public static final boolean DEFAULT_EARLY_H2D = true;

  /** The share of Device parents that may be referenced once a GET's early destinations are. */
  public static final int EARLY_H2D_MAX_REFERENCED_PERCENT = 75;

  /**
   * The share of Device parents the early destinations of all GETs in flight may hold together: a
   * store that hangs keeps its reads, and their destinations, until they retire, so this is what a
   * hung store can take from the Device.
   */
  public static final int EARLY_H2D_MAX_HELD_PERCENT = 50;

  private static final long HOUR_MS = 3_600_000;

  public StorageConfig {
    range("max_operations", maxOperations, 1, 1 << 20);
    range("max_host_blocks", maxHostBlocks, 0, Integer.MAX_VALUE);
    range("retraction_reserve_percent", retractionReservePercent, 0, 99);
    range("soft_deadline_ms", softDeadlineMs, 1, HOUR_MS);
    range("ready_hold_ms", readyHoldMs, 1, HOUR_MS);
    range("min_extension_tokens", minExtensionTokens, 1, Integer.MAX_VALUE);
    range("lookahead_tokens", lookaheadTokens, 1, Integer.MAX_VALUE);
    range("max_query_keys", maxQueryKeys, 1, 1 << 24);
    range("negative_metadata_capacity", negativeMetadataCapacity, 0, 1 << 24);
    range("backup_candidate_capacity", backupCandidateCapacity, 0, 1 << 24);
    range("max_put_keys", maxPutKeys, 1, 1 << 20);
    range("high_queued_jobs", highQueuedJobs, 1, Integer.MAX_VALUE);
    range("low_queued_jobs", lowQueuedJobs, 0, highQueuedJobs - 1L);
    range("high_queued_bytes", highQueuedBytes, 1, Long.MAX_VALUE);
    range("low_queued_bytes", lowQueuedBytes, 0, highQueuedBytes - 1);
    range("high_oldest_age_ms", highOldestAgeMs, 1, HOUR_MS);
    range("low_oldest_age_ms", lowOldestAgeMs, 0, highOldestAgeMs - 1);
    range("max_backup_backoff_ms", maxBackupBackoffMs, DEFAULT_BACKUP_RETRY_BACKOFF_MS, HOUR_MS);
    range("cost_model_margin_percent", costModelMarginPercent, 0, 1000);
    range("cost_model_reference_tokens", costModelReferenceTokens, 1, 1 << 24);
    range("cost_model_explore_ms", costModelExploreMs, 0, HOUR_MS);
    range("cost_model_prior_mbps", costModelPriorMbps, 0, 1_000_000_000);
  }

  /** A contract with the cost model's documented defaults. */
  public StorageConfig(
      int maxOperations,
      int maxHostBlocks,
      int retractionReservePercent,
      long softDeadlineMs,
      long readyHoldMs,
      int minExtensionTokens,
      int lookaheadTokens,
      int maxQueryKeys,
      int negativeMetadataCapacity,
      int backupCandidateCapacity,
      int maxPutKeys,
      int highQueuedJobs,
      int lowQueuedJobs,
      long highQueuedBytes,
      long lowQueuedBytes,
      long highOldestAgeMs,
      long lowOldestAgeMs,
      long maxBackupBackoffMs) {
    this(
        maxOperations,
        maxHostBlocks,
        retractionReservePercent,
        softDeadlineMs,
        readyHoldMs,
        minExtensionTokens,
        lookaheadTokens,
        maxQueryKeys,
        negativeMetadataCapacity,
        backupCandidateCapacity,
        maxPutKeys,
        highQueuedJobs,
        lowQueuedJobs,
        highQueuedBytes,
        lowQueuedBytes,
        highOldestAgeMs,
        lowOldestAgeMs,
        maxBackupBackoffMs,
        DEFAULT_COST_MODEL,
        DEFAULT_COST_MODEL_MARGIN_PERCENT,
        DEFAULT_COST_MODEL_REFERENCE_TOKENS,
        DEFAULT_COST_MODEL_EXPLORE_MS,
        DEFAULT_COST_MODEL_PRIOR_MBPS,
        DEFAULT_EARLY_H2D);
  }

  /** The documented defaults. */
  public static StorageConfig defaults() {
    return new StorageConfig(
        DEFAULT_MAX_OPERATIONS,
        DEFAULT_MAX_HOST_BLOCKS,
        DEFAULT_RETRACTION_RESERVE_PERCENT,
        DEFAULT_SOFT_DEADLINE_MS,
        DEFAULT_READY_HOLD_MS,
        DEFAULT_MIN_EXTENSION_TOKENS,
        DEFAULT_LOOKAHEAD_TOKENS,
        DEFAULT_MAX_QUERY_KEYS,
        DEFAULT_NEGATIVE_METADATA_CAPACITY,
        DEFAULT_BACKUP_CANDIDATE_CAPACITY,
        DEFAULT_MAX_PUT_KEYS,
        DEFAULT_HIGH_QUEUED_JOBS,
        DEFAULT_LOW_QUEUED_JOBS,
        DEFAULT_HIGH_QUEUED_BYTES,
        DEFAULT_LOW_QUEUED_BYTES,
        DEFAULT_HIGH_OLDEST_AGE_MS,
        DEFAULT_LOW_OLDEST_AGE_MS,
        DEFAULT_MAX_BACKUP_BACKOFF_MS,
        DEFAULT_COST_MODEL,
        DEFAULT_COST_MODEL_MARGIN_PERCENT,
        DEFAULT_COST_MODEL_REFERENCE_TOKENS,
        DEFAULT_COST_MODEL_EXPLORE_MS,
        DEFAULT_COST_MODEL_PRIOR_MBPS,
        DEFAULT_EARLY_H2D);
  }

  /**
   * The most keys the operations of one rank carry while they are in flight, from issue until the
   * scheduler applies their agreed fact: {@code maxOperations × maxQueryKeys + maxHostBlocks}. A
   * QUERY carries at most {@code maxQueryKeys} keys and holds no Host credit; every key of a GET (a
   * destination) and of a PUT (a source) holds one Host credit until that fact. The operations
   * themselves are at most {@code maxOperations}, one operation credit each.
   */
  public long maxKeysInFlight() {
    return (long) maxOperations * maxQueryKeys + maxHostBlocks;
  }

  /** Operation credits backups may hold: half, rounded down. */
  public int backupOperationCredits() {
    return maxOperations / 2;
  }

  /** Host credits backups may hold: half, rounded down (of the credits {@link #forHost} fits). */
  public int backupHostCredits() {
    return maxHostBlocks / 2;
  }

  /**
   * Parents of a Host tier of {@code hostParents} kept for retraction images: {@code
   * retraction_reserve_percent} of them, rounded down to whole parents (fewer than all of them).
   */
  public int retractionReserveParents(int hostParents) {
    return (int) ((long) hostParents * retractionReservePercent / 100);
  }

  /**
   * This contract over a Host tier of {@code hostParents} LCM parents, checked once at startup.
   * Every held Host block is charged as one whole parent, since one block can pin its parent, so
   * Host credits can never exceed the parents outside the retraction reserve: {@code
   * max_host_blocks=0} becomes exactly that many, and a larger explicit value is rejected rather
   * than letting L3 pin what retraction images need (the specification: an explicit size that does
   * not fit is rejected).
   *
   * <pre>
   *   Host tier:  [ parents for Host credits (L3 at most)     | retraction reserve ]
   *               |<-------- hostParents - reserve ---------->|<---- reserve ----->|
   *   reserve = floor(hostParents * retraction_reserve_percent / 100)
   * </pre>
   *
   * @throws IllegalArgumentException naming {@code max_host_blocks}, its value, the Host tier's
   *     parents and the reserve, when the credits do not fit
   */
  public StorageConfig forHost(int hostParents) {
    if (hostParents < 1) {
      throw new IllegalArgumentException("Host tier host_parents=" + hostParents + " must be >= 1");
    }
    int reserve = retractionReserveParents(hostParents);
    int fit = hostParents - reserve;
    if (maxHostBlocks > fit) {
      throw new IllegalArgumentException(
          "max_host_blocks="
              + maxHostBlocks
              + " exceeds the Host tier: each Host credit is one LCM parent, and the tier's "
              + hostParents
              + " parents less the "
              + reserve
              + " of retraction_reserve_percent="
              + retractionReservePercent
              + " leave "
              + fit
              + ": set it in [1, "
              + fit
              + "], or 0 for all of them");
    }
    return maxHostBlocks == 0 ? withCredits(maxOperations, fit) : this;
  }

  /** A copy with other credit limits (tests and tuning). */
  public StorageConfig withCredits(int operations, int hostBlocks) {
    return with(
        operations,
        hostBlocks,
        retractionReservePercent,
        softDeadlineMs,
        minExtensionTokens,
        maxBackupBackoffMs);
  }

  /** A copy with another retraction reserve (tests and tuning). */
  public StorageConfig withRetractionReservePercent(int percent) {
    return with(
        maxOperations,
        maxHostBlocks,
        percent,
        softDeadlineMs,
        minExtensionTokens,
        maxBackupBackoffMs);
  }

  /** A copy with another minimum extension (tests and tuning). */
  public StorageConfig withMinExtensionTokens(int tokens) {
    return with(
        maxOperations,
        maxHostBlocks,
        retractionReservePercent,
        softDeadlineMs,
        tokens,
        maxBackupBackoffMs);
  }

  /** A copy with another soft deadline (tests and tuning). */
  public StorageConfig withSoftDeadlineMs(long ms) {
    return with(
        maxOperations,
        maxHostBlocks,
        retractionReservePercent,
        ms,
        minExtensionTokens,
        maxBackupBackoffMs);
  }

  /** A copy with another longest backup hold (tests and tuning). */
  public StorageConfig withMaxBackupBackoffMs(long ms) {
    return with(
        maxOperations,
        maxHostBlocks,
        retractionReservePercent,
        softDeadlineMs,
        minExtensionTokens,
        ms);
  }

  /** A copy with the cost model on or off (tests and tuning). */
  public StorageConfig withCostModel(boolean on) {
    return withCostModel(on, costModelMarginPercent, costModelExploreMs, costModelPriorMbps);
  }

  /** A copy with other cost model settings (tests and tuning). */
  public StorageConfig withCostModel(
      boolean on, int marginPercent, long exploreMs, long priorMbps) {
    return withCosts(on, marginPercent, exploreMs, priorMbps, earlyH2d);
  }

  /** A copy with the early Device copies of GETs on or off ({@link #DEFAULT_EARLY_H2D}). */
  public StorageConfig withEarlyH2d(boolean on) {
    return withCosts(costModel, costModelMarginPercent, costModelExploreMs, costModelPriorMbps, on);
  }

  private StorageConfig withCosts(
      boolean on, int marginPercent, long exploreMs, long priorMbps, boolean early) {
    return new StorageConfig(
        maxOperations,
        maxHostBlocks,
        retractionReservePercent,
        softDeadlineMs,
        readyHoldMs,
        minExtensionTokens,
        lookaheadTokens,
        maxQueryKeys,
        negativeMetadataCapacity,
        backupCandidateCapacity,
        maxPutKeys,
        highQueuedJobs,
        lowQueuedJobs,
        highQueuedBytes,
        lowQueuedBytes,
        highOldestAgeMs,
        lowOldestAgeMs,
        maxBackupBackoffMs,
        on,
        marginPercent,
        costModelReferenceTokens,
        exploreMs,
        priorMbps,
        early);
  }

  private StorageConfig with(
      int operations,
      int hostBlocks,
      int reservePercent,
      long deadlineMs,
      int minExtension,
      long backupBackoffMs) {
    return new StorageConfig(
        operations,
        hostBlocks,
        reservePercent,
        deadlineMs,
        readyHoldMs,
        minExtension,
        lookaheadTokens,
        maxQueryKeys,
        negativeMetadataCapacity,
        backupCandidateCapacity,
        maxPutKeys,
        highQueuedJobs,
        lowQueuedJobs,
        highQueuedBytes,
        lowQueuedBytes,
        highOldestAgeMs,
        lowOldestAgeMs,
        backupBackoffMs,
        costModel,
        costModelMarginPercent,
        costModelReferenceTokens,
        costModelExploreMs,
        costModelPriorMbps,
        earlyH2d);
  }

  private static void range(String field, long value, long min, long max) {
    if (value < min || value > max) {
      throw new IllegalArgumentException(
          field + "=" + value + " must be in [" + min + ", " + max + "]");
    }
  }
}

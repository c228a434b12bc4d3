package io.tokenspeed.l3;

import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreConfigurationException;
import io.tokenspeed.l3.spi.StoreResult;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongSupplier;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The engine host's L3 executor (ts-l3): runs immutable storage jobs against a {@link Store} on
 * bounded per-kind queues and workers, and hands back completion facts when the event loop polls.
 *
 * <h2>What it guarantees</h2>
 *
 * <ul>
 *   <li><b>Never blocks the loop.</b> {@link #submit}, {@link #cancel} and {@link #poll} take one
 *       short lock and never call the store. A full queue, the operation limit, a cooldown or
 *       quarantine is answered at once with a rejection whose record is delivered by {@code poll}.
 *   <li><b>Bounded.</b> Each kind has its own queue and workers, so slow PUTs cannot starve reads;
 *       the total of queued jobs, running calls and undelivered results is capped.
 *   <li><b>Workers never die silently and never call back.</b> Every outcome of a store call, an
 *       exception included, becomes a fact in the completion list; an {@link Error} quarantines the
 *       executor before it propagates. Workers touch only keys and Host byte ranges.
 *   <li><b>Retirement is never guessed.</b> A result that cannot prove the store stopped touching
 *       the buffers (an unknown code, or a failure of a store whose failures do not retire)
 *       quarantines the executor: every later submission is rejected, and {@link #close()} keeps
 *       the store (and so the registered Host memory) for the life of the process.
 *   <li><b>Cancellation is immediate for queued jobs</b> (the job becomes inert and its record is
 *       marked detached) and never interrupts a running call, whose record comes back detached.
 *   <li><b>Operation ids are strictly increasing</b>; an id that is not larger than every earlier
 *       one is refused.
 *   <li><b>Big transfers use the idle workers.</b> A GET or PUT of at least twice {@link
 *       #SHARE_MIN_BYTES} (not a recovery probe) is split into contiguous shares of its rows, at
 *       most one per worker of its kind, each a store call of its own; workers take shares of
 *       running jobs before queued jobs. The job still completes once, when its last share returns:
 *       any failed share fails every row, and it is retired only if every share is.
 * </ul>
 *
 * <h2>Health</h2>
 *
 * <ul>
 *   <li><b>Cooldown rejects work, then exactly one recovery probe.</b> An outage signal (see {@link
 *       ResultInterpreter}) starts a cooldown under a new health epoch. Jobs still queued at that
 *       moment do not reach the backend: they complete at once as rejected (FAILED, retired, no
 *       object evidence, not detached), exactly like a submission refused during the cooldown.
 *       Calls already running go on; their successes are older than the outage and heal nothing.
 *   <li><b>Only a job that reaches the backend is a probe or ends an outage.</b> A job none of
 *       whose rows this rank owns makes no store call: it is admitted without consulting health (it
 *       is no backend work, so neither a cooldown nor a probe concerns it) and its retired, empty
 *       success says nothing about the backend.
 *   <li><b>A full store is not an outage either.</b> A PUT row the store refuses for capacity (a
 *       retired {@code Rejected} row without an outage) leaves health untouched; {@link
 *       WriteRefusals} records that the store refuses writes, logs it once when that starts and
 *       once when it ends, and {@link L3Metrics#writesRefused()} shows it.
 *   <li><b>A configuration failure is not an outage.</b> A store that throws {@link
 *       StoreConfigurationException} (a permission or credential the backend refused before any
 *       transfer) fails the job's rows as retired, without object evidence; health is untouched
 *       apart from the backend having answered. Each distinct message is logged once, naming the
 *       store, and {@link L3Metrics#configurationFailures()} counts them.
 * </ul>
 *
 * <h2>Close</h2>
 *
 * {@link #close()} runs once, however many threads call it (later callers wait for the first and
 * get its report). The store is kept when a call is still inside it after the join deadline
 * (counted by running calls, not by live threads: an idle worker never holds the store, whatever
 * the deadline) or when a job's retirement was never proven. The report counts every such job:
 * unretired results, GET/PUT calls still running at the deadline, and a call ended by an {@link
 * Error}.
 *
 * <h2>Threads</h2>
 *
 * <pre>
 *   event loop ──submit/cancel/poll──▶ [lock] queues(QUERY|GET|PUT), live jobs, completions
 *   ts-l3-get-N ──take──▶ store.get(...) (no lock held) ──▶ [lock] facts → completions
 *               ──unlock──▶ completion listener (wakes the loop; once per record)
 * </pre>
 */
public final class L3Executor {

  private static final Logger LOG = Logger.getLogger(L3Executor.class.getName());

  private enum Phase {
    QUEUED,
    RUNNING
  }

  private static final class Entry {
    final StorageJob job;
    final long payloadBytes;
    final long submitNs;
    final long healthEpoch;
    final boolean probe;
    Phase phase = Phase.QUEUED;
    boolean detached;

    /** Already counted among the unproven retirements (by close, while it was still running). */
    boolean countedUnproven;

    // Set when a worker takes the job: its owned rows, run as one or more shares (store calls;
    // see SHARE_MIN_BYTES), and what the shares returned so far.
    int[] owned;
    int[][] shareRows;
    StoreResult[] shareResults;
    int sharesLeft;
    long startNanos;

    /** The executor's clock when a worker took the job (the restore estimate's time base). */
    long startClockNs;

    /** The executor's clock when a worker took each share (a job of several shares). */
    long[] shareTakenClockNs;

    /**
     * How many leading shares are a GET's first wave of small shares ({@link
     * L3Executor#shareCuts}), 0 when it has none; how many of them are still running; the bytes
     * they read (every row in full, or the wave is not measured); the longest of their calls. Under
     * the lock.
     */
    int waveShares;

    int waveLeft;
    long waveBytes;
    long waveCallNs;
    boolean waveWhole = true;

    Throwable shareFailure; // the first exception, or an Error, of a share
    String shareConfigurationFailure;

    Entry(StorageJob job, long submitNs, long healthEpoch, boolean probe) {
      this.job = job;
      this.payloadBytes = job.payloadBytes();
      this.submitNs = submitNs;
      this.healthEpoch = healthEpoch;
      this.probe = probe;
    }
  }

  private static final class KindState {
    final StorageKind kind;
    final int capacity;
    final ArrayDeque<Entry> queue;

    /** Shares of running jobs, taken before any queued job. */
    final ArrayDeque<Share> shares = new ArrayDeque<>();

    final Condition nonEmpty;
    long queuedBytes;
    int running;
    long runningBytes;
    long jobs;
    long keys;
    long okKeys;
    long payloadBytes;
    long queueNanos;
    long backendNanos;

    KindState(StorageKind kind, int capacity, Condition nonEmpty) {
      this.kind = kind;
      this.capacity = capacity;
      this.queue = new ArrayDeque<>(Math.min(capacity, 1024));
      this.nonEmpty = nonEmpty;
    }
  }

  private record Completed(StorageDone done, long payloadBytes) {}

  /** One store call of a running job: the rows of {@code entry.shareRows[index]}. */
  private record Share(Entry entry, int index) {}

  /**
   * The least payload a share of a GET or PUT carries. A job of at least twice this many bytes is
   * split into contiguous shares of its owned rows, one per worker of its kind at most, that idle
   * workers run at once; the job still completes once, when its last share returns, with the facts
   * of all of them (any share's failure fails the job; it is retired only if every share is).
   */
  static final long SHARE_MIN_BYTES = 1L << 20;

  /**
   * With a {@link LandingListener}, a GET is cut into up to this many shares per worker instead of
   * one: workers take them in row order, so the leading rows land (and their listener runs) while
   * the later ones are still being read.
   */
  static final int LANDING_SHARES_PER_WORKER = 4;

  /**
   * A GET cut into more shares than it has workers starts with one small share per worker, which
   * together hold about this fraction (1 / LEAD_DIVISOR) of its rows: the first wave lands after a
   * small part of the bytes, so the store's speed on this read is known early ({@link
   * #restoreEstimate}) and its leading rows are the first to land.
   */
  static final int LEAD_DIVISOR = 64;

  /**
   * Told, on the thread that ran a GET's store call, which of the job's rows landed in full: the
   * call retired and each named row reported an exact-length read. It runs before the job can
   * complete (its completion record is produced after every share's listener returned) and must
   * return quickly; what it throws is logged and ignored. Rows of a job that fails later are still
   * named here: the job's facts decide what is published.
   */
  @FunctionalInterface
  public interface LandingListener {
    /** Rows {@code rows} (indices into the job's rows) of operation {@code operationId} landed. */
    void landed(long operationId, int[] rows);
  }

  private volatile LandingListener landingListener;

  private final Store store;
  private final L3ExecutorConfig config;
  private final MemorySegment host;
  private final LongSupplier nanoClock;
  private final boolean storeFailuresRetire;
  private final int maxKeyBytes;
  private final long maxValueBytes;

  private final ReentrantLock lock = new ReentrantLock();
  private final Map<StorageKind, KindState> kinds = new EnumMap<>(StorageKind.class);
  private final Map<Long, Entry> live = new HashMap<>();
  private final ArrayList<Completed> completions = new ArrayList<>();
  private final HealthMonitor health;

  /** The store's measured restore cost (guarded by the lock). */
  private final RestoreEstimator restoreEstimator = new RestoreEstimator();

  private final WriteRefusals writeRefusals;
  private final Map<SubmitResult, Long> rejections = new EnumMap<>(SubmitResult.class);
  private final List<Thread> workers = new ArrayList<>();

  /** Records produced so far; read without the lock by a caller that waits for news. */
  private volatile long recordsProduced;

  private volatile Runnable completionListener = () -> {};

  /** Records produced under the lock whose listener calls are still due (guarded by lock). */
  private int recordsToAnnounce;

  private long lastOperationId = -1;
  private boolean closing;
  private CloseReport closeReport;
  private boolean quarantined;
  private long unprovenRetirements;
  private long backendCalls;
  private long putsNewlyWritten;
  private long putsAlreadyExisted;
  private long workerFaults;
  private long configurationFailures;
  private String lastConfigurationFailure = "";
  private long queuedRejectedByOutage;
  private boolean diedOfError;

  /** Started by {@link #startStepped}: no workers; the caller runs the work. */
  private boolean stepped;

  private final Set<String> seenConfigurationFailures = new HashSet<>();
  private final Condition closeDone = lock.newCondition();

  private L3Executor(
      Store store, L3ExecutorConfig config, MemorySegment host, LongSupplier nanoClock) {
    this.store = store;
    this.config = config;
    this.host = host;
    this.nanoClock = nanoClock;
    this.storeFailuresRetire = store.failuresRetire();
    this.maxKeyBytes = store.maxKeyBytes();
    this.maxValueBytes = store.maxValueBytes();
    this.health = new HealthMonitor(TimeUnit.MILLISECONDS.toNanos(config.healthCooldownMs()));
    this.writeRefusals = new WriteRefusals(store.name());
    kinds.put(
        StorageKind.QUERY,
        new KindState(StorageKind.QUERY, config.queryQueueCapacity(), lock.newCondition()));
    kinds.put(
        StorageKind.GET,
        new KindState(StorageKind.GET, config.getQueueCapacity(), lock.newCondition()));
    kinds.put(
        StorageKind.PUT,
        new KindState(StorageKind.PUT, config.putQueueCapacity(), lock.newCondition()));
  }

  /**
   * Registers {@code hostAllocation} with the store and starts the workers.
   *
   * @param store the backend; called only from worker threads after this returns
   * @param config limits and worker counts
   * @param hostAllocation the one shared Host allocation every job's ranges address
   * @param nanoClock monotonic time for ages and the health cooldown ({@code System::nanoTime})
   */
  public static L3Executor start(
      Store store, L3ExecutorConfig config, MemorySegment hostAllocation, LongSupplier nanoClock)
      throws Exception {
    L3Executor ex = registered(store, config, hostAllocation, nanoClock);
    ex.startWorkers(StorageKind.QUERY, config.queryWorkers());
    ex.startWorkers(StorageKind.GET, config.getWorkers());
    ex.startWorkers(StorageKind.PUT, config.putWorkers());
    return ex;
  }

  /**
   * An executor without worker threads, for a deterministic simulation of the loop: the caller
   * takes each unit of work with {@link #takeWork} (what a worker would take next) and runs it when
   * it decides the store call happens, on its own thread. Everything else behaves as under {@link
   * #start}; {@link #close()} joins no worker and keeps the store when a taken call never ran.
   */
  public static L3Executor startStepped(
      Store store, L3ExecutorConfig config, MemorySegment hostAllocation, LongSupplier nanoClock)
      throws Exception {
    L3Executor ex = registered(store, config, hostAllocation, nanoClock);
    ex.stepped = true;
    return ex;
  }

  /** Registers {@code hostAllocation} with the store and builds the executor, no workers yet. */
  private static L3Executor registered(
      Store store, L3ExecutorConfig config, MemorySegment hostAllocation, LongSupplier nanoClock)
      throws Exception {
    if (hostAllocation == null || hostAllocation.byteSize() == 0) {
      throw new IllegalArgumentException("the Host allocation is missing or empty");
    }
    store.registerHostBuffer(hostAllocation);
    return new L3Executor(store, config, hostAllocation, nanoClock);
  }

  /**
   * Of an executor started by {@link #startStepped}: takes the next unit of {@code kind}'s work as
   * a worker would (a running job's share first, else the oldest queued job, which becomes
   * running), and returns the store call to run later, or null when there is none. The job stays
   * running, cancellable only by detaching, until the returned call has run.
   */
  public Runnable takeWork(StorageKind kind) {
    if (!stepped) {
      throw new IllegalStateException("the executor runs its own workers");
    }
    KindState ks = kinds.get(kind);
    lock.lock();
    try {
      if (ks.shares.isEmpty() && ks.queue.isEmpty()) {
        return null;
      }
      Work w = takeLocked(ks);
      return () -> runWork(ks, w);
    } finally {
      unlockAndNotify();
    }
  }

  /** A unit of a worker's work: a share to run, or a job none of whose rows this rank owns. */
  private record Work(Share share, Entry unowned) {}

  /** Takes the next share or queued job of {@code ks}; the caller checked there is one. */
  private Work takeLocked(KindState ks) {
    Share share = ks.shares.pollFirst(); // a running job's share comes first, closing or not
    if (share != null) {
      share.entry().shareTakenClockNs[share.index()] = nanoClock.getAsLong();
      return new Work(share, null);
    }
    Entry e = ks.queue.pollFirst();
    ks.queuedBytes -= e.payloadBytes;
    e.phase = Phase.RUNNING;
    ks.running++;
    ks.runningBytes += e.payloadBytes;
    ks.queueNanos += Math.max(0, nanoClock.getAsLong() - e.submitNs);
    share = splitLocked(ks, e);
    return new Work(share, share == null ? e : null);
  }

  private void runWork(KindState ks, Work w) {
    if (w.share() != null) {
      runShare(ks, w.share());
    } else {
      // nothing owned on this rank: no store call, and nothing it says about the backend
      complete(ks, w.unowned(), ResultInterpreter.nothingOwned(w.unowned().job), 0, 0, false, null);
    }
  }

  private void startWorkers(StorageKind kind, int count) {
    for (int i = 0; i < count; i++) {
      KindState ks = kinds.get(kind);
      Thread t =
          Thread.ofPlatform()
              .name("ts-l3-" + kind.name().toLowerCase() + "-" + i)
              .daemon(true)
              .unstarted(() -> workerLoop(ks));
      workers.add(t);
      t.start();
    }
  }

  // ---------------------------------------------------------------- loop-facing API

  /**
   * Submits a job. Bad input (a key longer than the store allows, a range outside the Host
   * allocation, a reused operation id) and a closed executor throw at once and submit nothing;
   * runtime refusals are returned and their records delivered by {@link #poll()}.
   */
  public SubmitResult submit(StorageJob job) {
    validate(job);
    lock.lock();
    try {
      if (closing) {
        throw new IllegalStateException(
            "the L3 executor is closed; operation " + job.operationId() + " was not submitted");
      }
      if (job.operationId() <= lastOperationId) {
        throw new IllegalArgumentException(
            "operation_id="
                + job.operationId()
                + " is not larger than the last submitted id "
                + lastOperationId
                + ": operation ids are never reused");
      }
      lastOperationId = job.operationId();
      long now = nanoClock.getAsLong();
      KindState ks = kinds.get(job.kind());
      SubmitResult refusal = null;
      if (quarantined) {
        refusal = SubmitResult.REJECTED_QUARANTINED;
      } else if (live.size() + completions.size() >= config.maxOutstandingOperations()) {
        refusal = SubmitResult.REJECTED_OPERATION_LIMIT;
      } else if (ks.queue.size() >= ks.capacity) {
        refusal = SubmitResult.REJECTED_QUEUE_FULL;
      }
      HealthMonitor.Admission admission;
      if (refusal != null) {
        admission = HealthMonitor.Admission.REJECT;
      } else if (!reachesBackend(job)) {
        admission = HealthMonitor.Admission.ADMIT; // no backend work: never a probe
      } else {
        admission = health.admit(now);
      }
      if (refusal == null && admission == HealthMonitor.Admission.REJECT) {
        refusal = SubmitResult.REJECTED_UNHEALTHY;
      }
      if (refusal != null) {
        rejections.merge(refusal, 1L, Long::sum);
        addRecord(
            new Completed(
                new StorageDone(
                    job.operationId(), job.kind(), ResultInterpreter.notRun(job), true, 0, false),
                job.payloadBytes()));
        return refusal;
      }
      boolean probe = admission == HealthMonitor.Admission.ADMIT_AS_PROBE;
      Entry e = new Entry(job, now, health.epoch(), probe);
      ks.queue.addLast(e);
      ks.queuedBytes += e.payloadBytes;
      live.put(job.operationId(), e);
      ks.nonEmpty.signal();
      return probe ? SubmitResult.QUEUED_AS_PROBE : SubmitResult.QUEUED;
    } finally {
      unlockAndNotify();
    }
  }

  /**
   * Cancels an operation. A queued job is removed at once, without waiting for any worker, and its
   * record (detached, retired, no evidence) is delivered by the next poll. A running job goes on;
   * its record comes back detached. Returns false for an unknown or already finished id.
   */
  public boolean cancel(long operationId) {
    lock.lock();
    try {
      Entry e = live.get(operationId);
      if (e == null) {
        return false;
      }
      if (e.phase == Phase.RUNNING) {
        e.detached = true;
        return true;
      }
      KindState ks = kinds.get(e.job.kind());
      ks.queue.remove(e);
      ks.queuedBytes -= e.payloadBytes;
      live.remove(operationId);
      if (e.probe) {
        health.onProbeAbandoned(e.healthEpoch);
      }
      addRecord(
          new Completed(
              new StorageDone(
                  operationId, e.job.kind(), ResultInterpreter.notRun(e.job), true, 0, true),
              e.payloadBytes));
      return true;
    } finally {
      unlockAndNotify();
    }
  }

  /**
   * New completion records and the pressure snapshot, under one lock. Scans at most the live jobs
   * (bounded by the operation limit) and never calls the store.
   */
  public L3Poll poll() {
    lock.lock();
    try {
      List<StorageDone> out = new ArrayList<>(completions.size());
      for (Completed c : completions) {
        out.add(c.done());
      }
      completions.clear();
      return new L3Poll(out, pressureLocked(nanoClock.getAsLong()));
    } finally {
      unlockAndNotify();
    }
  }

  /** Whether the job makes a store call on this rank: it owns at least one row. */
  private static boolean reachesBackend(StorageJob job) {
    for (JobRow r : job.rows()) {
      if (r.owned()) {
        return true;
      }
    }
    return false;
  }

  private PressureSnapshot pressureLocked(long now) {
    int queued = 0;
    long queuedBytes = 0;
    long oldest = Long.MAX_VALUE;
    boolean any = false;
    for (Entry e : live.values()) {
      if (e.phase == Phase.QUEUED) {
        queued++;
        queuedBytes += e.payloadBytes;
      }
      if (!any || e.submitNs - oldest < 0) {
        oldest = e.submitNs;
        any = true;
      }
    }
    return new PressureSnapshot(queued, queuedBytes, any ? Math.max(0, now - oldest) : 0);
  }

  // ---------------------------------------------------------------- workers

  private void workerLoop(KindState ks) {
    while (true) {
      Work w;
      lock.lock();
      try {
        while (ks.shares.isEmpty() && ks.queue.isEmpty() && !closing) {
          ks.nonEmpty.awaitUninterruptibly();
        }
        if (ks.shares.isEmpty() && ks.queue.isEmpty()) {
          return; // closing, nothing left to run
        }
        w = takeLocked(ks);
      } finally {
        unlockAndNotify();
      }
      runWork(ks, w);
    }
  }

  /**
   * Divides a job just taken into shares: one, or for a GET or PUT of at least twice {@link
   * #SHARE_MIN_BYTES} (never a probe) one per worker of its kind at most. Queues all but the first
   * for the other workers and returns the first; null when the job owns no row.
   */
  private Share splitLocked(KindState ks, Entry e) {
    int[] owned = ResultInterpreter.ownedRows(e.job);
    if (owned.length == 0) {
      return null;
    }
    int n = 1;
    if (ks.kind != StorageKind.QUERY && !e.probe) {
      int workers = ks.kind == StorageKind.GET ? config.getWorkers() : config.putWorkers();
      if (ks.kind == StorageKind.GET && landingListener != null) {
        workers *= LANDING_SHARES_PER_WORKER;
      }
      long bytes = 0;
      for (int row : owned) {
        bytes += e.job.rows().get(row).range().lengthBytes();
      }
      n = (int) Math.max(1, Math.min(Math.min(workers, owned.length), bytes / SHARE_MIN_BYTES));
    }
    e.owned = owned;
    e.shareRows = new int[n][];
    e.shareResults = new StoreResult[n];
    e.sharesLeft = n;
    e.startNanos = System.nanoTime();
    e.startClockNs = nanoClock.getAsLong();
    int lead = ks.kind == StorageKind.GET ? config.getWorkers() : 0;
    int[] cuts = shareCuts(owned.length, n, lead);
    if (n > 1) {
      e.shareTakenClockNs = new long[n];
      e.shareTakenClockNs[0] = e.startClockNs;
      e.waveShares = waveShares(owned.length, n, lead);
      e.waveLeft = e.waveShares;
    }
    for (int i = 0; i < n; i++) {
      e.shareRows[i] = java.util.Arrays.copyOfRange(owned, cuts[i], cuts[i + 1]);
    }
    for (int i = 1; i < n; i++) {
      ks.shares.addLast(new Share(e, i));
    }
    if (n > 1) {
      ks.nonEmpty.signalAll();
    }
    return new Share(e, 0);
  }

  /**
   * Where {@code rows} rows are cut into {@code n} contiguous shares: {@code n + 1} ascending
   * offsets from 0 to {@code rows}. Evenly, unless there are more shares than {@code lead} workers
   * and rows enough: then the first {@code lead} shares, the first wave, hold about {@code rows /
   * LEAD_DIVISOR} rows between them (one each at least) and the others share the rest evenly.
   */
  static int[] shareCuts(int rows, int n, int lead) {
    int[] cuts = new int[n + 1];
    if (waveShares(rows, n, lead) == 0) {
      for (int i = 0; i <= n; i++) {
        cuts[i] = (int) ((long) rows * i / n);
      }
      return cuts;
    }
    int waveRows = Math.max(lead, rows / LEAD_DIVISOR);
    for (int i = 0; i <= lead; i++) {
      cuts[i] = (int) ((long) waveRows * i / lead);
    }
    int rest = rows - waveRows;
    int later = n - lead;
    for (int i = 1; i <= later; i++) {
      cuts[lead + i] = waveRows + (int) ((long) rest * i / later);
    }
    return cuts;
  }

  /**
   * How many leading shares of {@link #shareCuts}{@code (rows, n, lead)} are its first wave of
   * small shares: {@code lead}, or 0 when the rows are cut evenly.
   */
  static int waveShares(int rows, int n, int lead) {
    int waveRows = Math.max(lead, rows / LEAD_DIVISOR);
    return lead < 1 || n <= lead || rows - waveRows < n - lead ? 0 : lead;
  }

  /** Runs one share's store call; the share that returns last completes the job. */
  private void runShare(KindState ks, Share share) {
    Entry e = share.entry();
    StoreResult result = null;
    Throwable failure = null;
    String configurationFailure = null;
    try {
      result = call(e.job, e.shareRows[share.index()]);
      announceLanded(e.job, e.shareRows[share.index()], result);
    } catch (StoreConfigurationException c) {
      configurationFailure = String.valueOf(c.getMessage());
    } catch (Throwable t) {
      failure = t;
    }
    if (failure != null) {
      recordFault(e, failure);
    }
    if (e.shareResults.length == 1) {
      // the job's only share: nobody else reads or writes these fields, so no lock is needed
      e.shareResults[0] = result;
      e.shareFailure = failure;
      e.shareConfigurationFailure = configurationFailure;
      e.sharesLeft = 0;
      finishShares(ks, e);
      if (failure instanceof Error err) {
        throw err;
      }
      return;
    }
    boolean last;
    long landed = landedBytes(e.job, e.shareRows[share.index()], result);
    long returnedClockNs = nanoClock.getAsLong();
    lock.lock();
    try {
      e.shareResults[share.index()] = result;
      if (share.index() < e.waveShares) {
        e.waveBytes += landed;
        e.waveWhole &= failure == null && landed == rowBytes(e.job, e.shareRows[share.index()]);
        e.waveCallNs = Math.max(e.waveCallNs, returnedClockNs - e.shareTakenClockNs[share.index()]);
        e.waveLeft--;
      }
      if (failure != null && (e.shareFailure == null || failure instanceof Error)) {
        e.shareFailure = failure;
      }
      if (configurationFailure != null && e.shareConfigurationFailure == null) {
        e.shareConfigurationFailure = configurationFailure;
      }
      last = --e.sharesLeft == 0;
    } finally {
      unlockAndNotify();
    }
    if (last) {
      finishShares(ks, e);
    }
    if (failure instanceof Error err) {
      throw err; // this worker dies as a worker failing a whole job would; the job completes once
    }
  }

  /** The bytes of a GET share's rows that were read in full (0 for other kinds, or no answer). */
  private static long landedBytes(StorageJob job, int[] rows, StoreResult result) {
    if (job.kind() != StorageKind.GET
        || result == null
        || !result.retired()
        || result.rows().size() != rows.length) {
      return 0;
    }
    long bytes = 0;
    for (int i = 0; i < rows.length; i++) {
      long want = job.rows().get(rows[i]).range().lengthBytes();
      if (result.rows().get(i) instanceof RowResult.Ok ok && ok.bytes() == want) {
        bytes += want;
      }
    }
    return bytes;
  }

  /** The bytes of {@code rows} of {@code job}. */
  private static long rowBytes(StorageJob job, int[] rows) {
    long bytes = 0;
    for (int row : rows) {
      bytes += job.rows().get(row).range().lengthBytes();
    }
    return bytes;
  }

  /** Tells the landing listener which rows of a GET share landed in full. */
  private void announceLanded(StorageJob job, int[] rows, StoreResult result) {
    LandingListener listener = landingListener;
    if (listener == null
        || job.kind() != StorageKind.GET
        || result == null
        || !result.retired()
        || result.rows().size() != rows.length) {
      return;
    }
    int[] landed = new int[rows.length];
    int n = 0;
    for (int i = 0; i < rows.length; i++) {
      if (result.rows().get(i) instanceof RowResult.Ok ok
          && ok.bytes() == job.rows().get(rows[i]).range().lengthBytes()) {
        landed[n++] = rows[i];
      }
    }
    if (n == 0) {
      return;
    }
    try {
      listener.landed(job.operationId(), java.util.Arrays.copyOf(landed, n));
    } catch (RuntimeException ex) {
      LOG.log(
          Level.WARNING, "the landing listener of operation " + job.operationId() + " threw", ex);
    }
  }

  /** The facts of a job, once every share has returned (no lock held). */
  private void finishShares(KindState ks, Entry e) {
    int[] owned = e.owned;
    ResultInterpreter.Facts facts;
    boolean fatal = e.shareFailure instanceof Error;
    if (fatal) {
      facts = ResultInterpreter.fatal(e.job, owned);
    } else if (e.shareFailure != null) {
      facts = ResultInterpreter.failed(e.job, owned, storeFailuresRetire);
    } else if (e.shareConfigurationFailure != null) {
      facts = ResultInterpreter.configurationFailure(e.job, owned);
    } else {
      List<RowResult> rows = new ArrayList<>(owned.length);
      boolean retired = true;
      boolean wellFormed = true;
      for (int i = 0; i < e.shareResults.length; i++) {
        StoreResult r = e.shareResults[i];
        if (r == null || r.rows().size() != e.shareRows[i].length) {
          wellFormed = false; // the merged answer must not line up by accident
          retired &= r != null && r.retired();
          continue;
        }
        rows.addAll(r.rows());
        retired &= r.retired();
      }
      StoreResult merged =
          e.shareResults.length == 1
              ? e.shareResults[0]
              : new StoreResult(wellFormed ? rows : List.of(), retired);
      facts = ResultInterpreter.interpret(e.job, owned, merged, storeFailuresRetire);
    }
    complete(
        ks,
        e,
        facts,
        e.shareResults.length,
        System.nanoTime() - e.startNanos,
        fatal,
        e.shareConfigurationFailure);
  }

  private StoreResult call(StorageJob job, int[] owned) throws Exception {
    List<String> keys = new ArrayList<>(owned.length);
    for (int row : owned) {
      keys.add(job.rows().get(row).key());
    }
    if (job.kind() == StorageKind.QUERY) {
      return store.exists(keys);
    }
    List<MemorySegment> segments = new ArrayList<>(owned.length);
    for (int row : owned) {
      JobRow r = job.rows().get(row);
      segments.add(host.asSlice(r.range().offset(), r.range().lengthBytes()));
    }
    return job.kind() == StorageKind.GET ? store.get(keys, segments) : store.put(keys, segments);
  }

  private void complete(
      KindState ks,
      Entry e,
      ResultInterpreter.Facts facts,
      int calls,
      long backendNs,
      boolean fatal,
      String configurationFailure) {
    lock.lock();
    try {
      long now = nanoClock.getAsLong();
      live.remove(e.job.operationId());
      ks.running--;
      ks.runningBytes -= e.payloadBytes;
      ks.jobs++;
      ks.keys += e.job.rows().size();
      ks.backendNanos += backendNs;
      backendCalls += calls;
      if (configurationFailure != null) {
        recordConfigurationFailureLocked(e, configurationFailure);
      }
      if (facts.outage()) {
        health.onOutage(now);
        rejectQueuedAfterOutageLocked();
      } else if (calls > 0) {
        health.onSuccess(e.healthEpoch); // only a call that reached the backend heals
        if (facts.retired() && configurationFailure == null) {
          long ns = Math.max(0, now - e.startClockNs);
          switch (e.job.kind()) {
            case QUERY -> restoreEstimator.onQuery(ns);
            case GET -> restoreEstimator.onGet(facts.bytes(), ns);
            case PUT -> {}
          }
        }
      }
      if (calls > 0 && e.job.kind() == StorageKind.PUT) {
        writeRefusals.onPutAnswered(facts.refused(), facts.newlyWritten(), facts.refusal(), now);
      }
      if (fatal) {
        diedOfError = true;
      }
      if (!facts.retired() || fatal) {
        if (!quarantined) {
          LOG.log(
              Level.SEVERE,
              "L3 operation {0} ({1}) could not be proven retired: the executor is quarantined"
                  + " and takes no more work until the process restarts",
              new Object[] {e.job.operationId(), e.job.kind()});
        }
        quarantined = true;
      }
      if (!facts.retired() && !e.countedUnproven) {
        unprovenRetirements++;
        e.countedUnproven = true;
      }
      if (fatal) {
        // This worker is about to die: nothing queued may wait for it.
        for (KindState other : kinds.values()) {
          while (!other.queue.isEmpty()) {
            cancelQueuedLocked(other, other.queue.peekFirst());
          }
        }
      }
      StorageDone done =
          new StorageDone(
              e.job.operationId(),
              e.job.kind(),
              facts.outcomes(),
              facts.retired(),
              facts.bytes(),
              e.detached);
      ks.okKeys += done.okCount();
      ks.payloadBytes += facts.bytes();
      putsNewlyWritten += facts.newlyWritten();
      putsAlreadyExisted += facts.alreadyExisted();
      addRecord(new Completed(done, e.payloadBytes));
    } finally {
      unlockAndNotify();
    }
  }

  private void addRecord(Completed c) {
    completions.add(c);
    recordsProduced++; // written under the lock; volatile for lock-free readers
    recordsToAnnounce++;
  }

  /**
   * Releases the lock, then runs the completion listener once for every record produced while it
   * was held. The listener runs outside the lock so that the loop it wakes does not find the lock
   * still held by the thread that woke it (and park again until that thread lets go).
   */
  private void unlockAndNotify() {
    int records = recordsToAnnounce;
    recordsToAnnounce = 0;
    lock.unlock();
    if (records > 0) {
      Runnable listener = completionListener;
      for (int i = 0; i < records; i++) {
        listener.run();
      }
    }
  }

  /**
   * Runs {@code listener} each time a completion record is produced, so that an event loop can wake
   * for its next poll instead of polling on a timer. It runs on the thread that produced the record
   * (a worker, or the caller of {@link #submit} or {@link #cancel}) right after that thread
   * released the executor's lock, once per record; the record may already have been polled by then.
   * It must return at once and must not call the executor.
   */
  public void onCompletion(Runnable listener) {
    completionListener = java.util.Objects.requireNonNull(listener, "listener");
  }

  /**
   * Runs {@code listener} as the rows of each GET land (see {@link LandingListener}); set before
   * the first job is submitted. GETs are then cut into more, smaller shares.
   */
  public void onLanded(LandingListener listener) {
    landingListener = java.util.Objects.requireNonNull(listener, "listener");
  }

  /**
   * How many completion records the executor has produced so far (delivered or not). It changes
   * exactly when a later {@link #poll()} has something new, and is read without the lock: a caller
   * waiting for a completion can watch it instead of polling in a tight loop.
   */
  public long recordsProduced() {
    return recordsProduced;
  }

  /**
   * The outage just recorded also stops the jobs still waiting in a queue: they were admitted
   * before it and must not reach the backend during the cooldown. Each completes now as rejected
   * (FAILED, retired, no object evidence, not detached), as a submission refused during the
   * cooldown would. Jobs with nothing owned stay: they make no store call.
   */
  private void rejectQueuedAfterOutageLocked() {
    for (KindState ks : kinds.values()) {
      var it = ks.queue.iterator();
      while (it.hasNext()) {
        Entry q = it.next();
        if (!reachesBackend(q.job)) {
          continue;
        }
        it.remove();
        ks.queuedBytes -= q.payloadBytes;
        live.remove(q.job.operationId());
        queuedRejectedByOutage++;
        addRecord(
            new Completed(
                new StorageDone(
                    q.job.operationId(),
                    q.job.kind(),
                    ResultInterpreter.notRun(q.job),
                    true,
                    0,
                    q.detached),
                q.payloadBytes));
      }
    }
  }

  private void recordConfigurationFailureLocked(Entry e, String message) {
    configurationFailures++;
    lastConfigurationFailure = message;
    if (seenConfigurationFailures.size() < 1024 && seenConfigurationFailures.add(message)) {
      LOG.log(
          Level.SEVERE,
          "L3 store {0} refused {1} operation {2} because of its configuration (not an outage:"
              + " no cooldown; every such job fails until the configuration is fixed): {3}",
          new Object[] {store.name(), e.job.kind(), e.job.operationId(), message});
    }
  }

  private final java.util.Set<String> seenFaults = new java.util.HashSet<>();

  private void recordFault(Entry e, Throwable t) {
    lock.lock();
    try {
      workerFaults++;
      String signature = t.getClass().getName() + ": " + t.getMessage();
      if (seenFaults.size() < 1024 && seenFaults.add(signature)) {
        LOG.log(
            Level.WARNING,
            "L3 " + e.job.kind() + " call failed (first occurrence of this error)",
            t);
      }
    } finally {
      unlockAndNotify();
    }
  }

  // ---------------------------------------------------------------- validation

  private void validate(StorageJob job) {
    for (int i = 0; i < job.rows().size(); i++) {
      JobRow r = job.rows().get(i);
      int keyBytes =
          r.key().length() * 3 <= maxKeyBytes
              ? r.key().length()
              : r.key().getBytes(StandardCharsets.UTF_8).length;
      if (keyBytes > maxKeyBytes) {
        throw new IllegalArgumentException(
            "operation "
                + job.operationId()
                + " row "
                + i
                + " key of "
                + keyBytes
                + " bytes exceeds the "
                + store.name()
                + " store's limit of "
                + maxKeyBytes);
      }
      if (r.range() != null && r.range().lengthBytes() > maxValueBytes) {
        throw new IllegalArgumentException(
            "operation "
                + job.operationId()
                + " row "
                + i
                + " value of "
                + r.range().lengthBytes()
                + " bytes exceeds the "
                + store.name()
                + " store's limit of "
                + maxValueBytes);
      }
      if (r.range() != null && r.range().end() > host.byteSize()) {
        throw new IllegalArgumentException(
            "operation "
                + job.operationId()
                + " row "
                + i
                + " range [offset="
                + r.range().offset()
                + ", end="
                + r.range().end()
                + ") lies outside the Host allocation of "
                + host.byteSize()
                + " bytes");
      }
    }
  }

  // ---------------------------------------------------------------- state and shutdown

  /** True once an unretired result stopped all new work. */
  public boolean quarantined() {
    lock.lock();
    try {
      return quarantined;
    } finally {
      unlockAndNotify();
    }
  }

  /**
   * What the store costs to restore from, as measured over this executor's QUERY and GET calls
   * ({@link RestoreEstimate}); one short lock, no store call. While GETs run whose first wave of
   * small shares ({@link #LEAD_DIVISOR}) has returned, every row read in full, the bandwidth is at
   * most the slowest wave's rate: its bytes over its longest call less the latency, as a finished
   * GET's are measured. So a store that reads slower than its finished calls said shows after a
   * GET's first wave, not when its last share returns.
   *
   * <p>Only the wave is measured, and only once all of it returned. A running GET's bytes land a
   * share at a time, so the bytes of its returned shares over the time since it started would count
   * the time of the shares still running but none of their bytes: between two landings that figure
   * falls far below the rate of a store that reads steadily (a twentieth of it before the second
   * wave of a GET of four shares per worker, a quarter after the first of four even shares), and
   * the engine would agree on it at once ({@code CostReporter}) and abandon restores the store is
   * serving at its usual speed. The wave's shares start together on idle workers; one that waited
   * for a busy worker makes its call no longer, so a busy executor overstates the wave's rate (no
   * cap) rather than understates it.
   */
  public RestoreEstimate restoreEstimate() {
    lock.lock();
    try {
      double latencyNs = restoreEstimator.latencyNs();
      double slowest = 0;
      for (Entry e : live.values()) {
        if (e.phase != Phase.RUNNING
            || e.job.kind() != StorageKind.GET
            || e.probe
            || e.waveShares == 0
            || e.waveLeft > 0
            || !e.waveWhole
            || e.waveBytes <= 0) {
          continue;
        }
        double ns = e.waveCallNs - latencyNs;
        if (ns <= 0) {
          continue; // faster than the latency: nothing against the finished calls
        }
        double rate = e.waveBytes * 1e9 / ns;
        slowest = slowest == 0 ? rate : Math.min(slowest, rate);
      }
      return restoreEstimator.snapshot(slowest);
    } finally {
      lock.unlock();
    }
  }

  /** The current counters and gauges. Reading them changes nothing (no probe is consumed). */
  public L3Metrics metrics() {
    lock.lock();
    try {
      Map<String, Long> rej = new HashMap<>();
      rejections.forEach((k, v) -> rej.put(k.name(), v));
      return new L3Metrics(
          kindMetrics(StorageKind.QUERY),
          kindMetrics(StorageKind.GET),
          kindMetrics(StorageKind.PUT),
          health.state().name(),
          health.epoch(),
          health.outages(),
          unprovenRetirements,
          quarantined,
          backendCalls,
          putsNewlyWritten,
          putsAlreadyExisted,
          rej,
          workerFaults,
          configurationFailures,
          lastConfigurationFailure,
          queuedRejectedByOutage,
          writeRefusals.refusing(),
          writeRefusals.refusedKeys(),
          writeRefusals.reason());
    } finally {
      unlockAndNotify();
    }
  }

  private L3Metrics.Kind kindMetrics(StorageKind kind) {
    KindState ks = kinds.get(kind);
    int completed = 0;
    long completedBytes = 0;
    for (Completed c : completions) {
      if (c.done().kind() == kind) {
        completed++;
        completedBytes += c.payloadBytes();
      }
    }
    return new L3Metrics.Kind(
        ks.jobs,
        ks.keys,
        ks.okKeys,
        ks.payloadBytes,
        ks.queueNanos,
        ks.backendNanos,
        ks.queue.size(),
        ks.queuedBytes,
        ks.running,
        ks.runningBytes,
        completed,
        completedBytes);
  }

  /**
   * Stops taking work, cancels queued jobs (their detached records stay pollable), joins the
   * workers until the configured deadline, then closes the store — unless some call is still
   * running or some result was never proven retired. In that case the store is kept open for the
   * life of the process and the report says a restart is required, counting every job whose
   * retirement is unproven (a GET or PUT still inside the store counts). Runs once: concurrent and
   * later calls wait for the first and return its report.
   */
  public CloseReport close() {
    lock.lock();
    try {
      if (closing) {
        while (closeReport == null) {
          closeDone.awaitUninterruptibly();
        }
        return closeReport;
      }
      closing = true;
      for (KindState ks : kinds.values()) {
        while (!ks.queue.isEmpty()) {
          Entry e = ks.queue.peekFirst();
          cancelQueuedLocked(ks, e);
        }
        ks.nonEmpty.signalAll();
      }
    } finally {
      unlockAndNotify();
    }
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(config.closeJoinDeadlineMs());
    for (Thread t : workers) {
      long left = deadline - System.nanoTime();
      if (left <= 0 || runningCalls() == 0) {
        break; // past the deadline, or nothing left inside the store: idle workers never hold it
      }
      try {
        t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
      } catch (InterruptedException ie) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    lock.lock();
    try {
      int inside = 0;
      for (Entry e : live.values()) {
        if (e.phase != Phase.RUNNING) {
          continue;
        }
        inside++;
        if (e.job.kind() != StorageKind.QUERY && !e.countedUnproven) {
          // still touching its Host ranges as far as anyone can tell
          e.countedUnproven = true;
          unprovenRetirements++;
          quarantined = true;
        }
      }
      int unproven = (int) unprovenRetirements;
      boolean keep = inside > 0 || quarantined;
      String message;
      boolean storeClosed = false;
      if (keep) {
        message =
            "L3 store "
                + store.name()
                + " left open: "
                + inside
                + " worker(s) still inside a store call and "
                + unproven
                + " job(s) never proven retired"
                + (diedOfError ? "; a worker died of an Error inside a store call" : "")
                + "; restart the process to reclaim its memory";
        LOG.severe(message);
      } else {
        try {
          store.close();
          storeClosed = true;
          message = "L3 store " + store.name() + " closed";
        } catch (Exception ex) {
          message = "L3 store " + store.name() + " failed to close: " + ex;
          LOG.log(Level.WARNING, message, ex);
        }
      }
      closeReport = new CloseReport(storeClosed, keep, inside, unproven, message);
      closeDone.signalAll();
      return closeReport;
    } finally {
      unlockAndNotify();
    }
  }

  private int runningCalls() {
    lock.lock();
    try {
      int running = 0;
      for (KindState ks : kinds.values()) {
        running += ks.running;
      }
      return running;
    } finally {
      unlockAndNotify();
    }
  }

  private void cancelQueuedLocked(KindState ks, Entry e) {
    ks.queue.remove(e);
    ks.queuedBytes -= e.payloadBytes;
    live.remove(e.job.operationId());
    addRecord(
        new Completed(
            new StorageDone(
                e.job.operationId(), e.job.kind(), ResultInterpreter.notRun(e.job), true, 0, true),
            e.payloadBytes));
  }
}

package io.tokenspeed.engine;

import io.tokenspeed.cache.Admission;
import io.tokenspeed.cache.BlockCopy;
import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.control.ControlPlaneException;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageJobs;
import io.tokenspeed.engine.l3.StorageTier;
import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.engine.memory.CopyFence;
import io.tokenspeed.engine.memory.DeviceHandle;
import io.tokenspeed.engine.memory.DevicePools;
import io.tokenspeed.engine.memory.HostCacheStorage;
import io.tokenspeed.l3.CloseReport;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.sampling.FinishReason;
import io.tokenspeed.model.sampling.Sampler;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.SamplingState;
import io.tokenspeed.scheduler.ExecutionPlan;
import io.tokenspeed.scheduler.RequestState;
import io.tokenspeed.scheduler.RoundInput;
import io.tokenspeed.scheduler.Scheduler;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One engine replica (TP = 1, without L3): the Device and Host KV tiers, the copy thread between
 * them, and the event loop that runs the scheduler's plans on the model.
 *
 * <p>A round of the loop thread (architecture §4, without the relay exchange and storage):
 *
 * <pre>
 *   1. intake      new requests (checked, then submitted to the scheduler) and cancellations
 *   2. plan        scheduler.round(tick, cancellations): forward batch, Device copies, demotions
 *   3. dispatch    H2D loads and copy-on-write to the copy thread in plan order; the forward waits
 *                  for their fence (a storage completion never stands in for it); then the D2H
 *                  demotions, which copy while the forward computes (commit waits for them)
 *   4. forward     the model over the Device pools, through each request's block tables
 *   5. commit      scheduler.onForwardDone: prefill progress, publication, demoted blocks to Host
 *   6. sample      the next token of every request whose known tokens are all computed; stop
 *                  tokens and token limits end requests (their blocks go back at once)
 *   7. resume      a request retracted after it generated tokens is resubmitted with its prompt and
 *                  those tokens, so it resumes by recomputing them exactly
 * </pre>
 *
 * <p>Rounds run while requests are active and, once they are not, until the background work is
 * done: a round after a request ends, and rounds while demotions are planned, so cached Device
 * blocks move to the Host even when no request arrives.
 *
 * <p>The scheduler and cache are owned by the loop thread; callers only touch the bounded intake
 * queue and the cancellation queue, and read their {@link RequestHandle}.
 */
public final class Engine implements AutoCloseable {
  private static final long IDLE_WAIT_MS = 20;

  /**
   * The longest wait between rounds while only L3 work is pending: a completion record wakes the
   * loop at once, so this only paces the ticks that expire soft deadlines.
   */
  private static final long STORAGE_TICK_MS = 5;

  /** How long close() lets pending L3 work (backups) finish before closing the executor. */
  private static final long L3_DRAIN_MS = 10_000;

  private final CausalLm model;
  private final EngineConfig config;
  private final CacheLayout layout;
  private final OptionalInt eosId;
  private final DevicePools device;
  private final HostCacheStorage host;
  private final DeviceHandle copies;
  private final CacheCoordinator cache;
  private final Scheduler scheduler;
  private final ComputePool pool;
  private final Sampler sampler;
  private final ArrayBlockingQueue<Active> intake;
  private final ConcurrentLinkedQueue<Long> cancels = new ConcurrentLinkedQueue<>();

  /** Permits for the loop's wait: released by submit, cancel, administration, close and L3. */
  private final java.util.concurrent.Semaphore wake = new java.util.concurrent.Semaphore(0);

  private final AtomicLong ids = new AtomicLong();
  private final AtomicLong seeds = new AtomicLong(0x5eed);
  private final Map<Long, Active> active = new LinkedHashMap<>();
  private final EngineObserver observer;
  private final Thread loop;
  private volatile boolean closing;
  private volatile Throwable fatal;
  private long rounds; // the loop thread's; others read stats()
  private volatile EngineStats stats = EngineStats.NONE;

  /** An idle round is due: a request ended or demotions are in progress (background work). */
  private boolean housekeeping;

  private long endedRequests;
  private long imageBlocks;
  private long roundNanos;

  /** L3 under the Host tier, or null without a backend. */
  private final StorageTransferManager stm;

  private final StorageTier storage;

  /** Keys restored from L3 recently (for the requests' figures), oldest first. */
  private final java.util.SequencedSet<CacheKey> restored = new java.util.LinkedHashSet<>();

  private static final int MAX_RESTORED_KEYS = 1 << 16;

  /** Keys of finished requests to write through to the Host in the next round (with L3). */
  private final List<CacheKey> backups = new ArrayList<>();

  /** The last round planned no forward while storage work was pending: wait a little. */
  private boolean storageWait;

  private volatile long drainDeadlineNs;

  /** Administrative tasks for the loop thread, run before the next round. */
  private final ConcurrentLinkedQueue<AdminTask> admin = new ConcurrentLinkedQueue<>();

  private record AdminTask(Runnable run, CompletableFuture<?> result) {}

  private volatile String weightVersion;
  private final String attentionBackend;
  private final io.tokenspeed.l3.spi.Store storageStore;
  private boolean closed; // guarded by this
  private volatile CloseReport closeReport;

  /** The latest copy batch the forward depends on (loads, copy-on-write, State copies). */
  private long awaitedFence;

  private long forwardNanos;

  /** One request the loop serves. */
  private static final class Active {
    final long id;
    final RequestHandle handle;
    final int promptTokens;
    final SamplingState sampling;
    final long submittedNs;
    int[] tokens;
    int known;
    long admittedNs;
    long firstTokenNs;
    long lastTokenNs;
    int reusedDevice = -1;
    int reusedHost;
    int reusedStorage;
    PromptKeys keys;
    Admission admission;

    /** Whether the State groups' running state lives in the working slot (after a forward). */
    boolean stateInWorkingSlot;

    /** Leading tokens whose KV the request's Device blocks hold (reused, loaded or computed). */
    int kvTokens;

    /** Tokens the forward computed for it so far. */
    long computedTokens;

    Active(long id, RequestHandle handle, int[] prompt, SamplingState sampling, long nowNs) {
      this.id = id;
      this.handle = handle;
      this.promptTokens = prompt.length;
      this.sampling = sampling;
      this.submittedNs = nowNs;
      this.tokens = Arrays.copyOf(prompt, prompt.length + sampling.params().maxTokens());
      this.known = prompt.length;
    }

    int generated() {
      return known - promptTokens;
    }
  }

  private Engine(
      CausalLm model,
      EngineConfig config,
      OptionalInt eosId,
      EngineObserver observer,
      L3Settings l3) {
    this.model = model;
    this.config = config;
    this.eosId = eosId;
    this.observer = observer;
    this.layout = model.cacheLayout(config.prefixGranularity(), config.blockGranularity());
    this.device = new DevicePools(layout, config.deviceParents());
    this.host = HostCacheStorage.ofRatio(layout, config.deviceParents(), config.hostRatio());
    this.copies = new DeviceHandle(device, host);
    this.cache = new CacheCoordinator(layout, config.deviceParents(), host.numParents(), 1024);
    this.stm = l3 == null ? null : new StorageTransferManager(l3.runtime().scheduling(), cache);
    this.scheduler = new Scheduler(cache, stm, schedulerConfig(config));
    this.weightVersion = model.identity().weightVersion();
    this.attentionBackend = l3 == null ? L3Settings.CPU_ATTENTION_BACKEND : l3.attentionBackend();
    this.storageStore = l3 == null ? null : l3.store();
    this.storage = l3 == null ? null : startStorage(l3);
    if (storage != null) {
      storage.onCompletion(this::wake);
    }
    this.pool = ComputePool.ofThreads(config.computeThreads());
    this.sampler = new Sampler(model.vocabSize());
    this.intake = new ArrayBlockingQueue<>(config.maxQueued());
    this.loop = new Thread(this::run, "ts-engine-loop");
    this.loop.setDaemon(true);
  }

  /** The namespace of this engine's deployment identity at weight version {@code version}. */
  private Namespace namespaceFor(String version) {
    ModelIdentity mi = model.identity();
    return Namespace.of(
        new DeploymentIdentity(
            mi.modelId(),
            mi.checkpointRevision(),
            version,
            null,
            null,
            layout,
            1,
            1,
            1,
            1,
            attentionBackend));
  }

  /** The executor and the exchange over the Host allocation; frees everything on failure. */
  private StorageTier startStorage(L3Settings l3) {
    try {
      return StorageTier.start(
          l3,
          new StorageJobs(namespaceFor(weightVersion), layout, host.geometry(), 0),
          host.memory().segment());
    } catch (Exception e) {
      copies.close();
      device.close();
      host.close();
      throw new IllegalStateException("L3 could not start over " + l3.store().name() + ": " + e, e);
    }
  }

  // ---------------------------------------------------------------- administration

  /** Runs {@code task} on the loop thread before its next round; completes with its result. */
  private <T> CompletableFuture<T> onLoop(java.util.function.Supplier<T> task) {
    CompletableFuture<T> f = new CompletableFuture<>();
    if (closing) {
      f.completeExceptionally(new IllegalStateException("engine is closed"));
      return f;
    }
    admin.add(
        new AdminTask(
            () -> {
              try {
                f.complete(task.get());
              } catch (Throwable t) {
                f.completeExceptionally(t);
              }
            },
            f));
    wake();
    return f;
  }

  /**
   * A full cache clear, before the next round: every cached Device and Host block goes and nothing
   * matches any more; with L3, every outstanding storage operation (Ready holds and quarantined
   * ones included) is rejected without waiting for its I/O, whose references live on until it
   * retires. Requests in flight go on: what they hold is withdrawn, never published. The store's
   * objects stay (see {@link #updateWeightVersion}).
   */
  public CompletableFuture<Void> clearCache() {
    return onLoop(
        () -> {
          scheduler.clearAll();
          backups.clear();
          return null;
        });
  }

  /**
   * An L1-only clear, before the next round: the cached Device blocks go; Host entries and any
   * Host-only storage I/O are left alone (a later prompt finds its prefix on the Host).
   */
  public CompletableFuture<Void> clearDeviceCache() {
    return onLoop(
        () -> {
          scheduler.clearDevice();
          return null;
        });
  }

  /**
   * A weight-version update, which rotates the L3 namespace: after a preflight on the loop thread,
   * deletes the current namespace's objects from the store on the calling thread (synchronously: a
   * slow store delays this call, never a round), then, only if that succeeded, clears the cache as
   * {@link #clearCache} does and switches every later key to the namespace of {@code version}.
   * Without L3 it clears and records the version. Returns the objects deleted.
   *
   * @throws Exception the store's deletion failure: nothing was cleared or switched
   */
  public long updateWeightVersion(String version) throws Exception {
    if (version == null || version.isBlank()) {
      throw new IllegalArgumentException("weight_version must be a non-empty string");
    }
    String current = onLoop(() -> weightVersion).get();
    long deleted =
        storage == null ? 0 : storageStore.deleteNamespace(namespaceFor(current).toString());
    onLoop(
            () -> {
              scheduler.clearAll();
              backups.clear();
              weightVersion = version;
              if (storage != null) {
                storage.switchNamespace(namespaceFor(version));
              }
              return null;
            })
        .get();
    return deleted;
  }

  /** The L3 namespace every object key of this engine is built under; empty without L3. */
  public Optional<Namespace> storageNamespace() {
    return storage == null ? Optional.empty() : Optional.of(storage.jobs().namespace());
  }

  /** The weight version of the deployment identity (the model's, or the last update's). */
  public String weightVersion() {
    return weightVersion;
  }

  /**
   * Starts an engine serving {@code model}, with the Device and Host tiers only. The model stays
   * the caller's: closing the engine does not close it.
   *
   * @param eosId the tokenizer's end-of-sequence id, if any (a stop token unless ignore_eos)
   */
  public static Engine start(CausalLm model, EngineConfig config, OptionalInt eosId) {
    return start(model, config, eosId, (L3Settings) null);
  }

  /**
   * Starts an engine serving {@code model} with L3 under its Host tier when {@code l3} is given
   * (the engine owns its store from then on); without it there is no executor, no exchange and no
   * storage work at all.
   *
   * @throws IllegalStateException when L3 cannot start (nothing is left running)
   */
  public static Engine start(
      CausalLm model, EngineConfig config, OptionalInt eosId, L3Settings l3) {
    Engine e = new Engine(model, config, eosId, EngineObserver.NONE, l3);
    e.resume();
    return e;
  }

  /** {@link #start} with a hook the loop thread runs after every round (tests check invariants). */
  static Engine start(
      CausalLm model, EngineConfig config, OptionalInt eosId, EngineObserver observer) {
    Engine e = paused(model, config, eosId, observer);
    e.resume();
    return e;
  }

  /**
   * An engine whose loop has not started: requests submitted now wait in the intake queue, and the
   * first round after {@link #resume} takes them all (tests that need them in one round).
   */
  static Engine paused(
      CausalLm model, EngineConfig config, OptionalInt eosId, EngineObserver observer) {
    return new Engine(model, config, eosId, observer, null);
  }

  /** {@link #paused} with L3 (null for none). */
  static Engine paused(
      CausalLm model,
      EngineConfig config,
      OptionalInt eosId,
      EngineObserver observer,
      L3Settings l3) {
    return new Engine(model, config, eosId, observer, l3);
  }

  /** Starts the loop of a {@link #paused} engine. */
  void resume() {
    loop.start();
  }

  /**
   * The fewest Device parents, doubling from one per block row of every group, whose single-request
   * limit under {@link EngineConfig#defaults} reaches {@code tokens} (no memory is allocated).
   */
  public static int deviceParentsFor(CausalLm model, int tokens) {
    EngineConfig base = EngineConfig.defaults(2);
    CacheLayout layout = model.cacheLayout(base.prefixGranularity(), base.blockGranularity());
    long rows = 0;
    for (var g : layout.groups()) {
      rows += g.rowsFor(tokens);
    }
    int parents = (int) Math.min(Integer.MAX_VALUE / 2, Math.max(2, rows + 1));
    while (true) {
      Scheduler s =
          new Scheduler(
              new CacheCoordinator(layout, parents, 1, 16),
              null,
              schedulerConfig(EngineConfig.defaults(parents)));
      if (s.maxRequestTokens() >= tokens || parents >= Integer.MAX_VALUE / 2) {
        return parents;
      }
      parents *= 2;
    }
  }

  /** The scheduler's settings of an engine of {@code config}. */
  static Scheduler.Config schedulerConfig(EngineConfig config) {
    return new Scheduler.Config(
        config.tokenBudget(),
        config.maxRunning(),
        Scheduler.Config.DEFAULT_HEADROOM_TOKENS,
        config.demoteBelowFreeParents());
  }

  /** The cache layout the engine's tiers use. */
  public CacheLayout layout() {
    return layout;
  }

  /** The most tokens (prompt plus max_tokens) one request may need. */
  public int maxRequestTokens() {
    return scheduler.maxRequestTokens();
  }

  /**
   * Submits a prompt. Bad input (an empty prompt, a token id outside the vocabulary, a prompt plus
   * max_tokens over the single-request limit) ends the returned handle with an error at once; the
   * engine goes on serving the others.
   *
   * @throws IllegalStateException when the engine is closed or its intake queue is full
   */
  public RequestHandle submit(int[] prompt, SamplingParams params) {
    if (closing) {
      throw new IllegalStateException(
          fatal == null ? "engine is closed" : "engine stopped after a failure: " + fatal);
    }
    long id = ids.incrementAndGet();
    RequestHandle handle = new RequestHandle(id, this);
    String error = check(prompt, params);
    if (error != null) {
      handle.end(new GenerationResult(id, new int[0], "error", error, null));
      return handle;
    }
    SamplingParams resolved = params.withSeedIfAbsent(seeds::incrementAndGet);
    Active a =
        new Active(id, handle, prompt, new SamplingState(resolved, eosId), System.nanoTime());
    if (!intake.offer(a)) {
      throw new IllegalStateException(
          "engine intake is full (max_queued=" + config.maxQueued() + ")");
    }
    wake();
    return handle;
  }

  private String check(int[] prompt, SamplingParams params) {
    if (prompt == null || prompt.length == 0) {
      return "prompt is empty: at least one token is needed";
    }
    if (params == null) {
      return "sampling params are required";
    }
    for (int i = 0; i < prompt.length; i++) {
      if (prompt[i] < 0 || prompt[i] >= model.vocabSize()) {
        return "prompt token "
            + i
            + " id="
            + prompt[i]
            + " is outside the vocabulary [0, "
            + model.vocabSize()
            + ")";
      }
    }
    long need = (long) prompt.length + params.maxTokens();
    if (need > maxRequestTokens()) {
      return "prompt of "
          + prompt.length
          + " tokens + max_tokens "
          + params.maxTokens()
          + " = "
          + need
          + " exceeds the single-request limit of "
          + maxRequestTokens()
          + " tokens (what the Device holds of one request in every cache group)";
    }
    return null;
  }

  void cancel(long id) {
    cancels.add(id);
    wake();
  }

  /** The figures of the latest round. */
  public EngineStats stats() {
    return stats;
  }

  // ---------------------------------------------------------------- the loop

  private void run() {
    try {
      while (!closing || !active.isEmpty() || !intake.isEmpty() || draining()) {
        if (closing) {
          for (Active a; (a = intake.poll()) != null; ) {
            a.handle.end(result(a, "cancelled", "engine closed"));
          }
          cancels.addAll(active.keySet()); // one round ends them all
        }
        boolean arrived = !intake.isEmpty() || !cancels.isEmpty() || !admin.isEmpty();
        boolean agreementDue = storage != null && storage.agreementDue(); // next round returns it
        if (active.isEmpty() && !arrived && !housekeeping && !agreementDue) {
          boolean busy = storageBusy(); // L3 facts still to come: a round per event or tick
          awaitWork(busy ? STORAGE_TICK_MS : IDLE_WAIT_MS);
          if (!busy && intake.isEmpty() && cancels.isEmpty() && admin.isEmpty()) {
            continue;
          }
        } else if (storageWait && !arrived && !agreementDue) {
          awaitWork(STORAGE_TICK_MS); // nothing to compute until L3 answers
        }
        round();
      }
    } catch (Throwable t) {
      fatal = t;
      closing = true; // refuse new work: nothing would serve it
      for (Active a : active.values()) {
        a.handle.end(result(a, "error", "engine loop failed: " + t));
      }
      for (Active a : intake) {
        a.handle.end(result(a, "error", "engine loop failed: " + t));
      }
    }
  }

  /**
   * Waits up to {@code ms} for a reason to run a round: a request, a cancellation, an
   * administrative task, close, or an L3 completion record.
   */
  private void awaitWork(long ms) throws InterruptedException {
    wake.tryAcquire(ms, TimeUnit.MILLISECONDS);
    wake.drainPermits();
  }

  /** Wakes the loop from {@link #awaitWork} (any thread; never blocks). */
  private void wake() {
    if (wake.availablePermits() == 0) {
      wake.release();
    }
  }

  /** L3 operations without an agreed completion, or backup candidates not yet written. */
  private boolean storageBusy() {
    return storage != null && (storage.busy() || stm.queuedCandidates() > 0 || !backups.isEmpty());
  }

  /** Closing with L3 work left: rounds go on until it is done or the drain deadline passes. */
  private boolean draining() {
    return storageBusy() && System.nanoTime() < drainDeadlineNs;
  }

  private void admitToScheduler(Active a) {
    try {
      a.keys = PromptKeys.of(layout, Arrays.copyOf(a.tokens, a.known), List.of());
      scheduler.submit(a.id, a.keys, a.sampling.params().maxTokens() - a.generated(), false);
      active.put(a.id, a);
    } catch (IllegalArgumentException e) {
      end(a, result(a, "error", e.getMessage()));
    }
  }

  private void round() throws InterruptedException, ControlPlaneException {
    long roundStart = System.nanoTime();
    for (AdminTask task; (task = admin.poll()) != null; ) {
      task.run().run();
    }
    for (Active a; (a = intake.poll()) != null; ) {
      admitToScheduler(a);
    }
    List<Long> cancelled = new ArrayList<>();
    for (Long id; (id = cancels.poll()) != null; ) {
      cancelled.add(id);
    }
    long now = System.nanoTime();
    long evictedBefore = scheduler.redundantEvictions();
    RoundInput input =
        storage == null
            ? new RoundInput(now, PressureSnapshot.IDLE, cancelled, List.of(), true, false)
            : storage.roundInput(now, cancelled);
    long hostMark = cache.host().publications();
    ExecutionPlan plan = scheduler.round(input);
    rounds++;
    if (storage != null) {
      noteRestored(hostMark); // inside a round, only agreed GETs publish on the Host
      storage.dispatch(plan.storage()); // beside the Device copies, never behind them
    }
    // a round that demoted or freed blocks may have left more for the next one
    housekeeping =
        !plan.demotions().isEmpty()
            || scheduler.redundantEvictions() != evictedBefore
            || !cancelled.isEmpty()
            || !backups.isEmpty();
    storageWait = storage != null && plan.forward().isEmpty() && storageBusy();
    for (long id : cancelled) {
      Active a = active.remove(id);
      if (a != null) {
        end(a, result(a, "cancelled", null));
      }
    }
    noteAdmissions(now);
    List<BlockTransfer> loads = new ArrayList<>();
    List<ImagePage> images = saveRetractedImages(loads); // first: before anything writes them
    for (BlockCopy c : plan.deviceCopies()) {
      loads.add(BlockTransfer.of(c));
    }
    awaitCopies(loads);
    publishImages(images);
    // demotions copy cached blocks no request reads, so they run while the forward computes
    List<BlockTransfer> stores = new ArrayList<>();
    for (ExecutionPlan.Demotion d : plan.demotions()) {
      stores.add(BlockTransfer.of(d));
    }
    List<ImagePage> written = writeThrough(stores);
    CopyFence demoted = stores.isEmpty() ? null : copies.submit(stores);
    ForwardResult out = plan.forward().isEmpty() ? null : forward(plan);
    if (demoted != null) {
      awaitFence(demoted);
    }
    publishImages(written);
    scheduler.onForwardDone(plan);
    if (out != null) {
      sample(plan, out);
    }
    resumeRetracted();
    roundNanos += System.nanoTime() - roundStart;
    stats =
        new EngineStats(
            rounds,
            active.size(),
            endedRequests,
            cache.device().cachedCount(),
            cache.host().cachedCount(),
            cache.device().pool().freeParents(),
            scheduler.retractions(),
            imageBlocks,
            copies.copiedBytes(),
            copies.copyNanos(),
            roundNanos,
            forwardNanos);
    observer.afterRound(this);
  }

  /**
   * A page block copied to a private Host block, to publish there once copied: a retracted
   * request's (deviceBlock 0: the Device block is no longer held) or a finished request's written
   * through (its published Device block, pinned until then).
   */
  private record ImagePage(CacheKey key, int hostBlock, int deviceBlock) {}

  /**
   * The images of the requests this round retracted: every full page of their computed KV (groups
   * with history or a window; a State group's running state lies between checkpoints and is not
   * kept) that the Host lacks goes by D2H into a fresh Host block, to be published under its
   * content key once copied. A resumed request then finds those pages on the Host and loads them by
   * H2D like any Host hit, computing only its partial last page again. Adds the copies to {@code
   * ops} (which must run before this round's Device copies and forward: the retracted blocks may
   * already belong to another request). A Host without room keeps fewer pages: those are
   * recomputed.
   */
  private List<ImagePage> saveRetractedImages(List<BlockTransfer> ops) {
    List<ImagePage> pages = new ArrayList<>();
    int p = layout.prefixGranularity();
    for (Scheduler.RetractedBlocks rb : scheduler.retractedThisRound()) {
      Active a = active.get(rb.requestId());
      if (a == null) {
        continue;
      }
      int boundary = a.kvTokens / p * p;
      a.kvTokens = 0;
      a.admission = null;
      if (boundary == 0) {
        continue;
      }
      PromptKeys keys = PromptKeys.of(layout, Arrays.copyOf(a.tokens, boundary), List.of());
      for (var g : layout.groups()) {
        if (g.kind() instanceof GroupKind.StateCheckpoints) {
          continue;
        }
        int gid = g.groupId();
        int[] row = rb.rows()[gid];
        for (int r = g.firstNeededRow(boundary); r < g.rowsFor(boundary) && r < row.length; r++) {
          CacheKey key = keys.keyOf(gid, r, boundary);
          if (row[r] == 0 || cache.host().contains(key)) {
            continue;
          }
          if (!copyToHost(key, row[r], false, ops, pages)) {
            return pages; // the Host is full of referenced blocks
          }
        }
      }
    }
    return pages;
  }

  /**
   * Allocates a private Host block for {@code key} and adds the D2H copy of {@code deviceBlock}
   * into it; pins the Device block until publication when {@code pin}. False when the Host has no
   * free or evictable block.
   */
  private boolean copyToHost(
      CacheKey key, int deviceBlock, boolean pin, List<BlockTransfer> ops, List<ImagePage> pages) {
    int g = key.groupId();
    int[] needs = new int[layout.numGroups()];
    needs[g] = 1;
    int[][] dst = cache.host().allocate(needs);
    if (dst == null) {
      return false;
    }
    if (pin) {
      cache.device().ref(deviceBlock);
    }
    ops.add(new BlockTransfer.Store(g, deviceBlock, dst[g][0]));
    pages.add(new ImagePage(key, dst[g][0], pin ? deviceBlock : 0));
    return true;
  }

  private void publishImages(List<ImagePage> pages) {
    if (pages.isEmpty()) {
      return;
    }
    List<CacheKey> published = new ArrayList<>();
    for (ImagePage page : pages) {
      cache.host().noteWrite(page.hostBlock());
      if (cache.host().publish(page.key(), page.hostBlock())) {
        published.add(page.key());
      }
      cache.host().unref(page.hostBlock()); // cached if published, freed if another copy won
      if (page.deviceBlock() != 0) {
        cache.device().unref(page.deviceBlock());
      } else {
        imageBlocks++;
      }
    }
    scheduler.onHostPublished(published); // backup candidates for L3
  }

  /**
   * With L3, the prefix of every finished request goes to the Host as soon as it finishes (so that
   * it becomes a backup candidate, not only under Device pressure): each key of its longest full
   * boundary that the Device has published and the Host lacks is copied D2H with this round's
   * demotions. The Device source stays pinned until the copy is done.
   */
  private List<ImagePage> writeThrough(List<BlockTransfer> ops) {
    if (backups.isEmpty()) {
      return List.of();
    }
    List<ImagePage> pages = new ArrayList<>();
    for (CacheKey key : backups) {
      int b = cache.device().lookup(key);
      if (b == 0 || cache.host().contains(key)) {
        continue;
      }
      if (!copyToHost(key, b, true, ops, pages)) {
        break; // the Host is full of referenced blocks: these keys stay local
      }
    }
    backups.clear();
    return pages;
  }

  /**
   * Of the Host part {@code [deviceHit, hit)} of an admission, the tokens whose Host blocks were
   * restored from L3: the pages whose first block of the (first) history group was restored, or,
   * for a model without one, the whole part when its State checkpoint was.
   */
  private int restoredTokens(PromptKeys keys, int deviceHit, int hit) {
    if (restored.isEmpty() || hit <= deviceHit) {
      return 0;
    }
    int p = layout.prefixGranularity();
    for (var g : layout.groups()) {
      if (g.kind() instanceof GroupKind.FullHistory) {
        int tokens = 0;
        for (int start = deviceHit; start < hit; start += p) {
          if (restored.contains(keys.keyOf(g.groupId(), start / g.blockGranularity(), hit))) {
            tokens += Math.min(p, hit - start);
          }
        }
        return tokens;
      }
    }
    for (var g : layout.groups()) {
      if (g.kind() instanceof GroupKind.StateCheckpoints
          && restored.contains(keys.checkpointKey(g.groupId(), hit))) {
        return hit - deviceHit;
      }
    }
    return 0;
  }

  /** Remembers the Host publications of a scheduler round: GET results restored from L3. */
  private void noteRestored(long hostMark) {
    List<CacheKey> keys = cache.host().publishedSince(hostMark);
    if (keys == null) {
      return; // more than the ring holds in one round: these go uncounted
    }
    for (CacheKey k : keys) {
      restored.add(k);
      if (restored.size() > MAX_RESTORED_KEYS) {
        restored.removeFirst();
      }
    }
  }

  private void noteAdmissions(long now) {
    for (Active a : active.values()) {
      if (a.admittedNs == 0) {
        Admission adm = scheduler.admission(a.id);
        if (adm != null) {
          a.admittedNs = now;
          if (a.reusedDevice < 0) {
            a.reusedDevice = adm.deviceHit();
            a.reusedHost = adm.hit() - adm.deviceHit();
            a.reusedStorage = restoredTokens(a.keys, adm.deviceHit(), adm.hit());
          }
        }
      }
    }
  }

  private ForwardResult forward(ExecutionPlan plan) throws InterruptedException {
    List<ForwardRequest> reqs = new ArrayList<>(plan.forward().size());
    List<Checkpoint> checkpoints = new ArrayList<>();
    for (ExecutionPlan.ForwardItem item : plan.forward()) {
      Active a = active.get(item.requestId());
      int start = item.startToken();
      int end = start + item.numTokens();
      int[][] tables = scheduler.blockTables(a.id);
      Admission adm = scheduler.admission(a.id);
      if (adm != a.admission) {
        a.admission = adm;
        a.stateInWorkingSlot = false;
        a.kvTokens = adm.hit(); // on the Device once this round's loads are done
      }
      for (var g : layout.groups()) {
        if (g.kind() instanceof GroupKind.StateCheckpoints) {
          int gid = g.groupId();
          tables[gid] = stateTable(a, gid, tables[gid], start, end, checkpoints);
        }
      }
      int[] ids = Arrays.copyOfRange(a.tokens, start, end);
      reqs.add(new ForwardRequest(ids, start, device.modelTables(tables), false));
    }
    if (copies.completedSequence() < awaitedFence) {
      throw new IllegalStateException(
          "the forward would run before copy batch " + awaitedFence + " completed");
    }
    long forwardStart = System.nanoTime();
    ForwardResult out = model.forward(new ForwardBatch(reqs), device.kvCache(), pool);
    forwardNanos += System.nanoTime() - forwardStart;
    for (ExecutionPlan.ForwardItem item : plan.forward()) {
      Active a = active.get(item.requestId());
      a.stateInWorkingSlot = true;
      a.kvTokens = Math.max(a.kvTokens, item.startToken() + item.numTokens());
      a.computedTokens += item.numTokens();
    }
    publishCheckpoints(checkpoints);
    return out;
  }

  /**
   * A State checkpoint a forward materializes at an aligned boundary of the prompt's full pages, to
   * publish after it: written by the model straight into {@code block}, or copied there from the
   * working slot ({@code copyFrom}) when the boundary is where the chunk ends.
   */
  private record Checkpoint(int groupId, int block, CacheKey key, int copyFrom) {}

  /**
   * The model's table of a State group for one chunk, built from the scheduler's two slots [input
   * checkpoint, working block]. The model ({@code SelectiveScan}) reads the state at row
   * ceil(start/P)−1, writes the state after every boundary B = (i+1)·P it crosses to row i unless
   * that row is a hole, and the running state to row ceil(end/P)−1:
   *
   * <pre>
   *   row ceil(start/P)−1   the running state: the input checkpoint before the request's first
   *                         forward, the working slot after it
   *   row ceil(end/P)−1     the working slot (a checkpoint ending the chunk is copied out of it
   *                         afterwards: the working slot goes on changing)
   *   row i, B = (i+1)·P    a fresh block when B is an aligned boundary of the prompt's full pages
   *   crossed in the chunk  whose checkpoint the Device lacks (published after the forward; when
   *                         it is also the input row, the running state is copied in first); else
   *                         a hole
   * </pre>
   *
   * A published block is never written: when the model would write the row it reads and that row
   * holds the published input checkpoint, the chunk runs from a copy in the working slot.
   */
  private int[] stateTable(
      Active a, int g, int[] slots, int start, int end, List<Checkpoint> checkpoints)
      throws InterruptedException {
    int p = layout.prefixGranularity();
    int working = slots[1];
    int inRow = start == 0 ? -1 : Math.ceilDiv(start, p) - 1;
    int workRow = Math.ceilDiv(end, p) - 1;
    int current = inRow < 0 ? 0 : a.stateInWorkingSlot ? working : slots[0];
    if (inRow >= 0 && current == 0) {
      throw new IllegalStateException(
          "request " + a.id + " resumes at " + start + " without an input checkpoint");
    }
    int[] t = new int[workRow + 1];
    t[workRow] = working;
    List<BlockTransfer> before = new ArrayList<>();
    boolean inputPlaced = false;
    int limit = cache.isCurrent(a.admission) ? a.keys.numFullPages() * p : 0;
    for (int b = (start / p + 1) * p; b <= Math.min(end, limit); b += p) {
      CacheKey key = a.keys.checkpointKey(g, b);
      if (cache.device().contains(key)) {
        continue;
      }
      int[] needs = new int[layout.numGroups()];
      needs[g] = 1;
      int[][] fresh = cache.device().allocate(needs);
      if (fresh == null) {
        continue; // no room for a copy: this checkpoint is simply not published
      }
      int block = fresh[g][0];
      int row = b / p - 1;
      if (row == workRow) {
        checkpoints.add(new Checkpoint(g, block, key, working));
        continue;
      }
      if (row == inRow) {
        before.add(new BlockTransfer.DeviceCopy(g, current, block)); // read there, then written
        inputPlaced = true;
      }
      t[row] = block;
      checkpoints.add(new Checkpoint(g, block, key, 0));
    }
    if (inRow >= 0 && !inputPlaced) {
      int boundary = (inRow + 1) * p;
      if (current != working && boundary > start && boundary <= end) {
        before.add(new BlockTransfer.DeviceCopy(g, current, working));
        current = working;
      }
      t[inRow] = current;
    }
    awaitCopies(before);
    return t;
  }

  private void publishCheckpoints(List<Checkpoint> checkpoints) throws InterruptedException {
    List<BlockTransfer> copyOps = new ArrayList<>();
    for (Checkpoint c : checkpoints) {
      if (c.copyFrom() != 0) {
        copyOps.add(new BlockTransfer.DeviceCopy(c.groupId(), c.copyFrom(), c.block()));
      }
    }
    awaitCopies(copyOps);
    for (Checkpoint c : checkpoints) {
      cache.device().noteWrite(c.block());
      cache.device().publish(c.key(), c.block());
      cache.device().unref(c.block());
    }
  }

  private void awaitCopies(List<BlockTransfer> ops) throws InterruptedException {
    if (ops.isEmpty()) {
      return;
    }
    CopyFence f = copies.submit(ops);
    awaitFence(f);
    awaitedFence = Math.max(awaitedFence, f.sequence());
  }

  private static void awaitFence(CopyFence f) throws InterruptedException {
    f.await();
    if (f.failure() != null) {
      throw new IllegalStateException("a Device/Host copy failed", f.failure());
    }
  }

  private void sample(ExecutionPlan plan, ForwardResult out) {
    long now = System.nanoTime();
    List<ExecutionPlan.ForwardItem> items = plan.forward();
    for (int i = 0; i < items.size(); i++) {
      ExecutionPlan.ForwardItem item = items.get(i);
      Active a = active.get(item.requestId());
      if (a == null || item.startToken() + item.numTokens() != a.known) {
        continue; // a prefill chunk before the prompt's end: nothing to sample yet
      }
      float[] logits = out.last(i);
      observer.onLogits(a.id, a.generated(), logits);
      int token = a.sampling.sample(sampler, logits, 0);
      Optional<FinishReason> done = a.sampling.onToken(token);
      a.tokens[a.known++] = token;
      if (a.firstTokenNs == 0) {
        a.firstTokenNs = now;
      }
      a.lastTokenNs = now;
      a.handle.emit(token);
      if (done.isPresent()) {
        housekeeping = true;
        if (storage != null && a.keys.numFullPages() > 0) {
          backups.addAll(
              cache.neededKeys(a.keys, a.keys.numFullPages() * layout.prefixGranularity()));
        }
        scheduler.complete(a.id);
        active.remove(a.id);
        end(a, result(a, done.get().wireName(), null));
      }
    }
  }

  /**
   * A request the scheduler retracted after it generated tokens restarts from its prompt; those
   * tokens must be computed again before the next, so it is resubmitted with them as its prompt.
   * The forward pass is exact whatever the chunking, so the resumed sequence is the one it would
   * have produced.
   */
  private void resumeRetracted() {
    for (Active a : new ArrayList<>(active.values())) {
      if (a.generated() > 0 && scheduler.state(a.id) instanceof RequestState.Retracted) {
        scheduler.complete(a.id);
        active.remove(a.id);
        admitToScheduler(a);
      }
    }
  }

  /** Ends a request the loop served (counted in {@link EngineStats#endedRequests()}). */
  private void end(Active a, GenerationResult r) {
    endedRequests++;
    a.handle.end(r);
  }

  private GenerationResult result(Active a, String reason, String error) {
    int n = a.generated();
    long tpot = n >= 2 && a.firstTokenNs != 0 ? (a.lastTokenNs - a.firstTokenNs) / (n - 1) : 0;
    RequestMetrics m =
        new RequestMetrics(
            a.admittedNs == 0 ? 0 : a.admittedNs - a.submittedNs,
            a.firstTokenNs == 0 ? 0 : a.firstTokenNs - a.submittedNs,
            tpot,
            a.promptTokens,
            Math.max(0, a.reusedDevice),
            a.reusedHost,
            a.reusedStorage,
            a.computedTokens);
    return new GenerationResult(
        a.id, Arrays.copyOfRange(a.tokens, a.promptTokens, a.known), reason, error, m);
  }

  // ---------------------------------------------------------------- for tests

  Scheduler scheduler() {
    return scheduler;
  }

  CacheCoordinator cache() {
    return cache;
  }

  /** Requests the loop serves right now. */
  int activeCount() {
    return active.size();
  }

  /** Every reference the scheduler and the storage transfer manager hold (for the checker). */
  List<io.tokenspeed.cache.HeldBlock> heldBlocks() {
    List<io.tokenspeed.cache.HeldBlock> out = new ArrayList<>(scheduler.heldBlocks());
    if (stm != null) {
      out.addAll(stm.heldHostBlocks());
      stm.checkInvariants();
    }
    return out;
  }

  /** Whether L3 work is pending (asked on the loop thread, between rounds). */
  boolean storageBusyNow() throws Exception {
    return onLoop(this::storageBusy).get(10, TimeUnit.SECONDS);
  }

  /** Copy batches submitted but not completed (0 between rounds: every round waits for its own). */
  long copyBacklog() {
    return copies.submittedSequence() - copies.completedSequence();
  }

  /** The ids of the requests the loop serves right now (on the loop thread, between rounds). */
  List<Long> activeIds() {
    return List.copyOf(active.keySet());
  }

  /**
   * Stops accepting requests, cancels those in flight (their handles end with {@code cancelled}),
   * lets pending L3 work (backups of finished prefixes, operations without an agreed completion)
   * finish for up to {@value #L3_DRAIN_MS} ms, waits for the loop, closes the L3 executor, then
   * frees the copy thread and the tiers (the Host tier stays mapped when the executor reports that
   * native I/O may still address it). Later calls return at once.
   */
  @Override
  public synchronized void close() {
    if (closed) {
      return; // a second close finds everything freed
    }
    closed = true;
    drainDeadlineNs = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(L3_DRAIN_MS);
    closing = true;
    wake();
    try {
      loop.join(TimeUnit.SECONDS.toMillis(30) + L3_DRAIN_MS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    for (AdminTask task; (task = admin.poll()) != null; ) {
      task.result().completeExceptionally(new IllegalStateException("engine closed"));
    }
    if (storage != null && closeReport == null) {
      closeReport = storage.close(); // when the loop has ended, before the device-copy cleanup
    }
    copies.close();
    pool.close();
    device.close();
    if (closeReport == null || !closeReport.restartRequired()) {
      host.close(); // else native I/O may still address it: it stays mapped for the process
    }
  }

  /** The L3 executor's close report, once {@link #close} closed it; empty without L3. */
  public Optional<CloseReport> storageCloseReport() {
    return Optional.ofNullable(closeReport);
  }
}

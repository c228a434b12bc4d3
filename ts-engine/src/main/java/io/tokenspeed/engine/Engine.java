package io.tokenspeed.engine;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.control.MeshException;
import io.tokenspeed.control.ReplicaSecret;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageJobs;
import io.tokenspeed.engine.l3.StorageTier;
import io.tokenspeed.engine.memory.DeviceHandle;
import io.tokenspeed.engine.memory.DevicePools;
import io.tokenspeed.engine.memory.HostCacheStorage;
import io.tokenspeed.engine.memory.LoadStages;
import io.tokenspeed.l3.CloseReport;
import io.tokenspeed.l3.spi.NamespaceDeletion;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.SamplingState;
import io.tokenspeed.model.sampling.TokenLogprobs;
import io.tokenspeed.pd.PdMetrics;
import io.tokenspeed.scheduler.Scheduler;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

/**
 * One engine replica, or one rank of a tensor-parallel replica: the Device and Host KV tiers, the
 * copy thread between them, L3 under the Host tier when a backend is given, and the event loop that
 * runs the scheduler's plans on the model. This class is the façade — submission, cancellation,
 * administration ({@link EngineAdmin}), figures and close — and wires the owners together from one
 * {@link EngineSettings}; the round itself is {@link Round}'s, its thread and idle policy {@link
 * LoopRunner}'s, and each of the round's steps has its own class: {@link Intake} (checks and the
 * bounded queue), {@link ForwardStep} (batch, forward, State checkpoints, sampling), {@link
 * HostPublication} (retraction images and write-through), {@link ReuseAccounting} (where each
 * prefix came from) and, with L3, {@link StorageTier} (the executor and the relay exchange).
 *
 * <p>The scheduler and cache are owned by the loop thread; callers only touch the bounded intake
 * queue and the cancellation queue, leave administrative tasks and wake-ups with {@link LoopProxy},
 * and read their {@link RequestHandle}. Administrative calls run on the loop thread between rounds.
 * No class the engine wires refers back to this one: each gets the narrow callbacks it needs.
 */
public final class Engine implements AutoCloseable {
  /** How long close() lets pending L3 work (backups) finish before closing the executor. */
  private static final long L3_DRAIN_MS = 10_000;

  private final DeviceModel model;

  /** Whether the engine made the binding (a CPU model's) and closes it. */
  private final boolean ownsModel;

  private final CacheLayout layout;
  private final DevicePools device;
  private final HostCacheStorage host;
  private final DeviceHandle copies;
  private final Scheduler scheduler;
  private final Intake intake;
  private final OptionalInt eosId;
  private final LongSupplier nanoClock;
  private final AtomicLong ids = new AtomicLong();
  private final AtomicLong seeds = new AtomicLong(0x5eed);
  private final Map<Long, ActiveRequest> active = new LinkedHashMap<>();
  private final LoopProxy loop;
  private final Round round;
  private final LoopRunner runner;
  private final EngineAdmin admin;

  /** What observers and tests read between rounds. */
  private final EngineView view;

  /** L3 under the Host tier, or null without a backend. */
  private final StorageTier storage;

  /** The engine's part in disaggregated serving; null for a fused engine. */
  private final PdPort pd;

  /** The replica's exchange (a single engine's: one rank's, in memory). */
  private final Replica replica;

  private final Copies loopCopies;

  /** How the whole-loop simulation runs this engine; null in production. */
  private final Simulation simulation;

  private boolean closed; // guarded by this
  private boolean closeRequested; // guarded by this
  private volatile CloseReport closeReport;

  private Engine(DeviceModel model, boolean ownsModel, EngineSettings settings) {
    EngineConfig config = settings.config();
    L3Settings l3 = settings.l3();
    this.model = model;
    this.ownsModel = ownsModel;
    this.eosId = settings.eosId();
    this.nanoClock = settings.nanoClock();
    this.simulation = settings.simulation();
    this.layout = model.cacheLayout(config.prefixGranularity(), config.blockGranularity());
    this.device = new DevicePools(layout, config.deviceParents(), model.shard().rank(), model);
    this.host = HostCacheStorage.ofRatio(layout, config.deviceParents(), config.hostRatio());
    model.pinHost(host.memory().segment());
    this.copies = new DeviceHandle(device, host);
    CacheCoordinator cache =
        new CacheCoordinator(layout, config.deviceParents(), host.numParents(), 1024);
    StorageTransferManager stm = l3 == null ? null : storageManager(l3, cache);
    if (stm != null && simulation != null) {
      simulation.planting().manager(stm);
    }
    // after the Host tier: the agreement window is sized from the credits that fit it
    this.replica = joinReplica(settings.control(), l3, stm == null ? null : stm.config());
    this.scheduler = new Scheduler(cache, stm, schedulerConfig(config));
    String attentionBackend = l3 == null ? L3Settings.CPU_ATTENTION_BACKEND : l3.attentionBackend();
    this.storage = l3 == null ? null : startStorage(l3, stm.config(), attentionBackend);
    if (stm != null && stm.earlyH2d()) {
      storage.copyEarly(copies);
    }
    this.intake =
        new Intake(
            model.vocabSize(),
            scheduler::maxRequestTokens,
            model.maxPositions(),
            config.maxQueued());
    this.loopCopies =
        new Copies(
            copies,
            PageTransfers.needed(layout, model.collective())
                ? new PageTransfers(layout, model.collective(), copies)
                : null,
            model.waitsForLayers()
                ? LoadStages.of(layout, settings.loadStages()).orElse(null)
                : null,
            nanoClock);
    if (simulation != null) {
      simulation.planting().copies(loopCopies);
    }
    // the KV block events: the leader's tiers mirror every rank's decisions, so only it records
    KvEventRecorder kvEvents =
        settings.kvEvents() == null || !replica.leader()
            ? null
            : new KvEventRecorder(layout, settings.kvEvents());
    if (kvEvents != null) {
      cache.tierListener(kvEvents);
      if (stm != null) {
        stm.storedListener(kvEvents::storedInStorage);
      }
    }
    HostPublication publication = new HostPublication(layout, cache, scheduler, stm, active);
    if (simulation != null) {
      simulation.planting().publication(publication);
    }
    this.loop = new LoopProxy();
    this.admin =
        new EngineAdmin(
            model,
            layout,
            attentionBackend,
            scheduler,
            publication,
            storage,
            stm,
            l3 == null ? null : l3.store(),
            replica,
            loop,
            nanoClock,
            kvEvents);
    EngineObserver observer = settings.observer();
    this.view = new EngineView(scheduler, cache, stm, publication, copies, active, admin::control);
    // last of what can fail: a decode engine's KV port is bound here
    try {
      this.pd =
          settings.pd().role() == EngineRole.FUSED
              ? null
              : new PdPort(
                  settings.pd(),
                  layout,
                  cache,
                  scheduler,
                  host,
                  active,
                  model.identity(),
                  admin::weightVersion,
                  model.attentionBackend(),
                  model.vocabSize(),
                  kvHeads(model),
                  model.shard());
    } catch (RuntimeException e) {
      if (storage != null) {
        storage.close();
      }
      closeTiers();
      throw e;
    }
    this.round =
        new Round(
            layout,
            cache,
            scheduler,
            stm,
            storage,
            intake,
            loop,
            copies,
            loopCopies,
            new ForwardStep(
                model, layout, cache, scheduler, device, loopCopies, observer, active, nanoClock),
            publication,
            new ReuseAccounting(layout, cache, scheduler, active),
            observer,
            view,
            active,
            replica,
            admin::apply,
            admin::control,
            this::cancel,
            model.collective()::abort,
            eosId,
            nanoClock,
            pd,
            kvEvents);
    if (pd != null) {
      view.pd(pd);
    }
    if (storage != null) {
      storage.onCompletion(loop::wake);
    }
    if (simulation != null) {
      simulation.planting().round(round);
    }
    round.publishInitialMetrics(nanoClock.getAsLong());
    this.runner = new LoopRunner(round, loop, nanoClock);
  }

  /**
   * The owner of L3's tickets and credits over the Host tier; frees everything when its Host
   * credits do not fit the tier (the startup check of {@code max_host_blocks}).
   */
  private StorageTransferManager storageManager(L3Settings l3, CacheCoordinator cache) {
    try {
      return new StorageTransferManager(l3.runtime().scheduling(), cache);
    } catch (IllegalArgumentException e) {
      closeTiers();
      throw e;
    }
  }

  private void closeTiers() {
    copies.close();
    device.close();
    host.close();
    if (replica != null) {
      replica.close();
    }
  }

  /** The executor and the exchange over the Host allocation; frees everything on failure. */
  private StorageTier startStorage(L3Settings l3, StorageConfig credits, String attentionBackend) {
    try {
      StorageJobs jobs =
          new StorageJobs(
              EngineAdmin.namespaceFor(
                  model, layout, attentionBackend, model.identity().weightVersion()),
              layout,
              host.geometry(),
              model.shard().rank());
      StorageTier.Stepping stepping = simulation == null ? null : simulation.stepping();
      return StorageTier.start(
          l3, jobs, host.memory().segment(), replica.size(), nanoClock, stepping);
    } catch (Exception e) {
      closeTiers();
      throw new IllegalStateException("L3 could not start over " + l3.store().name() + ": " + e, e);
    }
  }

  /**
   * Joins the replica's mesh when {@code control} names more than one rank (blocks until every rank
   * is connected); a single engine is a replica of one rank over an in-memory transport. The
   * settings checked that its ranks are the model's; the agreement window is sized from {@code
   * credits} (the Host-fitted storage settings, null without L3). On failure the memory tiers and
   * the store are freed.
   */
  private Replica joinReplica(ControlConfig control, L3Settings l3, StorageConfig credits) {
    try {
      ControlConfig own = control == null ? soloControl() : control;
      ControlConfig sized = credits == null ? own : StorageTier.windowFor(own, credits);
      if (own.worldSize() == 1) {
        return Replica.solo(sized, nanoClock, simulation);
      }
      return simulation == null
          ? Replica.join(sized, nanoClock)
          : Replica.join(sized, nanoClock, simulation);
    } catch (MeshException | RuntimeException e) {
      closeTiers();
      if (l3 != null) {
        try {
          l3.store().close();
        } catch (Exception ignored) {
          // the join's failure is what the caller needs to see
        }
      }
      if (e instanceof RuntimeException refused) {
        throw refused; // an agreement window the credits do not fit, named by windowFor
      }
      throw new IllegalStateException(
          "rank " + control.rank() + " could not join its replica's mesh: " + e.getMessage(), e);
    }
  }

  /** A single engine's control settings: one rank, which never opens its address. */
  private static ControlConfig soloControl() {
    return ControlConfig.of(
        0,
        0,
        List.of(new InetSocketAddress(InetAddress.getLoopbackAddress(), 1)),
        ReplicaSecret.generate());
  }

  /**
   * On a tensor-parallel replica: the time each round since the last call spent in the replica's
   * exchange (the round's agreement), in nanoseconds, oldest first; empty for a single rank. A
   * diagnostic for benchmarks (any thread).
   */
  public long[] recentExchangeNanos() {
    return replica.takeExchangeNanos();
  }

  /** Plants {@link PdPort#plantLandWindowFromRowZero} (its tests only; before any request). */
  /**
   * The model's KV heads, which the prefill/decode transfer splits over ranks: a device model
   * serves one rank, where every split moves whole blocks, and a model without attention has none
   * to split (1 for both).
   */
  private static int kvHeads(DeviceModel model) {
    if (!(model instanceof CpuDeviceModel c)) {
      return 1;
    }
    try {
      return c.model().config().dims().numKvHeads();
    } catch (UnsupportedOperationException e) {
      return 1;
    }
  }

  void plantPdLandsWindowFromRowZero() {
    pd.plantLandWindowFromRowZero();
  }

  /** The engine's role in disaggregated serving. */
  public EngineRole role() {
    return pd == null ? EngineRole.FUSED : pd.role();
  }

  /**
   * A decode engine's KV endpoint (the address prefill engines dial): this rank's; empty for other
   * roles.
   */
  public Optional<InetSocketAddress> pdEndpoint() {
    return pd == null ? Optional.empty() : pd.endpoint();
  }

  /**
   * A decode replica's KV endpoints by rank, as a prefill half's ticket names them ({@link
   * PdTicket.Prefill#decodeRanks}): every rank's once each has reported its own through the
   * replica's exchange (at once for a single rank); empty before, and for other roles.
   */
  public List<InetSocketAddress> pdEndpoints() {
    return pd == null ? List.of() : pd.endpoints();
  }

  /**
   * The requests whose transfer still holds Host or Device blocks on this rank, as of the loop's
   * last round (0 for a fused engine).
   */
  int pdHeldBlocks() {
    return pd == null ? 0 : pd.roomsHoldingBlocks();
  }

  /** The KV transfer's counters of a prefill or decode engine; empty for a fused engine. */
  public Optional<PdMetrics> pdMetrics() {
    return pd == null ? Optional.empty() : Optional.of(pd.metrics());
  }

  /** This engine's rank in its tensor-parallel replica (0 for a single rank). */
  public int tpRank() {
    return model.shard().rank();
  }

  /** The tensor-parallel size of this engine's replica. */
  public int tpSize() {
    return model.shard().size();
  }

  // ---------------------------------------------------------------- administration

  /**
   * A full cache clear, before the next round: every cached Device and Host block goes and nothing
   * matches any more; with L3, every outstanding storage operation (Ready holds and quarantined
   * ones included) is rejected without waiting for its I/O, whose references live on until it
   * retires. Requests in flight go on: what they hold is withdrawn, never published. The store's
   * objects stay (see {@link #updateWeightVersion}). On a replica every rank clears in the same
   * agreed round; the future completes once the leader has.
   */
  public CompletableFuture<Void> clearCache() {
    return admin.command(Replica.Command.CLEAR_ALL);
  }

  /**
   * An L1-only clear, before the next round: the cached Device blocks go; Host entries and any
   * Host-only storage I/O are left alone (a later prompt finds its prefix on the Host). On a
   * replica every rank clears in the same agreed round.
   */
  public CompletableFuture<Void> clearDeviceCache() {
    return admin.command(Replica.Command.CLEAR_DEVICE);
  }

  /**
   * An administrative freeze, from the next round on (on a replica, every rank from the round that
   * agrees on it): rounds go on with forward and storage permissions off. Nothing is admitted,
   * computed or demoted and no new storage operation starts, but every round still takes the agreed
   * tick (soft deadlines and Ready holds expire), cancellations (a cancelled request ends) and the
   * agreed completions of storage operations issued before (what a GET read is published on the
   * Host). Requests submitted meanwhile are accepted and wait. The future completes once the loop
   * (the leader's) has applied it. A second freeze changes nothing.
   */
  public CompletableFuture<Void> freeze() {
    return admin.command(Replica.Command.FREEZE);
  }

  /**
   * Lifts the freeze from the next round on (on a replica, every rank in the round that agrees on
   * it): waiting requests are admitted and computed as if the freeze had not been. Without a freeze
   * it changes nothing.
   */
  public CompletableFuture<Void> unfreeze() {
    return admin.command(Replica.Command.UNFREEZE);
  }

  /** Whether this rank's loop has applied a freeze that no unfreeze has lifted since. */
  public boolean frozen() {
    return admin.control().frozen();
  }

  /**
   * A weight-version update, which rotates the L3 namespace. In order, with L3:
   *
   * <ol>
   *   <li>fence (on the loop thread; on a replica, every rank in one agreed round): every
   *       outstanding storage operation is rejected — waits end, Ready holds and queued backups go
   *       — and no new storage work starts: requests that arrive meanwhile are served without L3;
   *   <li>wait (on the calling thread, never the loop's) until every operation already inside the
   *       store has retired, so no write can land in the old namespace after its deletion;
   *   <li>delete the old namespace's objects from the store, a synchronous call on the loop thread
   *       between two rounds (on a replica, the leader's, whose followers wait in the exchange
   *       meanwhile): no round runs until the store returns, so a slow store delays requests and
   *       administration alike, and nothing but the store's own bound limits it (a store whose
   *       objects can stay under read leases waits for them, {@link Store#purgeNamespace}; on a
   *       replica a deletion longer than the round timeout stops the replica); the calling thread
   *       waits for the outcome;
   *   <li>switch (on the loop thread; on a replica, every rank in one agreed round): clear the
   *       cache as {@link #clearCache} does, build every later key under the namespace of {@code
   *       version}, lift the fence.
   * </ol>
   *
   * If the wait passes {@link EngineAdmin#WEIGHT_UPDATE_RETIREMENT_MS} or the deletion fails, the
   * fence lifts (on every rank) and nothing is cleared, deleted further or switched. Concurrent
   * updates and rotations run one after the other. Operations quarantined before the update never
   * retire: their late writes may still land in the old namespace (quarantine already requires a
   * restart). Without L3 it clears and records the version. Returns the objects deleted.
   *
   * <p>On a tensor-parallel replica (called on the leader) the wait covers every rank: an operation
   * stays pending on every rank until every rank's executor has reported it (its agreed
   * completion), and an executor reports a job only once its store call has returned, so the
   * leader's pending operations are the replica's. Every rank dispatches the same operations and
   * applies the same agreed completions, so this fact is the same on every rank in every round. The
   * leader deletes the whole namespace through its own store client: every rank's objects carry the
   * namespace as their prefix ({@code r{rank}} comes later in the key) and every rank's client
   * reaches the same store. (With the {@code memory} backend each rank process has an in-process
   * store of its own: only the leader's is emptied; the others' old objects are never read again.)
   *
   * @throws Exception the store's deletion failure, or a wait for retirement that timed out
   */
  public long updateWeightVersion(String version) throws Exception {
    return updateWeights(version).removedObjects();
  }

  /**
   * {@link #updateWeightVersion}, reporting what the deletion did: the objects removed and, for a
   * store that can leave objects behind (Mooncake skips objects under a read lease), how many
   * stayed and why ({@link Store#purgeNamespace}). Objects that stayed do not fail the update:
   * their namespace is never built again, so they are never read. Without L3: {@link
   * NamespaceDeletion#NONE}.
   *
   * @throws Exception the store's deletion failure, or a wait for retirement that timed out
   */
  public NamespaceDeletion updateWeights(String version) throws Exception {
    return admin.updateWeights(version);
  }

  /**
   * A namespace rotation, before the next round: the cache is cleared as {@link #clearCache} does
   * (every outstanding storage operation is rejected, nothing read for the old namespace is
   * published) and every later key is built under the namespace of weight version {@code version}.
   * Unlike {@link #updateWeightVersion} the old namespace's objects stay in the store, for replicas
   * that still serve it; PUTs already inside the store finish there. Without L3 it clears and
   * records the version. On a replica (called on the leader) every rank rotates in the same agreed
   * round; the call returns once the leader has.
   */
  public void rotateNamespace(String version) throws Exception {
    admin.rotateNamespace(version);
  }

  /** The longest weight version a rotation or an update takes, in UTF-8 bytes. */
  public static final int MAX_WEIGHT_VERSION_BYTES = Replica.Command.MAX_VERSION_BYTES;

  /**
   * Transfers of a page-cyclic group between blocks of two owners, moved through the collective so
   * far (0 without such groups).
   */
  long movedPageBlocks() {
    return loopCopies.movedPageBlocks();
  }

  /** The L3 namespace every object key of this engine is built under; empty without L3. */
  public Optional<Namespace> storageNamespace() {
    return storage == null ? Optional.empty() : Optional.of(storage.jobs().namespace());
  }

  /** The weight version of the deployment identity (the model's, or the last update's). */
  public String weightVersion() {
    return admin.weightVersion();
  }

  /**
   * Starts an engine from {@code settings}: the Device and Host tiers, L3 under the Host tier when
   * the settings give a backend (the engine owns its store from then on; without one there is no
   * executor, no exchange and no storage work at all), and the loop. A CPU model's binding is the
   * engine's and closes with it; a device model stays the caller's, to close after the engine.
   *
   * <p>With a control plane of several ranks this starts rank {@code control.rank()} of a
   * tensor-parallel replica over the model's share of the weights ({@link
   * CausalLm#load(java.nio.file.Path, String, String, io.tokenspeed.model.parallel.Collective)}),
   * joined to the other ranks by the control plane's mesh (this blocks until every rank has
   * joined). Every rank runs the same loop; rank 0 leads: it alone takes requests ({@link #submit})
   * and administration, and the exchange carries them to the others. With L3, every rank reads and
   * writes its own objects through its own store client.
   *
   * @throws IllegalArgumentException when the control plane's explicit agreement window cannot hold
   *     what the L3 credits let be in flight ({@link StorageTier#windowFor})
   * @throws IllegalStateException when the mesh or L3 cannot start (nothing is left running)
   */
  public static Engine start(EngineSettings settings) {
    Engine e;
    if (settings.cpuModel() == null) {
      e = new Engine(settings.deviceModel(), false, settings);
    } else {
      CpuDeviceModel cpu =
          new CpuDeviceModel(settings.cpuModel(), settings.config().computeThreads());
      try {
        e = new Engine(cpu, true, settings);
      } catch (RuntimeException | Error failure) {
        cpu.close();
        throw failure;
      }
    }
    if (!settings.paused()) {
      e.resume();
    }
    return e;
  }

  /** Starts the loop of an engine whose settings asked for it {@code paused}. */
  void resume() {
    runner.start();
  }

  /**
   * The fewest Device parents, doubling from one per block row of every group, whose single-request
   * limit under {@link EngineConfig#defaults} reaches {@code tokens} (no memory is allocated).
   */
  public static int deviceParentsFor(CausalLm model, int tokens) {
    EngineConfig base = EngineConfig.defaults(2);
    return deviceParentsFor(
        model.cacheLayout(base.prefixGranularity(), base.blockGranularity()), tokens);
  }

  /** {@link #deviceParentsFor(CausalLm, int)} of a model on any device. */
  public static int deviceParentsFor(DeviceModel model, int tokens) {
    EngineConfig base = EngineConfig.defaults(2);
    return deviceParentsFor(
        model.cacheLayout(base.prefixGranularity(), base.blockGranularity()), tokens);
  }

  private static int deviceParentsFor(CacheLayout layout, int tokens) {
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

  /**
   * The most tokens (prompt plus max_tokens) one request may need: what the Device holds of one
   * request, and no more than the model's positions ({@link DeviceModel#maxPositions}).
   */
  public int maxRequestTokens() {
    return Math.min(scheduler.maxRequestTokens(), model.maxPositions());
  }

  /**
   * Submits a prompt. Bad input (an empty prompt, a token id outside the vocabulary, a prompt plus
   * max_tokens over the single-request limit) ends the returned handle with an error at once; the
   * engine goes on serving the others.
   *
   * @throws IntakeFullException when {@code max_queued} accepted requests do not run yet
   * @throws IllegalStateException when the engine is closed
   */
  public RequestHandle submit(int[] prompt, SamplingParams params) {
    return submit(prompt, params, TokenLogprobs.NO_LOGPROBS);
  }

  /**
   * Submits a prompt whose handle also reports each generated token's log probabilities ({@link
   * RequestHandle#logprobs(int)}, {@link TokenLogprobs}): {@code topLogprobs} is {@link
   * TokenLogprobs#NO_LOGPROBS} (-1) for none, as {@link #submit(int[], SamplingParams)}, 0 for the
   * sampled token's own only, 1 to {@link TokenLogprobs#MAX_TOP_LOGPROBS} for that many most likely
   * alternatives too. They are the log-softmax of the model's raw logits, before temperature and
   * filters. A value outside {@code [-1, 20]} is bad input like the others.
   *
   * @throws IntakeFullException when {@code max_queued} accepted requests do not run yet
   * @throws IllegalStateException when the engine is closed
   */
  public RequestHandle submit(int[] prompt, SamplingParams params, int topLogprobs) {
    return submit(prompt, params, topLogprobs, null);
  }

  /**
   * Submits one half of a disaggregated request (docs/pd.md), or, with {@code ticket} null, an
   * ordinary request as {@link #submit(int[], SamplingParams, int)}.
   *
   * <ul>
   *   <li>{@link PdTicket.Prefill} (a prefill engine): the prompt is computed (reusing Device, Host
   *       and L3 as a fused engine does) once the decode engine acknowledged the room; the first
   *       token is sampled and sent with the prompt's KV. The handle streams that token and ends
   *       once the transfer completed (an error result when it failed or was refused).
   *   <li>{@link PdTicket.Decode} (a decode engine): the prompt's KV and first token land from the
   *       prefill engine; the handle streams the first token, then the rest. Its metrics report the
   *       prefill engine's cached tokens by source. Log probabilities are not served this way.
   * </ul>
   *
   * A ticket this engine's role does not serve ends the handle with an error, as bad input does.
   *
   * @throws IntakeFullException when {@code max_queued} accepted requests do not run yet
   * @throws IllegalStateException when the engine is closed
   */
  public RequestHandle submit(
      int[] prompt, SamplingParams params, int topLogprobs, PdTicket ticket) {
    if (!replica.leader()) {
      throw new IllegalStateException(
          "rank " + replica.rank() + " of the replica is not its leader: submit to rank 0");
    }
    if (loop.closing()) {
      Throwable fatal = loop.fatal();
      throw new IllegalStateException(
          fatal == null ? "engine is closed" : "engine stopped after a failure: " + fatal);
    }
    long id = ids.incrementAndGet();
    RequestHandle handle = new RequestHandle(id, this::cancel, topLogprobs);
    String error = intake.check(prompt, params, topLogprobs);
    if (error != null) {
      handle.end(new GenerationResult(id, new int[0], "error", error, null));
      return handle;
    }
    SamplingParams resolved = params.withSeedIfAbsent(seeds::incrementAndGet);
    ActiveRequest a =
        new ActiveRequest(
            id, handle, prompt, new SamplingState(resolved, eosId, prompt), nanoClock.getAsLong());
    if (ticket != null) {
      String refusal =
          pd == null
              ? "this engine is fused: it serves no half of a disaggregated request"
              : pd.prepare(a, ticket, topLogprobs);
      if (refusal != null) {
        handle.end(new GenerationResult(id, new int[0], "error", refusal, null));
        return handle;
      }
      a.ticket = ticket;
    }
    if (!intake.offer(a)) {
      if (ticket != null) {
        pd.abandon(id);
      }
      throw new IntakeFullException(
          "engine intake is full (max_queued="
              + maxQueued()
              + " requests already wait for admission)");
    }
    loop.wake();
    return handle;
  }

  private int maxQueued() {
    return intake.capacity();
  }

  void cancel(long id) {
    intake.cancel(id);
    loop.wake();
  }

  /**
   * Whether the event loop has ended: after {@link #close}, after a failure ({@link #failure}), or,
   * on a tensor-parallel replica, when the replica stopped (its leader closed, or a rank failed).
   */
  public boolean stopped() {
    return runner.ended();
  }

  /** Why the loop stopped, when it stopped after a failure; later submissions are refused. */
  public Optional<Throwable> failure() {
    return Optional.ofNullable(loop.fatal());
  }

  /**
   * This rank's L3 executor counters now (one short lock, no store call, no health probe consumed;
   * any thread); empty without L3. {@link #metrics} holds the loop's last snapshot of them.
   */
  public Optional<io.tokenspeed.l3.L3Metrics> storageExecutorMetrics() {
    return storage == null ? Optional.empty() : Optional.of(storage.metrics());
  }

  /** The figures of the latest round. */
  public EngineStats stats() {
    return round.stats();
  }

  /**
   * The latest metrics snapshot the loop published (see {@link EngineMetrics} for when it takes
   * one). A volatile read from any thread: it touches no loop state, consumes no health probe and
   * feeds no decision.
   */
  public EngineMetrics metrics() {
    return round.metrics();
  }

  // ---------------------------------------------------------------- for tests

  /** What observers read between rounds (the whole-loop simulation checks it). */
  EngineView view() {
    return view;
  }

  /** The round, which the whole-loop simulation calls itself (its loop thread never starts). */
  Round round() {
    return round;
  }

  /** The loop's runner, whose idle policy the whole-loop simulation asks in the loop's place. */
  LoopRunner runner() {
    return runner;
  }

  /**
   * What the loop thread does when its round fails with {@code t}, for the whole-loop simulation,
   * which runs the rounds itself: every request ends with the failure, the replica's collective
   * aborts, and the loop ends.
   */
  void roundFailed(Throwable t) {
    runner.failed(t);
    round.ended();
  }

  /** The Host tier's memory (the whole-loop simulation reads its published blocks). */
  io.tokenspeed.engine.memory.TierMemory hostMemory() {
    return host.memory();
  }

  /**
   * A runner of this engine's loop whose waits are {@code waits}', for a test that steps a paused
   * engine ({@link LoopRunner#step}) on its own thread instead of resuming it.
   */
  LoopRunner steppedRunner(LoopRunner.Waits waits) {
    return new LoopRunner(round, loop, nanoClock, waits);
  }

  /** Whether a storage operation has no agreed completion yet (loop thread, between rounds). */
  boolean storageOperationsPending() {
    return storage != null && storage.busy();
  }

  /** An administrative command, applied before the next round (tests: without blocking). */
  CompletableFuture<Void> command(Replica.Command command) {
    return admin.command(command);
  }

  Scheduler scheduler() {
    return view.scheduler();
  }

  CacheCoordinator cache() {
    return view.cache();
  }

  /**
   * The storage transfer manager (its counters, credits, leases and Host references); null without
   * L3. Read it on the loop thread (an observer), between rounds.
   */
  StorageTransferManager storageTransferManager() {
    return view.storageTransferManager();
  }

  /** Requests the loop serves right now. */
  int activeCount() {
    return view.activeCount();
  }

  /**
   * Every reference the scheduler, the storage transfer manager and the tails waiting for
   * write-through hold (for the checker).
   */
  List<HeldBlock> heldBlocks() {
    return view.heldBlocks();
  }

  /**
   * Whether L3 work is pending, refused backups waiting for their retry included (asked on the loop
   * thread, between rounds).
   */
  boolean storageBusyNow() throws Exception {
    return loop.onLoop(round::storagePending).get(10, TimeUnit.SECONDS);
  }

  /** Copy batches submitted but not completed (0 between rounds: every round waits for its own). */
  long copyBacklog() {
    return view.copyBacklog();
  }

  /** The ids of the requests the loop serves right now (on the loop thread, between rounds). */
  List<Long> activeIds() {
    return view.activeIds();
  }

  /**
   * Stops accepting requests, cancels those in flight (their handles end with {@code cancelled}),
   * lets pending L3 work (backups of finished prefixes, operations without an agreed completion)
   * finish for up to {@value #L3_DRAIN_MS} ms, waits for the loop, closes the L3 executor, then
   * frees the copy thread and the tiers (the Host tier stays mapped when the executor reports that
   * native I/O may still address it). Later calls return at once.
   *
   * <p>Nothing is freed while the loop runs: a loop still inside a round when the wait ends (a
   * forward longer than {@value #LOOP_JOIN_MS} ms past the drain, an exchange with a rank that does
   * not answer) may still read the tiers and the model, so close refuses with an {@link
   * IllegalStateException} and leaves everything allocated; the loop ends at its next round, and a
   * later close frees what it held.
   */
  @Override
  public void close() {
    close(LOOP_JOIN_MS + L3_DRAIN_MS);
  }

  /** How long {@link #close} waits for the loop beyond the L3 drain. */
  static final long LOOP_JOIN_MS = 30_000;

  /** {@link #close}, waiting at most {@code joinMs} for the loop to end. */
  synchronized void close(long joinMs) {
    if (closed) {
      return; // a second close finds everything freed
    }
    if (!closeRequested) {
      closeRequested = true;
      loop.close(nanoClock.getAsLong() + TimeUnit.MILLISECONDS.toNanos(L3_DRAIN_MS));
    }
    try {
      runner.join(joinMs);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    if (runner.alive()) {
      throw new IllegalStateException(
          "the engine's loop did not end within "
              + joinMs
              + " ms of close (a round still running: a long forward, or a rank that does not"
              + " answer); nothing was freed, as the loop may still use it: close again once it"
              + " has ended");
    }
    closed = true;
    loop.failPendingTasks();
    replica.failPending(new IllegalStateException("engine closed")); // asked after the loop ended
    if (storage != null && closeReport == null) {
      closeReport = storage.close(); // when the loop has ended, before the device-copy cleanup
    }
    if (pd != null) {
      pd.close(); // its connections write into Host blocks: closed before the Host tier
    }
    replica.close();
    copies.close();
    device.close();
    if (closeReport == null || !closeReport.restartRequired()) {
      model.unpinHost(host.memory().segment());
      host.close(); // else native I/O may still address it: it stays mapped for the process
    }
    if (ownsModel) {
      model.close();
    }
  }

  /** The L3 executor's close report, once {@link #close} closed it; empty without L3. */
  public Optional<CloseReport> storageCloseReport() {
    return Optional.ofNullable(closeReport);
  }
}

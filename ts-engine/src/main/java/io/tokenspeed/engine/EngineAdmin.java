package io.tokenspeed.engine;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.engine.l3.StorageTier;
import io.tokenspeed.l3.spi.NamespaceDeletion;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.scheduler.Scheduler;
import io.tokenspeed.scheduler.StorageTransferManager;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.LongSupplier;

/**
 * The engine's administration: cache clears, namespace rotations, weight updates and the freeze. A
 * command is applied in two places: the caller's side ({@link #command}) hands it to the loop
 * through the replica's exchange, where every rank applies it in the round that agrees on it (a
 * single engine, a replica of one rank, in its next round) — and the loop's side ({@link #apply})
 * changes the {@link ControlState}, the scheduler, Host publication and the storage tier between
 * rounds. The control state is the only source of a round's forward and storage permissions ({@link
 * #control}).
 *
 * <p>A weight update waits for storage operations to retire on the calling thread (it asks the loop
 * between rounds, every storage tick). After that replica-agreed preflight, the deletion of the old
 * namespace is a synchronous call on the loop thread, the control thread, between rounds (on a
 * replica, the leader's): no round runs until the store returns, so a slow deletion delays request
 * and control processing, and nothing bounds or cancels it but the store's own limits. Updates and
 * rotations are serialized among themselves.
 */
final class EngineAdmin {
  /** How long a weight update waits for the storage operations in the store to retire. */
  static final long WEIGHT_UPDATE_RETIREMENT_MS = 60_000;

  private final DeviceModel model;
  private final CacheLayout layout;
  private final String attentionBackend;
  private final Scheduler scheduler;
  private final HostPublication publication;

  /** L3 under the Host tier, or null without a backend (then so are the store and manager). */
  private final StorageTier storage;

  private final StorageTransferManager stm;
  private final Store store;

  /** The replica's exchange (a single engine's: one rank's). */
  private final Replica replica;

  private final LoopProxy loop;
  private final LongSupplier nanoClock;

  /** The KV block events (null without them, and on a follower). */
  private final KvEventRecorder kvEvents;

  private volatile String weightVersion;

  /** Written by the loop thread only, when it applies a command; read by any thread. */
  private volatile ControlState control = ControlState.NORMAL;

  /** Serializes weight updates. */
  private final Object weightUpdates = new Object();

  EngineAdmin(
      DeviceModel model,
      CacheLayout layout,
      String attentionBackend,
      Scheduler scheduler,
      HostPublication publication,
      StorageTier storage,
      StorageTransferManager stm,
      Store store,
      Replica replica,
      LoopProxy loop,
      LongSupplier nanoClock,
      KvEventRecorder kvEvents) {
    this.model = model;
    this.layout = layout;
    this.attentionBackend = attentionBackend;
    this.scheduler = scheduler;
    this.publication = publication;
    this.storage = storage;
    this.stm = stm;
    this.store = store;
    this.replica = replica;
    this.loop = loop;
    this.nanoClock = nanoClock;
    this.kvEvents = kvEvents;
    this.weightVersion = model.identity().weightVersion();
  }

  /**
   * The namespace of {@code model}'s deployment identity at weight version {@code version}, with
   * {@code layout} and {@code attentionBackend}.
   */
  static Namespace namespaceFor(
      DeviceModel model, CacheLayout layout, String attentionBackend, String version) {
    ModelIdentity mi = model.identity();
    return Namespace.of(
        new DeploymentIdentity(
            mi.modelId(),
            mi.checkpointRevision(),
            version,
            null,
            null,
            layout,
            model.shard().size(),
            1,
            1,
            1,
            attentionBackend));
  }

  /** The weight version of the deployment identity (the model's, or the last update's). */
  String weightVersion() {
    return weightVersion;
  }

  /** The control state the next round's permissions come from (as the loop last applied it). */
  ControlState control() {
    return control;
  }

  /**
   * Applies {@code command}: the leader sends it through the exchange and every rank applies it in
   * the round that agrees on it (a single engine in its next round's head). Completes once this
   * rank (the leader) has applied it.
   */
  CompletableFuture<Void> command(Replica.Command command) {
    if (loop.closing()) {
      return CompletableFuture.failedFuture(new IllegalStateException("engine is closed"));
    }
    CompletableFuture<Void> done = replica.command(command);
    loop.wake();
    return done;
  }

  /**
   * What an administrative command does to this rank (on the loop thread, between rounds; on a
   * replica in the agreed round that carried it, the same on every rank). {@link Replica.Kind#STOP}
   * is the loop's.
   */
  void apply(Replica.Command command) {
    switch (command.kind()) {
      case CLEAR_ALL -> clearAll();
      case CLEAR_DEVICE -> scheduler.clearDevice();
      case ROTATE -> rotate(command.weightVersion());
      case SWITCH -> {
        rotate(command.weightVersion());
        fence(false);
      }
      case FENCE_STORAGE -> fence(true);
      case LIFT_FENCE -> fence(false);
      case FREEZE -> control = control.withFrozen(true);
      case UNFREEZE -> control = control.withFrozen(false);
      case DRAIN -> control = control.withDraining();
      case COST_FIGURES -> {
        if (stm != null) {
          stm.onCostFigures(command.figures()); // every rank, this round: the same decisions
        }
      }
      case STOP -> throw new IllegalArgumentException("a stop is the loop's to apply");
    }
  }

  /**
   * Sets or lifts a weight update's fence: the control state takes storage permission away while it
   * stands, and the scheduler rejects the outstanding operations when it is set and lets new
   * requests bypass L3 until it lifts ({@link Scheduler#fenceStorage}).
   */
  private void fence(boolean on) {
    control = control.withFenced(on);
    scheduler.fenceStorage(on);
  }

  /**
   * A full clear: the scheduler's (storage operations rejected, both tiers emptied) and the
   * write-through's backups; the KV events say {@code AllBlocksCleared} instead of each removal.
   */
  private void clearAll() {
    if (kvEvents != null) {
      kvEvents.beginClear();
    }
    scheduler.clearAll();
    publication.clearBackups();
    if (kvEvents != null) {
      kvEvents.endClear();
    }
  }

  /** A full clear, then every later key under the namespace of {@code version} (loop thread). */
  private void rotate(String version) {
    clearAll();
    if (storage != null) {
      storage.switchNamespace(namespaceFor(model, layout, attentionBackend, version));
    }
    weightVersion = version; // after the namespace: whoever reads the version reads its namespace
  }

  /**
   * A weight update: fence, wait for retirement, delete the old namespace, switch (the façade's
   * {@code updateWeightVersion} says each step and what a failure leaves).
   */
  NamespaceDeletion updateWeights(String version) throws Exception {
    checkVersion(version);
    synchronized (weightUpdates) {
      String current = loop.onLoop(() -> weightVersion).get();
      NamespaceDeletion deletion = NamespaceDeletion.NONE;
      if (storage != null) {
        command(Replica.Command.FENCE_STORAGE).get();
        try {
          awaitStorageRetired();
          deletion = purge(namespaceFor(model, layout, attentionBackend, current).toString());
        } catch (Exception | Error e) {
          command(Replica.Command.LIFT_FENCE);
          throw e;
        }
      }
      command(Replica.Command.switchTo(version)).get();
      return deletion;
    }
  }

  /**
   * Deletes {@code namespace}'s objects on the loop thread, between rounds, and waits for the
   * outcome: the store's failure is rethrown as it was.
   */
  private NamespaceDeletion purge(String namespace) throws Exception {
    try {
      return loop.onLoop(() -> store.purgeNamespace(namespace)).get();
    } catch (ExecutionException e) {
      if (e.getCause() instanceof Exception failure) {
        throw failure;
      }
      if (e.getCause() instanceof Error error) {
        throw error;
      }
      throw e;
    }
  }

  /** A namespace rotation that leaves the old namespace's objects in the store. */
  void rotateNamespace(String version) throws Exception {
    checkVersion(version);
    synchronized (weightUpdates) {
      command(Replica.Command.rotate(version)).get();
    }
  }

  private void checkVersion(String version) {
    if (!replica.leader()) {
      throw new IllegalStateException(
          "rank "
              + replica.rank()
              + " of the replica is not its leader: administration goes to rank 0");
    }
    if (version == null || version.isBlank()) {
      throw new IllegalArgumentException("weight_version must be a non-empty string");
    }
    if (version.getBytes(StandardCharsets.UTF_8).length > Replica.Command.MAX_VERSION_BYTES) {
      throw new IllegalArgumentException(
          "weight_version must be at most " + Replica.Command.MAX_VERSION_BYTES + " UTF-8 bytes");
    }
  }

  /**
   * Waits until no storage operation is inside the store (asked on the loop thread between rounds,
   * every storage tick); on a replica, inside any rank's store: an operation stays pending on every
   * rank until every rank's executor has reported it.
   */
  private void awaitStorageRetired() throws Exception {
    long deadlineNs =
        nanoClock.getAsLong() + TimeUnit.MILLISECONDS.toNanos(WEIGHT_UPDATE_RETIREMENT_MS);
    while (true) {
      int inFlight =
          loop.onLoop(() -> storage.busy() ? Math.max(1, stm.inFlightOperations()) : 0).get();
      if (inFlight == 0) {
        return;
      }
      if (nanoClock.getAsLong() - deadlineNs >= 0) {
        throw new TimeoutException(
            inFlight
                + " storage operations were still inside the store"
                + (replica.size() == 1 ? "" : " of a rank of the replica")
                + " after "
                + WEIGHT_UPDATE_RETIREMENT_MS
                + " ms: the weight update was abandoned (nothing deleted or switched)");
      }
      Thread.sleep(LoopRunner.STORAGE_TICK_MS);
    }
  }
}

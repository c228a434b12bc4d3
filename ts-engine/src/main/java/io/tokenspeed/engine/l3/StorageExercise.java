package io.tokenspeed.engine.l3;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageOp;
import io.tokenspeed.engine.memory.BlockGeometry;
import io.tokenspeed.engine.memory.HostCacheStorage;
import io.tokenspeed.l3.CloseReport;
import io.tokenspeed.l3.L3Executor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

/**
 * Calls a store many times over, the way an engine's storage commands reach it, so that the
 * just-in-time compiler compiles the store client before the first request (a handful of restores
 * through an engine would leave it interpreted).
 *
 * <p>Nothing here is a second path to the store. The exercise owns a Host allocation of the
 * engine's geometry ({@link HostCacheStorage} of the layout), starts an {@link L3Executor} over the
 * store and that allocation — which registers it with the store, as an engine's executor registers
 * the Host tier — and submits a PUT, then QUERYs and GETs, as {@link StorageOp}s translated by
 * {@link StorageJobs}: object keys under the given namespace, Host byte ranges of the allocation's
 * blocks. A store that accepts only slices of its registered allocation (Mooncake) is therefore
 * called exactly as it is while serving.
 *
 * <pre>
 *   Host allocation of the exercise (one LCM parent per object, child 0 of each)
 *   [ parent 0: object 0 | parent 1: object 1 | ... ]   PUT reads them, GET writes them back
 * </pre>
 *
 * <p>Store refusals are results, not failures: the exercise only compiles code, and the serving
 * engine answers a store that refuses as it always does. It stops at its time budget, and when a
 * job does not complete within it. The executor is closed at the end, and with it the store; when
 * the executor cannot prove that the store stopped touching the allocation, the allocation stays
 * mapped for the life of the process, as an engine's Host tier does.
 */
public final class StorageExercise {
  private StorageExercise() {}

  /** The most bytes the exercise's Host allocation takes. */
  public static final long MAX_HOST_BYTES = 16L << 20;

  /**
   * What the exercise did.
   *
   * @param objects objects written and read each round
   * @param rounds QUERY and GET rounds run after the PUT
   * @param putKeys PUT rows that succeeded
   * @param getKeys GET rows that read the whole object, over every round
   * @param storeClosed whether the store was closed (false: retirement unknown, both kept)
   */
  public record Outcome(int objects, int rounds, long putKeys, long getKeys, boolean storeClosed) {}

  /**
   * Runs the exercise over {@code settings.store()}, which it owns from then on and closes.
   *
   * @param settings the store and the executor's settings (the serving engine's)
   * @param layout the cache layout whose block sizes the objects take
   * @param namespace the namespace of every object key (its owner deletes the objects)
   * @param maxObjects the most objects, at least one; fewer when their parents pass {@link
   *     #MAX_HOST_BYTES}
   * @param maxRounds the most QUERY and GET rounds
   * @param budgetNs how long the rounds may take, in nanoseconds
   * @throws Exception when the store or the executor cannot start (the store is closed)
   */
  public static Outcome run(
      L3Settings settings,
      CacheLayout layout,
      Namespace namespace,
      int maxObjects,
      int maxRounds,
      long budgetNs)
      throws Exception {
    if (maxObjects < 1 || maxRounds < 0 || budgetNs < 0) {
      throw new IllegalArgumentException(
          "max_objects="
              + maxObjects
              + " must be at least 1, max_rounds="
              + maxRounds
              + " and budget_ns="
              + budgetNs
              + " at least 0");
    }
    BlockGeometry geometry = BlockGeometry.of(layout);
    int objects = (int) Math.max(1, Math.min(maxObjects, MAX_HOST_BYTES / geometry.parentBytes()));
    HostCacheStorage host;
    try {
      StoragePayloads.validate(layout, 1, namespace, settings.store());
      host = HostCacheStorage.ofBytes(layout, objects * geometry.parentBytes());
    } catch (RuntimeException | Error e) {
      settings.store().close(); // nothing registered or started yet
      throw e;
    }
    L3Executor executor;
    try {
      executor =
          L3Executor.start(
              settings.store(),
              settings.runtime().executor(),
              host.memory().segment(),
              System::nanoTime);
    } catch (Exception | Error e) {
      settings.store().close();
      host.close();
      throw e;
    }
    Thread caller = Thread.currentThread();
    executor.onCompletion(() -> LockSupport.unpark(caller));
    StorageJobs jobs = new StorageJobs(namespace, layout, geometry, 0);
    List<CacheKey> keys = new ArrayList<>(objects);
    List<Integer> blocks = new ArrayList<>(objects);
    for (int i = 0; i < objects; i++) {
      int group = i % layout.numGroups();
      int block = 1 + i * geometry.maxChildren(); // child 0 of parent i: a block of every group
      keys.add(new CacheKey(group, new ContentHash(WARM, i, objects, 0), 0));
      blocks.add(block);
      MemorySegment bytes = host.memory().block(group, block);
      for (long b = 0; b < bytes.byteSize(); b++) {
        bytes.set(ValueLayout.JAVA_BYTE, b, (byte) (i * 31 + b));
      }
    }
    long putKeys = 0;
    long getKeys = 0;
    int rounds = 0;
    CloseReport report;
    try {
      long deadlineNs = System.nanoTime() + budgetNs;
      long operationId = 0;
      StorageDone put =
          await(executor, jobs, new StorageOp.Put(++operationId, keys, blocks), deadlineNs);
      putKeys = put == null ? 0 : put.okCount();
      boolean going = put != null;
      while (going && rounds < maxRounds && System.nanoTime() - deadlineNs < 0) {
        StorageDone query =
            await(executor, jobs, new StorageOp.Query(++operationId, keys), deadlineNs);
        StorageDone get =
            query == null
                ? null
                : await(executor, jobs, new StorageOp.Get(++operationId, keys, blocks), deadlineNs);
        going = get != null;
        if (going) {
          getKeys += get.outcomes().stream().filter(o -> o == KeyOutcome.OK).count();
          rounds++;
        }
      }
    } finally {
      report = executor.close();
      if (!report.restartRequired()) {
        host.close(); // else the store may still touch it: it stays mapped, as the Host tier does
      }
    }
    return new Outcome(objects, rounds, putKeys, getKeys, report.storeClosed());
  }

  /** The first word of every exercise object's content hash ("warm"). */
  private static final long WARM = 0x7761726dL;

  /**
   * Submits {@code op}'s job and waits for its record; null when none came by the deadline (the job
   * stays with the executor, whose close deals with it).
   */
  private static StorageDone await(
      L3Executor executor, StorageJobs jobs, StorageOp op, long deadlineNs) {
    executor.submit(jobs.job(op)); // a refusal's record comes back through poll too
    while (true) {
      for (StorageDone d : executor.poll().completions()) {
        if (d.operationId() == op.operationId()) {
          return d;
        }
      }
      long leftNs = deadlineNs - System.nanoTime();
      if (leftNs <= 0) {
        return null;
      }
      LockSupport.parkNanos(Math.min(leftNs, 10_000_000L));
    }
  }
}

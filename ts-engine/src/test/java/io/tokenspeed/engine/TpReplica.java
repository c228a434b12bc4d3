package io.tokenspeed.engine;

import io.tokenspeed.engine.kvevents.KvEventSink;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.LocalCollective;
import io.tokenspeed.model.parallel.Shard;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;

/**
 * The ranks of one tensor-parallel replica in this JVM, for tests: each rank's share of a
 * checkpoint, a collective of threads, and engines joined by the real control-plane mesh on
 * loopback, started together (each blocks until the mesh forms).
 */
final class TpReplica implements AutoCloseable {
  final List<CausalLm> models = new ArrayList<>();
  final List<Engine> engines = new ArrayList<>();

  /**
   * Starts {@code tp} ranks over {@code folder} with {@code config}; {@code l3} gives each rank its
   * L3 settings (null for none).
   */
  static TpReplica start(Path folder, int tp, EngineConfig config, IntFunction<L3Settings> l3)
      throws Exception {
    return start(folder, tp, r -> config, l3);
  }

  /** {@link #start} with each rank's own configuration (a test of diverging ranks). */
  static TpReplica start(
      Path folder, int tp, IntFunction<EngineConfig> configs, IntFunction<L3Settings> l3)
      throws Exception {
    return start(folder, tp, configs, l3, r -> EngineObserver.NONE, Shard.KvSplit.HEADS);
  }

  /** {@link #start} with the KV of full-history attention split over the ranks by {@code kv}. */
  static TpReplica start(
      Path folder,
      int tp,
      IntFunction<EngineConfig> configs,
      IntFunction<L3Settings> l3,
      Shard.KvSplit kv)
      throws Exception {
    return start(folder, tp, configs, l3, r -> EngineObserver.NONE, kv);
  }

  /**
   * {@link #start} with each rank's observer, which its loop thread runs after every round (an
   * invariant checker per rank).
   */
  static TpReplica start(
      Path folder,
      int tp,
      IntFunction<EngineConfig> configs,
      IntFunction<L3Settings> l3,
      IntFunction<? extends EngineObserver> observers)
      throws Exception {
    return start(folder, tp, configs, l3, observers, Shard.KvSplit.HEADS);
  }

  /** {@link #start} with each rank's observer and the KV split by {@code kv}. */
  static TpReplica start(
      Path folder,
      int tp,
      IntFunction<EngineConfig> configs,
      IntFunction<L3Settings> l3,
      IntFunction<? extends EngineObserver> observers,
      Shard.KvSplit kv)
      throws Exception {
    return start(folder, tp, configs, l3, observers, kv, r -> PdOptions.FUSED);
  }

  /** {@link #start} with each rank's role in disaggregated serving. */
  static TpReplica start(
      Path folder,
      int tp,
      IntFunction<EngineConfig> configs,
      IntFunction<L3Settings> l3,
      IntFunction<? extends EngineObserver> observers,
      Shard.KvSplit kv,
      IntFunction<PdOptions> pd)
      throws Exception {
    return start(folder, tp, configs, l3, observers, kv, pd, r -> null);
  }

  /** {@link #start} with each rank's KV event sink (null: none). */
  static TpReplica start(
      Path folder,
      int tp,
      IntFunction<EngineConfig> configs,
      IntFunction<L3Settings> l3,
      IntFunction<? extends EngineObserver> observers,
      Shard.KvSplit kv,
      IntFunction<PdOptions> pd,
      IntFunction<KvEventSink> kvEvents)
      throws Exception {
    TpReplica replica = new TpReplica();
    Collective[] collectives = LocalCollective.group(tp);
    var controls = EngineTensorParallelTest.controls(tp);
    ExecutorService starts = Executors.newFixedThreadPool(tp);
    try {
      for (int r = 0; r < tp; r++) {
        replica.models.add(
            CausalLm.load(
                folder, "tp-test", ModelIdentity.DEFAULT_WEIGHT_VERSION, collectives[r], kv));
      }
      List<Future<Engine>> started = new ArrayList<>();
      for (int r = 0; r < tp; r++) {
        int rank = r;
        started.add(
            starts.submit(
                () ->
                    Engine.start(
                        EngineSettings.of(replica.models.get(rank), configs.apply(rank))
                            .l3(l3 == null ? null : l3.apply(rank))
                            .control(controls.get(rank))
                            .observer(observers.apply(rank))
                            .pd(pd.apply(rank))
                            .kvEvents(kvEvents.apply(rank))
                            .conclude())));
      }
      for (Future<Engine> f : started) {
        replica.engines.add(f.get(60, TimeUnit.SECONDS));
      }
      return replica;
    } catch (Exception | Error e) {
      replica.close();
      throw e;
    } finally {
      starts.shutdownNow();
    }
  }

  Engine leader() {
    return engines.getFirst();
  }

  /** Waits until no rank has storage work pending (write-through done). */
  void awaitStorageIdle() throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    for (Engine e : engines) {
      while (e.storageBusyNow()) {
        if (System.nanoTime() > deadline) {
          throw new AssertionError("storage work still pending on rank " + e.tpRank());
        }
        Thread.sleep(10);
      }
    }
  }

  @Override
  public void close() {
    for (Engine e : engines) {
      e.close();
    }
    for (CausalLm m : models) {
      m.close();
    }
  }
}

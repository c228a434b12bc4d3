package io.tokenspeed.engine;

import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.engine.kvevents.KvEventSink;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.model.parallel.Shard;
import java.util.OptionalInt;
import java.util.function.LongSupplier;

/**
 * Everything an engine starts from, in one immutable object validated once: {@link
 * Builder#conclude} checks every field together, and {@link Engine#start} takes only what it
 * returns.
 *
 * <pre>
 *   model       a CausalLm (the engine computes on the CPU with threads it owns and closes) or a
 *               DeviceModel (a GPU binding, say, which stays the caller's: close it after the engine)
 *   config      the tiers, the scheduler's budgets and the intake bound ({@link EngineConfig})
 *   eosId       the tokenizer's end-of-sequence id, if any (a stop token unless ignore_eos)
 *   l3          L3 under the Host tier; the engine owns the store from then on (default none)
 *   control     the control plane of a tensor-parallel replica, whose ranks must be the model's
 *               (default none: a single rank)
 *   nanoClock   the clock the loop runs by, read once per round (default System::nanoTime)
 *   kvEvents    where the KV block events go (docs/kv-events.md); only a replica's leader (rank 0)
 *               records them (default none: no events)
 * </pre>
 *
 * Tests may add an observer the loop calls after every round and ask for an engine whose loop has
 * not started yet ({@code paused}: requests submitted before {@link Engine#resume} all enter the
 * first round).
 */
public final class EngineSettings {
  /**
   * The load stages of an engine unless told otherwise: 1, the loads copied whole before the
   * forward. Stages of layers cost a GPU more copy calls of fewer bytes: on an H100 the restore of
   * a 32k-token prefix of the Llama 1B shape took 78-89 ms in 8 stages against 29 ms whole, more
   * than the forward they overlapped (docs/benchmarks/2026-12-07-layer-wise-start.md).
   */
  public static final int DEFAULT_LOAD_STAGES = 1;

  /** The clock an engine runs by unless told otherwise. */
  public static final LongSupplier DEFAULT_NANO_CLOCK = System::nanoTime;

  private final CausalLm cpuModel;
  private final DeviceModel deviceModel;
  private final EngineConfig config;
  private final OptionalInt eosId;
  private final L3Settings l3;
  private final ControlConfig control;
  private final EngineObserver observer;
  private final boolean paused;
  private final LongSupplier nanoClock;
  private final Simulation simulation;
  private final int loadStages;
  private final PdOptions pd;
  private final KvEventSink kvEvents;

  private EngineSettings(Builder b) {
    this.cpuModel = b.cpuModel;
    this.deviceModel = b.deviceModel;
    this.config = b.config;
    this.eosId = b.eosId;
    this.l3 = b.l3;
    this.control = b.control;
    this.observer = b.observer;
    this.paused = b.paused;
    this.nanoClock = b.nanoClock;
    this.simulation = b.simulation;
    this.loadStages = b.loadStages;
    this.pd = b.pd;
    this.kvEvents = b.kvEvents;
  }

  /** Where the KV block events go; null for none. */
  KvEventSink kvEvents() {
    return kvEvents;
  }

  /** The engine's role in disaggregated serving ({@link PdOptions#FUSED} unless told). */
  PdOptions pd() {
    return pd;
  }

  /**
   * The most stages a round's Host→Device loads are copied in while the forward computes (1: the
   * loads are copied whole before the forward).
   */
  int loadStages() {
    return loadStages;
  }

  /** Settings for an engine computing {@code model} on the CPU with threads of its own. */
  public static Builder of(CausalLm model, EngineConfig config) {
    return new Builder(model, null, config);
  }

  /** Settings for an engine whose model computes on {@code model}'s device. */
  public static Builder of(DeviceModel model, EngineConfig config) {
    return new Builder(null, model, config);
  }

  /** The CPU model the engine binds and closes; null when {@link #deviceModel} is given. */
  CausalLm cpuModel() {
    return cpuModel;
  }

  /** The caller's device binding; null when {@link #cpuModel} is given. */
  DeviceModel deviceModel() {
    return deviceModel;
  }

  EngineConfig config() {
    return config;
  }

  OptionalInt eosId() {
    return eosId;
  }

  /** L3 under the Host tier, or null for none. */
  L3Settings l3() {
    return l3;
  }

  /** The replica's control plane, or null for a single rank. */
  ControlConfig control() {
    return control;
  }

  EngineObserver observer() {
    return observer;
  }

  boolean paused() {
    return paused;
  }

  LongSupplier nanoClock() {
    return nanoClock;
  }

  /** How the whole-loop simulation runs this engine; null in production. */
  Simulation simulation() {
    return simulation;
  }

  /** Collects the settings; {@link #conclude} validates them once and freezes them. */
  public static final class Builder {
    private final CausalLm cpuModel;
    private final DeviceModel deviceModel;
    private final EngineConfig config;
    private OptionalInt eosId = OptionalInt.empty();
    private L3Settings l3;
    private ControlConfig control;
    private EngineObserver observer = EngineObserver.NONE;
    private boolean paused;
    private LongSupplier nanoClock = DEFAULT_NANO_CLOCK;
    private Simulation simulation;
    private int loadStages = DEFAULT_LOAD_STAGES;
    private PdOptions pd = PdOptions.FUSED;
    private KvEventSink kvEvents;

    private Builder(CausalLm cpuModel, DeviceModel deviceModel, EngineConfig config) {
      this.cpuModel = cpuModel;
      this.deviceModel = deviceModel;
      this.config = config;
    }

    /** The tokenizer's end-of-sequence id, if any (default none). */
    public Builder eosId(OptionalInt eosId) {
      this.eosId = eosId;
      return this;
    }

    /** L3 under the Host tier; null for none (the default). */
    public Builder l3(L3Settings l3) {
      this.l3 = l3;
      return this;
    }

    /** The control plane of a tensor-parallel replica; null for a single rank (the default). */
    public Builder control(ControlConfig control) {
      this.control = control;
      return this;
    }

    /** The clock the loop runs by (default {@link #DEFAULT_NANO_CLOCK}). */
    public Builder nanoClock(LongSupplier nanoClock) {
      this.nanoClock = nanoClock;
      return this;
    }

    /**
     * Copies a round's Host→Device loads in at most {@code stages} stages of consecutive layers,
     * the forward starting each layer once its stage has run; 1 copies them whole before the
     * forward (the default, {@link #DEFAULT_LOAD_STAGES}). A model that does not wait on its layer
     * gate ({@link DeviceModel#waitsForLayers}) always gets whole loads.
     */
    public Builder loadStages(int stages) {
      if (stages < 1) {
        throw new IllegalArgumentException("load_stages=" + stages + " must be at least 1");
      }
      this.loadStages = stages;
      return this;
    }

    /**
     * The engine's role in disaggregated serving and its KV transfer (default {@link
     * PdOptions#FUSED}). Every rank of a tensor-parallel replica in the prefill or decode role gets
     * its own options (a decode rank its own KV port); a replica whose KV is split by pages is
     * refused by {@link #conclude}.
     */
    public Builder pd(PdOptions pd) {
      this.pd = pd;
      return this;
    }

    /**
     * Where the engine's KV block events go (docs/kv-events.md): each round that had events hands
     * them to {@code sink} on the loop thread, in order, at the round's end; the sink must return
     * at once. On a tensor-parallel replica only the leader (rank 0) records events: its tiers
     * mirror every rank's decisions; a follower ignores the sink. Null for none (the default).
     */
    public Builder kvEvents(KvEventSink sink) {
      this.kvEvents = sink;
      return this;
    }

    /** A hook the loop thread runs after every round and sample (tests check invariants). */
    Builder observer(EngineObserver observer) {
      this.observer = observer;
      return this;
    }

    /**
     * Runs the engine under the whole-loop simulation (its tests): L3 stepped, the exchange in
     * memory, the loop thread never started (implies {@link #paused}).
     */
    Builder simulation(Simulation simulation) {
      this.simulation = simulation;
      this.paused = true;
      return this;
    }

    /** The engine's loop waits for {@link Engine#resume} (tests that need one first round). */
    Builder paused() {
      this.paused = true;
      return this;
    }

    /**
     * Validates every setting and returns them frozen.
     *
     * @throws IllegalArgumentException naming the setting that is missing or does not fit: no model
     *     or config, or a model's rank and size that are not the control plane's
     */
    public EngineSettings conclude() {
      if (cpuModel == null && deviceModel == null) {
        throw new IllegalArgumentException("model must be given");
      }
      require(config, "config");
      require(eosId, "eosId");
      require(observer, "observer");
      require(nanoClock, "nanoClock");
      require(pd, "pd");
      Shard shard = cpuModel != null ? cpuModel.shard() : deviceModel.shard();
      checkRanks(shard, control);
      if (pd.role() != EngineRole.FUSED && shard.pagesSplit()) {
        throw new IllegalArgumentException(
            "the "
                + pd.role().wireName()
                + " role moves KV split by heads: a replica whose KV is split by pages runs fused"
                + " only");
      }
      return new EngineSettings(this);
    }

    private static void require(Object value, String name) {
      if (value == null) {
        throw new IllegalArgumentException(name + " must not be null");
      }
    }

    /**
     * A model sharded over several ranks needs the replica's control plane, and the control plane's
     * ranks must be the model's.
     */
    private static void checkRanks(Shard shard, ControlConfig control) {
      if (control == null || control.worldSize() == 1) {
        if (shard.size() != 1) {
          throw new IllegalArgumentException(
              "the model is rank "
                  + shard.rank()
                  + " of "
                  + shard.size()
                  + ": the engine needs the replica's control plane");
        }
        return;
      }
      if (control.worldSize() != shard.size() || control.rank() != shard.rank()) {
        throw new IllegalArgumentException(
            "control plane rank "
                + control.rank()
                + " of "
                + control.worldSize()
                + " but the model is rank "
                + shard.rank()
                + " of "
                + shard.size());
      }
    }
  }
}

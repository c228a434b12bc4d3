package io.tokenspeed.server.cli;

import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.PdOptions;
import io.tokenspeed.engine.kvevents.KvEventSink;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.server.http.WarmUp;
import java.util.List;
import java.util.OptionalInt;

/**
 * The model a command's engines run on, loaded once per process: the CPU model (this process's rank
 * of the replica under {@code --tp}), or the checkpoint on the GPU {@code --device} names, bound
 * for the engine. Any number of engines may be started over it, one after another or side by side;
 * each is closed by whoever started it, and all of them before this.
 *
 * <p>On the CPU every engine binds the model to compute threads of its own and frees them when it
 * closes, as {@link Engine#start(CausalLm, EngineConfig, OptionalInt, L3Settings)} does. On a GPU
 * the binding (its copy stream and pinned memory), the weights in GPU memory and the device are
 * this object's, and {@link #close()} frees them; an engine frees only its Device tier.
 */
final class EngineModel implements AutoCloseable, WarmUp.Engines {

  private final CausalLm cpu;
  private final TensorParallelOptions tp;
  private final DeviceModel device;

  /** What the GPU path loaded, in closing order (the binding, the weights, the device). */
  private final List<AutoCloseable> owned;

  private boolean closed;

  /** The engines' {@link EngineSettings.Builder#loadStages} (the default unless set). */
  private int loadStages = EngineSettings.DEFAULT_LOAD_STAGES;

  /** Engines started over this model copy their loads in at most {@code stages} stages. */
  EngineModel withLoadStages(int stages) {
    this.loadStages = stages;
    return this;
  }

  private EngineModel(
      CausalLm cpu, TensorParallelOptions tp, DeviceModel device, List<AutoCloseable> owned) {
    this.cpu = cpu;
    this.tp = tp;
    this.device = device;
    this.owned = owned;
  }

  /** The CPU model {@code lm}, of the replica {@code tp} names when it is a rank of one. */
  static EngineModel onCpu(CausalLm lm, TensorParallelOptions tp) {
    return new EngineModel(lm, tp, null, List.of(lm));
  }

  /**
   * {@code model} on its device; {@code owned} is closed, in order, by {@link #close()} (the
   * binding first).
   */
  static EngineModel onDevice(DeviceModel model, List<AutoCloseable> owned) {
    return onDevice(model, owned, null);
  }

  /**
   * {@code model} on its device, this process's rank of the replica {@code tp} names (null or a
   * replica of one rank: alone); {@code owned} as above.
   */
  static EngineModel onDevice(
      DeviceModel model, List<AutoCloseable> owned, TensorParallelOptions tp) {
    return new EngineModel(null, tp, model, List.copyOf(owned));
  }

  /** Whether the model computes on a GPU. */
  boolean gpu() {
    return device != null;
  }

  /** The device as logs name it: {@code cpu} or {@code cuda:N}. */
  String deviceName() {
    return device != null ? device.deviceName() : "cpu";
  }

  /** The CPU model; null on a GPU. */
  CausalLm cpuModel() {
    return cpu;
  }

  @Override
  public int vocabSize() {
    return device != null ? device.vocabSize() : cpu.vocabSize();
  }

  /** The attention implementation the L3 namespace of this model's KV names. */
  String attentionBackend() {
    return device != null ? device.attentionBackend() : L3Settings.CPU_ATTENTION_BACKEND;
  }

  /** See {@link Engine#deviceParentsFor(CausalLm, int)}. */
  @Override
  public int deviceParentsFor(int tokens) {
    return device != null
        ? Engine.deviceParentsFor(device, tokens)
        : Engine.deviceParentsFor(cpu, tokens);
  }

  /**
   * Starts an engine over the model (this process's rank of the replica under {@code --tp}), with
   * L3 under its Host tier when {@code l3} is given: the engine owns its store from then on, and
   * its KV is named by this model's attention backend, whatever {@code l3} says.
   *
   * @throws IllegalStateException when L3 cannot start (nothing is left running)
   */
  @Override
  public Engine start(EngineConfig config, OptionalInt eos, L3Settings l3) {
    return start(config, eos, l3, PdOptions.FUSED);
  }

  /**
   * {@link #start(EngineConfig, OptionalInt, L3Settings)} in the role {@code pd} gives (a decode
   * engine listens for prefill engines from its start). Only the serving engine takes a role: the
   * warm-up's throwaway engines are fused, so they bind no KV port.
   */
  Engine start(EngineConfig config, OptionalInt eos, L3Settings l3, PdOptions pd) {
    return start(config, eos, l3, pd, null);
  }

  /**
   * {@link #start(EngineConfig, OptionalInt, L3Settings, PdOptions)} with the engine's KV events
   * going to {@code kvEvents} (null: none; only the serving engine publishes them).
   */
  Engine start(
      EngineConfig config, OptionalInt eos, L3Settings l3, PdOptions pd, KvEventSink kvEvents) {
    L3Settings settings =
        l3 == null || l3.attentionBackend().equals(attentionBackend())
            ? l3
            : new L3Settings(l3.store(), l3.runtime(), attentionBackend());
    EngineSettings.Builder engine =
        device != null ? EngineSettings.of(device, config) : EngineSettings.of(cpu, config);
    if (tp != null && tp.ranked()) {
      engine.control(tp.control());
    }
    return Engine.start(
        engine.eosId(eos).l3(settings).loadStages(loadStages).pd(pd).kvEvents(kvEvents).conclude());
  }

  /** Frees what was loaded: the CPU model, or the GPU's binding, weights and device. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    RuntimeException failure = null;
    for (AutoCloseable c : owned) {
      try {
        c.close();
      } catch (Exception e) {
        if (failure == null) {
          failure =
              e instanceof RuntimeException r
                  ? r
                  : new IllegalStateException("closing the model failed: " + e, e);
        } else {
          failure.addSuppressed(e);
        }
      }
    }
    if (failure != null) {
      throw failure;
    }
  }
}

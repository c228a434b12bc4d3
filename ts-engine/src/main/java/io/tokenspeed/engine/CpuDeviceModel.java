package io.tokenspeed.engine;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.memory.HostDeviceBytes;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.device.DeviceBytes;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;

/**
 * The CPU backend: the CPU model over the Device tier in host memory, on a pool of compute threads
 * it owns. The model stays its caller's.
 */
public final class CpuDeviceModel implements DeviceModel {
  private final CausalLm model;
  private final ComputePool pool;

  /** Binds {@code model} to a new pool of {@code threads} compute threads. */
  public CpuDeviceModel(CausalLm model, int threads) {
    this.model = model;
    this.pool = ComputePool.ofThreads(threads);
  }

  /** The CPU model. */
  public CausalLm model() {
    return model;
  }

  @Override
  public String deviceName() {
    return "cpu";
  }

  @Override
  public boolean computesOnHost() {
    return true;
  }

  @Override
  public String attentionBackend() {
    return L3Settings.CPU_ATTENTION_BACKEND;
  }

  @Override
  public ModelIdentity identity() {
    return model.identity();
  }

  @Override
  public Collective collective() {
    return model.collective();
  }

  @Override
  public Shard shard() {
    return model.shard();
  }

  @Override
  public int vocabSize() {
    return model.vocabSize();
  }

  @Override
  public int maxPositions() {
    return model.config().maxPositionEmbeddings();
  }

  @Override
  public CacheLayout cacheLayout(int prefixGranularity, int blockGranularity) {
    return model.cacheLayout(prefixGranularity, blockGranularity);
  }

  /** Never called: the engine allocates host memory itself ({@link #computesOnHost()}). */
  @Override
  public DeviceBytes allocate(
      CacheLayout layout, long leadingPad, long tierBytes, int[] poolBlocks) {
    throw new UnsupportedOperationException("the CPU backend's Device tier is the engine's");
  }

  /** The CPU model waits on the batch's gate before each of its blocks. */
  @Override
  public boolean waitsForLayers() {
    return true;
  }

  @Override
  public ForwardResult forward(ForwardBatch batch, DeviceBytes kv) {
    if (!(kv instanceof HostDeviceBytes host)) {
      throw new IllegalArgumentException("the CPU backend computes over host memory, not " + kv);
    }
    return model.forward(batch, host.kvCache(), pool);
  }

  @Override
  public void close() {
    pool.close();
  }
}

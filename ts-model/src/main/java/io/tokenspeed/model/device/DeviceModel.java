package io.tokenspeed.model.device;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import java.lang.foreign.MemorySegment;

/**
 * A model bound to the device it computes on, as the engine's loop drives it: the CPU backend (the
 * CPU model over host memory) or a GPU backend. The scheduler, the storage transfer manager, the
 * executor and the control plane never see which; the engine asks it for the Device tier's memory
 * and runs each round's forward pass over that memory.
 */
public interface DeviceModel extends AutoCloseable {

  /** What names the device in logs and errors, such as {@code cpu} or {@code cuda:0}. */
  String deviceName();

  /**
   * Whether the Device tier is host memory the model reads through a {@code KvCache} (the CPU
   * backend): the engine then allocates it itself, and {@link #allocate} is not called.
   */
  boolean computesOnHost();

  ModelIdentity identity();

  /**
   * The attention implementation the deployment identity names for KV this binding computes: KV of
   * another implementation (whose numbers differ) lives under another L3 namespace.
   */
  String attentionBackend();

  /** The collective of the model's tensor-parallel ranks (a single rank's without TP). */
  Collective collective();

  /** This rank's place in its tensor-parallel replica. */
  Shard shard();

  int vocabSize();

  /** The cache layout the forward pass reads and writes. */
  CacheLayout cacheLayout(int prefixGranularity, int blockGranularity);

  /**
   * Allocates a Device tier of {@code tierBytes} bytes behind {@code leadingPad} bytes of padding,
   * zeroed, and binds the model's pool of group {@code g} to the {@code poolBlocks[g]} blocks that
   * start {@code bytesPerBlock(g)} bytes before the tier (model block {@code i ≥ 1} of group g at
   * tier offset {@code (i − 1) · bytesPerBlock(g)}; block 0 is the null block, never written).
   */
  DeviceBytes allocate(CacheLayout layout, long leadingPad, long tierBytes, int[] poolBlocks);

  /**
   * Computes one batch over {@code kv} (what {@link #allocate} returned, or the engine's host
   * memory for a backend that {@link #computesOnHost}); returns once the logits are on the host.
   */
  ForwardResult forward(ForwardBatch batch, DeviceBytes kv);

  /**
   * Prepares the Host tier's memory for copies to and from the device (a GPU backend pins it, once,
   * for asynchronous copies at the bus's speed); the engine calls it once, before any copy.
   */
  default void pinHost(MemorySegment hostTier) {}

  /** Undoes {@link #pinHost} before the engine frees the Host tier. */
  default void unpinHost(MemorySegment hostTier) {}

  /** Frees what the binding holds (threads, device memory of the weights); not the checkpoint. */
  @Override
  void close();
}

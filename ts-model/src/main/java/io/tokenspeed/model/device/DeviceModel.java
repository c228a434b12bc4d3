package io.tokenspeed.model.device;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.sampling.LogSoftmax;
import io.tokenspeed.model.sampling.RowSampling;
import io.tokenspeed.model.sampling.Sampler;
import java.lang.foreign.MemorySegment;
import java.util.List;

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

  /**
   * The longest sequence, prompt and generated tokens together, the model accepts: its {@code
   * max_position_embeddings}. The engine refuses a request that would run past it at submission;
   * the forward pass refuses positions past it. Unbounded by default.
   */
  default int maxPositions() {
    return Integer.MAX_VALUE;
  }

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
   * Computes one batch over {@code kv}, as {@link #forward}, and samples the next token of each
   * request that has a {@link RowSampling} from that request's last logits row: a model that
   * samples on the device brings only the tokens (and asked-for log probabilities) to the host, not
   * {@code vocabSize} floats per request.
   *
   * <p>The tokens are those a {@link Sampler} gives on the host for the same rows and the same
   * (params, seed, step), bit for bit, and the log probabilities those of {@link LogSoftmax}: the
   * engine's tokens do not depend on where it samples. A row the sampler refuses (a NaN or
   * +Infinity logit, or every logit -Infinity) fails with the sampler's {@link
   * IllegalArgumentException}.
   *
   * <p>The default runs {@link #forward}, samples on the host with a {@link Sampler} and a {@link
   * LogSoftmax} that the calling thread reuses from call to call, and always returns the logits.
   * Like {@link #forward}, it is called by the engine's loop thread alone.
   *
   * @param rows one entry per request of {@code batch}, in batch order: what chooses its next
   *     token, or {@code null} for a request with nothing to sample this round (a prefill chunk
   *     before the prompt's end)
   * @param keepLogits whether to return the logits even when they are not on the host otherwise (an
   *     observer that checks them); a model that has them on the host returns them anyway
   * @throws IllegalArgumentException when {@code rows} does not match the batch, or a sampled row
   *     is not a distribution
   */
  default SampledForward forwardAndSample(
      ForwardBatch batch, DeviceBytes kv, List<RowSampling> rows, boolean keepLogits) {
    return forwardAndSampleOnHost(batch, kv, rows, keepLogits);
  }

  /**
   * {@link #forwardAndSample} with the sampling on the host whatever the model can do: the logits
   * come down and the host sampler chooses. The default of {@code forwardAndSample}; a device model
   * that samples on the device keeps this as the baseline its sampling is measured and checked
   * against.
   */
  default SampledForward forwardAndSampleOnHost(
      ForwardBatch batch, DeviceBytes kv, List<RowSampling> rows, boolean keepLogits) {
    return HostSampling.sample(this, batch, kv, rows, keepLogits);
  }

  /**
   * Whether {@link #forwardAndSample} samples on the device (and so brings no logits to the host
   * unless asked); {@code false} for the default, which samples on the host. For figures and logs.
   */
  default boolean samplesOnDevice() {
    return false;
  }

  /**
   * Whether {@link #forward} waits on the batch's {@link io.tokenspeed.model.LayerGate} before each
   * layer, so that the engine may copy a round's loads while the forward computes; {@code false}
   * (the default) makes the engine copy them whole before the forward.
   */
  default boolean waitsForLayers() {
    return false;
  }

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

package io.tokenspeed.cuda.model;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.cuda.CopyEngine;
import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.cuda.DeviceBuffer;
import io.tokenspeed.cuda.PinnedHost;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.device.DeviceBytes;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.model.device.SampledForward;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.sampling.RowSampling;
import java.lang.foreign.MemorySegment;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The CUDA backend as the engine drives it: the GPU model, the Device tier in GPU memory (one
 * {@code cudaMalloc} laid out as the engine's geometry says), copies to and from the pinned Host
 * tier on a copy stream of their own, and the forward pass on the compute stream.
 *
 * <pre>
 *   Host tier (pinned) ──cudaMemcpyAsync, copy stream──▶ Device tier (GPU) ◀── forward, compute stream
 *          ▲                                                   │
 *          └─────────────── cudaMemcpyAsync, copy stream ──────┘
 * </pre>
 *
 * <p>Ordering: a batch of copies completes (its stream synchronized) before the engine's fence lets
 * the forward pass that reads it run; the forward pass returns after its stream has finished, so
 * the stores the engine issues afterwards read what it wrote.
 */
public final class CudaDeviceModel implements DeviceModel {

  /** The suffix of {@link #attentionBackend()} in deterministic mode (fixed-order GEMMs). */
  public static final String FIXED_ORDER = "-fixed-order";

  private final CudaCausalLm model;
  private final Collective collective;
  private final CudaDevice device;
  private final CopyEngine copies;
  private final Map<MemorySegment, PinnedHost> pinned = new IdentityHashMap<>();

  /**
   * Binds {@code model} to its device, with a copy stream of its own. The model stays the caller's.
   */
  public CudaDeviceModel(CudaCausalLm model) {
    this(model, Collective.single());
  }

  /**
   * Binds {@code model}, one rank's share of a tensor-parallel replica ({@link
   * CudaCausalLm#shard}), whose ranks agree on each round through {@code collective} (the replica's
   * host collective, the caller's: the model sums its products through its own device collective).
   */
  public CudaDeviceModel(CudaCausalLm model, Collective collective) {
    if (collective.size() != model.shard().size() || collective.rank() != model.shard().rank()) {
      throw new IllegalArgumentException(
          "collective rank "
              + collective.rank()
              + " of "
              + collective.size()
              + " but the model's shard "
              + model.shard());
    }
    this.model = model;
    this.collective = collective;
    this.device = model.device();
    this.copies = new CopyEngine(device);
  }

  public CudaCausalLm model() {
    return model;
  }

  /**
   * The attention implementation the deployment identity names for KV this backend computes: the
   * model's attention kernels ({@code cuda-paged-f32}: float32 arithmetic; {@code cuda-flash-bf16}:
   * the tensor cores; {@code cuda-flash-wgmma-bf16}: Hopper's wgmma), with {@link #FIXED_ORDER} in
   * deterministic mode, and {@code -wgmma} after it where the fixed-order products are Hopper's
   * ({@code -wgmma-split} where they split k; {@link CudaCausalLm#fixedOrderBits}). KV of the CPU
   * kernels, or of another of these, lives under other namespaces.
   */
  @Override
  public String attentionBackend() {
    return attentionBackend(model.attentionName(), model.deterministic(), model.fixedOrderBits());
  }

  /**
   * {@link #attentionBackend()} of a model whose attention is {@code attention}, deterministic or
   * not, whose fixed-order products give {@code fixedOrderBits}.
   */
  static String attentionBackend(String attention, boolean deterministic, String fixedOrderBits) {
    if (!deterministic) {
      return attention;
    }
    return attention + FIXED_ORDER + ("mma".equals(fixedOrderBits) ? "" : "-" + fixedOrderBits);
  }

  @Override
  public String deviceName() {
    return "cuda:" + device.ordinal();
  }

  @Override
  public boolean computesOnHost() {
    return false;
  }

  @Override
  public ModelIdentity identity() {
    return model.identity();
  }

  @Override
  public Collective collective() {
    return collective;
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
    return model.maxPositions();
  }

  @Override
  public CacheLayout cacheLayout(int prefixGranularity, int blockGranularity) {
    return model.cacheLayout(prefixGranularity, blockGranularity);
  }

  @Override
  public synchronized void pinHost(MemorySegment hostTier) {
    pinned.computeIfAbsent(hostTier, s -> PinnedHost.register(device, s));
  }

  @Override
  public synchronized void unpinHost(MemorySegment hostTier) {
    PinnedHost p = pinned.remove(hostTier);
    if (p != null) {
      p.close();
    }
  }

  @Override
  public DeviceBytes allocate(
      CacheLayout layout, long leadingPad, long tierBytes, int[] poolBlocks) {
    device.bind();
    DeviceBuffer memory = device.allocateZeroed(Math.addExact(leadingPad, tierBytes));
    long[] bases = new long[layout.numGroups()];
    for (int g = 0; g < bases.length; g++) {
      long bpb = layout.group(g).bytesPerBlock();
      if (bpb > leadingPad) {
        memory.close();
        throw new IllegalArgumentException(
            "leading pad=" + leadingPad + " is smaller than group " + g + "'s block of " + bpb);
      }
      bases[g] = memory.pointer() + leadingPad - bpb;
    }
    return new Bytes(memory, leadingPad, tierBytes, new CudaKvCache(layout, bases, poolBlocks));
  }

  /**
   * The forward issues each layer's kernels after its gate opens: the layer's loads have then run
   * on the copy stream, and the kernels of earlier layers keep the GPU busy meanwhile.
   */
  @Override
  public boolean waitsForLayers() {
    return true;
  }

  @Override
  public ForwardResult forward(ForwardBatch batch, DeviceBytes kv) {
    if (!(kv instanceof Bytes b)) {
      throw new IllegalArgumentException(
          "the CUDA backend computes over its own memory, not " + kv);
    }
    return model.forward(batch, b.view);
  }

  /**
   * The forward pass, then the next tokens sampled on the device: the logits stay in GPU memory
   * unless {@code keepLogits} ({@link CudaCausalLm#forwardAndSample}).
   */
  @Override
  public SampledForward forwardAndSample(
      ForwardBatch batch, DeviceBytes kv, List<RowSampling> rows, boolean keepLogits) {
    if (!(kv instanceof Bytes b)) {
      throw new IllegalArgumentException(
          "the CUDA backend computes over its own memory, not " + kv);
    }
    return model.forwardAndSample(batch, b.view, rows, keepLogits);
  }

  @Override
  public boolean samplesOnDevice() {
    return true;
  }

  /** The Device tier in GPU memory; copies queue on the backend's copy stream. */
  private final class Bytes implements DeviceBytes {
    private final DeviceBuffer memory;
    private final long pad;
    private final long size;
    private final CudaKvCache view;
    private boolean closed;

    Bytes(DeviceBuffer memory, long pad, long size, CudaKvCache view) {
      this.memory = memory;
      this.pad = pad;
      this.size = size;
      this.view = view;
    }

    private long at(long offset, long bytes) {
      if (offset < 0 || bytes < 0 || offset > size - bytes) {
        throw new IndexOutOfBoundsException(
            "Device bytes [" + offset + ", " + (offset + bytes) + ") outside a tier of " + size);
      }
      return memory.pointer() + pad + offset;
    }

    @Override
    public long byteSize() {
      return size;
    }

    @Override
    public void copyFromHost(MemorySegment src, long dstOffset) {
      device.bind();
      copies.copy(at(dstOffset, src.byteSize()), src.address(), src.byteSize());
    }

    @Override
    public void copyToHost(long srcOffset, MemorySegment dst) {
      device.bind();
      copies.copy(dst.address(), at(srcOffset, dst.byteSize()), dst.byteSize());
    }

    @Override
    public void copyWithin(long srcOffset, long dstOffset, long bytes) {
      device.bind();
      copies.copy(at(dstOffset, bytes), at(srcOffset, bytes), bytes);
    }

    @Override
    public void awaitCopies() {
      device.bind();
      copies.synchronize();
    }

    @Override
    public Optional<MemorySegment> hostSegment() {
      return Optional.empty();
    }

    @Override
    public synchronized void close() {
      if (!closed) {
        closed = true;
        device.bind();
        copies.synchronize();
        device.synchronize();
        memory.close();
      }
    }

    @Override
    public String toString() {
      return "Device tier of " + size + " bytes on " + deviceName();
    }
  }

  /** Closes the copy stream and unpins what is still pinned; the model stays the caller's. */
  @Override
  public synchronized void close() {
    for (PinnedHost p : pinned.values()) {
      p.close();
    }
    pinned.clear();
    copies.close();
  }
}

package io.tokenspeed.cuda.model;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.cuda.DeviceBuffer;
import io.tokenspeed.cuda.DeviceCollective;
import io.tokenspeed.cuda.Gemm;
import io.tokenspeed.cuda.KernelArgs;
import io.tokenspeed.cuda.KernelSwitch;
import io.tokenspeed.cuda.PinnedHost;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardChecks;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.LayerGate;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.checkpoint.Checkpoint;
import io.tokenspeed.model.checkpoint.CheckpointException;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.Tensor;
import io.tokenspeed.model.checkpoint.WeightSource;
import io.tokenspeed.model.config.DecoderDims;
import io.tokenspeed.model.config.Gemma3Config;
import io.tokenspeed.model.config.JambaConfig;
import io.tokenspeed.model.config.MambaConfig;
import io.tokenspeed.model.config.MixerDims;
import io.tokenspeed.model.config.ModelConfig;
import io.tokenspeed.model.config.ModelConfigs;
import io.tokenspeed.model.device.SampledForward;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.sampling.RowSampling;
import io.tokenspeed.model.sampling.SampledRow;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A decoder of the Llama family (Llama, Mistral without sliding window, Qwen2, Qwen3), Gemma 3,
 * Mamba or Jamba computed on a GPU: the weights in device memory in the checkpoint's own element
 * type (bf16 or float32), the residual stream and every reduction in float32, GEMMs through cuBLAS
 * (bf16 inputs with float32 accumulation for bf16 weights), and the other steps as the project's
 * kernels.
 *
 * <pre>
 *   tokens → embed → [ RMSNorm → qkv GEMM → bias, QK-norm, RoPE, K/V → pool → paged attention
 *                      → o GEMM (+= x) → RMSNorm → gate|up GEMM → SiLU·mul → down GEMM (+= x) ] × L
 *          → rows that need logits → RMSNorm → LM head GEMM → float32 logits, copied to the host
 *
 *   Gemma 3: embeddings × sqrt(hidden); norms of 1 + w; each sublayer's output normalized before
 *            its add (rmsnorm_add); GELU(tanh)·mul; sliding layers attend within their window
 *            (their own cache group, their own RoPE base); scores and logits soft-capped if asked
 *   Mamba:   [ RMSNorm → in_proj → conv → x_proj → dt_proj, softplus → scan → out_proj (+= x) ]
 *            (CudaMamba), resuming and storing State checkpoints in the State group's slots
 *   Jamba:   Mamba mixers and attention layers without RoPE, each followed by the SiLU MLP
 * </pre>
 *
 * <p>Gemma 3, Mamba and Jamba run on the per-token float32 attention ({@code paged_attention},
 * whose window and soft-cap the other kernels do not take; float32 KV beside Mamba's float32 State
 * checkpoints in one layout).
 *
 * <p>It reads and writes KV exactly where the CPU model does (the same {@link CacheLayout}, float32
 * values), so blocks restored from a store, or computed by a CPU replica, serve it unchanged. Like
 * the CPU model it never chooses blocks: a forward pass is handed block tables.
 *
 * <p>System property {@value #SPLIT_KV_PROPERTY} = {@code on|off} (default {@code on}, read once):
 * with {@code on}, a small batch ({@link #SPLIT_SMALL_BATCH}) of decode tokens only (one token per
 * request) whose longest context is at least {@value #SPLIT_MIN_CONTEXT} positions runs its
 * attention split over the keys (flash-decoding: {@code decode_attention_split_d64/d128} then
 * {@code decode_attention_combine}), so that its contexts spread over the multiprocessors instead
 * of taking one block per (request, KV head). Only with the tensor-core attention and only when the
 * model is not deterministic: the split path rounds the softmax's probabilities differently from
 * the flash kernel, so a token's logits would depend on whether its batch took it. With {@code on}
 * too, on Hopper, a prefill or mixed batch whose flash grid would leave half the multiprocessors
 * idle, as a restored prefix's short suffix over a long context does, runs the same kernel split
 * over the keys ({@link #prefillSplitPlan}, {@code flash_attention_wgmma_split_d64/d128} or {@code
 * _tma_split_}, then the same combine), in normal mode only; {@value #PREFILL_SPLIT_PROPERTY} =
 * {@code off} keeps the unsplit kernel for prefill alone. Any other value is refused when the class
 * loads.
 *
 * <p>System property {@value #GRAPHS_PROPERTY} = {@code on|off} (default {@code on}, read once):
 * with {@code on}, a decode step whose products all run on the project's own kernels is recorded as
 * a CUDA graph the second time its shape comes and replayed after that (see {@link GraphKey}); the
 * step's tables are uploaded before the replay as before a launch.
 *
 * <p>System property {@value #FLASH_PROPERTY} = {@code auto|mma|wgmma|tma} (default {@code auto},
 * read once): the tensor-core attention's kernel, {@code flash_attention_d64/d128} ({@code
 * mma.sync}, every GPU), {@code flash_attention_wgmma_d64/d128} (Hopper's {@code wgmma}, compute
 * capability 9.0 only: loading a tensor-core model with {@code wgmma} on another GPU is refused
 * with an {@link IllegalArgumentException} that says so, rather than measuring the other kernel) or
 * {@code flash_attention_tma_d64/d128} (the same with K and V copied by the TMA unit, the same
 * bits; Hopper only, as {@code wgmma}; not yet the default: not yet timed on a GPU). {@code auto}
 * takes {@code wgmma} on compute capability 9.0 and {@code mma} elsewhere; on Hopper, a batch of
 * decode tokens only then runs on {@code mma} unless the model is deterministic (its blocks hold
 * one token's few rows, for which the one-block-a-multiprocessor kernels have no advantage), while
 * every batch with a prefill runs on {@code wgmma}. A deterministic model runs every batch on one
 * kernel, so that a token's bits do not depend on what shares its batch. {@code mma} gives other
 * bits than the Hopper kernels, so the attention's name in the deployment identity differs ({@link
 * #attentionName}). Any other value is refused when the class loads.
 */
public final class CudaCausalLm implements AutoCloseable {

  private static final int NORM_THREADS = 256;

  /**
   * SILU_SPAN of kernels.cu: the intermediate width one block of {@code silu_mul} covers, four
   * values a thread.
   */
  public static final int SILU_SPAN = 1024;

  private static final int ATTN_WARPS = 4;
  private static final int ATTN_MAX_HEAD_DIM = 256;

  /** FA_ROWS of kernels.cu: the (token, query head) rows of a tensor-core attention block. */
  private static final int FLASH_ROWS = 128;

  /** FA_KEYS of kernels.cu: the keys of one pipeline stage of the flash kernel. */
  private static final int FLASH_KEYS = 64;

  /** FA_WARPS of kernels.cu, in threads: the flash kernel's block. */
  static final int FLASH_THREADS = 128;

  /** FW_KEYS of kernels.cu: the keys of one pipeline stage of the Hopper flash kernel. */
  static final int WGMMA_FLASH_KEYS = 128;

  /** FW_THREADS of kernels.cu: the Hopper flash kernel's block, a producer and two consumers. */
  static final int WGMMA_FLASH_THREADS = 384;

  /** The system property that picks the tensor-core attention's kernel: {@code auto|mma|wgmma}. */
  static final String FLASH_PROPERTY = "tokenspeed.cuda.flash";

  /**
   * The kernel {@link #FLASH_PROPERTY} asks of every tensor-core model, read once: null for {@code
   * auto} (the device's choice, {@link #flashKernelFor}).
   */
  static final FlashKernel FLASH_DEFAULT = flashKernelOf(System.getProperty(FLASH_PROPERTY));

  /** The system property that turns the split-KV decode on ({@code on}) or off ({@code off}). */
  static final String SPLIT_KV_PROPERTY = "tokenspeed.cuda.splitkv";

  /** The mode {@link #SPLIT_KV_PROPERTY} gives every model, read once. */
  private static final SplitKv SPLIT_KV_DEFAULT =
      splitKvMode(System.getProperty(SPLIT_KV_PROPERTY));

  /**
   * Key positions of a split, the unit splits grow by when a context would need more than the cap:
   * a multiple of every power-of-two block size up to it, and four chunks of 32 keys, one for each
   * warp of a block (a warp's chunks follow one another; a short context's time is theirs).
   */
  static final int SPLIT_KEYS = 128;

  /** The shortest longest-context of a batch for which {@link SplitKv#AUTO} splits. */
  static final int SPLIT_MIN_CONTEXT = 512;

  /**
   * {@link SplitKv#AUTO} splits only a batch whose blocks of one split ({@code tokens · kvHeads ·
   * ⌈group / SPLIT_HEADS⌉}) take at most this share of the multiprocessors, inverted: 4, a quarter.
   * Measured on an H100 (Llama 8B shape, context 2,048, graphs; docs/benchmarks): split against
   * flash 6.98 against 8.23 ms a step at batch 1 and 7.59 against 9.00 at batch 4 (32 blocks), but
   * 13.28 against 11.62 at batch 16 and 27.94 against 18.83 at batch 64, where the flash kernel's
   * blocks already fill the device.
   */
  static final int SPLIT_SMALL_BATCH = 4;

  /** The most splits of one token (the grid's second dimension and the partials' stride). */
  static final int SPLIT_MAX = 128;

  /**
   * Blocks of the split kernel a batch aims at per multiprocessor: the cap on splits per token is
   * this many blocks over the blocks one split of every token takes, so long contexts at small
   * batches fill the device about four times over while the partials (and the combine) stay small.
   */
  static final int SPLIT_BLOCKS_PER_SM = 4;

  /** DS_HEADS of kernels.cu: the query heads of a KV head one split block serves. */
  static final int SPLIT_HEADS = 8;

  /** DS_WARPS of kernels.cu: the warps of a split block. */
  private static final int SPLIT_WARPS = 4;

  /**
   * The system property that writes the gate | up product as bf16 ({@code on}, the default) or
   * float32 ({@code off}) where its kernel can ({@link Gemm#writesBf16}: bf16 weights, cuBLAS in
   * normal mode at more rows than {@code gemv_bf16} takes, the wgmma tiles in deterministic mode):
   * the product's outputs are the widest tensor of a layer (2 × 14,336 values a token in Llama 8B),
   * and bf16 halves the bytes the product writes and {@code silu_mul} reads back. Each output is
   * its float32 sum rounded once, so deterministic mode stays batch-invariant. On an H100 (8B
   * shape, bf16) it took prefill of 2k / 8k / 32k tokens from 50.6 / 233.2 / 1435.8 ms to 49.7 /
   * 221.9 / 1399.5 ({@code SWITCHES=bf16mlp bin/test-gpu --switches llama-8b}, one run,
   * docs/benchmarks/2026-12-07-gpu-bf16-mlp.md).
   */
  static final String BF16_MLP_PROPERTY = "tokenspeed.cuda.bf16mlp";

  /** Whether the gate | up product writes bf16 where it can: the property, read once. */
  static final boolean BF16_MLP =
      KernelSwitch.read(
          BF16_MLP_PROPERTY, System.getProperty(BF16_MLP_PROPERTY, "on"), "off", "on");

  /**
   * The system property that turns the split prefill attention ({@link #prefillSplitPlan}) on
   * ({@code on}, the default) or off ({@code off}) where {@link #SPLIT_KV_PROPERTY} leaves it on.
   */
  static final String PREFILL_SPLIT_PROPERTY = "tokenspeed.cuda.prefillsplit";

  /** Whether prefill batches may take the split attention: the property, read once. */
  static final boolean PREFILL_SPLIT =
      KernelSwitch.read(
          PREFILL_SPLIT_PROPERTY, System.getProperty(PREFILL_SPLIT_PROPERTY, "on"), "off", "on");

  /**
   * The system property that puts the float32 attention of Gemma 3, Mamba and Jamba on the tiled
   * kernel ({@code tiled}) instead of the per-token one ({@code per_token}, the default). Both
   * compute the same bits, windows and soft-capped scores included (checked on the host by
   * ts-cuda/src/test/cpp/kernels-emulator.sh, on a GPU by CudaCausalLmGpuTest); the tiled kernel
   * stages each chunk of keys and values once for a tile of tokens instead of once per token. It
   * stays opt-in until its speed on these models is measured on a GPU.
   */
  static final String HYBRID_ATTENTION_PROPERTY = "tokenspeed.cuda.hybridattention";

  /** Whether the hybrid families take the tiled attention by default: the property, read once. */
  static final boolean HYBRID_TILED =
      KernelSwitch.read(
          HYBRID_ATTENTION_PROPERTY,
          System.getProperty(HYBRID_ATTENTION_PROPERTY, "per_token"),
          "per_token",
          "tiled");

  /** The system property that turns decode graphs on ({@code on}) or off ({@code off}). */
  static final String GRAPHS_PROPERTY = "tokenspeed.cuda.graphs";

  /** Whether decode steps replay CUDA graphs by default: the property, read once. */
  static final boolean GRAPHS_DEFAULT =
      KernelSwitch.read(GRAPHS_PROPERTY, System.getProperty(GRAPHS_PROPERTY, "on"), "off", "on");

  /**
   * A decode step's table stride is rounded up to a power of two of at least this many rows when it
   * replays a graph: the stride is a kernel argument, so a graph serves every step whose longest
   * context fits, and a request growing by one token does not need a new graph.
   */
  static final int GRAPH_MIN_STRIDE = 64;

  /** The most graphs a model keeps; past it, the least recently captured ones are destroyed. */
  static final int GRAPH_LIMIT = 64;

  /**
   * One decoder layer's weights and where its KV lives.
   *
   * @param postNorm the norm before the MLP ({@code post_attention_layernorm} of the Llama family,
   *     {@code pre_feedforward_layernorm} of Gemma)
   * @param attnOutNorm Gemma's norm of the attention's output before the residual add ({@code
   *     post_attention_layernorm}), or null
   * @param mlpOutNorm Gemma's norm of the MLP's output before the residual add, or null
   * @param group the cache group holding the layer's K and V
   * @param window the positions a query sees, its own included (a sliding-window layer), or 0
   * @param invFreq the layer's RoPE inverse frequencies
   */
  private record Layer(
      DeviceBuffer inputNorm,
      DeviceBuffer qkv,
      DeviceBuffer qkvBias,
      DeviceBuffer qNorm,
      DeviceBuffer kNorm,
      DeviceBuffer o,
      DeviceBuffer oBias,
      DeviceBuffer postNorm,
      DeviceBuffer gateUp,
      DeviceBuffer down,
      DeviceBuffer attnOutNorm,
      DeviceBuffer mlpOutNorm,
      int group,
      int window,
      DeviceBuffer invFreq,
      MambaWeights mamba) {

    /**
     * A layer whose mixer is Mamba's: {@code norm} before it, then (Jamba) {@code preFf} and the
     * MLP {@code gateUp}, {@code down}, or none of the three (Mamba).
     */
    static Layer mamba(
        DeviceBuffer norm,
        MambaWeights m,
        DeviceBuffer preFf,
        DeviceBuffer gateUp,
        DeviceBuffer down,
        int group) {
      return new Layer(
          norm, null, null, null, null, null, null, preFf, gateUp, down, null, null, group, 0, null,
          m);
    }

    /** Every weight of the layer (entries may be null), the RoPE table left out. */
    List<DeviceBuffer> weights() {
      List<DeviceBuffer> all =
          new ArrayList<>(
              Arrays.asList(
                  inputNorm,
                  qkv,
                  qkvBias,
                  qNorm,
                  kNorm,
                  o,
                  oBias,
                  postNorm,
                  gateUp,
                  down,
                  attnOutNorm,
                  mlpOutNorm));
      if (mamba != null) {
        all.addAll(mamba.weights());
      }
      return all;
    }
  }

  /**
   * A Mamba-1 mixer's weights on the device (Mamba's layers, Jamba's Mamba layers): the four
   * projections in the model's element type, the rest float32.
   *
   * @param convWeight the taps {@code [di][k]}
   * @param convBias {@code [di]} or null
   * @param dtNorm Jamba's RMSNorm of δ, or null (then {@code bNorm} and {@code cNorm} too)
   * @param a {@code -exp(A_log)}, {@code [di][N]}
   */
  record MambaWeights(
      MixerDims dims,
      DeviceBuffer inProj,
      DeviceBuffer convWeight,
      DeviceBuffer convBias,
      DeviceBuffer xProj,
      DeviceBuffer dtNorm,
      DeviceBuffer bNorm,
      DeviceBuffer cNorm,
      DeviceBuffer dtProj,
      DeviceBuffer dtBias,
      DeviceBuffer a,
      DeviceBuffer d,
      DeviceBuffer outProj) {

    List<DeviceBuffer> weights() {
      return Arrays.asList(
          inProj, convWeight, convBias, xProj, dtNorm, bNorm, cNorm, dtProj, dtBias, a, d, outProj);
    }
  }

  /** The weights of the Mamba mixer under {@code p} ({@code ...mixer.} or {@code ...mamba.}). */
  private static MambaWeights mambaWeights(
      Uploader up, Norms norms, WeightSource w, String p, MixerDims m, int hidden) {
    int di = m.innerSize();
    int n = m.stateSize();
    int rank = m.timeStepRank();
    float[] aLog = w.take(p + "A_log", di, n).toFloatArray();
    float[] a = new float[aLog.length];
    for (int i = 0; i < a.length; i++) {
      a[i] = (float) -StrictMath.exp(aLog[i]); // as the CPU model computes it at load
    }
    return new MambaWeights(
        m,
        up.matrix(w.take(p + "in_proj.weight", 2 * di, hidden)),
        up.floats(w.take(p + "conv1d.weight", di, 1, m.convKernel())),
        m.convBias() ? up.floats(w.take(p + "conv1d.bias", di)) : null,
        up.matrix(w.take(p + "x_proj.weight", rank + 2 * n, di)),
        m.innerNorms() ? norms.of(p + "dt_layernorm.weight", rank) : null,
        m.innerNorms() ? norms.of(p + "b_layernorm.weight", n) : null,
        m.innerNorms() ? norms.of(p + "c_layernorm.weight", n) : null,
        up.matrix(w.take(p + "dt_proj.weight", di, rank)),
        up.floats(w.take(p + "dt_proj.bias", di)),
        up.floats(a),
        up.floats(w.take(p + "D", di)),
        up.matrix(w.take(p + "out_proj.weight", hidden, di)));
  }

  /**
   * The decoder dimensions the forward pass sizes itself by: the config's, or for Mamba, which has
   * no attention, its residual width, vocabulary, layers and norm epsilon beside one nominal head
   * of two values and an MLP width of 1 that no kernel reads (its workspace rows stay small).
   */
  static DecoderDims dimsOf(ModelConfig config) {
    if (config instanceof MambaConfig m) {
      return new DecoderDims(
          m.vocabSize(),
          m.hiddenSize(),
          1,
          m.numLayers(),
          1,
          1,
          2,
          m.normEps(),
          10_000,
          Integer.MAX_VALUE,
          m.tieWordEmbeddings());
    }
    return config.dims();
  }

  /**
   * The dimensions of {@code shard}'s share of a model of {@code config}: its query and KV heads
   * and its columns of the MLP (Mamba, whose mixers every rank holds whole, keeps its own).
   *
   * @throws IllegalArgumentException when a dimension does not split over the ranks
   */
  static DecoderDims rankDims(ModelConfig config, Shard shard) {
    DecoderDims d = dimsOf(config);
    if (shard.size() == 1 || config instanceof MambaConfig) {
      return d;
    }
    return new DecoderDims(
        d.vocabSize(),
        d.hiddenSize(),
        shard.even("intermediate_size", d.intermediateSize()).count(),
        d.numLayers(),
        shard.queryHeads(d.numHeads()).count(),
        shard.kvHeads(d.numKvHeads()).count(),
        d.headDim(),
        d.rmsNormEps(),
        d.ropeTheta(),
        d.maxPositionEmbeddings(),
        d.tieWordEmbeddings());
  }

  /** Values {@code [from, from + n)} of the vector {@code t}. */
  static float[] slice(Tensor t, int from, int n) {
    return Arrays.copyOfRange(t.toFloatArray(), from, from + n);
  }

  /** The arrays one after the other. */
  static float[] concat(float[]... parts) {
    int n = 0;
    for (float[] p : parts) {
      n += p.length;
    }
    float[] all = new float[n];
    int at = 0;
    for (float[] p : parts) {
      System.arraycopy(p, 0, all, at, p.length);
      at += p.length;
    }
    return all;
  }

  /**
   * A block of a weight matrix {@code t} ({@code [out][in]}): rows {@code [row, row + rows)},
   * columns {@code [col, col + cols)}: a rank's share.
   */
  record Part(Tensor t, int row, int rows, int col, int cols) {
    Part {
      if (t.rank() != 2
          || row < 0
          || rows < 0
          || col < 0
          || cols < 0
          || row + rows > t.dim(0)
          || col + cols > t.dim(1)) {
        throw new IllegalArgumentException(
            "rows ["
                + row
                + ", "
                + (row + rows)
                + ") and columns ["
                + col
                + ", "
                + (col + cols)
                + ") are not inside "
                + t);
      }
    }

    /** The whole matrix. */
    static Part of(Tensor t) {
      return new Part(t, 0, t.dim(0), 0, t.dim(1));
    }

    static Part rows(Tensor t, int row, int rows) {
      return new Part(t, row, rows, 0, t.dim(1));
    }

    static Part columns(Tensor t, int col, int cols) {
      return new Part(t, 0, t.dim(0), col, cols);
    }

    long numElements() {
      return (long) rows * cols;
    }

    /**
     * Rows {@code [r0, r0 + n)} of the block, row after row, into {@code host} as the device holds
     * them: float32, or bf16 rounded by {@link #toBf16} ({@code bf16}); the checkpoint's bytes
     * where its element type is that one already.
     */
    void gather(boolean bf16, int r0, int n, MemorySegment host) {
      int size = bf16 ? 2 : 4;
      DType want = bf16 ? DType.BF16 : DType.F32;
      long rowBytes = (long) cols * size;
      long width = t.dim(1);
      float[] values = t.dtype() == want ? null : new float[cols];
      for (int r = 0; r < n; r++) {
        long first = (row + r0 + r) * width + col;
        if (values == null) {
          MemorySegment.copy(t.data(), first * size, host, r * rowBytes, rowBytes);
          continue;
        }
        t.readFloats(first, values, 0, cols);
        for (int c = 0; c < cols; c++) {
          long i = (long) r * cols + c;
          if (bf16) {
            host.setAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i, toBf16(values[c]));
          } else {
            host.setAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i, values[c]);
          }
        }
      }
    }
  }

  /** The Mamba mixers' shape of {@code config}, or null for a model without them. */
  static MixerDims mixerOf(ModelConfig config) {
    return switch (config) {
      case MambaConfig m -> m.mixer();
      case JambaConfig j -> j.mixer();
      default -> null;
    };
  }

  /**
   * What a model family changes in the forward pass besides its weights: the Llama family's is
   * {@link #LLAMA}; Gemma 3's scales the embeddings, normalizes each sublayer's output before the
   * residual add ("sandwich" blocks), gates its MLP with GELU's tanh approximation, scales scores
   * by {@code query_pre_attn_scalar^-1/2} and may soft-cap scores and logits.
   *
   * @param embedScale the factor of every embedding row
   * @param attnScale the factor of the scores (applied to the queries)
   * @param attnSoftcap the cap of the scores, or 0
   * @param sandwich whether each sublayer's output is normalized before the residual add
   * @param gelu whether the MLP's gate is GELU (tanh approximation) rather than SiLU
   * @param logitSoftcap the cap of the logits, or 0
   * @param perTokenAttention whether only the float32 attention (the per-token or the tiled kernel)
   *     computes its layers (sliding windows, soft-capped scores, float32 State)
   */
  record Family(
      float embedScale,
      float attnScale,
      float attnSoftcap,
      boolean sandwich,
      boolean gelu,
      float logitSoftcap,
      boolean perTokenAttention) {

    static final Family LLAMA = new Family(1f, 0f, 0f, false, false, 0f, false);

    /** The family of {@code config}; {@code attnScale} 0 means {@code 1/sqrt(head_dim)}. */
    static Family of(ModelConfig config) {
      if (config instanceof Gemma3Config g) {
        return new Family(
            (float) Math.sqrt(g.dims().hiddenSize()),
            (float) (1.0 / Math.sqrt(g.queryPreAttnScalar())),
            (float) g.attnLogitSoftcap(),
            true,
            true,
            (float) g.finalLogitSoftcap(),
            true);
      }
      if (config instanceof MambaConfig || config instanceof JambaConfig) {
        // float32 State checkpoints beside the KV: one element type for the whole layout
        return new Family(1f, 0f, 0f, false, false, 0f, true);
      }
      return LLAMA;
    }
  }

  private final CudaDevice device;
  private final ModelConfig config;
  private final DecoderDims d;
  private final ModelIdentity identity;
  private final int weightType;
  private final DeviceBuffer embed;
  private final DeviceBuffer lmHead;
  private final DeviceBuffer finalNorm;
  private final Family family;

  /** This rank's place in its tensor-parallel replica ({@link Shard#NONE} alone). */
  private final Shard shard;

  /** What this rank sums its partial products with ({@link DeviceCollective#single()} alone). */
  private final DeviceCollective collective;

  /** Whether some layer's mixer is Mamba's: the forward then uploads the request arrays. */
  private final boolean mixers;

  private final List<Layer> layers;
  private final List<DeviceBuffer> owned;
  private final Gemm gemm;
  private final boolean deterministic;
  private Attention attention;

  /** Whether every product of a decode step meets {@code gemv_bf16}'s alignment (at load). */
  private final boolean weightsFitGemv;

  /** Whether the KV pool holds bf16 (the tensor-core attention's) rather than float32. */
  private final boolean kvBf16;

  /** The tensor-core attention's kernel ({@link #FLASH_DEFAULT}, {@link #useFlash}). */
  private FlashKernel flash;

  /**
   * The tensor-core attention's kernel for a batch of decode tokens only: {@link #flash}, except
   * under {@code auto} on Hopper in normal mode, where it is {@link FlashKernel#MMA}.
   */
  private FlashKernel decodeFlash;

  private Workspace workspace;

  /** When decode batches take the split-KV attention. */
  private SplitKv splitKv = SPLIT_KV_DEFAULT;

  /**
   * The split-KV partials (m, l, acc: float32), grown to the largest plan seen; null until then.
   */
  private DeviceBuffer splitPartials;

  /** Forward passes that took the split-KV attention. */
  private long splitForwards;

  /** Forward passes whose prefill attention was split over the keys ({@link #prefillSplitPlan}). */
  private long prefillSplitForwards;

  /** Whether decode steps replay CUDA graphs ({@link #GRAPHS_DEFAULT}, {@link #useGraphs}). */
  private boolean graphs = GRAPHS_DEFAULT;

  /**
   * What a captured decode step depends on besides the data its kernels read from device memory:
   * the launches' grids and scalar arguments (tokens, tiles, stride), the buffers they point at
   * (the workspace and the KV pool, by identity) and the attention kernel chosen.
   */
  private record GraphKey(
      int numTokens,
      int numTiles,
      int stride,
      Object workspace,
      Object kv,
      Attention kernel,
      SplitPlan split,
      long splitPartials) {}

  /** Executable graphs by key, least recently captured first. */
  private final java.util.LinkedHashMap<GraphKey, Long> graphExecs =
      new java.util.LinkedHashMap<>();

  /** Keys seen once: a step is captured the second time its key comes, after an eager run. */
  private final java.util.Set<GraphKey> graphCandidates = new java.util.HashSet<>();

  private long graphCaptures;
  private long graphReplays;

  private CudaCausalLm(
      CudaDevice device,
      ModelConfig config,
      ModelIdentity identity,
      int weightType,
      DeviceBuffer embed,
      DeviceBuffer lmHead,
      DeviceBuffer finalNorm,
      Family family,
      List<Layer> layers,
      List<DeviceBuffer> owned,
      boolean deterministic,
      Attention attention,
      FlashKernel flash,
      FlashKernel decodeFlash,
      Shard shard,
      DeviceCollective collective) {
    this.device = device;
    this.shard = shard;
    this.collective = collective;
    this.deterministic = deterministic;
    this.config = config;
    this.d = rankDims(config, shard);
    this.identity = identity;
    this.weightType = weightType;
    this.embed = embed;
    this.lmHead = lmHead;
    this.finalNorm = finalNorm;
    this.family = family;
    this.mixers = layers.stream().anyMatch(l -> l.mamba() != null);
    this.layers = layers;
    this.owned = owned;
    this.gemm = new Gemm(device, deterministic);
    reserveProducts(gemm, d, mixerOf(config));
    this.attention = attention;
    this.kvBf16 = attention == Attention.TENSOR_CORE;
    this.flash = flash;
    this.decodeFlash = decodeFlash;
    this.weightsFitGemv = weightsFitGemv(d, lmHead, layers);
  }

  /**
   * Loads {@code folder} onto {@code device}: validates the checkpoint as the CPU loader does
   * (every tensor's shape, every tensor used) and copies the weights to device memory.
   *
   * @throws CheckpointException naming the file or tensor at fault
   * @throws IllegalArgumentException for an architecture the GPU path does not run yet
   */
  public static CudaCausalLm load(
      CudaDevice device, Path folder, String modelId, String weightVersion) {
    return load(device, folder, modelId, weightVersion, false);
  }

  /**
   * {@link #load(CudaDevice, Path, String, String)}, deterministic when asked: every GEMM then runs
   * in a fixed reduction order (the {@code gemm_fixed} kernels, not cuBLAS), and since the other
   * kernels reduce each row in an order of its own, a token's logits are bit-identical however the
   * batch around it is made up: a prefix restored from a store and one recomputed give the same
   * logits.
   */
  public static CudaCausalLm load(
      CudaDevice device, Path folder, String modelId, String weightVersion, boolean deterministic) {
    return load(device, folder, modelId, weightVersion, deterministic, null);
  }

  /**
   * {@link #load(CudaDevice, Path, String, String, boolean)} with the attention kernels named
   * ({@code null}: the default, the tensor cores where they fit). The kernel family fixes the KV
   * element type: bf16 for {@link Attention#TENSOR_CORE}, float32 for the others.
   */
  static CudaCausalLm load(
      CudaDevice device,
      Path folder,
      String modelId,
      String weightVersion,
      boolean deterministic,
      Attention attention) {
    return load(
        device,
        folder,
        modelId,
        weightVersion,
        deterministic,
        attention,
        Shard.NONE,
        DeviceCollective.single());
  }

  /**
   * This rank's share of {@code folder} for a tensor-parallel replica over several GPUs, its
   * partial products summed through {@code collective} (which stays the caller's): the attention
   * heads and their KV, and the MLP's columns, split as the CPU model splits them ({@link Shard},
   * the KV by heads); the embedding, the norms, Mamba mixers and the LM head whole on every rank
   * (each rank computes every logit from the same summed hidden state, so no gather follows).
   *
   * @throws IllegalArgumentException when the dimensions do not split over the ranks, for a KV
   *     split by pages, or when {@code collective} does not match {@code shard}
   */
  public static CudaCausalLm load(
      CudaDevice device,
      Path folder,
      String modelId,
      String weightVersion,
      boolean deterministic,
      Shard shard,
      DeviceCollective collective) {
    return load(device, folder, modelId, weightVersion, deterministic, null, shard, collective);
  }

  static CudaCausalLm load(
      CudaDevice device,
      Path folder,
      String modelId,
      String weightVersion,
      boolean deterministic,
      Attention attention,
      Shard shard,
      DeviceCollective collective) {
    if (shard.rank() != collective.rank() || shard.size() != collective.size()) {
      throw new IllegalArgumentException(
          "shard rank "
              + shard.rank()
              + " of "
              + shard.size()
              + " but the device collective's rank "
              + collective.rank()
              + " of "
              + collective.size());
    }
    if (shard.pagesSplit()) {
      throw new IllegalArgumentException(
          "the GPU splits KV over its ranks by heads; --tp-kv pages is for the CPU backend");
    }
    try (Checkpoint ckpt = Checkpoint.open(folder)) {
      ModelConfig config;
      try {
        config = ModelConfigs.parse(ckpt.config());
      } catch (IllegalArgumentException e) {
        throw new CheckpointException(
            folder.resolve(Checkpoint.CONFIG_FILE) + ": " + e.getMessage(), e);
      }
      if (dimsOf(config).headDim() > ATTN_MAX_HEAD_DIM) {
        throw new IllegalArgumentException(
            "head_dim="
                + dimsOf(config).headDim()
                + " is above the GPU kernels' "
                + ATTN_MAX_HEAD_DIM);
      }
      MixerDims mixer = mixerOf(config);
      if (mixer != null && mixer.convKernel() > CudaMamba.MAX_CONV_KERNEL) {
        throw new IllegalArgumentException(
            "conv_kernel="
                + mixer.convKernel()
                + " is above the GPU kernels' "
                + CudaMamba.MAX_CONV_KERNEL);
      }
      device.bind();
      List<DeviceBuffer> owned = new ArrayList<>();
      try (WeightSource w = new WeightSource(ckpt, config.architecture())) {
        CudaCausalLm model =
            build(
                device,
                config,
                w,
                ckpt,
                modelId,
                weightVersion,
                owned,
                deterministic,
                attention,
                shard,
                collective);
        w.requireAllTaken();
        device.synchronize();
        return model;
      } catch (RuntimeException e) {
        for (DeviceBuffer b : owned) {
          b.close();
        }
        throw e;
      }
    }
  }

  private static CudaCausalLm build(
      CudaDevice device,
      ModelConfig config,
      WeightSource w,
      Checkpoint ckpt,
      String modelId,
      String weightVersion,
      List<DeviceBuffer> owned,
      boolean deterministic,
      Attention attention,
      Shard shard,
      DeviceCollective collective) {
    DecoderDims d = dimsOf(config);
    int hidden = d.hiddenSize();
    int hd = d.headDim();
    int qWidth = d.numHeads() * hd;
    int kvWidth = d.numKvHeads() * hd;
    int inter = d.intermediateSize();
    DecoderDims local = rankDims(config, shard);
    // this rank's rows of q and of k, v, its columns of the MLP
    int q0 = shard.queryHeads(d.numHeads()).from() * hd;
    int qn = local.numHeads() * hd;
    int kv0 = shard.kvHeads(d.numKvHeads()).from() * hd;
    int kvn = local.numKvHeads() * hd;
    int i0 = config instanceof MambaConfig ? 0 : shard.even("intermediate_size", inter).from();
    int in = local.intermediateSize();
    MambaConfig mambaModel = config instanceof MambaConfig m ? m : null;
    JambaConfig jamba = config instanceof JambaConfig j ? j : null;
    MixerDims mixer = mixerOf(config);
    String root = mambaModel != null ? "backbone." : "model.";
    Tensor embedT =
        w.take(
            mambaModel != null ? "backbone.embeddings.weight" : "model.embed_tokens.weight",
            d.vocabSize(),
            hidden);
    boolean bf16 = embedT.dtype() == DType.BF16;
    int type = bf16 ? Gemm.R_16BF : Gemm.R_32F;
    Gemma3Config gemma = config instanceof Gemma3Config g ? g : null;
    Family family = Family.of(config);
    boolean floatOnly = family.perTokenAttention();
    if (floatOnly && attention == Attention.TENSOR_CORE) {
      throw new IllegalArgumentException(
          config.architecture()
              + " runs on the float32 attention (sliding windows, soft-capped scores or float32"
              + " State checkpoints), not "
              + attention);
    }
    if (attention == Attention.TENSOR_CORE && !tensorCoreFits(type, local)) {
      throw new IllegalArgumentException(TENSOR_CORE_NEEDS);
    }
    Attention chosen =
        attention != null
            ? attention
            : floatOnly
                ? (HYBRID_TILED ? Attention.TILED : Attention.PER_TOKEN)
                : defaultAttention(type, local);
    FlashKernel flash =
        chosen == Attention.TENSOR_CORE
            ? flashKernelFor(FLASH_DEFAULT, device.arch())
            : FlashKernel.MMA;
    // auto: decode-only batches keep the mma kernel in normal mode; a deterministic model runs
    // every batch on one kernel
    FlashKernel decodeFlash = FLASH_DEFAULT == null && !deterministic ? FlashKernel.MMA : flash;
    Uploader up = new Uploader(device, bf16, owned);
    DeviceBuffer embed = up.matrix(embedT);
    // RoPE tables for the layers that rotate (Mamba has no attention, Jamba's attention no RoPE)
    DeviceBuffer globalRope =
        mambaModel != null || jamba != null
            ? null
            : up.floats(inverseFrequencies(d.ropeTheta(), hd));
    DeviceBuffer localRope =
        gemma == null ? globalRope : up.floats(inverseFrequencies(gemma.ropeLocalTheta(), hd));
    // Gemma's norms scale by 1 + w: folded into the weights here, in float32 as the CPU model adds
    Norms norms = new Norms(up, w, gemma != null);
    List<Layer> layers = new ArrayList<>();
    List<Integer> groups = groupsOfLayers(config);
    for (int l = 0; l < d.numLayers(); l++) {
      String p = root + "layers." + l + ".";
      if (mambaModel != null) {
        // Mamba: x += mixer(norm(x)), no MLP
        DeviceBuffer norm = norms.of(p + "norm.weight", hidden);
        MambaWeights m = mambaWeights(up, norms, w, p + "mixer.", mixer, hidden);
        layers.add(Layer.mamba(norm, m, null, null, null, groups.get(l)));
        continue;
      }
      if (jamba != null && !jamba.attentionLayers().get(l)) {
        DeviceBuffer norm = norms.of(p + "input_layernorm.weight", hidden);
        MambaWeights m = mambaWeights(up, norms, w, p + "mamba.", mixer, hidden);
        DeviceBuffer preFf = norms.of(p + "pre_ff_layernorm.weight", hidden);
        String f = p + "feed_forward.";
        layers.add(
            Layer.mamba(
                norm,
                m,
                preFf,
                up.stacked(
                    Part.rows(w.take(f + "gate_proj.weight", inter, hidden), i0, in),
                    Part.rows(w.take(f + "up_proj.weight", inter, hidden), i0, in)),
                up.stacked(Part.columns(w.take(f + "down_proj.weight", hidden, inter), i0, in)),
                groups.get(l)));
        continue;
      }
      String a = p + "self_attn.";
      String mlp = jamba != null ? p + "feed_forward." : p + "mlp.";
      boolean sliding = gemma != null && gemma.isSliding(l);
      DeviceBuffer inputNorm = norms.of(p + "input_layernorm.weight", hidden);
      DeviceBuffer qkv =
          up.stacked(
              Part.rows(w.take(a + "q_proj.weight", qWidth, hidden), q0, qn),
              Part.rows(w.take(a + "k_proj.weight", kvWidth, hidden), kv0, kvn),
              Part.rows(w.take(a + "v_proj.weight", kvWidth, hidden), kv0, kvn));
      DeviceBuffer qkvBias =
          config.qkvBias()
              ? up.floats(
                  concat(
                      slice(w.take(a + "q_proj.bias", qWidth), q0, qn),
                      slice(w.take(a + "k_proj.bias", kvWidth), kv0, kvn),
                      slice(w.take(a + "v_proj.bias", kvWidth), kv0, kvn)))
              : null;
      DeviceBuffer qNorm = config.qkNorm() ? norms.of(a + "q_norm.weight", hd) : null;
      DeviceBuffer kNorm = config.qkNorm() ? norms.of(a + "k_norm.weight", hd) : null;
      DeviceBuffer o =
          up.stacked(Part.columns(w.take(a + "o_proj.weight", hidden, qWidth), q0, qn));
      DeviceBuffer oBias =
          config.outputBias() ? up.floats(w.take(a + "o_proj.bias", hidden)) : null;
      DeviceBuffer attnOutNorm = null;
      DeviceBuffer postNorm;
      if (gemma != null) {
        attnOutNorm = norms.of(p + "post_attention_layernorm.weight", hidden);
        postNorm = norms.of(p + "pre_feedforward_layernorm.weight", hidden);
      } else if (jamba != null) {
        postNorm = norms.of(p + "pre_ff_layernorm.weight", hidden);
      } else {
        postNorm = norms.of(p + "post_attention_layernorm.weight", hidden);
      }
      DeviceBuffer gateUp =
          up.stacked(
              Part.rows(w.take(mlp + "gate_proj.weight", inter, hidden), i0, in),
              Part.rows(w.take(mlp + "up_proj.weight", inter, hidden), i0, in));
      DeviceBuffer down =
          up.stacked(Part.columns(w.take(mlp + "down_proj.weight", hidden, inter), i0, in));
      DeviceBuffer mlpOutNorm =
          gemma != null ? norms.of(p + "post_feedforward_layernorm.weight", hidden) : null;
      layers.add(
          new Layer(
              inputNorm,
              qkv,
              qkvBias,
              qNorm,
              kNorm,
              o,
              oBias,
              postNorm,
              gateUp,
              down,
              attnOutNorm,
              mlpOutNorm,
              groups.get(l),
              sliding ? gemma.slidingWindow() : 0,
              sliding ? localRope : globalRope,
              null));
    }
    DeviceBuffer finalNorm =
        norms.of(
            mambaModel != null
                ? "backbone.norm_f.weight"
                : jamba != null ? "model.final_layernorm.weight" : "model.norm.weight",
            hidden);
    DeviceBuffer lmHead =
        d.tieWordEmbeddings() ? embed : up.matrix(w.take("lm_head.weight", d.vocabSize(), hidden));
    ModelIdentity identity = new ModelIdentity(modelId, ckpt.fingerprint(), weightVersion);
    return new CudaCausalLm(
        device,
        config,
        identity,
        type,
        embed,
        lmHead,
        finalNorm,
        family,
        layers,
        owned,
        deterministic,
        chosen,
        flash,
        decodeFlash,
        shard,
        collective);
  }

  /** The CPU model's RoPE inverse frequencies of base {@code theta}, float arithmetic included. */
  static float[] inverseFrequencies(double theta, int headDim) {
    float[] inv = new float[headDim / 2];
    for (int i = 0; i < inv.length; i++) {
      float exponent = (float) (2 * i) / (float) headDim;
      inv[i] = 1.0f / (float) StrictMath.pow(theta, exponent);
    }
    return inv;
  }

  /**
   * The cache group of each layer's K and V, as the CPU model numbers them: one group per distinct
   * kind in order of first appearance (Gemma 3: its sliding-window layers' group and its global
   * layers' group; the Llama family: one Full-history group).
   */
  static List<Integer> groupsOfLayers(ModelConfig config) {
    List<GroupKind> kinds = groupKinds(config);
    List<Integer> groups = new ArrayList<>();
    for (int l = 0; l < dimsOf(config).numLayers(); l++) {
      groups.add(kinds.indexOf(kindOf(config, l)));
    }
    return groups;
  }

  /** The distinct group kinds of the layers of {@code config}, in order of first appearance. */
  static List<GroupKind> groupKinds(ModelConfig config) {
    List<GroupKind> kinds = new ArrayList<>();
    for (int l = 0; l < dimsOf(config).numLayers(); l++) {
      GroupKind k = kindOf(config, l);
      if (!kinds.contains(k)) {
        kinds.add(k);
      }
    }
    return kinds;
  }

  private static GroupKind kindOf(ModelConfig config, int layer) {
    return switch (config) {
      case Gemma3Config g when g.isSliding(layer) -> new GroupKind.SlidingWindow(g.slidingWindow());
      case MambaConfig m -> new GroupKind.StateCheckpoints();
      case JambaConfig j when !j.attentionLayers().get(layer) -> new GroupKind.StateCheckpoints();
      default -> new GroupKind.FullHistory();
    };
  }

  /**
   * Norm weights uploaded as float32, with Gemma's {@code 1 + w} folded in when {@code onePlus}.
   */
  private record Norms(Uploader up, WeightSource w, boolean onePlus) {
    DeviceBuffer of(String name, int width) {
      float[] v = w.take(name, width).toFloatArray();
      if (onePlus) {
        for (int i = 0; i < v.length; i++) {
          v[i] = 1f + v[i];
        }
      }
      return up.floats(v);
    }
  }

  /** Copies host tensors to device buffers it records in {@code owned}. */
  private record Uploader(CudaDevice device, boolean bf16, List<DeviceBuffer> owned) {

    /** A float32 vector (norm weights, biases), the tensors concatenated. */
    DeviceBuffer floats(Tensor... parts) {
      int n = 0;
      for (Tensor t : parts) {
        n += Math.toIntExact(t.numElements());
      }
      float[] all = new float[n];
      int at = 0;
      for (Tensor t : parts) {
        float[] v = t.toFloatArray();
        System.arraycopy(v, 0, all, at, v.length);
        at += v.length;
      }
      return floats(all);
    }

    DeviceBuffer floats(float[] values) {
      DeviceBuffer b = keep(device.allocate((long) values.length * Float.BYTES));
      b.write(0, values);
      return b;
    }

    /** A weight matrix in the model's element type. */
    DeviceBuffer matrix(Tensor t) {
      return stacked(t);
    }

    /** Matrices {@code [out_i][in]} stacked by rows into one {@code [Σ out_i][in]}. */
    DeviceBuffer stacked(Tensor... parts) {
      Part[] whole = new Part[parts.length];
      for (int i = 0; i < parts.length; i++) {
        whole[i] = Part.of(parts[i]);
      }
      return stacked(whole);
    }

    /** Blocks of matrices stacked by rows: each block's rows, then the next block's. */
    DeviceBuffer stacked(Part... parts) {
      int size = bf16 ? 2 : 4;
      long elements = 0;
      for (Part p : parts) {
        elements += p.numElements();
      }
      DeviceBuffer b = keep(device.allocate(elements * size));
      long at = 0;
      for (Part p : parts) {
        upload(p, b, at);
        at += p.numElements() * size;
      }
      return b;
    }

    /** The block's rows, converted to the model's element type where the checkpoint's differs. */
    private void upload(Part p, DeviceBuffer b, long offset) {
      Tensor t = p.t();
      DType want = bf16 ? DType.BF16 : DType.F32;
      int size = bf16 ? 2 : 4;
      long width = t.dim(1);
      if (t.dtype() == want && p.cols() == width) {
        // whole rows: one copy of the checkpoint's bytes
        b.copyFrom(t.data().asSlice(p.row() * width * size, p.numElements() * size), offset);
        return;
      }
      // a column block or another element type: rows gathered on the host, 16 MiB at a time
      int rowBytes = p.cols() * size;
      int rowsAtOnce = Math.max(1, (16 << 20) / Math.max(1, rowBytes));
      try (Arena a = Arena.ofConfined()) {
        MemorySegment host =
            a.allocate((long) Math.min(rowsAtOnce, Math.max(1, p.rows())) * rowBytes, 64);
        for (int r0 = 0; r0 < p.rows(); r0 += rowsAtOnce) {
          int n = Math.min(rowsAtOnce, p.rows() - r0);
          p.gather(bf16, r0, n, host);
          b.copyFrom(host.asSlice(0, (long) n * rowBytes), offset + (long) r0 * rowBytes);
        }
      }
    }

    private DeviceBuffer keep(DeviceBuffer b) {
      owned.add(b);
      return b;
    }
  }

  /** Rounds {@code f} to bf16, nearest even, as the kernels do. */
  static short toBf16(float f) {
    int u = Float.floatToRawIntBits(f);
    if ((u & 0x7f800000) == 0x7f800000 && (u & 0x007fffff) != 0) {
      return (short) ((u >>> 16) | 0x0040);
    }
    u += 0x7fff + ((u >>> 16) & 1);
    return (short) (u >>> 16);
  }

  public ModelConfig config() {
    return config;
  }

  public ModelIdentity identity() {
    return identity;
  }

  /** This rank's place in its tensor-parallel replica ({@link Shard#NONE} alone). */
  public Shard shard() {
    return shard;
  }

  public CudaDevice device() {
    return device;
  }

  /**
   * Bytes of weights a decode step reads whatever its batch: every layer's matrices, biases and
   * norms, the final norm and the output head. The embedding table is left out (a step reads one
   * row of it per token) unless it is the output head too.
   */
  public long weightBytesPerStep() {
    long bytes = finalNorm.bytes() + lmHead.bytes();
    for (Layer l : layers) {
      for (DeviceBuffer b : l.weights()) {
        bytes += b == null ? 0 : b.bytes();
      }
    }
    return bytes;
  }

  /** The longest sequence the model accepts: its {@code max_position_embeddings}. */
  public int maxPositions() {
    return d.maxPositionEmbeddings();
  }

  public int vocabSize() {
    return d.vocabSize();
  }

  /** The residual stream's width: the floats per token each tensor-parallel all-reduce sums. */
  public int hiddenSize() {
    return d.hiddenSize();
  }

  /**
   * Whether every GEMM runs in a fixed reduction order (see {@link #load(CudaDevice, Path, String,
   * String, boolean)}).
   */
  public boolean deterministic() {
    return deterministic;
  }

  /** The attention kernels of the backend. */
  enum Attention {
    /** Float32 arithmetic, one warp per (token, query head) reading keys and values itself. */
    PER_TOKEN,
    /**
     * Float32 arithmetic, the same as {@link #PER_TOKEN} in the same order, with the keys and
     * values of a tile of tokens shared in shared memory by its warps.
     */
    TILED,
    /**
     * Flash attention on the tensor cores: bf16 queries, keys, values and probabilities, float32
     * accumulation; bf16 models with a head size of 64 or 128.
     */
    TENSOR_CORE
  }

  /** The kernel a model uses by default: the tensor cores where it can, else the tiled one. */
  private static Attention defaultAttention(int weightType, DecoderDims dims) {
    return tensorCoreFits(weightType, dims) ? Attention.TENSOR_CORE : Attention.TILED;
  }

  private static boolean tensorCoreFits(int weightType, DecoderDims dims) {
    int hd = dims.headDim();
    return weightType == Gemm.R_16BF
        && (hd == 64 || hd == 128)
        && dims.numHeads() / dims.numKvHeads() <= FLASH_ROWS;
  }

  private static final String TENSOR_CORE_NEEDS =
      "the tensor-core attention needs bf16 weights, head size 64 or 128 and at most "
          + FLASH_ROWS
          + " query heads per KV head";

  /**
   * Switches between the float32 kernels, {@link Attention#PER_TOKEN} and {@link Attention#TILED}
   * (they compute the same bits over the same float32 pool).
   *
   * @throws IllegalArgumentException for a model loaded with the tensor cores, or to them
   */
  void useAttention(Attention kernel) {
    if (kvBf16 || kernel == Attention.TENSOR_CORE) {
      throw new IllegalArgumentException(
          "the attention's KV element type is chosen at load: " + attention + " to " + kernel);
    }
    this.attention = kernel;
  }

  /** When a decode batch takes the split-KV attention. */
  enum SplitKv {
    /** Never: the flash kernel for every batch. */
    OFF,
    /**
     * Batches of decode tokens whose longest context is at least {@link #SPLIT_MIN_CONTEXT}, whose
     * plan gives that context two splits or more, and that are small ({@link #SPLIT_SMALL_BATCH}):
     * the default.
     */
    AUTO,
    /**
     * Every batch of decode tokens, whatever its contexts (tests compare it with the flash kernel).
     */
    ALWAYS
  }

  /**
   * The mode a value of {@link #SPLIT_KV_PROPERTY} gives: {@code on} (or none) is AUTO, {@code off}
   * OFF, in any case.
   *
   * @throws IllegalArgumentException for anything else, naming the property
   */
  static SplitKv splitKvMode(String value) {
    return KernelSwitch.read(SPLIT_KV_PROPERTY, value == null ? "on" : value, "off", "on")
        ? SplitKv.AUTO
        : SplitKv.OFF;
  }

  /**
   * How a batch's decode attention is split: a token whose context is {@code n} positions takes
   * {@link #splitsOf} splits of {@link #splitSize} positions, and {@code maxSplits} bounds them for
   * every token of the batch (the split kernel's second grid dimension, the partials' stride).
   */
  record SplitPlan(int splitKeys, int cap, int maxSplits) {}

  /**
   * Positions per split of a context of {@code n} positions: {@code splitKeys}, or the least
   * multiple of it that keeps the splits at most {@code cap} (split_size of kernels.cu).
   */
  static int splitSize(int n, int splitKeys, int cap) {
    return splitKeys * Math.ceilDiv(Math.ceilDiv(n, splitKeys), cap);
  }

  /** Splits of a context of {@code n} positions (the last one may be short). */
  static int splitsOf(int n, int splitKeys, int cap) {
    return Math.ceilDiv(n, splitSize(n, splitKeys, cap));
  }

  /**
   * The split plan of a batch, or null for the flash kernel: only a batch of decode tokens (one per
   * request) splits; under {@link SplitKv#AUTO} only when its longest context is at least {@link
   * #SPLIT_MIN_CONTEXT} and gets two splits or more, and its blocks of one split take at most a
   * {@link #SPLIT_SMALL_BATCH}th of the multiprocessors. The cap on splits per token aims at {@link
   * #SPLIT_BLOCKS_PER_SM} blocks per multiprocessor over the blocks one split of every token takes
   * ({@code tokens · kvHeads · ⌈group / SPLIT_HEADS⌉}), between 1 and {@link #SPLIT_MAX}: a large
   * batch fills the device with few splits, and the partials stay about that many blocks' worth.
   */
  static SplitPlan splitPlan(
      SplitKv mode,
      boolean pureDecode,
      int numTokens,
      int maxContext,
      int kvHeads,
      int group,
      int multiprocessors) {
    if (mode == SplitKv.OFF || !pureDecode) {
      return null;
    }
    long perSplit = (long) numTokens * kvHeads * Math.ceilDiv(group, SPLIT_HEADS);
    if (mode == SplitKv.AUTO
        && (maxContext < SPLIT_MIN_CONTEXT || perSplit * SPLIT_SMALL_BATCH > multiprocessors)) {
      return null;
    }
    long target = (long) SPLIT_BLOCKS_PER_SM * multiprocessors;
    int cap = Math.clamp(Math.ceilDiv(target, perSplit), 1, SPLIT_MAX);
    int splits = maxSplits(maxContext, SPLIT_KEYS, cap);
    if (mode == SplitKv.AUTO && splits < 2) {
      return null;
    }
    return new SplitPlan(SPLIT_KEYS, cap, splits);
  }

  /**
   * Key tiles a split of the split prefill attention reads at least ({@link #prefillSplitPlan}).
   */
  static final int PREFILL_SPLIT_MIN_TILES = 4;

  /**
   * The split of a prefill (or mixed) batch's Hopper flash attention over the keys, or null for the
   * unsplit kernel: a batch whose unsplit grid (a block per tile and KV head, one block a
   * multiprocessor) leaves at least half of the {@code multiprocessors} idle, as a restored
   * prefix's short suffix over a long context does, is split so that about twice the
   * multiprocessors' blocks run, each reading at least {@link #PREFILL_SPLIT_MIN_TILES} key tiles
   * ({@link #WGMMA_FLASH_KEYS} keys each), at most {@link #SPLIT_MAX} splits. The plan is in the
   * combine's terms: splits of {@code splitKeys} keys, a cap of {@code maxSplits} (so that every
   * token of the batch, its context at most {@code maxContext}, takes splits of exactly {@code
   * splitKeys} keys) and {@code maxSplits} the grid's third dimension.
   */
  static SplitPlan prefillSplitPlan(
      int numTiles, int kvHeads, int maxContext, int multiprocessors) {
    long blocks = (long) numTiles * kvHeads;
    if (blocks < 1 || 2 * blocks > multiprocessors) {
      return null;
    }
    int keyTiles = Math.ceilDiv(maxContext, WGMMA_FLASH_KEYS);
    long wanted = Math.ceilDiv(2L * multiprocessors, blocks);
    int splits = (int) Math.min(Math.min(wanted, keyTiles / PREFILL_SPLIT_MIN_TILES), SPLIT_MAX);
    if (splits < 2) {
      return null;
    }
    int perSplit = Math.ceilDiv(keyTiles, splits);
    int maxSplits = Math.ceilDiv(keyTiles, perSplit);
    return new SplitPlan(perSplit * WGMMA_FLASH_KEYS, maxSplits, maxSplits);
  }

  /**
   * A bound on {@link #splitsOf} for every context up to {@code maxContext}: the splits do not grow
   * with the context (65 positions in units of 32 under a cap of 3 take three splits of 32, 97 take
   * two of 64), but they are at most the cap and at most the units of the context.
   */
  static int maxSplits(int maxContext, int splitKeys, int cap) {
    return Math.min(cap, Math.ceilDiv(maxContext, splitKeys));
  }

  /**
   * The plan a captured step launches: {@code plan}'s grid widened to the splits of the longest
   * context the step's tables can hold ({@code positions}: the graph's stride times the positions a
   * block holds), so that the grid, and with it the graph, does not follow the batch's contexts
   * from step to step. Every token still takes its own {@link #splitsOf} splits; the blocks past
   * them exit at once.
   */
  static SplitPlan graphSplitPlan(SplitPlan plan, int positions) {
    int bound = maxSplits(positions, plan.splitKeys(), plan.cap());
    return new SplitPlan(plan.splitKeys(), plan.cap(), Math.max(plan.maxSplits(), bound));
  }

  /** Bytes of the partials of {@code plan} for a batch: m, l and acc per (token, head, split). */
  static long splitPartialBytes(SplitPlan plan, int numTokens, int heads, int headDim) {
    return (long) numTokens * heads * plan.maxSplits() * (headDim + 2) * Float.BYTES;
  }

  /**
   * Turns the split-KV decode on for every batch of decode tokens, whatever its contexts ({@link
   * SplitKv#ALWAYS}), or off, over what {@link #SPLIT_KV_PROPERTY} chose.
   *
   * @throws IllegalArgumentException for a model without the tensor-core attention, or a
   *     deterministic one (its logits must not depend on the path its batch took)
   */
  void useSplitKv(boolean on) {
    if (!kvBf16 || deterministic) {
      throw new IllegalArgumentException(
          "the split-KV decode needs the tensor-core attention and a non-deterministic model: "
              + attention
              + (deterministic ? ", deterministic" : ""));
    }
    this.splitKv = on ? SplitKv.ALWAYS : SplitKv.OFF;
  }

  /**
   * Sets the split rule to {@code mode} ({@link SplitKv#AUTO} gives the default back after {@link
   * #useSplitKv(boolean)}), with the same refusals.
   */
  void useSplitKv(SplitKv mode) {
    useSplitKv(mode != SplitKv.OFF);
    this.splitKv = mode;
  }

  /** Forward passes so far that took the split-KV attention. */
  long splitForwards() {
    return splitForwards;
  }

  /** Forward passes so far whose prefill attention was split over the keys. */
  long prefillSplitForwards() {
    return prefillSplitForwards;
  }

  /**
   * What every attention kernel reads first, in its arguments' order: the queries, the paged KV
   * pool (its blocks' size, the layer's K and V offsets in a block, positions a block holds), and
   * each token's position, request and its request's block table.
   */
  record AttentionInputs(
      long q,
      long pool,
      long bytesPerBlock,
      long kOffset,
      long vOffset,
      int blockTokens,
      long positions,
      long tokenRequest,
      long tables,
      int tableStride) {

    /** These inputs, then a kernel's own arguments, as one launch's arguments. */
    Object[] then(Object... rest) {
      Object[] all = new Object[10 + rest.length];
      all[0] = q;
      all[1] = pool;
      all[2] = bytesPerBlock;
      all[3] = kOffset;
      all[4] = vOffset;
      all[5] = blockTokens;
      all[6] = positions;
      all[7] = tokenRequest;
      all[8] = tables;
      all[9] = tableStride;
      System.arraycopy(rest, 0, all, 10, rest.length);
      return all;
    }
  }

  /**
   * Launches the split-KV decode attention of {@code numTokens} decode tokens: the partials of
   * every (token, KV head, head slice, split) into {@code partials} ({@link #splitPartialBytes}: m
   * {@code [t][H][maxSplits]}, then l, then acc {@code [t][H][maxSplits][d]}, float32), then their
   * merge into {@code out} (bf16 {@code [t][H·d]}, where the flash kernel writes). The other
   * arguments are the flash kernel's.
   */
  static void launchSplitDecode(
      CudaDevice device,
      SplitPlan plan,
      int headDim,
      int numTokens,
      int heads,
      int kvHeads,
      AttentionInputs in,
      float scale,
      long partials,
      long out) {
    long partM = partials;
    long partL = partialL(plan, numTokens, heads, partials);
    long partAcc = partialAcc(plan, numTokens, heads, partials);
    int slices = Math.ceilDiv(heads / kvHeads, SPLIT_HEADS);
    device.launch(
        "decode_attention_split_d" + headDim,
        Math.multiplyExact(numTokens, Math.multiplyExact(kvHeads, slices)),
        plan.maxSplits(),
        32 * SPLIT_WARPS,
        0,
        in.then(
            heads,
            kvHeads,
            plan.splitKeys(),
            plan.cap(),
            plan.maxSplits(),
            scale,
            partM,
            partL,
            partAcc,
            out));
    if (plan.maxSplits() > 1) {
      // tokens of a single split were written by the split kernel; the combine skips them
      launchCombine(device, plan, headDim, numTokens, heads, in, partials, out);
    }
  }

  /** Merges the partials of a split attention ({@code plan}) of its tokens of several splits. */
  private static void launchCombine(
      CudaDevice device,
      SplitPlan plan,
      int headDim,
      int numTokens,
      int heads,
      AttentionInputs in,
      long partials,
      long out) {
    device.launch(
        "decode_attention_combine",
        Math.multiplyExact(numTokens, heads),
        1,
        headDim,
        0,
        in.positions(),
        heads,
        headDim,
        plan.splitKeys(),
        plan.cap(),
        plan.maxSplits(),
        partials,
        partialL(plan, numTokens, heads, partials),
        partialAcc(plan, numTokens, heads, partials),
        out);
  }

  /** Where the partials' sums (l) start: after m's float per (token, head, split). */
  private static long partialL(SplitPlan plan, int numTokens, int heads, long partials) {
    return partials + (long) numTokens * heads * plan.maxSplits() * Float.BYTES;
  }

  /** Where the partials' outputs (acc) start: after m and l. */
  private static long partialAcc(SplitPlan plan, int numTokens, int heads, long partials) {
    return partials + 2L * numTokens * heads * plan.maxSplits() * Float.BYTES;
  }

  /** Zeroed descriptors for the split kernel that copies by cp.async (it never reads them). */
  private static final byte[][] NO_TENSOR_MAPS = new byte[2][KernelArgs.BLOB_BYTES];

  /**
   * Launches the Hopper flash attention split over the keys ({@code flash_attention_wgmma_split} or
   * {@code _tma_split}, {@link #prefillSplitPlan}): {@code numTiles} tiles, as {@link
   * #launchFlash}, times {@code plan.maxSplits()} splits, their partials into {@code partials}
   * ({@link #splitPartialBytes}), then the combine of the tokens of several splits into {@code
   * out}.
   */
  static void launchFlashSplit(
      CudaDevice device,
      FlashKernel kernel,
      SplitPlan plan,
      int headDim,
      int numTiles,
      int numTokens,
      int heads,
      int kvHeads,
      AttentionInputs in,
      long tiles,
      float scale,
      long partials,
      long out,
      int poolBlocks) {
    if (kernel == FlashKernel.MMA) {
      throw new IllegalArgumentException("the split prefill attention runs the Hopper kernels");
    }
    boolean tma = kernel == FlashKernel.TMA && tmaTakes(in.blockTokens());
    byte[][] maps = tma ? poolTensorMaps(device, in, headDim, kvHeads, poolBlocks) : NO_TENSOR_MAPS;
    device.launchGrid3(
        (tma ? "flash_attention_tma_split_d" : "flash_attention_wgmma_split_d") + headDim,
        numTiles,
        kvHeads,
        plan.maxSplits(),
        FlashKernel.WGMMA.threads(),
        FlashKernel.WGMMA.sharedBytes(headDim),
        in.then(
            tiles,
            numTiles,
            heads,
            kvHeads,
            scale,
            out,
            plan.splitKeys(),
            plan.maxSplits(),
            partials,
            partialL(plan, numTokens, heads, partials),
            partialAcc(plan, numTokens, heads, partials),
            maps[0],
            maps[1]));
    launchCombine(device, plan, headDim, numTokens, heads, in, partials, out);
  }

  /**
   * Launches the tensor-core attention of {@code numTiles} tiles ({@code tiles}: first row and
   * count per tile, at most {@code FLASH_ROWS / group} tokens of one request each) into {@code out}
   * (bf16 {@code [t][H·d]}) on the kernel {@code kernel} (the same arguments and grid for both;
   * {@link FlashKernel#WGMMA} and {@link FlashKernel#TMA} on compute capability 9.0 only; {@code
   * poolBlocks}: the blocks of the pool, which TMA's descriptors bound).
   */
  static void launchFlash(
      CudaDevice device,
      FlashKernel kernel,
      int headDim,
      int numTiles,
      int heads,
      int kvHeads,
      AttentionInputs in,
      long tiles,
      float scale,
      long out,
      int poolBlocks) {
    if (kernel == FlashKernel.TMA && !tmaTakes(in.blockTokens())) {
      kernel = FlashKernel.WGMMA; // the same bits, copied by cp.async
    }
    Object[] args = in.then(tiles, numTiles, heads, kvHeads, scale, out);
    if (kernel == FlashKernel.TMA) {
      byte[][] maps = poolTensorMaps(device, in, headDim, kvHeads, poolBlocks);
      args = Arrays.copyOf(args, args.length + 2);
      args[args.length - 2] = maps[0];
      args[args.length - 1] = maps[1];
    }
    device.launch(
        kernel.function(headDim),
        numTiles,
        kvHeads,
        kernel.threads(),
        kernel.sharedBytes(headDim),
        args);
  }

  /**
   * Whether the TMA flash kernel takes a pool of {@code blockTokens} positions a block: a multiple
   * of 8 (a box then starts on the 128-byte swizzle's 1,024-byte pattern) that divides {@link
   * #WGMMA_FLASH_KEYS} or is a multiple of it (a key tile is then whole boxes).
   */
  static boolean tmaTakes(int blockTokens) {
    return blockTokens > 0
        && blockTokens % 8 == 0
        && (WGMMA_FLASH_KEYS % blockTokens == 0 || blockTokens % WGMMA_FLASH_KEYS == 0);
  }

  /**
   * The TMA descriptors of one layer's K and V in the pool (see FLASH_ATTENTION_TMA in kernels.cu):
   * 4-dimensional tensors of bf16 at {@code pool + kOffset} and {@code pool + vOffset}, innermost
   * first (head dimensions, positions of a block, KV heads, blocks), copied in boxes of 64
   * dimensions by {@code min(blockTokens, 128)} positions.
   */
  static byte[][] poolTensorMaps(
      CudaDevice device, AttentionInputs in, int headDim, int kvHeads, int poolBlocks) {
    // a descriptor depends only on these numbers: encoded once per layer and pool, not per launch
    var key =
        List.of(
            in.pool() + in.kOffset(),
            in.pool() + in.vOffset(),
            in.bytesPerBlock(),
            (long) in.blockTokens(),
            (long) headDim,
            (long) kvHeads,
            (long) poolBlocks);
    byte[][] maps = TENSOR_MAPS.get(key);
    if (maps == null) {
      PoolTensor t = PoolTensor.of(in, headDim, kvHeads, poolBlocks);
      maps =
          new byte[][] {
            device.api().tensorMap(t.kAddress(), t.dims(), t.strides(), t.box()),
            device.api().tensorMap(t.vAddress(), t.dims(), t.strides(), t.box())
          };
      if (TENSOR_MAPS.size() >= TENSOR_MAP_LIMIT) {
        TENSOR_MAPS.clear(); // pools come and go (tests, benchmarks): never more than the limit
      }
      TENSOR_MAPS.put(key, maps);
    }
    return maps;
  }

  /** The most layers' descriptors {@link #poolTensorMaps} keeps. */
  private static final int TENSOR_MAP_LIMIT = 1024;

  /** Descriptors by (K address, V address, block bytes, block positions, d, KV heads, blocks). */
  private static final Map<List<Long>, byte[][]> TENSOR_MAPS = new ConcurrentHashMap<>();

  /**
   * The shape {@link #poolTensorMaps} describes one layer's K and V with: their addresses, the
   * dimensions innermost first, the byte strides of dimensions 1 to 3 and the box.
   */
  record PoolTensor(long kAddress, long vAddress, long[] dims, long[] strides, int[] box) {

    static PoolTensor of(AttentionInputs in, int headDim, int kvHeads, int poolBlocks) {
      int bt = in.blockTokens();
      return new PoolTensor(
          in.pool() + in.kOffset(),
          in.pool() + in.vOffset(),
          new long[] {headDim, bt, kvHeads, poolBlocks},
          new long[] {headDim * 2L, (long) bt * headDim * 2, in.bytesPerBlock()},
          new int[] {64, Math.min(bt, WGMMA_FLASH_KEYS), 1, 1});
    }

    /**
     * The byte offset from the K (or V) address of element (e, position p, head h, block b) as the
     * TMA reads it: the pool layout's {@code b · bytesPerBlock + (h · blockTokens + p) · d · 2 + e
     * · 2}.
     */
    long offset(long e, long p, long h, long b) {
      return e * 2 + p * strides[0] + h * strides[1] + b * strides[2];
    }
  }

  /**
   * The split-KV partials for {@code bytes}, grown to at least twice their old size when they do
   * not fit (after the compute stream's work that may still read the old ones).
   */
  private long splitPartials(long bytes) {
    DeviceBuffer b = splitPartials;
    if (b == null || b.bytes() < bytes) {
      long size = b == null ? bytes : Math.max(bytes, 2 * b.bytes());
      if (b != null) {
        device.synchronize();
        b.close();
        splitPartials = null;
      }
      splitPartials = device.allocate(size);
    }
    return splitPartials.pointer();
  }

  /**
   * Turns decode graphs on or off for this model (tests and the benchmark compare both; the
   * property {@link #GRAPHS_PROPERTY} gives the default). Turning them off destroys the graphs.
   */
  void useGraphs(boolean on) {
    this.graphs = on;
    if (!on) {
      destroyGraphs();
    }
  }

  /** Decode steps captured into a graph, and steps that replayed one, so far. */
  long[] graphCounts() {
    return new long[] {graphCaptures, graphReplays};
  }

  /**
   * Whether a step may replay a graph: decode only (one token a request), graphs on, and every
   * product on the project's own kernels (cuBLAS is left out of captures: it may allocate its
   * workspace while recording). A split-KV plan is captured too, with its grid widened by {@link
   * #graphSplitPlan}.
   */
  private boolean graphable(boolean pureDecode, int numTokens) {
    return graphs
        && collective.size() == 1
        && pureDecode
        && gemm.ownKernels(numTokens, weightType)
        && (deterministic || weightsFitGemv);
  }

  /**
   * Whether every product of a decode step meets {@code gemv_bf16}'s conditions besides the rows:
   * dimensions that are multiples of 8 and weights on 16-byte boundaries (else {@link Gemm} would
   * send the product to cuBLAS, which a capture must not record).
   */
  private static boolean weightsFitGemv(DecoderDims d, DeviceBuffer lmHead, List<Layer> layers) {
    boolean ok =
        d.hiddenSize() % 8 == 0
            && (d.numHeads() * d.headDim()) % 8 == 0
            && d.intermediateSize() % 8 == 0
            && lmHead.pointer() % 16 == 0;
    for (Layer l : layers) {
      // a Mamba mixer's narrow products (its x and dt projections) are left to cuBLAS's rules
      ok &= l.mamba() == null;
      for (DeviceBuffer b : new DeviceBuffer[] {l.qkv(), l.o(), l.gateUp(), l.down()}) {
        ok &= b == null || b.pointer() % 16 == 0;
      }
    }
    return ok;
  }

  /** The stride a graphed step uses: a power of two of at least {@link #GRAPH_MIN_STRIDE}. */
  static int graphStride(int stride) {
    return Math.max(GRAPH_MIN_STRIDE, Integer.highestOneBit(Math.max(1, stride - 1)) << 1);
  }

  private void destroyGraphs() {
    for (long exec : graphExecs.values()) {
      device.api().graphExecDestroy(exec);
    }
    graphExecs.clear();
    graphCandidates.clear();
  }

  /** The flash kernel for head size {@code headDim} (64 or 128). */
  static String flashKernel(int headDim) {
    return "flash_attention_d" + headDim;
  }

  /**
   * Dynamic shared memory of {@link #flashKernel}, in bytes: two stages of K and V of {@link
   * #FLASH_KEYS} rows of {@code headDim + 8} bf16, and at head size 128 the block's {@link
   * #FLASH_ROWS} query rows as well (FLASH_ATTENTION's QSHARED in kernels.cu).
   */
  static int flashSharedBytes(int headDim) {
    int row = (headDim + 8) * 2;
    return 2 * 2 * FLASH_KEYS * row + (headDim == 128 ? FLASH_ROWS * row : 0);
  }

  /** The kernels of the tensor-core attention: the same arguments, grid and semantics. */
  enum FlashKernel {
    /** {@code flash_attention_d64/d128}: {@code mma.sync}, any GPU the backend runs on. */
    MMA,
    /**
     * {@code flash_attention_wgmma_d64/d128}: Hopper's {@code wgmma} (sm_90a), a producer warpgroup
     * copying K and V and two consumer warpgroups of 64 rows; compute capability 9.0 only.
     */
    WGMMA,
    /**
     * {@code flash_attention_tma_d64/d128}: the {@link #WGMMA} kernel with K and V copied by the
     * TMA unit from two descriptors of the layer's pool ({@link #poolTensorMaps}), the same bits;
     * compute capability 9.0 only. Where the pool's blocks do not suit the TMA's boxes ({@link
     * #tmaTakes}) a launch runs the {@link #WGMMA} kernel instead.
     */
    TMA;

    /** The kernel's function for head size {@code headDim} (64 or 128). */
    String function(int headDim) {
      return switch (this) {
        case MMA -> flashKernel(headDim);
        case WGMMA -> "flash_attention_wgmma_d" + headDim;
        case TMA -> "flash_attention_tma_d" + headDim;
      };
    }

    /** Threads a block. */
    int threads() {
      return this == MMA ? FLASH_THREADS : WGMMA_FLASH_THREADS;
    }

    /** Dynamic shared memory a block, in bytes. */
    int sharedBytes(int headDim) {
      return this == MMA ? flashSharedBytes(headDim) : wgmmaFlashSharedBytes(headDim);
    }
  }

  /**
   * Stages of K and V of the Hopper flash kernel at head size {@code headDim}: the
   * FLASH_ATTENTION_WGMMA lines of kernels.cu (three at 128, four at 64).
   */
  static int wgmmaFlashStages(int headDim) {
    return headDim == 128 ? 3 : 4;
  }

  /**
   * Dynamic shared memory of the Hopper flash kernel, in bytes: 1024 to align the rest on 1024
   * bytes (wgmma's 128-byte swizzle), the two consumers' {@code 64 · headDim} bf16 queries, the
   * stages of K and V of {@link #WGMMA_FLASH_KEYS} keys of {@code headDim} bf16, and four 8-byte
   * mbarriers a stage: 230,496 bytes at 128 (three stages), 148,608 at 64 (four).
   */
  static int wgmmaFlashSharedBytes(int headDim) {
    int stages = wgmmaFlashStages(headDim);
    return 1024
        + 2 * 64 * headDim * 2
        + 2 * stages * WGMMA_FLASH_KEYS * headDim * 2
        + 4 * stages * 8;
  }

  /**
   * The kernel a value of {@link #FLASH_PROPERTY} names: {@code auto} (or none) null, the device's
   * choice; {@code mma} {@link FlashKernel#MMA}; {@code wgmma} {@link FlashKernel#WGMMA}; in any
   * case.
   *
   * @throws IllegalArgumentException for anything else, naming the property
   */
  static FlashKernel flashKernelOf(String value) {
    int i = KernelSwitch.pick(FLASH_PROPERTY, value, "auto", "mma", "wgmma", "tma");
    return i == 0 ? null : FlashKernel.values()[i - 1];
  }

  /**
   * {@code wanted} on a device of architecture {@code arch} ({@link CudaDevice#arch}, such as
   * {@code sm_90}); for null ({@code auto}), {@link FlashKernel#TMA} on compute capability 9.0 and
   * {@link FlashKernel#MMA} elsewhere.
   *
   * @throws IllegalArgumentException for {@link FlashKernel#WGMMA} on anything but compute
   *     capability 9.0, naming the device's architecture and the property
   */
  static FlashKernel flashKernelFor(FlashKernel wanted, String arch) {
    boolean hopper = "sm_90".equals(arch);
    if (wanted == null) {
      return hopper ? FlashKernel.WGMMA : FlashKernel.MMA;
    }
    if (wanted != FlashKernel.MMA && !hopper) {
      throw new IllegalArgumentException(
          FLASH_PROPERTY
              + "="
              + wanted.name().toLowerCase(Locale.ROOT)
              + " needs a Hopper GPU (compute capability 9.0, sm_90a): this device is "
              + arch
              + "; use "
              + FLASH_PROPERTY
              + "=mma");
    }
    return wanted;
  }

  /** The tensor-core attention's kernel of this model (of every batch with a prefill token). */
  FlashKernel flash() {
    return flash;
  }

  /** The tensor-core attention's kernel of this model for a batch of decode tokens only. */
  FlashKernel decodeFlash() {
    return decodeFlash;
  }

  /**
   * Runs the tensor-core attention on {@code kernel} from now on, for every batch (tests and the
   * benchmark compare both on one model), dropping the decode graphs recorded with the other.
   *
   * @throws IllegalArgumentException for a model without the tensor-core attention, or {@link
   *     FlashKernel#WGMMA} on a device that is not of compute capability 9.0
   */
  void useFlash(FlashKernel kernel) {
    if (!kvBf16) {
      throw new IllegalArgumentException(
          "the flash kernels are the tensor-core attention's; this model's is " + attention);
    }
    this.flash = flashKernelFor(kernel, device.arch());
    this.decodeFlash = this.flash;
    destroyGraphs();
  }

  /**
   * The name of the attention arithmetic, for the deployment identity: KV computed by one kernel
   * family is not bit-identical to another's.
   */
  public String attentionName() {
    if (attention != Attention.TENSOR_CORE) {
      return "cuda-paged-f32";
    }
    // the TMA kernel gives the wgmma kernel's bits
    return flash == FlashKernel.MMA ? "cuda-flash-bf16" : "cuda-flash-wgmma-bf16";
  }

  /**
   * Reserves every product's buffers on {@code gemm} once, at load ({@link Gemm#reserve}): qkv, o,
   * gate|up, down and the logits, so that no product allocates during a recorded decode step.
   */
  private static void reserveProducts(Gemm gemm, DecoderDims d, MixerDims m) {
    int hidden = d.hiddenSize();
    int q = d.numHeads() * d.headDim();
    int kv = d.numKvHeads() * d.headDim();
    int inter = d.intermediateSize();
    gemm.reserve(hidden, q + 2 * kv);
    gemm.reserve(q, hidden);
    gemm.reserve(hidden, 2 * inter);
    gemm.reserve(inter, hidden);
    gemm.reserve(hidden, d.vocabSize());
    if (m != null) {
      int di = m.innerSize();
      int rank = m.timeStepRank();
      gemm.reserve(hidden, 2 * di);
      gemm.reserve(di, rank + 2 * m.stateSize());
      gemm.reserve(rank, di);
      gemm.reserve(di, hidden);
    }
  }

  /**
   * The name of the deterministic products' bits ({@link Gemm#fixedOrderBits}: {@code mma}, {@code
   * wgmma} or {@code wgmma-split}), with {@code -bf16mlp} after it where the gate | up product
   * writes bf16 ({@link #BF16_MLP_PROPERTY}), for the deployment identity: KV computed with one
   * family's products, or with the other rounding, is not bit-identical to another's.
   */
  public String fixedOrderBits() {
    String bits = gemm.fixedOrderBits();
    return deterministic && gateUpWritesBf16() ? bits + "-bf16mlp" : bits;
  }

  /**
   * Whether the gate | up product of {@code rows} rows writes bf16 (the switch on, and a kernel
   * that can: {@link Gemm#writesBf16}; in deterministic mode a function of the shape alone).
   */
  private boolean gateUpWritesBf16(long x, long w, int rows) {
    return BF16_MLP
        && gemm.writesBf16(x, w, weightType, rows, d.hiddenSize(), 2 * d.intermediateSize());
  }

  /** {@link #gateUpWritesBf16(long, long, int)} of deterministic mode, where rows do not matter. */
  private boolean gateUpWritesBf16() {
    return gateUpWritesBf16(0L, 0L, 1);
  }

  /** Whether the weights (and the GEMMs' inputs) are bf16; else float32. */
  public boolean bf16() {
    return weightType == Gemm.R_16BF;
  }

  /**
   * The cache layout of this model: one Full-history group whose blocks hold every layer's K and V
   * (Gemma 3: its sliding-window layers' group and its global layers' group); with float32 KV the
   * CPU model's ({@link CausalLm#cacheLayout}) for one rank, with the tensor-core attention the
   * same geometry in bf16 ({@link #KV_BF16}).
   */
  public CacheLayout cacheLayout(int prefixGranularity, int blockGranularity) {
    return cacheLayoutOf(config, d, prefixGranularity, blockGranularity, kvBf16);
  }

  /** The {@link CacheLayout#dtype()} of a bf16 KV pool. */
  public static final String KV_BF16 = "bfloat16";

  /** {@link #cacheLayout} of a model of {@code config}, one rank. */
  static CacheLayout cacheLayoutOf(
      ModelConfig config, int prefixGranularity, int blockGranularity, boolean kvBf16) {
    return cacheLayoutOf(config, dimsOf(config), prefixGranularity, blockGranularity, kvBf16);
  }

  /**
   * {@link #cacheLayout} of the rank of a model of {@code config} whose dimensions are {@code d}.
   */
  static CacheLayout cacheLayoutOf(
      ModelConfig config,
      DecoderDims d,
      int prefixGranularity,
      int blockGranularity,
      boolean kvBf16) {
    MixerDims mixer = mixerOf(config);
    List<GroupKind> kinds = groupKinds(config);
    List<Integer> groupOf = groupsOfLayers(config);
    long bytes = (long) d.numKvHeads() * blockGranularity * d.headDim() * (kvBf16 ? 2 : 4);
    List<CacheGroupSpec> groups = new ArrayList<>();
    for (int g = 0; g < kinds.size(); g++) {
      boolean state = kinds.get(g) instanceof GroupKind.StateCheckpoints;
      List<CacheField> fields = new ArrayList<>();
      for (int l = 0; l < d.numLayers(); l++) {
        if (groupOf.get(l) != g) {
          continue;
        }
        if (state) {
          // one checkpoint slot a page, the CPU model's MambaMixer fields
          fields.add(new CacheField("layers." + l + ".conv", mixer.convStateBytes()));
          fields.add(new CacheField("layers." + l + ".ssm", mixer.ssmStateBytes()));
        } else {
          fields.add(new CacheField("layers." + l + ".k", bytes));
          fields.add(new CacheField("layers." + l + ".v", bytes));
        }
      }
      groups.add(
          new CacheGroupSpec(
              g,
              kinds.get(g),
              state ? prefixGranularity : blockGranularity,
              fields,
              state ? new Sharding.Replicated() : new Sharding.HeadPartitioned()));
    }
    return new CacheLayout(prefixGranularity, kvBf16 ? KV_BF16 : CausalLm.KV_DTYPE, groups);
  }

  /** Scratch memory of a forward pass, grown to the largest batch seen. */
  private final class Workspace implements AutoCloseable {
    final int tokens;
    final int tableInts;
    final int logitRows;
    final DeviceBuffer x;
    final DeviceBuffer act;
    final DeviceBuffer qkv;
    final DeviceBuffer q;
    final DeviceBuffer gu;

    /**
     * A sublayer's output before its sum over the ranks, its norm and its residual add (tensor
     * parallelism, sandwich blocks), else null.
     */
    final DeviceBuffer y;

    /** The Mamba mixers' scratch ({@link MambaScratch}), else null. */
    final DeviceBuffer mamba;

    final DeviceBuffer ints;
    final DeviceBuffer tables;
    final DeviceBuffer logits;

    /** The logits' copy in pinned host memory: the copy down runs at the bus's speed. */
    final Arena hostArena;

    final MemorySegment logitsHost;
    final PinnedHost logitsPinned;

    /**
     * The round's tables (token metadata, attention tiles, block tables) staged in pinned host
     * memory and copied up asynchronously on the compute stream, ahead of the kernels that read
     * them: the forward pass waits for its stream before it returns, so the next round may refill
     * them.
     */
    final MemorySegment intsHost;

    final MemorySegment tablesHost;
    final PinnedHost intsPinned;
    final PinnedHost tablesPinned;

    Workspace(int tokens, int tableInts, int logitRows) {
      this.tokens = tokens;
      this.tableInts = tableInts;
      this.logitRows = logitRows;
      int hidden = d.hiddenSize();
      int qkvWidth = (d.numHeads() + 2 * d.numKvHeads()) * d.headDim();
      int actWidth = Math.max(hidden, Math.max(d.intermediateSize(), d.numHeads() * d.headDim()));
      MixerDims mixer = mixerOf(config);
      if (mixer != null) {
        actWidth = Math.max(actWidth, Math.max(mixer.innerSize(), mixer.timeStepRank()));
      }
      List<DeviceBuffer> made = new ArrayList<>();
      try {
        x = keep(made, (long) tokens * hidden * 4);
        act = keep(made, (long) tokens * actWidth * 4);
        qkv = keep(made, (long) tokens * qkvWidth * 4);
        q = keep(made, (long) tokens * d.numHeads() * d.headDim() * 4);
        gu = keep(made, (long) tokens * 2 * d.intermediateSize() * 4);
        y =
            family.sandwich() || collective.size() > 1
                ? keep(made, (long) tokens * hidden * 4)
                : null;
        // per token: id, position, request, logit row; two ints of attention tiles; then three
        // ints a request (at most one a token) for the Mamba kernels
        ints = keep(made, (long) tokens * 9 * 4);
        mamba =
            mixer == null ? null : keep(made, (long) tokens * MambaScratch.floatsPerRow(mixer) * 4);
        tables = keep(made, (long) tableInts * 4);
        logits = keep(made, (long) logitRows * d.vocabSize() * 4);
      } catch (RuntimeException e) {
        for (DeviceBuffer b : made) {
          b.close();
        }
        throw e;
      }
      hostArena = Arena.ofShared();
      List<PinnedHost> pinnedMade = new ArrayList<>();
      try {
        logitsHost = hostArena.allocate(logits.bytes(), 64);
        logitsPinned = PinnedHost.register(device, logitsHost);
        pinnedMade.add(logitsPinned);
        intsHost = hostArena.allocate(ints.bytes(), 64);
        intsPinned = PinnedHost.register(device, intsHost);
        pinnedMade.add(intsPinned);
        tablesHost = hostArena.allocate(tables.bytes(), 64);
        tablesPinned = PinnedHost.register(device, tablesHost);
      } catch (RuntimeException e) {
        pinnedMade.forEach(PinnedHost::close);
        hostArena.close();
        for (DeviceBuffer b : made) {
          b.close();
        }
        throw e;
      }
    }

    private DeviceBuffer keep(List<DeviceBuffer> made, long bytes) {
      DeviceBuffer b = device.allocate(bytes);
      made.add(b);
      return b;
    }

    @Override
    public void close() {
      for (DeviceBuffer b : List.of(x, act, qkv, q, gu, ints, tables, logits)) {
        b.close();
      }
      if (y != null) {
        y.close();
      }
      if (mamba != null) {
        mamba.close();
      }
      logitsPinned.close();
      intsPinned.close();
      tablesPinned.close();
      hostArena.close();
    }
  }

  /**
   * The scratch for a batch, grown when one does not fit: the token rows to what the batch needs
   * (the engine's token budget bounds them), block tables (at least 16,384 entries, they are small)
   * and logit rows to at least twice their old size, so a prompt whose chunks need ever longer
   * tables reallocates a logarithmic number of times, not at every chunk.
   */
  private Workspace workspace(int tokens, int tableInts, int logitRows) {
    Workspace w = workspace;
    if (w == null || w.tokens < tokens || w.tableInts < tableInts || w.logitRows < logitRows) {
      int t = Math.max(16, w == null ? tokens : Math.max(tokens, w.tokens));
      int ti = grown(1 << 14, tableInts, w == null ? 0 : w.tableInts);
      int lr = grown(16, logitRows, w == null ? 0 : w.logitRows);
      if (w != null) {
        device.synchronize();
        destroyGraphs(); // their launches point into the old buffers
        w.close();
        workspace = null;
      }
      workspace = new Workspace(t, ti, lr);
    }
    return workspace;
  }

  /** {@code need} rounded up: at least {@code floor}, and twice {@code old} when it outgrows it. */
  static int grown(int floor, int need, int old) {
    int size = Math.max(floor, Math.max(need, old));
    if (old > 0 && need > old) {
      size = (int) Math.min(Integer.MAX_VALUE, Math.max((long) size, 2L * old));
    }
    return size;
  }

  /**
   * Computes one batch: writes the KV of every token it computes into the slots its request's block
   * table gives, and returns the logits of every chunk token or the last, per request.
   *
   * @throws IllegalArgumentException when a request's tokens, positions or block table do not fit
   *     the model or the cache
   */
  public ForwardResult forward(ForwardBatch batch, CudaKvCache kv) {
    int logitRows = enqueue(batch, kv);
    return copyLogits(batch.requests(), logitRows);
  }

  /** Host nanoseconds spent issuing forward passes (up to their logits, not waiting for them). */
  private long enqueueNanos;

  /**
   * Nanoseconds the host spent issuing this model's forward passes so far: building their tables
   * and launching their kernels, without waiting for the GPU. Beside the GPU's time for the same
   * passes it tells whether a step is bound by the host's launches (what CUDA graphs would remove)
   * or by the GPU.
   */
  public long enqueueNanos() {
    return enqueueNanos;
  }

  private int enqueue(ForwardBatch batch, CudaKvCache kv) {
    long t0 = System.nanoTime();
    int rows = runToLogits(batch, kv);
    enqueueNanos += System.nanoTime() - t0;
    return rows;
  }

  /**
   * Computes one batch as {@link #forward} does and samples the next token of each request whose
   * entry of {@code rows} is not null from its last logits row, on the device ({@link
   * DeviceSampler}): only the tokens, and the log probabilities the rows ask for, come down. The
   * logits come down too when {@code keepLogits}.
   *
   * @throws IllegalArgumentException as {@link #forward} does, and for a logits row the sampler
   *     refuses (a NaN or +Infinity, or every logit -Infinity)
   */
  public SampledForward forwardAndSample(
      ForwardBatch batch, CudaKvCache kv, List<RowSampling> rows, boolean keepLogits) {
    List<ForwardRequest> requests = batch.requests();
    if (rows.size() != requests.size()) {
      throw new IllegalArgumentException(
          rows.size() + " sampling rows for a batch of " + requests.size() + " requests");
    }
    int logitRows = enqueue(batch, kv);
    int[] last = new int[requests.size()];
    int through = 0;
    for (int r = 0; r < requests.size(); r++) {
      through += requests.get(r).numLogitRows();
      last[r] = through - 1;
    }
    if (sampler == null) {
      sampler = new DeviceSampler(device, d.vocabSize());
    }
    List<SampledRow> sampled = sampler.sample(workspace.logits.pointer(), last, rows);
    return new SampledForward(sampled, keepLogits ? copyLogits(requests, logitRows) : null);
  }

  /** The device sampler, made at the first sampled batch. */
  private DeviceSampler sampler;

  /** The batch's logits, copied to the host (waits for the compute stream). */
  private ForwardResult copyLogits(List<ForwardRequest> requests, int logitRows) {
    Workspace ws = workspace;
    int vocab = d.vocabSize();
    long bytes = (long) logitRows * vocab * Float.BYTES;
    device.api().memcpyAsync(ws.logitsHost.address(), ws.logits.pointer(), bytes, device.stream());
    device.synchronize();
    return ForwardResult.split(vocab, requests, ws.logitsHost.asSlice(0, bytes));
  }

  /**
   * Runs the batch up to its logits, in the workspace's logits buffer on the device (issued on the
   * compute stream, not waited for); returns how many logits rows it wrote.
   */
  private int runToLogits(ForwardBatch batch, CudaKvCache kv) {
    CacheLayout have = kv.layout();
    int bg = attentionBlockTokens(have);
    if (!sameGroups(have, cacheLayout(have.prefixGranularity(), bg))) {
      throw new IllegalArgumentException("kv cache layout " + have + " is not this model's");
    }
    device.bind();
    List<ForwardRequest> requests = batch.requests();
    int numTokens = batch.numTokens();
    int numGroups = have.numGroups();
    int stride = 1;
    int logitRows = 0;
    boolean pureDecode = true;
    int maxContext = 0;
    for (int r = 0; r < requests.size(); r++) {
      ForwardRequest req = requests.get(r);
      validate(r, req, kv);
      for (int g = 0; g < numGroups; g++) {
        stride = Math.max(stride, have.group(g).rowsFor(req.startPosition() + req.numTokens()));
      }
      logitRows += req.numLogitRows();
      pureDecode &= req.numTokens() == 1;
      maxContext = Math.max(maxContext, req.startPosition() + req.numTokens());
    }
    // per token: id, position, request; per logit row: its token; then the attention's tiles
    int group = d.numHeads() / d.numKvHeads();
    int tileTokens = Math.max(1, Math.min(8, 16 / group));
    Attention kernel = attention == Attention.TILED && group > 32 ? Attention.PER_TOKEN : attention;
    if (kernel == Attention.TENSOR_CORE) {
      tileTokens = FLASH_ROWS / group;
    }
    SplitPlan split =
        kernel == Attention.TENSOR_CORE && !deterministic
            ? splitPlan(
                splitKv,
                pureDecode,
                numTokens,
                maxContext,
                d.numKvHeads(),
                group,
                device.multiprocessors())
            : null;
    boolean graphed = graphable(pureDecode, numTokens);
    if (graphed) {
      stride = graphStride(stride);
      if (split != null) {
        split = graphSplitPlan(split, stride * bg);
      }
    }
    int[] tiles = new int[2 * numTokens];
    int numTiles = 0;
    int[] meta = new int[numTokens * 3 + logitRows];
    // per request: its first row, tokens and start (the Mamba kernels' request arrays)
    int numRequests = requests.size();
    int[] perRequest = mixers ? new int[3 * numRequests] : null;
    // group g's tables at g · (requests · stride): a layer reads its group's
    int groupTables = requests.size() * stride;
    int[] tables = new int[numGroups * groupTables];
    int row = 0;
    int lr = 0;
    for (int r = 0; r < requests.size(); r++) {
      ForwardRequest req = requests.get(r);
      for (int g = 0; g < numGroups; g++) {
        int[] table = req.blockTables()[g];
        System.arraycopy(
            table, 0, tables, g * groupTables + r * stride, Math.min(stride, table.length));
      }
      int first = req.allLogits() ? row : row + req.numTokens() - 1;
      if (perRequest != null) {
        perRequest[r] = row;
        perRequest[numRequests + r] = req.numTokens();
        perRequest[2 * numRequests + r] = req.startPosition();
      }
      for (int i = 0; i < req.numTokens(); i++) {
        meta[row] = req.tokenIds()[i];
        meta[numTokens + row] = req.startPosition() + i;
        meta[2 * numTokens + row] = r;
        row++;
      }
      for (int i = first; i < row; i++) {
        meta[3 * numTokens + lr++] = i;
      }
      for (int i = row - req.numTokens(); i < row; i += tileTokens) {
        tiles[2 * numTiles] = i;
        tiles[2 * numTiles + 1] = Math.min(tileTokens, row - i);
        numTiles++;
      }
    }
    // a prefill (or mixed) batch of few tiles over long contexts: the Hopper flash kernel split
    // over the keys, in normal mode (the merge rounds differently from the unsplit kernel)
    SplitPlan prefillSplit =
        kernel == Attention.TENSOR_CORE
                && !deterministic
                && !pureDecode
                && !graphed
                && splitKv != SplitKv.OFF
                && (PREFILL_SPLIT || splitKv == SplitKv.ALWAYS)
                && flash != FlashKernel.MMA
            ? prefillSplitPlan(numTiles, d.numKvHeads(), maxContext, device.multiprocessors())
            : null;
    Workspace ws = workspace(numTokens, tables.length, logitRows);
    long tileTable = ws.ints.pointer() + 4L * numTokens * 4;
    MemorySegment.copy(meta, 0, ws.intsHost, ValueLayout.JAVA_INT, 0, meta.length);
    MemorySegment.copy(tiles, 0, ws.intsHost, ValueLayout.JAVA_INT, 16L * numTokens, 2 * numTiles);
    MemorySegment.copy(tables, 0, ws.tablesHost, ValueLayout.JAVA_INT, 0, tables.length);
    long stream = device.stream();
    device.api().memcpyAsync(ws.ints.pointer(), ws.intsHost.address(), 4L * meta.length, stream);
    device
        .api()
        .memcpyAsync(tileTable, ws.intsHost.address() + 16L * numTokens, 8L * numTiles, stream);
    device
        .api()
        .memcpyAsync(ws.tables.pointer(), ws.tablesHost.address(), 4L * tables.length, stream);
    long requestArrays = ws.ints.pointer() + 24L * numTokens;
    if (perRequest != null) {
      MemorySegment.copy(
          perRequest, 0, ws.intsHost, ValueLayout.JAVA_INT, 24L * numTokens, perRequest.length);
      device
          .api()
          .memcpyAsync(
              requestArrays,
              ws.intsHost.address() + 24L * numTokens,
              4L * perRequest.length,
              stream);
    }
    long tokens = ws.ints.pointer();
    long positions = tokens + (long) numTokens * 4;
    long tokenRequest = tokens + 2L * numTokens * 4;
    long logitIndex = tokens + 3L * numTokens * 4;

    int hidden = d.hiddenSize();
    int hd = d.headDim();
    int heads = d.numHeads();
    int kvHeads = d.numKvHeads();
    int inter = d.intermediateSize();
    boolean bf = bf16();
    long act = ws.act.pointer();
    long actF32 = bf ? 0L : act;
    long actBf16 = bf ? act : 0L;
    SplitPlan anySplit = split != null ? split : prefillSplit;
    long partials =
        anySplit == null
            ? 0L
            : splitPartials(splitPartialBytes(anySplit, numTokens, heads, d.headDim()));
    if (split != null) {
      splitForwards++;
    }
    if (prefillSplit != null) {
      prefillSplitForwards++;
    }
    GraphKey key =
        graphed ? new GraphKey(numTokens, numTiles, stride, ws, kv, kernel, split, partials) : null;
    LayerGate gate = batch.gate();
    if (key != null) {
      gate.awaitLayer(layers.size() - 1); // a graph runs every layer: all of the loads first
      Long exec = graphExecs.get(key);
      if (exec != null) {
        device.api().graphLaunch(exec, stream);
        graphReplays++;
        return logitRows;
      }
      if (!graphCandidates.add(key)) {
        device.api().beginCapture(stream); // seen before, run eagerly once: record it now
      } else {
        key = null; // the first time: an eager run (kernels loaded, their limits set)
      }
    }
    try {
      device.launch(
          bf ? "embed_bf16" : "embed_f32",
          numTokens,
          1,
          256,
          0,
          embed.pointer(),
          tokens,
          ws.x.pointer(),
          hidden,
          family.embedScale());
      float eps = (float) d.rmsNormEps();
      float scale = family.attnScale() > 0 ? family.attnScale() : (float) (1.0 / Math.sqrt(hd));
      int ropeThreads = Integer.highestOneBit(Math.max(32, hd / 2 - 1) * 2);
      for (int l = 0; l < layers.size(); l++) {
        gate.awaitLayer(l); // its loads have run on the copy stream before its kernels are issued
        Layer layer = layers.get(l);
        int g = layer.group();
        long pool = kv.base(g);
        long layerTables = ws.tables.pointer() + 4L * g * groupTables;
        long bpb = have.group(g).bytesPerBlock();
        int groupBg = have.group(g).blockGranularity();
        rmsNorm(ws.x.pointer(), 0L, layer.inputNorm(), actF32, actBf16, numTokens, hidden, eps);
        if (layer.mamba() != null) {
          CudaMamba.DeviceRequests reqs =
              new CudaMamba.DeviceRequests(
                  numRequests,
                  requestArrays,
                  requestArrays + 4L * numRequests,
                  requestArrays + 8L * numRequests,
                  layerTables,
                  stride);
          mambaMixer(layer, l, kv, reqs, numTokens, eps);
          if (layer.gateUp() != null) {
            mlp(layer, numTokens, eps);
          }
          continue;
        }
        // an attention layer's K and V in its group's blocks (a Mamba layer has its state instead)
        long kOff = kv.fieldOffset(g, "layers." + l + ".k");
        long vOff = kv.fieldOffset(g, "layers." + l + ".v");
        gemm.apply(
            act,
            layer.qkv().pointer(),
            weightType,
            ws.qkv.pointer(),
            numTokens,
            hidden,
            (heads + 2 * kvHeads) * hd,
            false);
        device.launch(
            "qkv_rope_store",
            numTokens,
            heads + kvHeads,
            ropeThreads,
            ropeThreads * 4,
            ws.qkv.pointer(),
            ptr(layer.qkvBias()),
            ptr(layer.qNorm()),
            ptr(layer.kNorm()),
            eps,
            ptr(layer.invFreq()),
            positions,
            tokenRequest,
            layerTables,
            stride,
            heads,
            kvHeads,
            hd,
            ws.q.pointer(),
            pool,
            bpb,
            kOff,
            vOff,
            groupBg,
            kvBf16 ? 1 : 0);
        AttentionInputs in =
            new AttentionInputs(
                ws.q.pointer(),
                pool,
                bpb,
                kOff,
                vOff,
                groupBg,
                positions,
                tokenRequest,
                layerTables,
                stride);
        if (split != null) {
          launchSplitDecode(device, split, hd, numTokens, heads, kvHeads, in, scale, partials, act);
        } else if (prefillSplit != null) {
          launchFlashSplit(
              device,
              flash,
              prefillSplit,
              hd,
              numTiles,
              numTokens,
              heads,
              kvHeads,
              in,
              tileTable,
              scale,
              partials,
              act,
              kv.numBlocks(g));
        } else if (kernel == Attention.TENSOR_CORE) {
          launchFlash(
              device,
              pureDecode ? decodeFlash : flash,
              hd,
              numTiles,
              heads,
              kvHeads,
              in,
              tileTable,
              scale,
              act,
              kv.numBlocks(g));
        } else if (kernel == Attention.TILED) {
          int warps = tileTokens * group;
          // a window's tokens start their chunks at their own first keys: a step stages 32 keys
          // plus the spread of the tile's first keys
          int span = layer.window() > 0 ? 32 + tileTokens - 1 : 32;
          device.launch(
              "paged_attention_tiled",
              numTiles,
              kvHeads,
              32 * warps,
              (warps * hd + span * (hd + 1) + span * hd) * 4,
              in.then(
                  tileTable,
                  heads,
                  kvHeads,
                  hd,
                  scale,
                  layer.window(),
                  family.attnSoftcap(),
                  actF32,
                  actBf16));
        } else {
          long items = (long) numTokens * heads;
          device.launch(
              "paged_attention",
              Math.toIntExact((items + ATTN_WARPS - 1) / ATTN_WARPS),
              1,
              32 * ATTN_WARPS,
              ATTN_WARPS * hd * 4,
              in.then(
                  numTokens,
                  heads,
                  kvHeads,
                  hd,
                  scale,
                  layer.window(),
                  family.attnSoftcap(),
                  actF32,
                  actBf16));
        }
        // the Llama family adds each sublayer's output to x in its product; Gemma normalizes it
        // first (in y), then adds
        gemm.apply(
            act,
            layer.o().pointer(),
            weightType,
            sublayerOut(),
            numTokens,
            heads * hd,
            hidden,
            addsInProduct());
        endSublayer(layer.oBias(), layer.attnOutNorm(), numTokens, eps);
        mlp(layer, numTokens, eps);
      }
      rmsNorm(ws.x.pointer(), logitIndex, finalNorm, actF32, actBf16, logitRows, hidden, eps);
      int vocab = d.vocabSize();
      gemm.apply(
          act, lmHead.pointer(), weightType, ws.logits.pointer(), logitRows, hidden, vocab, false);
      if (family.logitSoftcap() > 0) {
        long n = (long) logitRows * vocab;
        device.launch(
            "softcap_logits",
            Math.toIntExact((n + 255) / 256),
            1,
            256,
            0,
            ws.logits.pointer(),
            n,
            family.logitSoftcap());
      }
    } catch (RuntimeException | Error e) {
      if (key != null) {
        abandonCapture(stream);
      }
      throw e;
    }
    if (key != null) {
      long graph = device.api().endCapture(stream);
      long exec;
      try {
        exec = device.api().graphInstantiate(graph);
      } finally {
        device.api().graphDestroy(graph);
      }
      if (graphExecs.size() >= GRAPH_LIMIT) {
        var oldest = graphExecs.entrySet().iterator().next();
        device.api().graphExecDestroy(oldest.getValue());
        graphExecs.remove(oldest.getKey());
      }
      graphExecs.put(key, exec);
      graphCandidates.remove(key);
      graphCaptures++;
      device.api().graphLaunch(exec, stream); // the capture recorded the step; now it runs
    }
    return logitRows;
  }

  /** Ends a capture a failed launch left open, so the stream takes work again. */
  private void abandonCapture(long stream) {
    try {
      device.api().graphDestroy(device.api().endCapture(stream));
    } catch (RuntimeException ignored) {
      // the launch's own failure is the one to report
    }
  }

  private void rmsNorm(
      long x, long rows, DeviceBuffer w, long outF32, long outBf16, int count, int n, float eps) {
    device.launch(
        "rmsnorm",
        count,
        1,
        NORM_THREADS,
        NORM_THREADS * 4,
        x,
        rows,
        w.pointer(),
        outF32,
        outBf16,
        n,
        eps);
  }

  /**
   * The MLP sublayer of {@code layer} over the workspace's rows: its norm of x, the gate | up
   * product, the gated activation and the down product, added to x (Gemma: normalized first).
   */
  private void mlp(Layer layer, int numTokens, float eps) {
    Workspace ws = workspace;
    int hidden = d.hiddenSize();
    int inter = d.intermediateSize();
    boolean bf = bf16();
    long act = ws.act.pointer();
    long actF32 = bf ? 0L : act;
    long actBf16 = bf ? act : 0L;
    rmsNorm(ws.x.pointer(), 0L, layer.postNorm(), actF32, actBf16, numTokens, hidden, eps);
    long gateUp = layer.gateUp().pointer();
    boolean guBf16 = gateUpWritesBf16(act, gateUp, numTokens);
    if (guBf16) {
      gemm.applyBf16Output(act, gateUp, ws.gu.pointer(), numTokens, hidden, 2 * inter);
    } else {
      gemm.apply(act, gateUp, weightType, ws.gu.pointer(), numTokens, hidden, 2 * inter, false);
    }
    String gated = family.gelu() ? "gelu_tanh_mul" : "silu_mul";
    device.launch(
        guBf16 ? gated + "_bf16" : gated,
        numTokens,
        Math.ceilDiv(inter, SILU_SPAN),
        SILU_SPAN / 4,
        0,
        guBf16
            ? new Object[] {ws.gu.pointer(), inter, actBf16}
            : new Object[] {ws.gu.pointer(), inter, actF32, actBf16});
    gemm.apply(
        act,
        layer.down().pointer(),
        weightType,
        sublayerOut(),
        numTokens,
        inter,
        hidden,
        addsInProduct());
    endSublayer(null, layer.mlpOutNorm(), numTokens, eps);
  }

  /**
   * Whether a sharded sublayer's last product (o, down) adds into x itself: alone and without
   * Gemma's output norm. Else it writes y, which {@link #endSublayer} sums over the ranks,
   * normalizes where Gemma does and adds.
   */
  private boolean addsInProduct() {
    return !family.sandwich() && collective.size() == 1;
  }

  /** Where a sharded sublayer's last product writes: x ({@link #addsInProduct}) or y. */
  private long sublayerOut() {
    return addsInProduct() ? workspace.x.pointer() : workspace.y.pointer();
  }

  /**
   * The end of a sharded sublayer whose last product wrote {@link #sublayerOut}: the ranks' partial
   * outputs summed (tensor parallelism), the bias added once (after the sum), Gemma's output norm,
   * and the residual add where the product did not do it.
   */
  private void endSublayer(DeviceBuffer bias, DeviceBuffer outNorm, int rows, float eps) {
    Workspace ws = workspace;
    int hidden = d.hiddenSize();
    long out = sublayerOut();
    if (collective.size() > 1) {
      collective.allReduceSum(out, (long) rows * hidden, device.stream());
    }
    if (bias != null) {
      device.launch("add_bias", rows, 1, 256, 0, out, bias.pointer(), hidden);
    }
    if (family.sandwich()) {
      normAdd(outNorm, rows, hidden, eps);
    } else if (!addsInProduct()) {
      device.launch("add_rows", rows, 1, 256, 0, ws.x.pointer(), out, hidden);
    }
  }

  /**
   * The Mamba mixer of layer {@code l} over the workspace's rows, its input (the layer's norm of x)
   * in the activations, its output added to x; the conv and scan resume each request's state from
   * the State group's input slot and store its checkpoints ({@link CudaMamba}).
   *
   * <pre>
   *   xz = in_proj(h) → u = conv(x) → [δ|B|C] = x_proj(u) → (Jamba: norms) → dt = softplus(dt_proj(δ)
   *   + b) → y = scan(u, dt, B, C) · silu(z) → x += out_proj(y)
   * </pre>
   *
   * A bf16 model's products read bf16: u, δ and y are rounded into the activations' buffer first.
   */
  private void mambaMixer(
      Layer layer, int l, CudaKvCache kv, CudaMamba.DeviceRequests reqs, int rows, float eps) {
    MambaWeights w = layer.mamba();
    MixerDims m = w.dims();
    int di = m.innerSize();
    int n = m.stateSize();
    int rank = m.timeStepRank();
    int g = layer.group();
    Workspace ws = workspace;
    long act = ws.act.pointer();
    MambaScratch sc = new MambaScratch(ws.mamba.pointer(), rows, m);
    CudaMamba.LayerState state =
        new CudaMamba.LayerState(
            kv.base(g),
            kv.layout().group(g).bytesPerBlock(),
            kv.fieldOffset(g, "layers." + l + ".conv"),
            kv.fieldOffset(g, "layers." + l + ".ssm"),
            di,
            n,
            m.convKernel(),
            kv.layout().group(g).blockGranularity());
    gemm.apply(act, w.inProj().pointer(), weightType, sc.xz(), rows, d.hiddenSize(), 2 * di, false);
    CudaMamba.conv(
        device, state, reqs, sc.xz(), 2 * di, w.convWeight().pointer(), ptr(w.convBias()), sc.u());
    gemm.apply(
        productInput(sc.u(), act, (long) rows * di),
        w.xProj().pointer(),
        weightType,
        sc.proj(),
        rows,
        di,
        rank + 2 * n,
        false);
    CudaMamba.splitProj(device, sc.proj(), rows, rank, n, sc.delta(), sc.b(), sc.c());
    if (w.dtNorm() != null) {
      rmsNorm(sc.delta(), 0L, w.dtNorm(), sc.delta(), 0L, rows, rank, eps);
      rmsNorm(sc.b(), 0L, w.bNorm(), sc.b(), 0L, rows, n, eps);
      rmsNorm(sc.c(), 0L, w.cNorm(), sc.c(), 0L, rows, n, eps);
    }
    gemm.apply(
        productInput(sc.delta(), act, (long) rows * rank),
        w.dtProj().pointer(),
        weightType,
        sc.dt(),
        rows,
        rank,
        di,
        false);
    CudaMamba.softplusBias(device, sc.dt(), w.dtBias().pointer(), rows, di);
    CudaMamba.scan(
        device,
        state,
        reqs,
        sc.xz(),
        2 * di,
        di,
        sc.u(),
        sc.dt(),
        sc.b(),
        sc.c(),
        n,
        w.a().pointer(),
        w.d().pointer(),
        sc.y());
    gemm.apply(
        productInput(sc.y(), act, (long) rows * di),
        w.outProj().pointer(),
        weightType,
        ws.x.pointer(),
        rows,
        di,
        d.hiddenSize(),
        true);
  }

  /**
   * What a product reads for the float32 values at {@code x}: {@code x} itself in a float32 model,
   * else their bf16 rounding, written to {@code staging}.
   */
  private long productInput(long x, long staging, long count) {
    if (!bf16()) {
      return x;
    }
    device.launch("to_bf16", Math.toIntExact((count + 255) / 256), 1, 256, 0, x, staging, count);
    return staging;
  }

  /**
   * The Mamba mixer's float32 scratch of {@code rows} rows at {@code base}, one region after the
   * other: xz {@code [2·di]}, u {@code [di]}, the x projection {@code [R + 2N]}, δ {@code [R]}, B
   * and C {@code [N]}, dt {@code [di]} and y {@code [di]} a row.
   */
  record MambaScratch(long base, int rows, MixerDims m) {
    static long floatsPerRow(MixerDims m) {
      int di = m.innerSize();
      int n = m.stateSize();
      int r = m.timeStepRank();
      return 2L * di + di + (r + 2L * n) + r + 2L * n + di + di;
    }

    private long at(long floatsBefore) {
      return base + 4L * rows * floatsBefore;
    }

    long xz() {
      return at(0);
    }

    long u() {
      return at(2L * m.innerSize());
    }

    long proj() {
      return at(3L * m.innerSize());
    }

    long delta() {
      return at(3L * m.innerSize() + m.timeStepRank() + 2L * m.stateSize());
    }

    long b() {
      return at(3L * m.innerSize() + 2L * m.timeStepRank() + 2L * m.stateSize());
    }

    long c() {
      return at(3L * m.innerSize() + 2L * m.timeStepRank() + 3L * m.stateSize());
    }

    long dt() {
      return at(3L * m.innerSize() + 2L * m.timeStepRank() + 4L * m.stateSize());
    }

    long y() {
      return at(4L * m.innerSize() + 2L * m.timeStepRank() + 4L * m.stateSize());
    }
  }

  /** x += rmsnorm(y) · w over the workspace's rows: a sandwich block's output norm and add. */
  private void normAdd(DeviceBuffer w, int count, int n, float eps) {
    device.launch(
        "rmsnorm_add",
        count,
        1,
        NORM_THREADS,
        NORM_THREADS * 4,
        workspace.y.pointer(),
        w.pointer(),
        workspace.x.pointer(),
        n,
        eps);
  }

  /**
   * The tokens of a block of the attention groups of {@code layout} (a State group's slot covers a
   * page instead), or the page for a model without attention.
   */
  private static int attentionBlockTokens(CacheLayout layout) {
    for (CacheGroupSpec g : layout.groups()) {
      if (!(g.kind() instanceof GroupKind.StateCheckpoints)) {
        return g.blockGranularity();
      }
    }
    return layout.prefixGranularity();
  }

  /** Whether {@code have} has {@code want}'s groups: their kinds, block sizes and fields. */
  private static boolean sameGroups(CacheLayout have, CacheLayout want) {
    if (have.numGroups() != want.numGroups()) {
      return false;
    }
    for (int g = 0; g < have.numGroups(); g++) {
      CacheGroupSpec h = have.group(g);
      CacheGroupSpec w = want.group(g);
      if (!h.kind().equals(w.kind())
          || h.blockGranularity() != w.blockGranularity()
          || !h.fields().equals(w.fields())) {
        return false;
      }
    }
    return true;
  }

  private static long ptr(DeviceBuffer b) {
    return b == null ? 0L : b.pointer();
  }

  private void validate(int r, ForwardRequest req, CudaKvCache kv) {
    int[] numBlocks = new int[kv.layout().numGroups()];
    for (int g = 0; g < numBlocks.length; g++) {
      numBlocks[g] = kv.numBlocks(g);
    }
    ForwardChecks.check(r, req, config, kv.layout(), numBlocks, 1);
  }

  /** Frees the weights and scratch; the model must not be used afterwards. */
  @Override
  public void close() {
    device.bind();
    device.synchronize();
    destroyGraphs();
    if (sampler != null) {
      sampler.close();
      sampler = null;
    }
    if (workspace != null) {
      workspace.close();
      workspace = null;
    }
    if (splitPartials != null) {
      splitPartials.close();
      splitPartials = null;
    }
    gemm.close();
    for (DeviceBuffer b : owned) {
      b.close();
    }
  }
}

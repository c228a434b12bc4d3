package io.tokenspeed.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Row-major matrix products through cuBLAS (or, in deterministic mode, a fixed-order kernel):
 * {@code Y[rows][out] = X[rows][in] · Wᵀ (+ Y)} for a weight matrix {@code W[out][in]} as
 * checkpoints store it. X and W share an element type (float32, or bf16 with float32 accumulation);
 * Y is float32, or bf16 where the product's kernel can round to it ({@link #applyBf16Output}:
 * cuBLAS in normal mode, the wgmma tiles in deterministic mode).
 *
 * <p>cuBLAS is column-major: a row-major {@code [rows][cols]} matrix is its column-major transpose.
 * So {@code Yᵀ (out × rows) = W (in × out, transposed) · Xᵀ (in × rows)}: op(A) = T with A = W, lda
 * = in; B = X, ldb = in; C = Y, ldc = out.
 *
 * <p>Decode batches (1 to 8 rows) read every weight once for very little arithmetic, so their time
 * is that of streaming W from memory; the project's {@code gemv_bf16} kernel is laid out for
 * exactly that. The system property {@code tokenspeed.cuda.gemv} chooses: {@code on} routes bf16
 * products of 1 to 8 rows with {@code in} a multiple of 8 and 16-byte aligned X and W to it (the
 * default: on an H100 it streams the Llama shapes' weights as fast as cuBLAS or faster, and a
 * decode step whose products are all the project's own kernels can be replayed as a CUDA graph),
 * {@code off} keeps every product on cuBLAS. It is read once, when the class loads: pass it on the
 * java command line ({@code -Dtokenspeed.cuda.gemv=off}), or through the environment as {@code
 * JAVA_TOOL_OPTIONS=-Dtokenspeed.cuda.gemv=off} where a script builds that command line.
 * Deterministic mode never takes this path: its products stay on the fixed-order kernel whatever
 * the switch says.
 *
 * <p>Deterministic mode's bf16 products (with {@code in} a multiple of 8) run on the tensor cores,
 * on one of two families of kernels that give the same bits, because every output is the same chain
 * of tensor-core steps over k in ascending order in all of them: {@code gemm_fixed_bf16_mma}, 64 ×
 * 128 outputs a block, the slices of k read through registers (v1); and {@code gemm_fixed_tiles}'s
 * kernels fed by a cp.async pipeline, in three block tiles from 128 × 128 ({@code
 * gemm_fixed_bf16_mma_v2_128x128}, prefill's thousands of rows) down to 64 × 64 (a few rows), so
 * that a product of any shape has blocks for every multiprocessor without splitting k ({@link
 * FixedOrderTile}). The system property {@code tokenspeed.cuda.fixedgemm} chooses: {@code v2} (on
 * an H100 the first tiled kernel, a 128 × 256 tile since dropped for 128 × 128, which was faster
 * wherever the rule picked it, was alone 1.1-2.7 times as fast as v1 on every shape measured) sends
 * each product to the tile {@link FixedOrderTile#forShape} picks; {@code v1} keeps every product on
 * the first kernel, the baseline. Choosing by shape keeps deterministic mode's promise only because
 * the bits agree: a row's result still does not depend on the rows beside it. The property is read
 * once, when the class loads, like the one above ({@code -Dtokenspeed.cuda.fixedgemm=v1}).
 *
 * <p>Its third value, {@code wgmma}, sends every deterministic bf16 product ({@code in} a multiple
 * of 8), decode's and prefill's alike, to a third family: {@code gemm_fixed_wgmma}'s kernels, on
 * Hopper's warpgroup instruction {@code wgmma.mma_async}, in six block tiles from 128 × 256 down to
 * 64 × 32 ({@link FixedOrderWgmmaTile}). They agree with each other bit for bit, not with the
 * mma.sync kernels (a wgmma step of 16 k need not round as two mma.sync steps do), so with this
 * value no product of the run goes to v1 or v2. Effective only on compute capability 9.0, where the
 * kernels are compiled for sm_90a ({@link CudaDevice#wgmma}); on any other device {@code wgmma}
 * reads as {@code v2}, so deterministic results there are v2's. It is the default: on an H100 the
 * products of Llama 8B's prefill take 0.84-0.92 of v2's time at 2,048 and 8,192 rows (at 64 rows
 * 1.09-1.17, a cost deterministic decode pays for having one family whatever the batch).
 */
public final class Gemm {

  /** {@code cudaDataType}: float32. */
  public static final int R_32F = 0;

  /** {@code cudaDataType}: bfloat16. */
  public static final int R_16BF = 14;

  /** The system property that turns the few-row kernel on or off (see the class comment). */
  static final String GEMV_PROPERTY = "tokenspeed.cuda.gemv";

  /** Whether few-row bf16 products go to {@code gemv_bf16}: the property, read once. */
  static final boolean GEMV = gemvSwitch(System.getProperty(GEMV_PROPERTY));

  /** The most rows {@code gemv_bf16} takes (GV_ROWS in kernels.cu). */
  static final int GEMV_MAX_ROWS = 8;

  /** Outputs per block of {@code gemv_bf16} (GV_OUTS in kernels.cu). */
  private static final int GEMV_OUTS = 8;

  /** Threads per block of {@code gemv_bf16}: 8 warps (its GEMV_BF16 line in kernels.cu). */
  private static final int GEMV_THREADS = 256;

  /** The few-row kernel {@link #apply} takes. */
  static final String GEMV_KERNEL = "gemv_bf16";

  /** Its twin with 4 warps a block (a candidate, measured by GemvGpuTest). */
  static final String GEMV_W4_KERNEL = "gemv_bf16_w4";

  /** The system property that picks the fixed-order bf16 kernel (see the class comment). */
  static final String FIXED_GEMM_PROPERTY = "tokenspeed.cuda.fixedgemm";

  /**
   * The value of {@link #FIXED_GEMM_PROPERTY} when it is unset: the Hopper kernels, which read as
   * the tiled mma.sync kernels ({@code v2}) on any other device.
   */
  static final String DEFAULT_FIXED_GEMM = "wgmma";

  /**
   * The families of deterministic mode's bf16 product, the values of {@link #FIXED_GEMM_PROPERTY}.
   */
  enum FixedGemm {
    /** {@code gemm_fixed_bf16_mma} for every product. */
    V1,
    /** A tile of {@code gemm_fixed_tiles} by shape ({@link FixedOrderTile}), v1's bits. */
    V2,
    /** A tile of {@code gemm_fixed_wgmma} by shape ({@link FixedOrderWgmmaTile}), its own bits. */
    WGMMA;

    /**
     * The family a device runs when this one is asked for: {@link #WGMMA} only where {@code
     * wgmmaDevice} (compute capability 9.0, {@link CudaDevice#wgmma}), {@link #V2} in its place
     * elsewhere; the others as they are.
     */
    FixedGemm on(boolean wgmmaDevice) {
      return this == WGMMA && !wgmmaDevice ? V2 : this;
    }
  }

  /** The family the switch asks for: the property, read once. */
  static final FixedGemm FIXED_GEMM = fixedGemmSwitch(System.getProperty(FIXED_GEMM_PROPERTY));

  /**
   * The system property that splits k of deterministic mode's wgmma products in parts chosen by the
   * weight's shape ({@link #splitParts}): {@code on} (the default: measured faster than the whole
   * chain in deterministic prefill, chunked prefill and decode, docs/gpu.md) or {@code off}.
   */
  static final String FIXED_SPLIT_PROPERTY = "tokenspeed.cuda.fixedsplit";

  /** Whether the wgmma products split k: the property, read once. */
  static final boolean FIXED_SPLIT =
      !KernelSwitch.read(
          FIXED_SPLIT_PROPERTY, System.getProperty(FIXED_SPLIT_PROPERTY), "on", "off");

  /** The most rows one launch of a split product takes: its parts' buffer holds as many. */
  static final int SPLIT_ROWS = 4096;

  /** Threads a block of {@code gemm_fixed_combine}. */
  private static final int COMBINE_THREADS = 256;

  /** Rows per block of {@code gemm_fixed_bf16_mma} (GT_ROWS in kernels.cu). */
  static final int V1_ROWS = 64;

  /** Outputs per block of {@code gemm_fixed_bf16_mma} (GT_OUTS). */
  static final int V1_OUTS = 128;

  /** Threads per block of {@code gemm_fixed_bf16_mma}. */
  private static final int V1_THREADS = 128;

  /** The first fixed-order bf16 kernel: all of {@code v1}, the fallback of {@code v2}. */
  static final String V1_KERNEL = "gemm_fixed_bf16_mma";

  /** A product kernel's {@code accumulate}: y = x · wᵀ (float32). */
  private static final int STORE = 0;

  /** A product kernel's {@code accumulate}: y += x · wᵀ (float32). */
  private static final int ADD = 1;

  /**
   * A wgmma product kernel's (and {@code gemm_fixed_combine}'s) {@code accumulate}: y = bf16(x ·
   * wᵀ), FIXED_STORE_BF16 of kernels.cu.
   */
  private static final int STORE_BF16 = 2;

  private static final int OP_N = 0;
  private static final int OP_T = 1;
  private static final int COMPUTE_32F = 68;
  private static final int ALGO_DEFAULT = -1;

  private final CudaDevice device;
  private final boolean fixedOrder;

  /** The family of fixed-order bf16 kernels this device runs: {@link #FIXED_GEMM} on it. */
  private final FixedGemm fixedGemm;

  /**
   * Whether products may split k ({@link #FIXED_SPLIT}, or the tests' choice): only on a wgmma
   * device, and the routing ({@link #apply}) splits only with the wgmma family.
   */
  private final boolean split;

  /**
   * The parts' products of a split product: {@link #SPLIT_ROWS} rows, grown by {@link #reserve}.
   */
  private DeviceBuffer partials;

  private final MemorySegment one;
  private final MemorySegment zero;

  /**
   * Products on {@code device}; with {@code fixedOrder}, through the project's {@code gemm_fixed}
   * kernel instead of cuBLAS: every output's sum over {@code in} runs in ascending order whatever
   * the number of rows (no split-K, no algorithm chosen by shape), so a row's result does not
   * depend on the other rows of its launch. Slower than cuBLAS; for deterministic mode.
   */
  public Gemm(CudaDevice device, boolean fixedOrder) {
    this(device, fixedOrder, FIXED_SPLIT);
  }

  /**
   * {@link #Gemm(CudaDevice, boolean)} with the split of k asked for or not, whatever {@link
   * #FIXED_SPLIT} says (tests compare both); it takes effect only with the wgmma family.
   */
  Gemm(CudaDevice device, boolean fixedOrder, boolean split) {
    this.device = device;
    this.fixedOrder = fixedOrder;
    this.fixedGemm = FIXED_GEMM.on(device.wgmma());
    this.split = split && device.wgmma();
    Arena arena = Arena.ofAuto();
    this.one = arena.allocateFrom(ValueLayout.JAVA_FLOAT, 1f);
    this.zero = arena.allocateFrom(ValueLayout.JAVA_FLOAT, 0f);
  }

  /**
   * {@code y = x · wᵀ} ({@code accumulate}: {@code y += x · wᵀ}) on the device's stream.
   *
   * @param type the element type of x and w ({@link #R_32F} or {@link #R_16BF})
   */
  public void apply(
      long x, long w, int type, long y, int rows, int in, int out, boolean accumulate) {
    if (fixedOrder) {
      applyFixedOrder(x, w, type, y, rows, in, out, accumulate ? ADD : STORE);
    } else if (usesGemv(GEMV, fixedOrder, type, rows, in, out, x, w)) {
      applyGemv(x, w, y, rows, in, out, accumulate);
    } else {
      applyCublas(x, w, type, y, rows, in, out, accumulate);
    }
  }

  /**
   * Whether every product of {@code rows} rows of element type {@code type} runs on the project's
   * own kernels rather than cuBLAS: in fixed-order mode (whichever family the {@code fixedgemm}
   * switch picks: v1, v2's tiles and the wgmma tiles are all the project's kernels, launched with
   * no allocation), or on {@code gemv_bf16} (the switch on, bf16, at most {@link #GEMV_MAX_ROWS}
   * rows; the model's dimensions are multiples of 8 and its buffers aligned). A step made only of
   * such launches can be recorded as a CUDA graph.
   */
  public boolean ownKernels(int rows, int type) {
    return fixedOrder || (GEMV && type == R_16BF && rows >= 1 && rows <= GEMV_MAX_ROWS);
  }

  /**
   * Whether {@link #apply} sends a product to {@code gemv_bf16}: only when the switch is on and the
   * mode is not fixed-order (the kernel's sum order is its own, not the fixed-order kernel's, so
   * deterministic mode must not mix the two), for bf16 with 1 to 8 rows (the kernel's most), {@code
   * in} a multiple of 8 and X and W 16-byte aligned (its 16-byte loads) and at least one output.
   * Everything else stays where it was.
   */
  static boolean usesGemv(
      boolean enabled, boolean fixedOrder, int type, int rows, int in, int out, long x, long w) {
    return enabled
        && !fixedOrder
        && type == R_16BF
        && rows >= 1
        && rows <= GEMV_MAX_ROWS
        && in > 0
        && in % 8 == 0
        && out > 0
        && ((x | w) & 15) == 0;
  }

  /**
   * The switch's value: {@code on} or {@code off} (either case, spaces around ignored), {@code on}
   * when unset. Anything else is refused, so that a misspelt switch does not silently measure the
   * other path.
   */
  static boolean gemvSwitch(String value) {
    return KernelSwitch.read(GEMV_PROPERTY, value == null ? "on" : value, "off", "on");
  }

  /**
   * {@code y = x · wᵀ} (or {@code +=}) through {@code gemv_bf16}, whatever the switch: bf16 x and
   * w, float32 y, for the cases {@link #usesGemv} admits. A block per 8 outputs.
   *
   * @throws IllegalArgumentException for rows, {@code in} or pointers the kernel does not take
   */
  void applyGemv(long x, long w, long y, int rows, int in, int out, boolean accumulate) {
    applyGemv(GEMV_KERNEL, x, w, y, rows, in, out, accumulate);
  }

  /**
   * {@link #applyGemv} through {@code kernel}: {@value #GEMV_KERNEL} (8 warps a block, the one
   * {@link #apply} takes) or {@value #GEMV_W4_KERNEL} (4 warps a block; GemvGpuTest times both on
   * the Llama shapes before the routing takes it anywhere).
   */
  void applyGemv(
      String kernel, long x, long w, long y, int rows, int in, int out, boolean accumulate) {
    int threads =
        switch (kernel) {
          case GEMV_KERNEL -> GEMV_THREADS;
          case GEMV_W4_KERNEL -> GEMV_THREADS / 2;
          default -> throw new IllegalArgumentException(kernel + " is no gemv kernel");
        };
    if (!usesGemv(true, false, R_16BF, rows, in, out, x, w)) {
      throw new IllegalArgumentException(
          "gemv_bf16 takes 1 to "
              + GEMV_MAX_ROWS
              + " rows, in a positive multiple of 8, out > 0 and 16-byte aligned x and w: rows="
              + rows
              + ", in="
              + in
              + ", out="
              + out
              + ", x=0x"
              + Long.toHexString(x)
              + ", w=0x"
              + Long.toHexString(w));
    }
    launchProduct(
        kernel,
        Math.ceilDiv(out, GEMV_OUTS),
        1,
        threads,
        0,
        x,
        w,
        y,
        rows,
        in,
        out,
        accumulate ? ADD : STORE);
  }

  /**
   * Whether a product of these arguments can write bf16 outputs ({@link #applyBf16Output}): a bf16
   * product on cuBLAS's route in normal mode (not one {@code gemv_bf16} takes), or on the wgmma
   * family's tiles in deterministic mode ({@code in} a multiple of 8, a Hopper device).
   */
  public boolean writesBf16(long x, long w, int type, int rows, int in, int out) {
    if (type != R_16BF) {
      return false;
    }
    if (!fixedOrder) {
      return !usesGemv(GEMV, false, type, rows, in, out, x, w);
    }
    // a function of the shape's in and the mode alone, never of the rows: deterministic mode's
    // bits must not depend on the batch (on a wgmma device some tile takes every row count)
    return fixedGemm == FixedGemm.WGMMA && in % 8 == 0;
  }

  /**
   * {@code y = bf16(x · wᵀ)}: bf16 x, w and y, float32 accumulation, each sum rounded once (to
   * nearest even) where it is written, as a bf16 linear layer of PyTorch writes its outputs. Half
   * the bytes of a float32 {@code y} to write and to read back: the gate | up product takes it. In
   * normal mode through cuBLAS; in deterministic mode through the wgmma tile (or the split and its
   * combine) {@link #apply} would take, so the bits are those of its float32 sums, rounded, and as
   * independent of the rows beside them.
   *
   * @throws IllegalStateException for a product that cannot ({@link #writesBf16})
   */
  public void applyBf16Output(long x, long w, long y, int rows, int in, int out) {
    if (!writesBf16(x, w, R_16BF, rows, in, out)) {
      throw new IllegalStateException(
          "bf16 outputs come from cuBLAS (normal mode, more than "
              + GEMV_MAX_ROWS
              + " rows or gemv off) or from the wgmma tiles (deterministic mode on Hopper): rows="
              + rows
              + ", in="
              + in
              + ", fixed order "
              + fixedOrder);
    }
    if (fixedOrder) {
      applyFixedOrder(x, w, R_16BF, y, rows, in, out, STORE_BF16);
    } else {
      cublas(x, w, R_16BF, y, R_16BF, rows, in, out, false);
    }
  }

  /**
   * {@code y = x · wᵀ} (or {@code +=}) through cuBLAS's {@code cublasGemmEx}, whatever the switch.
   */
  void applyCublas(
      long x, long w, int type, long y, int rows, int in, int out, boolean accumulate) {
    cublas(x, w, type, y, R_32F, rows, in, out, accumulate);
  }

  /** {@code cublasGemmEx}: y of element type {@code yType}, float32 accumulation. */
  private void cublas(
      long x, long w, int type, long y, int yType, int rows, int in, int out, boolean accumulate) {
    device
        .api()
        .gemmEx(
            device.cublas(),
            OP_T,
            OP_N,
            out,
            rows,
            in,
            one,
            w,
            type,
            in,
            x,
            type,
            in,
            accumulate ? one : zero,
            y,
            yType,
            out,
            COMPUTE_32F,
            ALGO_DEFAULT);
  }

  /**
   * The switch's value: {@code v1}, {@code v2} or {@code wgmma} (any case, spaces around ignored),
   * {@link #DEFAULT_FIXED_GEMM} ({@code wgmma}) when unset. Anything else is refused, so that a
   * misspelt value does not silently measure another kernel.
   */
  static FixedGemm fixedGemmSwitch(String value) {
    int i =
        KernelSwitch.pick(
            FIXED_GEMM_PROPERTY, value == null ? DEFAULT_FIXED_GEMM : value, "v1", "v2", "wgmma");
    return FixedGemm.values()[i];
  }

  /** The family of fixed-order bf16 kernels this instance runs (the switch, on its device). */
  FixedGemm fixedGemm() {
    return fixedGemm;
  }

  /**
   * The name of the bits deterministic mode's bf16 products give on this instance, for the
   * deployment identity: {@code mma} for v1 and v2 (the same bits), {@code wgmma} for Hopper's
   * family, {@code wgmma-split} for it with k in parts ({@link #FIXED_SPLIT}).
   */
  public String fixedOrderBits() {
    if (fixedGemm != FixedGemm.WGMMA) {
      return "mma";
    }
    return splits() ? "wgmma-split" : "wgmma";
  }

  /**
   * The parts k of a wgmma product of {@code in} by {@code out} is split in, with {@code
   * tokenspeed.cuda.fixedsplit} on: 2 where the reduction is at least twice the outputs (Llama's
   * down projection: 14,336 by 4,096) and at least 4 slices of 64 long, else 1. A function of the
   * weight's shape alone, never of the rows: a row's result must not depend on its batch.
   */
  static int splitParts(int in, int out) {
    return in >= 2L * out && Math.ceilDiv(in, FixedOrderWgmmaTile.SLICE_K) >= 4 ? 2 : 1;
  }

  /**
   * Makes room for the parts of a product of {@code in} by {@code out} (a no-op where it does not
   * split): a model reserves every product it runs when it loads, so that no buffer is allocated,
   * or moved, once decode steps are recorded as graphs.
   */
  public void reserve(int in, int out) {
    if (fixedOrder && splits() && splitParts(in, out) > 1) {
      partialsFor(in, out);
    }
  }

  /** Whether {@link #apply}'s fixed-order products split k: the wgmma family with the split on. */
  private boolean splits() {
    return split && fixedGemm == FixedGemm.WGMMA;
  }

  /**
   * The parts' buffer, grown to {@link #SPLIT_ROWS} rows of a product of {@code in} by {@code out}.
   */
  private long partialsFor(int in, int out) {
    long bytes = (long) SPLIT_ROWS * out * splitParts(in, out) * 4;
    if (partials == null || partials.bytes() < bytes) {
      if (partials != null) {
        device.synchronize();
        partials.close();
        partials = null;
      }
      partials = device.allocate(bytes);
    }
    return partials.pointer();
  }

  /** Frees the parts' buffer. */
  public void close() {
    if (partials != null) {
      device.synchronize();
      partials.close();
      partials = null;
    }
  }

  /**
   * The kernel deterministic mode runs a product on, for {@code family} (the switch's family on the
   * device: {@link FixedGemm#on}). For bf16 with {@code in} a multiple of 8: with {@code V2}, the
   * tile {@link FixedOrderTile#forShape} picks for the shape, the GPU's {@code multiprocessors} and
   * its opt-in shared memory per block ({@code sharedBytesPerBlock}); with {@code WGMMA}, the tile
   * {@link FixedOrderWgmmaTile#forShape} picks; with {@code V1}, or where no tile's shared memory
   * fits the device, {@code gemm_fixed_bf16_mma}. Within a family every choice gives the same bits,
   * so the choice by shape keeps a row's result independent of the rows beside it. Otherwise the
   * one-thread-per-output kernels, whatever the switch: {@code gemm_fixed_bf16} ({@code in} not a
   * multiple of 8, which the 16-byte loads of the others need) or {@code gemm_fixed_f32}.
   */
  static String fixedOrderKernel(
      FixedGemm family,
      int type,
      int rows,
      int in,
      int out,
      int multiprocessors,
      int sharedBytesPerBlock) {
    if (type != R_16BF) {
      return "gemm_fixed_f32";
    }
    if (in % 8 != 0) {
      return "gemm_fixed_bf16";
    }
    ProductTile tile =
        fixedOrderTile(family, type, rows, in, out, multiprocessors, sharedBytesPerBlock);
    return tile == null ? V1_KERNEL : tile.kernel();
  }

  /** The tile of {@link #fixedOrderKernel}'s choice, or null where it chooses no tile. */
  private static ProductTile fixedOrderTile(
      FixedGemm family,
      int type,
      int rows,
      int in,
      int out,
      int multiprocessors,
      int sharedBytesPerBlock) {
    if (type != R_16BF || in % 8 != 0) {
      return null;
    }
    return switch (family) {
      case V1 -> null;
      case V2 -> FixedOrderTile.forShape(rows, out, multiprocessors, sharedBytesPerBlock);
      case WGMMA -> FixedOrderWgmmaTile.forShape(rows, out, multiprocessors, sharedBytesPerBlock);
    };
  }

  /**
   * The fixed-order kernels (see {@link #fixedOrderKernel}): bf16 on the tensor cores where {@code
   * in} is a multiple of 8 ({@code gemm_fixed_bf16_mma}, 64 × 128 outputs a block, or a tile of
   * {@link FixedOrderTile}, the same bits; or, with the wgmma family, a tile of {@link
   * FixedOrderWgmmaTile}), else one thread per output ({@code gemm_fixed_f32/bf16}, 16 × 16 tiles).
   */
  private void applyFixedOrder(
      long x, long w, int type, long y, int rows, int in, int out, int mode) {
    int sms = device.multiprocessors();
    int shared = device.sharedBytesPerBlock();
    if (splits() && type == R_16BF && in % 8 == 0 && splitParts(in, out) > 1) {
      split(null, x, w, y, rows, in, out, mode);
      return;
    }
    // the common case, a tile, without going through its kernel's name
    ProductTile tile = fixedOrderTile(fixedGemm, type, rows, in, out, sms, shared);
    if (tile != null) {
      launchTile(tile, x, w, y, rows, in, out, mode);
      return;
    }
    if (mode == STORE_BF16) {
      throw new IllegalStateException("only the wgmma tiles write bf16, not " + rows + " rows");
    }
    boolean accumulate = mode == ADD;
    String kernel = fixedOrderKernel(fixedGemm, type, rows, in, out, sms, shared);
    switch (kernel) {
      case V1_KERNEL -> applyFixedOrderV1(x, w, y, rows, in, out, accumulate);
      case "gemm_fixed_f32", "gemm_fixed_bf16" ->
          launchProduct(
              kernel,
              Math.ceilDiv(out, 16),
              Math.ceilDiv(rows, 16),
              256,
              0,
              x,
              w,
              y,
              rows,
              in,
              out,
              accumulate ? ADD : STORE);
      default -> throw new IllegalStateException("no tile was chosen, yet " + kernel);
    }
  }

  /**
   * {@code y = x · wᵀ} (or {@code +=}) through {@code gemm_fixed_bf16_mma}, whatever the switch:
   * bf16 x and w (16-byte aligned), {@code in} a multiple of 8, float32 y.
   */
  void applyFixedOrderV1(long x, long w, long y, int rows, int in, int out, boolean accumulate) {
    launchProduct(
        V1_KERNEL,
        Math.ceilDiv(out, V1_OUTS),
        Math.ceilDiv(rows, V1_ROWS),
        V1_THREADS,
        0,
        x,
        w,
        y,
        rows,
        in,
        out,
        accumulate ? ADD : STORE);
  }

  /**
   * {@code y = x · wᵀ} (or {@code +=}) through the kernel of {@code tile}, whatever the switch and
   * the shape: for a {@link FixedOrderTile}, the same bits as {@link #applyFixedOrderV1}; for a
   * {@link FixedOrderWgmmaTile} (a device with {@link CudaDevice#wgmma} only), the same bits as
   * every other wgmma tile. Its blocks form one dimension of grid (the kernel orders the tiles
   * itself).
   */
  void applyFixedOrderTile(
      ProductTile tile, long x, long w, long y, int rows, int in, int out, boolean accumulate) {
    launchTile(tile, x, w, y, rows, in, out, accumulate ? ADD : STORE);
  }

  private void launchTile(
      ProductTile tile, long x, long w, long y, int rows, int in, int out, int mode) {
    launchProduct(
        tile.kernel(),
        Math.toIntExact(tile.blocks(rows, out)),
        1,
        tile.threads(),
        tile.sharedBytes(),
        x,
        w,
        y,
        rows,
        in,
        out,
        mode);
  }

  /**
   * {@code y = x · wᵀ} (or {@code +=}) with k in {@link #splitParts} parts: for each run of up to
   * {@link #SPLIT_ROWS} rows, the wgmma tile {@code tile} (null: the one {@link
   * FixedOrderWgmmaTile#forShape} picks for the run's blocks times the parts) writes every part's
   * product into the parts' buffer ({@code gemm_fixed_wgmma} with a grid of the parts in y), then
   * {@code gemm_fixed_combine} adds them in part order into y. Every tile and every cut of the rows
   * give the same bits. Wgmma devices only; the buffer grows here if {@link #reserve} was not
   * called for the shape.
   */
  void applyFixedOrderSplit(
      FixedOrderWgmmaTile tile,
      long x,
      long w,
      long y,
      int rows,
      int in,
      int out,
      boolean accumulate) {
    split(tile, x, w, y, rows, in, out, accumulate ? ADD : STORE);
  }

  /** {@link #applyFixedOrderSplit} with the combine's {@code mode}: STORE, ADD or STORE_BF16. */
  private void split(
      FixedOrderWgmmaTile tile, long x, long w, long y, int rows, int in, int out, int mode) {
    if (!split) {
      throw new IllegalStateException("the split of k runs on a wgmma device, asked for");
    }
    int parts = splitParts(in, out);
    long buffer = partialsFor(in, out);
    int sms = device.multiprocessors();
    int shared = device.sharedBytesPerBlock();
    int ySize = mode == STORE_BF16 ? 2 : 4;
    for (int r0 = 0; r0 < rows; r0 += SPLIT_ROWS) {
      int n = Math.min(SPLIT_ROWS, rows - r0);
      FixedOrderWgmmaTile t =
          tile != null ? tile : FixedOrderWgmmaTile.forShape(n, out, parts, sms, shared);
      launchProduct(
          t.kernel(),
          Math.toIntExact(t.blocks(n, out)),
          parts,
          t.threads(),
          t.sharedBytes(),
          x + (long) r0 * in * 2,
          w,
          buffer,
          n,
          in,
          out,
          STORE);
      long outputs = (long) n * out;
      int blocks = Math.toIntExact(Math.min(Math.ceilDiv(outputs, COMBINE_THREADS), 8L * sms));
      device.launch(
          "gemm_fixed_combine",
          blocks,
          1,
          COMBINE_THREADS,
          0,
          buffer,
          y + (long) r0 * out * ySize,
          outputs,
          parts,
          mode);
    }
  }

  /**
   * Launches a product kernel: every one takes {@code (x, w, y, rows, in, out, accumulate)}, its
   * accumulate a mode ({@link #STORE}, {@link #ADD}, or {@link #STORE_BF16} for the wgmma tiles).
   */
  private void launchProduct(
      String kernel,
      int gridX,
      int gridY,
      int threads,
      int sharedBytes,
      long x,
      long w,
      long y,
      int rows,
      int in,
      int out,
      int mode) {
    device.launch(kernel, gridX, gridY, threads, sharedBytes, x, w, y, rows, in, out, mode);
  }
}

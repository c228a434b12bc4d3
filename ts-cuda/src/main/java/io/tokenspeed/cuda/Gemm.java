package io.tokenspeed.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Locale;

/**
 * Row-major matrix products through cuBLAS (or, in deterministic mode, a fixed-order kernel):
 * {@code Y[rows][out] = X[rows][in] · Wᵀ (+ Y)} for a weight matrix {@code W[out][in]} as
 * checkpoints store it. X and W share an element type (float32, or bf16 with float32 accumulation);
 * Y is float32.
 *
 * <p>cuBLAS is column-major: a row-major {@code [rows][cols]} matrix is its column-major transpose.
 * So {@code Yᵀ (out × rows) = W (in × out, transposed) · Xᵀ (in × rows)}: op(A) = T with A = W, lda
 * = in; B = X, ldb = in; C = Y, ldc = out.
 *
 * <p>Decode batches (1 to 8 rows) read every weight once for very little arithmetic, so their time
 * is that of streaming W from memory; the project's {@code gemv_bf16} kernel is laid out for
 * exactly that. The system property {@code tokenspeed.cuda.gemv} chooses: {@code on} routes bf16
 * products of 1 to 8 rows with {@code in} a multiple of 8 and 16-byte aligned X and W to it, {@code
 * off} (the default, until it has been measured against cuBLAS on the GPU) keeps every product on
 * cuBLAS. It is read once, when the class loads: pass it on the java command line ({@code
 * -Dtokenspeed.cuda.gemv=on}), or through the environment as {@code
 * JAVA_TOOL_OPTIONS=-Dtokenspeed.cuda.gemv=on} where a script builds that command line (as {@code
 * bin/test-gpu --bench} does). Deterministic mode never takes this path: its products stay on the
 * fixed-order kernel whatever the switch says.
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

  /** Threads per block of {@code gemv_bf16} (GV_WARPS · 32 in kernels.cu). */
  private static final int GEMV_THREADS = 256;

  private static final int OP_N = 0;
  private static final int OP_T = 1;
  private static final int COMPUTE_32F = 68;
  private static final int ALGO_DEFAULT = -1;

  private final CudaDevice device;
  private final boolean fixedOrder;
  private final MemorySegment one;
  private final MemorySegment zero;

  /**
   * Products on {@code device}; with {@code fixedOrder}, through the project's {@code gemm_fixed}
   * kernel instead of cuBLAS: every output's sum over {@code in} runs in ascending order whatever
   * the number of rows (no split-K, no algorithm chosen by shape), so a row's result does not
   * depend on the other rows of its launch. Slower than cuBLAS; for deterministic mode.
   */
  public Gemm(CudaDevice device, boolean fixedOrder) {
    this.device = device;
    this.fixedOrder = fixedOrder;
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
      applyFixedOrder(x, w, type, y, rows, in, out, accumulate);
    } else if (usesGemv(GEMV, fixedOrder, type, rows, in, out, x, w)) {
      applyGemv(x, w, y, rows, in, out, accumulate);
    } else {
      applyCublas(x, w, type, y, rows, in, out, accumulate);
    }
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
   * The switch's value: {@code on} or {@code off} (either case, spaces around ignored), {@code off}
   * when unset. Anything else is refused, so that a misspelt switch does not silently measure the
   * other path.
   */
  static boolean gemvSwitch(String value) {
    if (value == null) {
      return false;
    }
    return switch (value.strip().toLowerCase(Locale.ROOT)) {
      case "on" -> true;
      case "off" -> false;
      default ->
          throw new IllegalArgumentException(
              GEMV_PROPERTY + " must be on or off, not \"" + value + "\"");
    };
  }

  /**
   * {@code y = x · wᵀ} (or {@code +=}) through {@code gemv_bf16}, whatever the switch: bf16 x and
   * w, float32 y, for the cases {@link #usesGemv} admits. A block per 8 outputs.
   *
   * @throws IllegalArgumentException for rows, {@code in} or pointers the kernel does not take
   */
  void applyGemv(long x, long w, long y, int rows, int in, int out, boolean accumulate) {
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
    device.launch(
        "gemv_bf16",
        Math.ceilDiv(out, GEMV_OUTS),
        1,
        GEMV_THREADS,
        0,
        x,
        w,
        y,
        rows,
        in,
        out,
        accumulate ? 1 : 0);
  }

  /**
   * {@code y = x · wᵀ} (or {@code +=}) through cuBLAS's {@code cublasGemmEx}, whatever the switch.
   */
  void applyCublas(
      long x, long w, int type, long y, int rows, int in, int out, boolean accumulate) {
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
            R_32F,
            out,
            COMPUTE_32F,
            ALGO_DEFAULT);
  }

  /**
   * The fixed-order kernels: bf16 on the tensor cores ({@code gemm_fixed_bf16_mma}, 64 × 128
   * outputs a block, k in ascending slices of 32) where {@code in} is a multiple of 8, else one
   * thread per output ({@code gemm_fixed_f32/bf16}, 16 × 16 tiles).
   */
  private void applyFixedOrder(
      long x, long w, int type, long y, int rows, int in, int out, boolean accumulate) {
    int acc = accumulate ? 1 : 0;
    if (type == R_16BF && in % 8 == 0) {
      device.launch(
          "gemm_fixed_bf16_mma",
          Math.ceilDiv(out, 128),
          Math.ceilDiv(rows, 64),
          128,
          0,
          x,
          w,
          y,
          rows,
          in,
          out,
          acc);
      return;
    }
    device.launch(
        type == R_16BF ? "gemm_fixed_bf16" : "gemm_fixed_f32",
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
        acc);
  }
}

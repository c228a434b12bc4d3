package io.tokenspeed.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Row-major matrix products through cuBLAS (or, in deterministic mode, a fixed-order kernel):
 * {@code Y[rows][out] = X[rows][in] · Wᵀ (+ Y)} for a weight matrix {@code W[out][in]} as
 * checkpoints store it. X and W share an element type (float32, or bf16 with float32 accumulation);
 * Y is float32.
 *
 * <p>cuBLAS is column-major: a row-major {@code [rows][cols]} matrix is its column-major transpose.
 * So {@code Yᵀ (out × rows) = W (in × out, transposed) · Xᵀ (in × rows)}: op(A) = T with A = W, lda
 * = in; B = X, ldb = in; C = Y, ldc = out.
 */
public final class Gemm {

  /** {@code cudaDataType}: float32. */
  public static final int R_32F = 0;

  /** {@code cudaDataType}: bfloat16. */
  public static final int R_16BF = 14;

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
      return;
    }
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

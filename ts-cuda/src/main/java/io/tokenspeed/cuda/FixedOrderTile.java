package io.tokenspeed.cuda;

/**
 * The block tiles of deterministic mode's second fixed-order bf16 product, one kernel each of
 * {@code gemm_fixed_tiles} in {@code kernels.cu} (its {@code GEMM_FIXED_V2} lines, which these
 * constants repeat), largest first, and the rule that picks one for a product's shape ({@link
 * #forShape}).
 *
 * <p>Every tile gives {@code gemm_fixed_bf16_mma}'s bits for every output: an output is one chain
 * of {@code mma.sync} steps over k = 0, 16, 32, … into one float32 accumulator whatever the block's
 * tile, warps or pipeline depth, and no tile splits k. So the choice may follow the shape (the
 * number of rows of the batch included) without a row's result depending on the rows beside it.
 *
 * <pre>
 *   tile       kernel                           warps        stages  shared   blocks / SM (sm_90)
 *   128 × 128  gemm_fixed_bf16_mma_v2_128x128   2 × 2 of 64 × 64   3    96 KiB  2
 *    64 × 128  gemm_fixed_bf16_mma_v2_64x128    2 × 2 of 32 × 64   4    96 KiB  2
 *    64 × 64   gemm_fixed_bf16_mma_v2_64x64     2 × 2 of 32 × 32   4    64 KiB  3
 * </pre>
 *
 * <p>Why several tiles: no tile splits k, so a product has only as many blocks as output tiles, and
 * each block's k loop is as long as {@code in}. The first tiled kernel had one tile, 128 × 256 (8
 * warps of 64 × 64, 4 stages, 192 KiB): 512 rows of Llama 8B's down projection (4,096 outputs) made
 * 64 blocks of it on 132 multiprocessors, half of them idle for the whole loop of 14,336 k; in
 * tiles of 128 × 128 the same product makes 128 blocks.
 *
 * <p>Why not 128 × 256 any more: {@code FixedGemmV2GpuTest} timed every tile on an H100 and an H200
 * (GPU suite, 2026-12-06) on 40 shapes each (1 to 8,192 rows of Llama 8B's qkv, o, gate|up and
 * down). 128 × 256 was the fastest tile on 1 shape of 40 on each card (128 rows of gate|up), and
 * wherever this rule picked it, 128 × 128 was 8-14 % faster. Replaying the H100's times, the rule
 * over four tiles took 1.075 times the fastest tile's time summed over the shapes, the same rule
 * over the three left 1.006. So the largest tile is 128 × 128 (see
 * docs/benchmarks/2026-12-06-gpu-kernels-and-serving.md).
 */
enum FixedOrderTile implements ProductTile {
  T128X128("gemm_fixed_bf16_mma_v2_128x128", 128, 128, 4, 3),
  T64X128("gemm_fixed_bf16_mma_v2_64x128", 64, 128, 4, 4),
  T64X64("gemm_fixed_bf16_mma_v2_64x64", 64, 64, 4, 4);

  /** k per slice of the ring (F2_K in kernels.cu). */
  static final int SLICE_K = 64;

  /** The kernel's name in {@code kernels.cu}. */
  final String kernel;

  /** Rows of x per block. */
  final int rows;

  /** Outputs (rows of w) per block. */
  final int outs;

  /** Threads per block: 32 per warp. */
  final int threads;

  /** Slices of {@link #SLICE_K} in the ring. */
  final int stages;

  FixedOrderTile(String kernel, int rows, int outs, int warps, int stages) {
    this.kernel = kernel;
    this.rows = rows;
    this.outs = outs;
    this.threads = 32 * warps;
    this.stages = stages;
  }

  @Override
  public String kernel() {
    return kernel;
  }

  @Override
  public int tileRows() {
    return rows;
  }

  @Override
  public int threads() {
    return threads;
  }

  /**
   * Dynamic shared memory of a block: {@code stages} slices of {@link #SLICE_K} k for its x rows
   * and w rows, bf16 ({@link CudaDevice#launch} raises the kernel's limit above 48 KiB).
   */
  @Override
  public int sharedBytes() {
    return stages * (rows + outs) * SLICE_K * 2;
  }

  @Override
  public int tileOuts() {
    return outs;
  }

  /**
   * The tile whose kernel is {@code kernel}.
   *
   * @throws IllegalArgumentException for a name that is none of theirs
   */
  static FixedOrderTile ofKernel(String kernel) {
    return ProductTile.ofKernel(values(), kernel, "gemm_fixed_tiles");
  }

  /**
   * The rule ({@link ProductTile#largestThatFills} over these tiles): among the tiles whose shared
   * memory fits {@code sharedBytesPerBlock} (the device's opt-in limit per block: 227 KiB on sm_90,
   * 163 KiB on sm_80, 99 KiB on sm_86 and sm_89) and that are not too tall for the rows, the
   * largest whose blocks fill the GPU (at least {@link ProductTile#FULL_WAVE_TENTHS} tenths of
   * {@code multiprocessors}), else the smallest. A tile is too tall when half of it holds the rows
   * and a shorter tile exists: 64 rows or fewer (decode batches) never take the 128-row tiles,
   * whose other half would be padding multiplied for nothing. Null when no tile fits the shared
   * memory: the caller keeps {@code gemm_fixed_bf16_mma}.
   *
   * <p>Rows and outputs of any count are taken (edges are zero-filled and never written); {@code
   * in} must be a multiple of 8 and x and w 16-byte aligned, as for {@code gemm_fixed_bf16_mma}.
   */
  static FixedOrderTile forShape(int rows, int out, int multiprocessors, int sharedBytesPerBlock) {
    return ProductTile.largestThatFills(values(), rows, out, multiprocessors, sharedBytesPerBlock);
  }
}

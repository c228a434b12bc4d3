package io.tokenspeed.cuda;

/**
 * The block tiles of deterministic mode's wgmma family of fixed-order bf16 products, one kernel
 * each of {@code gemm_fixed_wgmma} in {@code kernels.cu} (its {@code GEMM_FIXED_WGMMA} lines, which
 * these constants repeat), largest first, and the rule that picks one for a product's shape ({@link
 * #forShape}). Hopper only: the kernels use {@code wgmma.mma_async}, which exists on the sm_90a
 * target alone ({@link CudaDevice#wgmma}); {@link Gemm} sends products here on such a device unless
 * {@code -Dtokenspeed.cuda.fixedgemm} names v1 or v2.
 *
 * <p>Every tile gives the same bits for every output: an output is one chain of {@code wgmma
 * m64nNk16} steps over k = 0, 16, 32, … (ceil(in / 16) of them) into one float32 accumulator
 * whatever the tile, its warpgroups, the block's position or the ring's depth, and no tile splits
 * k. So the choice may follow the shape (the number of rows of the batch included) without a row's
 * result depending on the rows beside it. These bits are not those of the mma.sync tiles ({@link
 * FixedOrderTile}, {@code gemm_fixed_bf16_mma}): a run sends every product to one family.
 *
 * <pre>
 *   tile       kernel                     warpgroups         wgmma      stages  shared   blocks / SM
 *   128 × 256  gemm_fixed_wgmma_128x256   2 of 64 × 256      m64n256k16   4     193 KiB  1
 *   128 × 128  gemm_fixed_wgmma_128x128   2 of 64 × 128      m64n128k16   3      97 KiB  2
 *    64 × 128  gemm_fixed_wgmma_64x128    1 of 64 × 128      m64n128k16   4      97 KiB  2
 *    64 × 64   gemm_fixed_wgmma_64x64     1 of 64 × 64       m64n64k16    6      97 KiB  2
 *    64 × 32   gemm_fixed_wgmma_64x32     1 of 64 × 32       m64n32k16    8      97 KiB  2
 * </pre>
 *
 * <p>(Shared memory: the stages of 64 k, {@code (rows + outs) · 128} bytes each, and 1 KiB to align
 * the ring to the 1,024 bytes of the 128-byte swizzle's pattern.) The largest tile is the shape the
 * fastest published Hopper GEMMs use (two consumer warpgroups of m64n256k16); it fills the GPU only
 * from about a thousand rows (o and down at 1,024 rows: 128 blocks). Below that the smaller tiles
 * give the product enough blocks without splitting k, down to 64 × 32 for decode batches, which are
 * bound by reading w once: 4,096 outputs make 128 blocks of 64 × 32 and only 64 of 64 × 64.
 *
 * <p>The rule ({@link #forShape}) is the mma.sync family's ({@link ProductTile#largestThatFills}):
 * the largest tile whose blocks fill the GPU, never a 128-row tile for 64 rows or fewer. On an H100
 * (132 multiprocessors) the Llama 8B projections go, as the rows double, through 64 × 32 (up to 64
 * rows), 64 × 64 (128), 64 × 128 (256), 128 × 128 (512) and 128 × 256 (from 1,024) for qkv (6,144
 * outputs), o and down (4,096 outputs: 128 blocks at each step from 64 rows on); gate|up (28,672
 * outputs) takes 64 × 128 up to 64 rows, 128 × 128 at 128 and 128 × 256 from 256. Not yet measured:
 * FixedGemmWgmmaGpuTest prints every tile's time on the Llama 8B shapes, against which the rule is
 * to be checked.
 */
enum FixedOrderWgmmaTile implements ProductTile {
  T128X256("gemm_fixed_wgmma_128x256", 2, 256, 4),
  T128X128("gemm_fixed_wgmma_128x128", 2, 128, 3),
  T64X128("gemm_fixed_wgmma_64x128", 1, 128, 4),
  T64X64("gemm_fixed_wgmma_64x64", 1, 64, 6),
  T64X32("gemm_fixed_wgmma_64x32", 1, 32, 8);

  /** k per slice of the ring (FW_K in kernels.cu): one 128-byte swizzled row per operand row. */
  static final int SLICE_K = 64;

  /** Shared memory a block asks for beyond its stages, to align them to 1,024 bytes. */
  static final int ALIGNMENT_BYTES = 1024;

  /** The kernel's name in {@code kernels.cu}. */
  final String kernel;

  /** Warpgroups (128 threads each) per block, each of 64 rows. */
  final int warpgroups;

  /** Rows of x per block: 64 per warpgroup. */
  final int rows;

  /** Outputs (rows of w) per block: the N of each warpgroup's wgmma. */
  final int outs;

  /** Slices of {@link #SLICE_K} in the ring. */
  final int stages;

  FixedOrderWgmmaTile(String kernel, int warpgroups, int outs, int stages) {
    this.kernel = kernel;
    this.warpgroups = warpgroups;
    this.rows = 64 * warpgroups;
    this.outs = outs;
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
    return 128 * warpgroups;
  }

  /**
   * Dynamic shared memory of a block: {@code stages} slices of {@link #SLICE_K} k for its x rows
   * and w rows, bf16, and {@link #ALIGNMENT_BYTES} ({@link CudaDevice#launch} raises the kernel's
   * limit above 48 KiB).
   */
  @Override
  public int sharedBytes() {
    return stages * (rows + outs) * SLICE_K * 2 + ALIGNMENT_BYTES;
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
  static FixedOrderWgmmaTile ofKernel(String kernel) {
    return ProductTile.ofKernel(values(), kernel, "gemm_fixed_wgmma");
  }

  /**
   * The rule, {@link ProductTile#largestThatFills} over these tiles: among the tiles whose shared
   * memory fits {@code sharedBytesPerBlock} (all of them on sm_90, 227 KiB) and that are not too
   * tall for the rows (64 rows or fewer never take a 128-row tile), the largest whose blocks number
   * at least {@link ProductTile#FULL_WAVE_TENTHS} tenths of {@code multiprocessors}, else the
   * smallest; null when none fits. No tile splits k, so a product has only as many blocks as output
   * tiles: the largest tile that still gives every multiprocessor a block reuses each operand the
   * most without leaving the GPU idle.
   *
   * <p>Rows and outputs of any count are taken (edges are zero-filled and never written); {@code
   * in} must be a multiple of 8 and x and w 16-byte aligned.
   */
  static FixedOrderWgmmaTile forShape(
      int rows, int out, int multiprocessors, int sharedBytesPerBlock) {
    return ProductTile.largestThatFills(values(), rows, out, multiprocessors, sharedBytesPerBlock);
  }
}

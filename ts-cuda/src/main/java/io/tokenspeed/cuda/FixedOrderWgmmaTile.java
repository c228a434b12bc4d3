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
 *   128 × 192  gemm_fixed_wgmma_128x192   2 of 64 × 192      m64n192k16   4     161 KiB  1
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
 * <p>128 × 192 sits between 128 × 256 and 128 × 128 for the row counts where 128 × 256's last wave
 * runs part-empty (qkv at 512 rows: 96 blocks of 128 × 256 leave 36 of 132 multiprocessors idle,
 * 128 of 128 × 192 fill 128), with more reuse of each operand than 128 × 128. Its slice time was
 * measured on an H100 (build 4061556): 809 to 893 ns a wave and slice over Llama 8B's four products
 * at 8,192 rows, where 128 × 256 took 1,068 to 1,123 in the same run, the widest spread of any tile
 * (gate|up, the widest product, is its slowest). The rule takes the slowest, 893, scaled to the
 * calibration of the other tiles (1,068 / 1,123), 849: with the fastest it would take 8,192 rows of
 * gate|up (73 waves against 55 of 128 × 256), which its measured time makes 7 % slower. A tile
 * enters the rule only once its slice time is measured ({@link #measured}).
 *
 * <p>The rule ({@link #forShape}) estimates each tile's time from its waves: a product of B blocks
 * runs in ⌈B / (blocks a multiprocessor holds · multiprocessors)⌉ waves, each as long as one
 * block's work at that occupancy, measured per slice of 64 k ({@link #sliceNanos}), and it takes
 * the tile of the fewest estimated nanoseconds (the larger on a tie), never a 128-row tile for 64
 * rows or fewer. The slice times come from FixedGemmWgmmaGpuTest's timings on an H100 (8,192 rows
 * of Llama 8B's qkv, where every tile runs many full waves: the time over its waves and slices).
 * Checked against every tile's measured time on the 24 shapes of that test (Llama 8B's four
 * products at 1 to 8,192 rows) in two runs: the rule's picks sum to 10,300 µs where the fastest
 * tiles sum to 10,293 (10,492 against 10,486 in the other run), against 10,340 and 10,550 for the
 * previous rule (the largest tile whose blocks fill nine tenths of the multiprocessors, the
 * mma.sync family's {@link ProductTile#largestThatFills}), which at 512 rows took 128 × 128 where
 * 128 × 256 (qkv) or 64 × 128 (o, down) is 11-18 % faster. On an H100 the Llama 8B projections take
 * 64 × 32 up to 64 rows for qkv, o and down, 64 × 128 for gate|up; at 512 rows 128 × 256 for qkv
 * and gate|up, 64 × 128 for o and down; 128 × 256 from 1,024 rows; with 128 × 192 (see above) it
 * takes qkv at 512 and 1,024 rows and gate|up at 512.
 */
enum FixedOrderWgmmaTile implements ProductTile {
  T128X256("gemm_fixed_wgmma_128x256", 2, 256, 4, 1, 1068, true),
  // measured: its slowest product's slice time, scaled to this calibration (see the class comment)
  T128X192("gemm_fixed_wgmma_128x192", 2, 192, 4, 1, 849, true),
  T128X128("gemm_fixed_wgmma_128x128", 2, 128, 3, 2, 1166, true),
  T64X128("gemm_fixed_wgmma_64x128", 1, 128, 4, 2, 837, true),
  T64X64("gemm_fixed_wgmma_64x64", 1, 64, 6, 2, 592, true),
  T64X32("gemm_fixed_wgmma_64x32", 1, 32, 8, 2, 413, true);

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

  /** Blocks a multiprocessor holds: the kernel's launch bounds (MIN_BLOCKS in kernels.cu). */
  final int blocksPerSm;

  /**
   * Nanoseconds of one wave over one slice of {@link #SLICE_K} k, every multiprocessor holding
   * {@link #blocksPerSm} blocks: measured on an H100 (see the class comment) where {@link
   * #measured}, else an estimate that {@link #forShape} does not use.
   */
  final int sliceNanos;

  /**
   * Whether {@link #sliceNanos} was measured on a GPU: only then does {@link #forShape} consider
   * the tile. A tile not measured is a candidate, run by the GPU tests (bits and times) and by a
   * caller that names it, never picked by the rule.
   */
  final boolean measured;

  FixedOrderWgmmaTile(
      String kernel,
      int warpgroups,
      int outs,
      int stages,
      int blocksPerSm,
      int sliceNanos,
      boolean measured) {
    this.kernel = kernel;
    this.warpgroups = warpgroups;
    this.rows = 64 * warpgroups;
    this.outs = outs;
    this.stages = stages;
    this.blocksPerSm = blocksPerSm;
    this.sliceNanos = sliceNanos;
    this.measured = measured;
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
   * The estimated time of a product of {@code rows} rows and {@code out} outputs, k in {@code
   * parts} parts (1: whole; each part a block of its own), on this tile, per slice of k, in
   * nanoseconds: its waves on {@code multiprocessors} times {@link #sliceNanos}.
   */
  long sliceEstimate(int rows, int out, int parts, int multiprocessors) {
    long slots = (long) blocksPerSm * multiprocessors;
    return Math.ceilDiv(blocks(rows, out) * parts, slots) * sliceNanos;
  }

  /**
   * The rule: among the {@link #measured} tiles that may take the rows ({@link ProductTile#takes}:
   * their shared memory fits {@code sharedBytesPerBlock}, all of them on sm_90 at 227 KiB, and 64
   * rows or fewer never take a 128-row tile), the one of the least {@link #sliceEstimate} (the
   * larger tile on a tie; see the class comment); null when none fits. k does not enter: every tile
   * runs the same slices. Every tile gives the same bits, so the pick changes the time only.
   *
   * <p>Rows and outputs of any count are taken (edges are zero-filled and never written); {@code
   * in} must be a multiple of 8 and x and w 16-byte aligned.
   */
  static FixedOrderWgmmaTile forShape(
      int rows, int out, int multiprocessors, int sharedBytesPerBlock) {
    return forShape(rows, out, 1, multiprocessors, sharedBytesPerBlock);
  }

  /**
   * {@link #forShape(int, int, int, int)} for a product whose k is in {@code parts} parts (each a
   * block of its own: {@code Gemm.splitParts}); the slices of a part are the same for every tile.
   */
  static FixedOrderWgmmaTile forShape(
      int rows, int out, int parts, int multiprocessors, int sharedBytesPerBlock) {
    FixedOrderWgmmaTile[] tiles = values();
    int shortest = ProductTile.shortestRows(tiles);
    FixedOrderWgmmaTile best = null;
    long bestNanos = Long.MAX_VALUE;
    for (FixedOrderWgmmaTile tile : tiles) {
      if (!tile.measured || !ProductTile.takes(tile, shortest, rows, sharedBytesPerBlock)) {
        continue;
      }
      long nanos = tile.sliceEstimate(rows, out, parts, multiprocessors);
      if (nanos < bestNanos) {
        best = tile;
        bestNanos = nanos;
      }
    }
    return best;
  }
}

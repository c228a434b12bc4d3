package io.tokenspeed.cuda;

/**
 * A block tile of one of deterministic mode's tiled bf16 product kernels ({@link FixedOrderTile}
 * for the mma.sync family, {@link FixedOrderWgmmaTile} for the wgmma one): what a launch needs, and
 * the mma.sync family's rule ({@link #largestThatFills}; the wgmma family estimates each tile's
 * waves instead, {@link FixedOrderWgmmaTile#forShape}). Every kernel takes {@code (x, w, y, rows,
 * in, out, accumulate)} on a one-dimensional grid of {@link #blocks} blocks.
 */
interface ProductTile {

  /**
   * A tile fills the GPU when its blocks number at least this share of the multiprocessors, in
   * tenths: 9, so that 128 blocks count as a full wave on 132 multiprocessors (the power-of-two
   * shapes of the Llama family give 128 of a tile where the next smaller tile gives 256). Idle
   * multiprocessors cost at most that tenth of the time; the smaller tile would pay instead with
   * less reuse of each operand it loads (by how much, the families' GPU tests measure).
   */
  int FULL_WAVE_TENTHS = 9;

  /** The kernel's name in {@code kernels.cu}. */
  String kernel();

  /** Rows of x per block. */
  int tileRows();

  /** Threads per block. */
  int threads();

  /** Dynamic shared memory of a block, in bytes. */
  int sharedBytes();

  /** Outputs (rows of w) per block. */
  int tileOuts();

  /** Blocks of a product of {@code rows} rows and {@code out} outputs: one per output tile. */
  default long blocks(int rows, int out) {
    return (long) Math.ceilDiv(rows, tileRows()) * Math.ceilDiv(out, tileOuts());
  }

  /**
   * The tile of {@code tiles} whose kernel is {@code kernel}.
   *
   * @throws IllegalArgumentException for a name that is none of theirs, naming {@code family}
   */
  static <T extends ProductTile> T ofKernel(T[] tiles, String kernel, String family) {
    for (T tile : tiles) {
      if (tile.kernel().equals(kernel)) {
        return tile;
      }
    }
    throw new IllegalArgumentException("kernel=" + kernel + " is no tile of " + family);
  }

  /**
   * The rule: among {@code tiles} (largest first) whose shared memory fits {@code
   * sharedBytesPerBlock} (the device's opt-in limit per block) and that are not too tall for the
   * rows, the largest whose blocks fill the GPU (at least {@link #FULL_WAVE_TENTHS} tenths of
   * {@code multiprocessors}), else the smallest. A tile is too tall when half of it holds the rows
   * and a shorter tile exists: 64 rows or fewer (decode batches) never take a 128-row tile, whose
   * other half would be padding multiplied for nothing. Null when no tile fits the shared memory.
   */
  static <T extends ProductTile> T largestThatFills(
      T[] tiles, int rows, int out, int multiprocessors, int sharedBytesPerBlock) {
    int shortest = shortestRows(tiles);
    T smallest = null;
    for (T tile : tiles) {
      if (!takes(tile, shortest, rows, sharedBytesPerBlock)) {
        continue;
      }
      if (10 * tile.blocks(rows, out) >= (long) FULL_WAVE_TENTHS * multiprocessors) {
        return tile;
      }
      smallest = tile;
    }
    return smallest;
  }

  /** The fewest rows a tile of {@code tiles} has. */
  static int shortestRows(ProductTile[] tiles) {
    int shortest = Integer.MAX_VALUE;
    for (ProductTile t : tiles) {
      shortest = Math.min(shortest, t.tileRows());
    }
    return shortest;
  }

  /**
   * Whether {@code tile} may take a product of {@code rows} rows, {@code shortest} being the fewest
   * rows of its family's tiles ({@link #shortestRows}): its shared memory fits {@code
   * sharedBytesPerBlock} and it is not too tall for the rows (half of it holds them while a shorter
   * tile exists: 64 rows or fewer never take a 128-row tile, whose other half would be padding
   * multiplied for nothing).
   */
  static boolean takes(ProductTile tile, int shortest, int rows, int sharedBytesPerBlock) {
    boolean tooTall = tile.tileRows() > shortest && 2L * rows <= tile.tileRows();
    return !tooTall && tile.sharedBytes() <= sharedBytesPerBlock;
  }
}

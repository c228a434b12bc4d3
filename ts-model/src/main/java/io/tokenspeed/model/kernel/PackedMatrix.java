package io.tokenspeed.model.kernel;

import io.tokenspeed.model.checkpoint.Tensor;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * A weight matrix {@code W [out][in]} as {@link MatMul} reads it: column panels of {@link #PANEL}
 * outputs, each stored input-major, float32, off the heap.
 *
 * <pre>
 *   W (as mapped, [out][in], F32/BF16/F16)      packed (float32, 64-byte aligned)
 *     row o = W[o][0..in)                         panel p = outputs p·N .. p·N+N-1   (N = PANEL)
 *                                                   k = 0:    W[pN][0]  W[pN+1][0]  ... W[pN+N-1][0]
 *                                                   k = 1:    W[pN][1]  W[pN+1][1]  ...
 *                                                   ...
 *                                                   k = in-1: ...
 *   the last panel is padded with zero columns up to N
 * </pre>
 *
 * <p>In this form one step of the multiply reads {@code N} consecutive weights that belong to
 * {@code N} different outputs, so the vector lanes run over outputs and each output's sum is a
 * plain sequential chain over {@code k} (see {@link MatMul}).
 *
 * <p>The checkpoint stays memory-mapped; the packed copy is made once, on the first multiply (a
 * planning run that never multiplies allocates nothing), in parallel on the caller's pool, and
 * lives off the heap until the matrix is unreachable. BF16 and F16 widen exactly to float32, so a
 * packed BF16 matrix multiplies exactly as the same values stored as F32.
 */
public final class PackedMatrix {
  /** Outputs per panel: four vectors of the kernels' species. */
  public static final int PANEL = 4 * VectorMath.SPECIES.length();

  private final Tensor source;
  private final int rowFrom;
  private final int colFrom;
  private final int out;
  private final int in;
  private final int panels;
  private volatile MemorySegment[] packed;

  private PackedMatrix(Tensor source, int rowFrom, int rows, int colFrom, int cols) {
    if (source.rank() != 2) {
      throw new IllegalArgumentException(
          "weight " + source.name() + " rank=" + source.rank() + " must be 2");
    }
    if (rowFrom < 0
        || rows < 1
        || rowFrom + rows > source.dim(0)
        || colFrom < 0
        || cols < 1
        || colFrom + cols > source.dim(1)) {
      throw new IllegalArgumentException(
          "weight "
              + source.name()
              + " "
              + java.util.Arrays.toString(source.shape())
              + " has no block of rows ["
              + rowFrom
              + ", "
              + (rowFrom + rows)
              + ") and columns ["
              + colFrom
              + ", "
              + (colFrom + cols)
              + ")");
    }
    this.source = source;
    this.rowFrom = rowFrom;
    this.colFrom = colFrom;
    this.out = rows;
    this.in = cols;
    this.panels = (out + PANEL - 1) / PANEL;
  }

  /** The matrix {@code w} ({@code [out][in]}), packed on its first multiply. */
  public static PackedMatrix of(Tensor w) {
    return new PackedMatrix(w, 0, w.rank() == 2 ? w.dim(0) : 0, 0, w.rank() == 2 ? w.dim(1) : 0);
  }

  /**
   * The block of {@code w} ({@code [out][in]}) of rows {@code [rowFrom, rowFrom + rows)} and
   * columns {@code [colFrom, colFrom + cols)}: a tensor-parallel rank's share of a weight. Only the
   * block is packed; the checkpoint stays mapped whole.
   */
  public static PackedMatrix block(Tensor w, int rowFrom, int rows, int colFrom, int cols) {
    return new PackedMatrix(w, rowFrom, rows, colFrom, cols);
  }

  public String name() {
    return source.name();
  }

  /** True when this is the whole tensor, not a block of it. */
  public boolean whole() {
    return out == source.dim(0) && in == source.dim(1);
  }

  /** {@code dim(0)} is the output count, {@code dim(1)} the input width. */
  public int dim(int i) {
    return switch (i) {
      case 0 -> out;
      case 1 -> in;
      default -> throw new IndexOutOfBoundsException("dim " + i + " of a matrix");
    };
  }

  /** Column panels of {@link #PANEL} outputs. */
  int panels() {
    return panels;
  }

  /** The packed panels, one segment each, packing them on {@code pool} the first time. */
  MemorySegment[] panelsOn(ComputePool pool) {
    MemorySegment[] s = packed;
    if (s == null) {
      synchronized (this) {
        s = packed;
        if (s == null) {
          s = pack(pool);
          packed = s;
        }
      }
    }
    return s;
  }

  /**
   * Each thread allocates and fills the panels of its own range, so the fresh pages are first
   * touched (zeroed by the allocation) in parallel too.
   */
  private MemorySegment[] pack(ComputePool pool) {
    long panelBytes = Math.max((long) in * PANEL * Float.BYTES, Float.BYTES);
    MemorySegment[] segs = new MemorySegment[panels];
    pool.parallelFor(
        panels,
        (from, to) -> {
          MemorySegment range = Arena.ofAuto().allocate(panelBytes * (to - from), 64);
          float[] row = new float[in];
          float[] panel = new float[in * PANEL];
          for (int p = from; p < to; p++) {
            java.util.Arrays.fill(panel, 0f);
            int o0 = p * PANEL;
            int n = Math.min(PANEL, out - o0);
            for (int c = 0; c < n; c++) {
              source.readFloats((long) (rowFrom + o0 + c) * source.dim(1) + colFrom, row, 0, in);
              for (int k = 0; k < in; k++) {
                panel[k * PANEL + c] = row[k];
              }
            }
            segs[p] = range.asSlice(panelBytes * (p - from), panelBytes);
            MemorySegment.copy(panel, 0, segs[p], ValueLayout.JAVA_FLOAT, 0, panel.length);
          }
        });
    return segs;
  }

  @Override
  public String toString() {
    return whole()
        ? source.toString()
        : source
            + " rows ["
            + rowFrom
            + ", "
            + (rowFrom + out)
            + ") columns ["
            + colFrom
            + ", "
            + (colFrom + in)
            + ")";
  }
}

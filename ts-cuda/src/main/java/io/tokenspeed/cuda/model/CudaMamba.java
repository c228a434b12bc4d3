package io.tokenspeed.cuda.model;

import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import java.util.Arrays;
import java.util.List;

/**
 * The recurrent half of a Mamba-1 mixer on the GPU: the launches of the Mamba kernels of {@code
 * kernels.cu}, which compute float for float what the CPU path's {@code SelectiveScan} and {@code
 * MambaMixer} compute between the projections (up to the last ulp of the exponentials).
 *
 * <pre>
 *   xz       = in_proj GEMM               [T][xzWidth]: x at column c, z at column gateOffset + c
 *   u        = {@link #conv}                [T][di]      (reads the input checkpoints only)
 *   [δ|B|C]  = x_proj GEMM                  [T][R + 2N]
 *              {@link #splitProj} → δ [T][R], B [T][N], C [T][N]   (where RMSNorm runs on each)
 *   dt       = dt_proj GEMM (no bias), then {@link #softplusBias}   [T][di]
 *   y        = {@link #scan}                [T][di]      (stores the checkpoints)
 *   out      = out_proj GEMM
 * </pre>
 *
 * <p>The requests reach the kernels as device int arrays, built on the host by {@link #requests}
 * and uploaded as one block ({@link Requests#packed}, {@link DeviceRequests#packed}). One thread
 * computes one (request, channel) pair over the request's tokens in order, so a launch's grid is
 * {@code (⌈di / 128⌉, requests)}.
 *
 * <p>Bounds: {@code k <= }{@link #MAX_CONV_KERNEL}; at most {@link #MAX_REQUESTS} requests a
 * launch; a state size up to {@link #REGISTER_STATE} runs {@code mamba_scan_n16} (the state in
 * registers), larger ones {@code mamba_scan} (the state kept in the working slot's memory); both
 * give the same bits. The conv kernel must run before the scan of the same layer: the scan
 * overwrites the working slot, which may be the input slot the conv reads.
 */
public final class CudaMamba {
  private CudaMamba() {}

  /**
   * The most convolution taps the kernels take ({@code MAMBA_MAX_CONV}: the window in registers).
   */
  public static final int MAX_CONV_KERNEL = 8;

  /** The largest state size that {@code mamba_scan_n16} (the state in registers) takes. */
  public static final int REGISTER_STATE = 16;

  /** The most requests of one launch: the grid's y dimension. */
  public static final int MAX_REQUESTS = 65_535;

  /** Threads of a block of the conv and scan kernels: one a channel. */
  static final int THREADS = 128;

  /** Threads of a block of the elementwise kernels. */
  static final int ELEMENTWISE_THREADS = 256;

  /**
   * One Mamba layer's state inside the device State pool (the CacheLayout of the CPU path: slot
   * {@code s} at {@code pool + s·bytesPerSlot}, this layer's {@code conv} field {@code
   * [channel][k-1]} and {@code ssm} field {@code [channel][stateSize]}, float32).
   *
   * @param pool device address of the group's slot 0
   * @param bytesPerSlot bytes of one slot (all layers)
   * @param convOffset byte offset of this layer's conv field in a slot
   * @param ssmOffset byte offset of this layer's ssm field in a slot
   * @param innerSize channels di
   * @param stateSize N
   * @param convKernel taps k, 1 to {@link #MAX_CONV_KERNEL}
   * @param pageTokens P: a checkpoint at every multiple of P
   */
  public record LayerState(
      long pool,
      long bytesPerSlot,
      long convOffset,
      long ssmOffset,
      int innerSize,
      int stateSize,
      int convKernel,
      int pageTokens) {

    public LayerState {
      positive("inner_size", innerSize);
      positive("state_size", stateSize);
      positive("page_tokens", pageTokens);
      if (convKernel < 1 || convKernel > MAX_CONV_KERNEL) {
        throw new IllegalArgumentException(
            "conv_kernel=" + convKernel + " outside [1, " + MAX_CONV_KERNEL + "]");
      }
      if (bytesPerSlot <= 0 || bytesPerSlot % Float.BYTES != 0) {
        throw new IllegalArgumentException(
            "bytes_per_slot=" + bytesPerSlot + " must be a positive multiple of 4");
      }
      field("conv", convOffset, (long) innerSize * (convKernel - 1) * Float.BYTES, bytesPerSlot);
      field("ssm", ssmOffset, (long) innerSize * stateSize * Float.BYTES, bytesPerSlot);
    }

    private static void field(String name, long offset, long bytes, long bytesPerSlot) {
      if (offset < 0 || offset % Float.BYTES != 0 || offset + bytes > bytesPerSlot) {
        throw new IllegalArgumentException(
            name
                + "_offset="
                + offset
                + " with "
                + bytes
                + " bytes must be a multiple of 4 inside bytes_per_slot="
                + bytesPerSlot);
      }
    }
  }

  /**
   * A batch's requests as the kernels read them; rows are laid out request after request, in the
   * batch's order.
   *
   * @param firstRow the batch row of each request's first token
   * @param numTokens tokens of each request
   * @param startPosition position of each request's first token
   * @param tables the state tables, request r's row i at {@code r·tableStride + i} (a slot, 0: no
   *     checkpoint wanted; 0 also past a request's own table)
   * @param tableStride entries a request
   */
  public record Requests(
      int[] firstRow, int[] numTokens, int[] startPosition, int[] tables, int tableStride) {

    public Requests {
      int n = firstRow.length;
      if (numTokens.length != n || startPosition.length != n) {
        throw new IllegalArgumentException(
            "first_row="
                + n
                + " num_tokens="
                + numTokens.length
                + " start_position="
                + startPosition.length
                + " must be as many");
      }
      positive("table_stride", tableStride);
      if (tables.length != (long) n * tableStride) {
        throw new IllegalArgumentException(
            "tables=" + tables.length + " must be requests=" + n + " · stride=" + tableStride);
      }
    }

    /** Requests of the batch. */
    public int count() {
      return firstRow.length;
    }

    /**
     * The four arrays in one, for one upload: {@code firstRow | numTokens | startPosition | tables}
     * ({@link DeviceRequests#packed} names its parts on the device).
     */
    public int[] packed() {
      int n = count();
      int[] all = new int[Math.addExact(3 * n, tables.length)];
      System.arraycopy(firstRow, 0, all, 0, n);
      System.arraycopy(numTokens, 0, all, n, n);
      System.arraycopy(startPosition, 0, all, 2 * n, n);
      System.arraycopy(tables, 0, all, 3 * n, tables.length);
      return all;
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Requests r
          && tableStride == r.tableStride
          && Arrays.equals(firstRow, r.firstRow)
          && Arrays.equals(numTokens, r.numTokens)
          && Arrays.equals(startPosition, r.startPosition)
          && Arrays.equals(tables, r.tables);
    }

    @Override
    public int hashCode() {
      return Arrays.hashCode(packed()) * 31 + tableStride;
    }

    @Override
    public String toString() {
      return "Requests[firstRow="
          + Arrays.toString(firstRow)
          + ", numTokens="
          + Arrays.toString(numTokens)
          + ", startPosition="
          + Arrays.toString(startPosition)
          + ", tables="
          + Arrays.toString(tables)
          + ", tableStride="
          + tableStride
          + "]";
    }
  }

  /**
   * The device addresses of a batch's request arrays (int32 each).
   *
   * @param count requests, 1 to {@link #MAX_REQUESTS}
   * @param tableStride entries of a request's state table
   */
  public record DeviceRequests(
      int count, long firstRow, long numTokens, long startPosition, long tables, int tableStride) {

    public DeviceRequests {
      if (count < 1 || count > MAX_REQUESTS) {
        throw new IllegalArgumentException(
            "requests=" + count + " outside [1, " + MAX_REQUESTS + "] (the grid's y dimension)");
      }
      positive("table_stride", tableStride);
    }

    /** The arrays of {@link Requests#packed} uploaded at {@code base}. */
    public static DeviceRequests packed(long base, int count, int tableStride) {
      long n = (long) count * Integer.BYTES;
      return new DeviceRequests(count, base, base + n, base + 2 * n, base + 3 * n, tableStride);
    }
  }

  /**
   * The request arrays of {@code batch} for the State group {@code group}: rows request after
   * request (as the batch's token rows), each request's table copied into rows of {@code
   * tableStride = max ⌈(start + tokens) / pageTokens⌉} entries (the rows a launch may read: the
   * input, the crossed checkpoints and the working row), padded with 0.
   *
   * @throws IllegalArgumentException when a request has no table {@code group}, or its table does
   *     not reach its working row
   */
  public static Requests requests(ForwardBatch batch, int group, int pageTokens) {
    positive("page_tokens", pageTokens);
    List<ForwardRequest> reqs = batch.requests();
    int n = reqs.size();
    int[] first = new int[n];
    int[] count = new int[n];
    int[] start = new int[n];
    int stride = 1;
    int row = 0;
    for (int r = 0; r < n; r++) {
      ForwardRequest req = reqs.get(r);
      if (group < 0 || group >= req.blockTables().length) {
        throw new IllegalArgumentException(
            "request "
                + r
                + " has block tables of groups="
                + req.blockTables().length
                + ", no group "
                + group);
      }
      first[r] = row;
      count[r] = req.numTokens();
      start[r] = req.startPosition();
      row = Math.addExact(row, count[r]);
      int rows = Math.ceilDiv(Math.addExact(start[r], count[r]), pageTokens);
      int have = req.blockTables()[group].length;
      if (have < rows) {
        throw new IllegalArgumentException(
            "request "
                + r
                + " group "
                + group
                + " state table has rows="
                + have
                + " but tokens up to position "
                + (start[r] + count[r])
                + " need "
                + rows);
      }
      stride = Math.max(stride, rows);
    }
    int[] tables = new int[Math.multiplyExact(n, stride)];
    for (int r = 0; r < n; r++) {
      int[] table = reqs.get(r).blockTables()[group];
      System.arraycopy(table, 0, tables, r * stride, Math.min(stride, table.length));
    }
    return new Requests(first, count, start, tables, stride);
  }

  /**
   * {@code u[t][c] = silu(bias[c] + Σ_j w[c][j]·window_j + w[c][k-1]·x[t][c])} over each request's
   * rows, {@code x[t][c] = xz[t·xzWidth + c]}, the window resumed from the request's input slot.
   * Reads the pool only.
   *
   * @param xz float32 {@code [T][xzWidth]}
   * @param w float32 taps {@code [di][k]}, oldest input first
   * @param bias float32 {@code [di]} or 0
   * @param u float32 {@code [T][di]}, written
   */
  public static void conv(
      CudaDevice device,
      LayerState state,
      DeviceRequests reqs,
      long xz,
      int xzWidth,
      long w,
      long bias,
      long u) {
    device.launch(
        "mamba_conv",
        channelBlocks(state),
        reqs.count(),
        THREADS,
        0,
        convArgs(state, reqs, xz, xzWidth, w, bias, u));
  }

  /** The arguments of {@code mamba_conv}, in its parameter order, once checked. */
  static Object[] convArgs(
      LayerState state, DeviceRequests reqs, long xz, int xzWidth, long w, long bias, long u) {
    if (xzWidth < state.innerSize()) {
      throw new IllegalArgumentException(
          "xz_width=" + xzWidth + " is narrower than inner_size=" + state.innerSize());
    }
    return then(
        requestsAndSlots(state, reqs),
        state.innerSize(),
        state.convKernel(),
        xz,
        xzWidth,
        w,
        bias,
        u);
  }

  /**
   * The arguments both recurrent kernels start with: the request arrays, the page size and the
   * State pool with this layer's conv field.
   */
  private static Object[] requestsAndSlots(LayerState state, DeviceRequests reqs) {
    return new Object[] {
      reqs.firstRow(),
      reqs.numTokens(),
      reqs.startPosition(),
      reqs.tables(),
      reqs.tableStride(),
      state.pageTokens(),
      state.pool(),
      state.bytesPerSlot(),
      state.convOffset()
    };
  }

  /** {@code first}, then {@code rest}. */
  private static Object[] then(Object[] first, Object... rest) {
    Object[] all = java.util.Arrays.copyOf(first, first.length + rest.length);
    System.arraycopy(rest, 0, all, first.length, rest.length);
    return all;
  }

  /**
   * The scan: {@code y[t][c]} for each request's rows, resuming from its input slot, storing its
   * state at every crossed page boundary (where the table's entry is not 0) and into its working
   * slot.
   *
   * @param xz the conv's input (column c) and the gate z (column {@code gateOffset + c})
   * @param u the conv's output {@code [T][di]}
   * @param dt {@code [T][di]}, after {@link #softplusBias}
   * @param b B, rows {@code bcStride} floats apart ({@code N} each)
   * @param c C, rows {@code bcStride} floats apart
   * @param bcStride {@code N} for the tensors of {@link #splitProj}, {@code R + 2N} for views into
   *     the x projection
   * @param a {@code A = -exp(A_log)}, {@code [di][N]}
   * @param d {@code [di]}
   * @param y {@code [T][di]}, written
   */
  public static void scan(
      CudaDevice device,
      LayerState state,
      DeviceRequests reqs,
      long xz,
      int xzWidth,
      int gateOffset,
      long u,
      long dt,
      long b,
      long c,
      int bcStride,
      long a,
      long d,
      long y) {
    device.launch(
        scanKernel(state.stateSize()),
        channelBlocks(state),
        reqs.count(),
        THREADS,
        0,
        scanArgs(state, reqs, xz, xzWidth, gateOffset, u, dt, b, c, bcStride, a, d, y));
  }

  /** {@code mamba_scan_n16} where the state fits its registers, else {@code mamba_scan}. */
  static String scanKernel(int stateSize) {
    return stateSize <= REGISTER_STATE ? "mamba_scan_n16" : "mamba_scan";
  }

  /** The arguments of {@code mamba_scan} and {@code mamba_scan_n16}, once checked. */
  static Object[] scanArgs(
      LayerState state,
      DeviceRequests reqs,
      long xz,
      int xzWidth,
      int gateOffset,
      long u,
      long dt,
      long b,
      long c,
      int bcStride,
      long a,
      long d,
      long y) {
    int di = state.innerSize();
    if (gateOffset < 0 || (long) gateOffset + di > xzWidth || xzWidth < di) {
      throw new IllegalArgumentException(
          "gate_offset="
              + gateOffset
              + " with inner_size="
              + di
              + " does not fit xz_width="
              + xzWidth);
    }
    if (bcStride < state.stateSize()) {
      throw new IllegalArgumentException(
          "bc_stride=" + bcStride + " is less than state_size=" + state.stateSize());
    }
    return then(
        requestsAndSlots(state, reqs),
        state.ssmOffset(),
        di,
        state.stateSize(),
        state.convKernel(),
        xz,
        xzWidth,
        gateOffset,
        u,
        dt,
        b,
        c,
        bcStride,
        a,
        d,
        y);
  }

  /**
   * {@code dt[i] = softplus(dt[i] + bias[i % di])} over {@code rows·di} floats in place ({@code
   * bias} 0: softplus alone), the CPU's rule: {@code v} above 20, else {@code log(1 + e^v)} in
   * double rounded once.
   */
  public static void softplusBias(CudaDevice device, long dt, long bias, int rows, int innerSize) {
    device.launch(
        "softplus_bias",
        elementBlocks(rows, innerSize),
        1,
        ELEMENTWISE_THREADS,
        0,
        dt,
        bias,
        rows,
        innerSize);
  }

  /** Blocks of {@code softplus_bias} over {@code rows·di} values. */
  static int elementBlocks(int rows, int innerSize) {
    positive("rows", rows);
    positive("inner_size", innerSize);
    return Math.toIntExact(Math.ceilDiv((long) rows * innerSize, ELEMENTWISE_THREADS));
  }

  /**
   * The x projection's rows {@code proj [rows][R + 2N]} into contiguous {@code delta [rows][R]},
   * {@code b [rows][N]} and {@code c [rows][N]}.
   */
  public static void splitProj(
      CudaDevice device, long proj, int rows, int rank, int stateSize, long delta, long b, long c) {
    positive("rows", rows);
    positive("rank", rank);
    positive("state_size", stateSize);
    if ((long) rank + 2L * stateSize > Integer.MAX_VALUE) {
      throw new IllegalArgumentException(
          "rank=" + rank + " + 2·state_size=" + stateSize + " overflows an int");
    }
    device.launch(
        "mamba_split_proj", rows, 1, ELEMENTWISE_THREADS, 0, proj, rank, stateSize, delta, b, c);
  }

  /** Blocks of the conv and scan kernels: one thread a channel. */
  static int channelBlocks(LayerState state) {
    return Math.ceilDiv(state.innerSize(), THREADS);
  }

  private static void positive(String name, int value) {
    if (value < 1) {
      throw new IllegalArgumentException(name + "=" + value + " must be positive");
    }
  }
}

package io.tokenspeed.model.kernel;

import io.tokenspeed.model.checkpoint.Tensor;
import java.lang.foreign.MemorySegment;

/**
 * The recurrent half of a Mamba-1 mixer: the causal depthwise convolution and the selective scan,
 * reading and writing the layer's state in checkpoint slots of a State pool.
 *
 * <pre>
 *   one request, channel c, tokens at positions p = start .. end-1:
 *     window  = conv state of the input slot (the k-1 last inputs before start, oldest first; zeros
 *               when start = 0)
 *     u_p     = silu(bias[c] + Σ_j w[c][j]·window_j + w[c][k-1]·x_p)        (j ascending)
 *     s_p[n]  = exp(A[c][n]·dt_p) · s_{p-1}[n] + (dt_p·B_p[n])·u_p           (n ascending)
 *     y_p     = (Σ_n s_p[n]·C_p[n] + u_p·D[c]) · silu(z_p)
 *
 *   checkpoints (bg = P, the page size):  row i of the state table holds the state after token
 *   (i+1)·P - 1, i.e. the checkpoint AT boundary (i+1)·P
 *     input   = start == 0 ? zeros : table[ceil(start/P) - 1]      (aligned or the running state)
 *     crossed boundaries B = (i+1)·P in (start, end]  → table[i]     (skipped where table[i] = 0)
 *     working = table[ceil(end/P) - 1]                             ← the state after end-1
 * </pre>
 *
 * <p>A slot holds, per layer, field {@code conv} as {@code [channel][k-1]} and field {@code ssm} as
 * {@code [channel][stateSize]}, float32 little-endian. A channel's state is read whole before any
 * of it is written, so the working slot may be the input slot (decode in place).
 *
 * <p>Exactness: one (request, channel) pair is computed by one thread, the convolution taps and the
 * scan in token order, every state element updated by the same float operations in the same order
 * whatever the chunking (a chunk resumes exactly the state the previous one stored), the batch, the
 * thread count or the physical slots; {@code exp} is {@link StrictMath#exp}.
 */
public final class SelectiveScan {
  private SelectiveScan() {}

  /**
   * One Mamba layer's state inside a State pool.
   *
   * @param memory the group's pool
   * @param bytesPerSlot bytes of one checkpoint slot (all layers)
   * @param convOffset byte offset of this layer's conv field in a slot
   * @param ssmOffset byte offset of this layer's ssm field in a slot
   * @param innerSize channels
   * @param stateSize SSM state per channel
   * @param convKernel convolution taps k
   * @param pageTokens P: a checkpoint is taken at every multiple of P
   */
  public record LayerState(
      MemorySegment memory,
      long bytesPerSlot,
      long convOffset,
      long ssmOffset,
      int innerSize,
      int stateSize,
      int convKernel,
      int pageTokens) {

    long convAt(int slot, int channel) {
      return slot * bytesPerSlot + convOffset + (long) channel * (convKernel - 1) * 4L;
    }

    long ssmAt(int slot, int channel) {
      return slot * bytesPerSlot + ssmOffset + (long) channel * stateSize * 4L;
    }
  }

  /**
   * The requests of a batch as seen by the scan.
   *
   * @param firstRow the batch row of each request's first token
   * @param numTokens tokens of each request
   * @param startPosition position of each request's first token
   * @param tables each request's state table (physical slots, 0 = no checkpoint wanted)
   */
  public record Requests(int[] firstRow, int[] numTokens, int[] startPosition, int[][] tables) {

    int count() {
      return firstRow.length;
    }

    int inputSlot(int r, int pageTokens) {
      int start = startPosition[r];
      return start == 0 ? 0 : tables[r][Math.ceilDiv(start, pageTokens) - 1];
    }

    int workingSlot(int r, int pageTokens) {
      return tables[r][Math.ceilDiv(startPosition[r] + numTokens[r], pageTokens) - 1];
    }
  }

  /**
   * {@code u[t][c] = silu(conv(x)[t][c])}: {@code x} is column {@code c} of {@code xz} ({@code
   * [T][xzWidth]}, channel c at {@code t·xzWidth + c}); earlier inputs come from each request's
   * input slot. Reads the pool only.
   *
   * @param w the taps {@code [innerSize][k]}, oldest input first
   * @param bias {@code [innerSize]} or null
   */
  public static void conv(
      ComputePool pool,
      LayerState state,
      Requests reqs,
      float[] xz,
      int xzWidth,
      float[] w,
      float[] bias,
      float[] u) {
    int di = state.innerSize();
    int k = state.convKernel();
    pool.parallelFor(
        reqs.count() * di,
        (from, to) -> {
          float[] window = new float[k - 1];
          for (int i = from; i < to; i++) {
            int r = i / di;
            int c = i % di;
            loadConv(state, reqs.inputSlot(r, state.pageTokens()), c, window);
            int first = reqs.firstRow()[r];
            for (int t = first; t < first + reqs.numTokens()[r]; t++) {
              float xt = xz[t * xzWidth + c];
              float acc = bias == null ? 0f : bias[c];
              for (int j = 0; j < k - 1; j++) {
                acc += w[c * k + j] * window[j];
              }
              acc += w[c * k + k - 1] * xt;
              u[t * di + c] = Activations.silu(acc);
              shift(window, xt);
            }
          }
        });
  }

  /**
   * The scan: {@code y[t][c]} for every row, resuming each request from its input slot and storing
   * its state at every crossed page boundary and into its working slot.
   *
   * @param xz pre-convolution inputs (column c) and gates (column {@code gateOffset + c})
   * @param u convolved, activated inputs {@code [T][innerSize]}
   * @param dt softplus time steps {@code [T][innerSize]}
   * @param b input matrices {@code [T][stateSize]}
   * @param cm output matrices {@code [T][stateSize]}
   * @param a {@code A = -exp(A_log)}, {@code [innerSize][stateSize]}
   * @param d skip weights {@code [innerSize]}
   * @param y output {@code [T][innerSize]}
   */
  public static void scan(
      ComputePool pool,
      LayerState state,
      Requests reqs,
      float[] xz,
      int xzWidth,
      int gateOffset,
      float[] u,
      float[] dt,
      float[] b,
      float[] cm,
      float[] a,
      float[] d,
      float[] y) {
    int di = state.innerSize();
    int n = state.stateSize();
    int k = state.convKernel();
    int page = state.pageTokens();
    pool.parallelFor(
        reqs.count() * di,
        (from, to) -> {
          float[] window = new float[k - 1];
          float[] s = new float[n];
          for (int i = from; i < to; i++) {
            int r = i / di;
            int c = i % di;
            int input = reqs.inputSlot(r, page);
            loadConv(state, input, c, window);
            loadSsm(state, input, c, s);
            int first = reqs.firstRow()[r];
            int pos = reqs.startPosition()[r];
            int[] table = reqs.tables()[r];
            for (int t = first; t < first + reqs.numTokens()[r]; t++, pos++) {
              shift(window, xz[t * xzWidth + c]);
              float delta = dt[t * di + c];
              float ut = u[t * di + c];
              float acc = 0f;
              for (int j = 0; j < n; j++) {
                float decay = (float) StrictMath.exp(a[c * n + j] * delta);
                s[j] = decay * s[j] + (delta * b[t * n + j]) * ut;
                acc += s[j] * cm[t * n + j];
              }
              float gate = xz[t * xzWidth + gateOffset + c];
              y[t * di + c] = (acc + ut * d[c]) * Activations.silu(gate);
              if ((pos + 1) % page == 0) {
                int row = (pos + 1) / page - 1;
                int slot = row < table.length ? table[row] : 0;
                if (slot != 0) {
                  store(state, slot, c, window, s);
                }
              }
            }
            store(state, reqs.workingSlot(r, page), c, window, s);
          }
        });
  }

  /** {@code softplus(v) = log(1 + e^v)}, or {@code v} above 20 (where they agree in float). */
  public static float softplus(float v) {
    return v > 20f ? v : (float) StrictMath.log1p(StrictMath.exp(v));
  }

  private static void shift(float[] window, float newest) {
    if (window.length > 0) {
      System.arraycopy(window, 1, window, 0, window.length - 1);
      window[window.length - 1] = newest;
    }
  }

  private static void loadConv(LayerState st, int slot, int c, float[] window) {
    if (slot == 0) {
      java.util.Arrays.fill(window, 0f);
      return;
    }
    MemorySegment.copy(st.memory(), Tensor.F32_LE, st.convAt(slot, c), window, 0, window.length);
  }

  private static void loadSsm(LayerState st, int slot, int c, float[] s) {
    if (slot == 0) {
      java.util.Arrays.fill(s, 0f);
      return;
    }
    MemorySegment.copy(st.memory(), Tensor.F32_LE, st.ssmAt(slot, c), s, 0, s.length);
  }

  private static void store(LayerState st, int slot, int c, float[] window, float[] s) {
    MemorySegment.copy(window, 0, st.memory(), Tensor.F32_LE, st.convAt(slot, c), window.length);
    MemorySegment.copy(s, 0, st.memory(), Tensor.F32_LE, st.ssmAt(slot, c), s.length);
  }
}

package io.tokenspeed.model.layer;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.model.config.MixerDims;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.MatMul;
import io.tokenspeed.model.kernel.PackedMatrix;
import io.tokenspeed.model.kernel.SelectiveScan;
import io.tokenspeed.model.kv.PagedKvPool;
import java.util.List;

/**
 * A Mamba-1 selective state-space mixer (Mamba's {@code mixer}, Jamba's {@code mamba}).
 *
 * <pre>
 *   [x | z]  = h·W_inᵀ                         [T][2·di]
 *   u        = silu(causal depthwise conv(x) + b_conv)   (k taps; earlier inputs from the state)
 *   [δ|B|C]  = u·W_xᵀ                          [T][R + 2N]     (Jamba: RMSNorm on δ, B, C)
 *   dt       = softplus(δ·W_dtᵀ + b_dt)        [T][di]
 *   y        = scan(u, dt, A = -exp(A_log), B, C) + u·D,  then · silu(z)
 *   out      = y·W_outᵀ                        [T][hidden]
 * </pre>
 *
 * <p>Its cache group is State checkpoints: it owns two fields of every checkpoint slot, {@code
 * layers.L.conv} ({@code di × (k-1)} float32: the last inputs of each channel) and {@code
 * layers.L.ssm} ({@code di × N} float32). The state never lives in the layer: a forward pass
 * resumes from the request's input checkpoint and stores checkpoints through the request's state
 * table ({@link SelectiveScan} draws the rows).
 *
 * @param layerIndex the decoder layer this mixer belongs to
 * @param cacheGroup the State group id assigned by the model
 * @param dims the mixer's shape
 * @param inProj {@code [2·di][hidden]}
 * @param convWeight the taps {@code [di][k]}, widened at load
 * @param convBias {@code [di]} or null
 * @param xProj {@code [R + 2N][di]}
 * @param dtNorm RMSNorm of δ (width R) or null
 * @param bNorm RMSNorm of B (width N) or null
 * @param cNorm RMSNorm of C (width N) or null
 * @param dtProj {@code [di][R]}
 * @param dtBias {@code [di]}
 * @param a {@code -exp(A_log)}, {@code [di][N]}, computed at load
 * @param d the skip weights {@code [di]}
 * @param outProj {@code [hidden][di]}
 */
public record MambaMixer(
    int layerIndex,
    int cacheGroup,
    MixerDims dims,
    PackedMatrix inProj,
    float[] convWeight,
    float[] convBias,
    PackedMatrix xProj,
    RmsNorm dtNorm,
    RmsNorm bNorm,
    RmsNorm cNorm,
    PackedMatrix dtProj,
    float[] dtBias,
    float[] a,
    float[] d,
    PackedMatrix outProj)
    implements Layer, CachedLayer {

  public MambaMixer {
    int di = dims.innerSize();
    int n = dims.stateSize();
    int r = dims.timeStepRank();
    if (inProj.dim(0) != 2 * di
        || convWeight.length != di * dims.convKernel()
        || xProj.dim(0) != r + 2 * n
        || xProj.dim(1) != di
        || dtProj.dim(0) != di
        || dtProj.dim(1) != r
        || dtBias.length != di
        || a.length != di * n
        || d.length != di
        || outProj.dim(1) != di
        || outProj.dim(0) != inProj.dim(1)
        || (convBias != null && convBias.length != di)) {
      throw new IllegalArgumentException(
          "layer " + layerIndex + " mamba weight shapes disagree with dims=" + dims);
    }
    if ((dtNorm == null) != (bNorm == null) || (bNorm == null) != (cNorm == null)) {
      throw new IllegalArgumentException(
          "layer " + layerIndex + " needs all of the dt, B and C norms or none");
    }
  }

  @Override
  public GroupKind cacheKind() {
    return new GroupKind.StateCheckpoints();
  }

  /** Name of this layer's conv-state field in a checkpoint slot. */
  public String convField() {
    return "layers." + layerIndex + ".conv";
  }

  /** Name of this layer's SSM-state field in a checkpoint slot. */
  public String ssmField() {
    return "layers." + layerIndex + ".ssm";
  }

  /** The two fields of a checkpoint; their size does not depend on the tokens a slot covers. */
  @Override
  public List<CacheField> cacheFields(int blockTokens) {
    return List.of(
        new CacheField(convField(), dims.convStateBytes()),
        new CacheField(ssmField(), dims.ssmStateBytes()));
  }

  /**
   * The mixer over the batch's rows {@code h} ({@code [T][hidden]}, already normalized) into {@code
   * out} ({@code [T][hidden]}), reading and storing checkpoints on the way.
   */
  public void forward(BatchMetadata batch, float[] h, float[] out) {
    ComputePool pool = batch.pool();
    int t = batch.numTokens();
    int di = dims.innerSize();
    int n = dims.stateSize();
    int rank = dims.timeStepRank();
    PagedKvPool statePool = batch.kv().pool(cacheGroup);
    SelectiveScan.LayerState state =
        new SelectiveScan.LayerState(
            statePool.memory(),
            statePool.bytesPerBlock(),
            statePool.fieldOffset(convField()),
            statePool.fieldOffset(ssmField()),
            di,
            n,
            dims.convKernel(),
            statePool.spec().blockGranularity());
    SelectiveScan.Requests reqs = requests(batch);

    float[] xz = new float[t * 2 * di];
    MatMul.apply(pool, h, t, inProj, null, xz);
    float[] u = new float[t * di];
    SelectiveScan.conv(pool, state, reqs, xz, 2 * di, convWeight, convBias, u);

    int width = rank + 2 * n;
    float[] proj = new float[t * width];
    MatMul.apply(pool, u, t, xProj, null, proj);
    float[] delta = new float[t * rank];
    float[] b = new float[t * n];
    float[] c = new float[t * n];
    for (int row = 0; row < t; row++) {
      System.arraycopy(proj, row * width, delta, row * rank, rank);
      System.arraycopy(proj, row * width + rank, b, row * n, n);
      System.arraycopy(proj, row * width + rank + n, c, row * n, n);
    }
    if (dtNorm != null) {
      dtNorm.apply(pool, delta, t, delta);
      bNorm.apply(pool, b, t, b);
      cNorm.apply(pool, c, t, c);
    }
    float[] dt = new float[t * di];
    MatMul.apply(pool, delta, t, dtProj, dtBias, dt);
    pool.parallelFor(
        t * di,
        (from, to) -> {
          for (int i = from; i < to; i++) {
            dt[i] = SelectiveScan.softplus(dt[i]);
          }
        });
    float[] y = new float[t * di];
    SelectiveScan.scan(pool, state, reqs, xz, 2 * di, di, u, dt, b, c, a, d, y);
    MatMul.apply(pool, y, t, outProj, null, out);
  }

  private SelectiveScan.Requests requests(BatchMetadata batch) {
    int[] tokenRequest = batch.tokenRequest();
    int numRequests = batch.blockTables().length;
    int[] first = new int[numRequests];
    int[] count = new int[numRequests];
    int[] start = new int[numRequests];
    int[][] tables = batch.tablesOfGroup(cacheGroup);
    for (int row = batch.numTokens() - 1; row >= 0; row--) {
      int r = tokenRequest[row];
      first[r] = row;
      start[r] = batch.positions()[row];
      count[r]++;
    }
    return new SelectiveScan.Requests(first, count, start, tables);
  }
}

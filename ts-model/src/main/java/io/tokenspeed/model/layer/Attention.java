package io.tokenspeed.model.layer;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.MatMul;
import io.tokenspeed.model.kernel.PackedMatrix;
import io.tokenspeed.model.kernel.PagedAttention;
import io.tokenspeed.model.kernel.Rope;
import io.tokenspeed.model.kv.PagedKvPool;
import java.util.List;

/**
 * Full-history causal self-attention with GQA, optional q/k/v/o biases (Qwen2: q/k/v), optional
 * per-head QK-norm before RoPE (Qwen3), and RoPE.
 *
 * <pre>
 *   q = h·Wqᵀ (+bq)   [T][H·d]      k = h·Wkᵀ (+bk)   [T][Hkv·d]     v = h·Wvᵀ (+bv)
 *   q, k ← RMSNorm per head (QK-norm, when present)
 *   q, k ← RoPE at each token's position
 *   K/V of the batch → paged pool (block table, position)    then attention over positions 0..p
 *   out = attn·Woᵀ (+bo)
 * </pre>
 *
 * <p>Under tensor parallelism a rank holds its share of the heads ({@code numHeads} and {@code
 * numKvHeads} are then the rank's; see {@code Shard}): q, k, v are row blocks of the checkpoint's
 * projections and o a column block, so the rank's output is a partial sum that the ranks add
 * together ({@link BatchMetadata#reducePartial}) before the output bias. When its group is
 * page-cyclic the rank holds every head instead, and K/V only of the pages it owns: it attends over
 * those, and the ranks combine their partial results exactly with their log-sum-exps (see {@link
 * PagedAttention#attendPartial}) before a whole output projection.
 *
 * <p>Its cache group is Full history: it writes two fields per block, {@code layers.L.k} and {@code
 * layers.L.v}, each {@code numKvHeads × bg × headDim} float32 values. Biases and QK-norm weights
 * are {@code null} when absent.
 *
 * @param layerIndex the decoder layer this attention belongs to
 * @param cacheGroup the cache group id assigned by the model
 * @param q query projection {@code [H·d][hidden]}
 * @param k key projection {@code [Hkv·d][hidden]}
 * @param v value projection {@code [Hkv·d][hidden]}
 * @param o output projection {@code [hidden][H·d]}
 * @param qBias query bias or null
 * @param kBias key bias or null
 * @param vBias value bias or null
 * @param oBias output bias or null
 * @param qNorm per-head query RMSNorm (width d) or null
 * @param kNorm per-head key RMSNorm (width d) or null
 * @param rope rotary embedding of width d, or null for attention without positions (Jamba)
 * @param numHeads query heads H
 * @param numKvHeads key/value heads Hkv
 * @param headDim d
 * @param scale score multiplier, usually {@code 1/sqrt(d)}
 * @param logitSoftcap 0, or the cap {@code c} of scores soft-capped to {@code c·tanh(s/c)} (Gemma)
 */
public record Attention(
    int layerIndex,
    int cacheGroup,
    PackedMatrix q,
    PackedMatrix k,
    PackedMatrix v,
    PackedMatrix o,
    float[] qBias,
    float[] kBias,
    float[] vBias,
    float[] oBias,
    RmsNorm qNorm,
    RmsNorm kNorm,
    Rope rope,
    int numHeads,
    int numKvHeads,
    int headDim,
    float scale,
    float logitSoftcap)
    implements Layer, CachedLayer {

  public Attention {
    if (numHeads < 1 || numKvHeads < 1 || numHeads % numKvHeads != 0) {
      throw new IllegalArgumentException(
          "layer " + layerIndex + " num_heads=" + numHeads + " num_kv_heads=" + numKvHeads);
    }
    if (q.dim(0) != numHeads * headDim
        || k.dim(0) != numKvHeads * headDim
        || v.dim(0) != numKvHeads * headDim
        || o.dim(1) != numHeads * headDim) {
      throw new IllegalArgumentException(
          "layer " + layerIndex + " projection shapes disagree with heads");
    }
    if (rope != null && rope.headDim() != headDim) {
      throw new IllegalArgumentException(
          "layer " + layerIndex + " rope head_dim=" + rope.headDim() + " head_dim=" + headDim);
    }
    if ((qNorm == null) != (kNorm == null)) {
      throw new IllegalArgumentException(
          "layer " + layerIndex + " needs both q_norm and k_norm or neither");
    }
  }

  @Override
  public GroupKind cacheKind() {
    return new GroupKind.FullHistory();
  }

  /** Name of this layer's K field in its group's blocks. */
  public String keyField() {
    return "layers." + layerIndex + ".k";
  }

  /** Name of this layer's V field in its group's blocks. */
  public String valueField() {
    return "layers." + layerIndex + ".v";
  }

  @Override
  public List<CacheField> cacheFields(int blockTokens) {
    long bytes = (long) numKvHeads * blockTokens * headDim * Float.BYTES;
    return List.of(new CacheField(keyField(), bytes), new CacheField(valueField(), bytes));
  }

  /**
   * Attention of the batch's rows {@code h} ({@code [T][hidden]}, already normalized) into {@code
   * out} ({@code [T][hidden]}), storing the rows' K/V in the pool on the way.
   */
  public void forward(BatchMetadata batch, float[] h, float[] out) {
    forwardWithin(batch, h, out, 0);
  }

  /**
   * {@link #forward} reading only the last {@code windowTokens} positions of each token (0: all),
   * for {@link SlidingAttention}.
   */
  void forwardWithin(BatchMetadata batch, float[] h, float[] out, int windowTokens) {
    ComputePool pool = batch.pool();
    int t = batch.numTokens();
    float[] qs = new float[t * numHeads * headDim];
    float[] ks = new float[t * numKvHeads * headDim];
    float[] vs = new float[t * numKvHeads * headDim];
    MatMul.apply(pool, h, t, q, qBias, qs);
    MatMul.apply(pool, h, t, k, kBias, ks);
    MatMul.apply(pool, h, t, v, vBias, vs);
    if (qNorm != null) {
      qNorm.apply(pool, qs, t * numHeads, qs);
      kNorm.apply(pool, ks, t * numKvHeads, ks);
    }
    if (rope != null) {
      float[] cos = new float[t * headDim / 2];
      float[] sin = new float[t * headDim / 2];
      rope.table(batch.positions(), cos, sin);
      rope.apply(pool, qs, t, numHeads, cos, sin);
      rope.apply(pool, ks, t, numKvHeads, cos, sin);
    }

    PagedKvPool kvPool = batch.kv().pool(cacheGroup);
    PagedAttention.LayerKv layerKv =
        new PagedAttention.LayerKv(
            kvPool.memory(),
            kvPool.bytesPerBlock(),
            kvPool.fieldOffset(keyField()),
            kvPool.fieldOffset(valueField()),
            kvPool.spec().blockGranularity(),
            numKvHeads,
            headDim);
    int[][] tables = batch.tablesOfGroup(cacheGroup);
    PagedAttention.write(pool, layerKv, ks, vs, t, batch.positions(), batch.tokenRequest(), tables);
    float[] attn = new float[t * numHeads * headDim];
    Sharding sharding = kvPool.spec().sharding();
    if (sharding instanceof Sharding.PageCyclic && batch.collective().size() > 1) {
      attendOverPages(batch, layerKv, qs, tables, attn);
      MatMul.apply(pool, attn, t, o, oBias, out);
      return;
    }
    PagedAttention.attend(
        pool,
        layerKv,
        qs,
        t,
        numHeads,
        scale,
        logitSoftcap,
        windowTokens,
        batch.positions(),
        batch.tokenRequest(),
        tables,
        attn);
    if (batch.collective().size() == 1 || !(sharding instanceof Sharding.HeadPartitioned)) {
      MatMul.apply(pool, attn, t, o, oBias, out);
      return;
    }
    // this rank's heads give a partial output: sum the ranks', then add the bias once
    MatMul.apply(pool, attn, t, o, null, out);
    int hidden = o.dim(0);
    batch.reducePartial(out, t * hidden);
    if (oBias != null) {
      for (int i = 0; i < t; i++) {
        for (int j = 0; j < hidden; j++) {
          out[i * hidden + j] += oBias[j];
        }
      }
    }
  }

  /**
   * Attention of a page-cyclic group: this rank holds every head but only the pages it owns (the
   * others' table entries are 0). It attends over its own pages, the ranks exchange their partial
   * results with their log-sum-exps, and every rank combines them in rank order into the same
   * attention over all pages.
   */
  private void attendOverPages(
      BatchMetadata batch,
      PagedAttention.LayerKv layerKv,
      float[] qs,
      int[][] tables,
      float[] attn) {
    int t = batch.numTokens();
    int items = t * numHeads;
    float[] local = new float[items * (headDim + 1)];
    float[] lse = new float[items];
    PagedAttention.attendPartial(
        batch.pool(),
        layerKv,
        qs,
        t,
        numHeads,
        scale,
        logitSoftcap,
        batch.positions(),
        batch.tokenRequest(),
        tables,
        local,
        lse);
    System.arraycopy(lse, 0, local, items * headDim, items);
    int ranks = batch.collective().size();
    int[] counts = new int[ranks];
    java.util.Arrays.fill(counts, local.length);
    float[] gathered = new float[ranks * local.length];
    batch.collective().allGather(local, counts, gathered);
    PagedAttention.combinePartials(gathered, ranks, items, headDim, attn);
  }
}

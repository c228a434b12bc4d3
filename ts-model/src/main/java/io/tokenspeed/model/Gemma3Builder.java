package io.tokenspeed.model;

import io.tokenspeed.core.GroupKind;
import io.tokenspeed.model.checkpoint.Checkpoint;
import io.tokenspeed.model.checkpoint.Tensor;
import io.tokenspeed.model.checkpoint.WeightSource;
import io.tokenspeed.model.config.DecoderDims;
import io.tokenspeed.model.config.Gemma3Config;
import io.tokenspeed.model.kernel.PackedMatrix;
import io.tokenspeed.model.kernel.Rope;
import io.tokenspeed.model.layer.Attention;
import io.tokenspeed.model.layer.CachedLayer;
import io.tokenspeed.model.layer.Embedding;
import io.tokenspeed.model.layer.GeGluMlp;
import io.tokenspeed.model.layer.LmHead;
import io.tokenspeed.model.layer.RmsNorm;
import io.tokenspeed.model.layer.SandwichBlock;
import io.tokenspeed.model.layer.SlidingAttention;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Composes a Gemma 3 text model from its config and checkpoint.
 *
 * <pre>
 *   tokens → Embedding × sqrt(hidden)
 *     → [SandwichBlock × L: norm → (SlidingAttention W | Attention) → norm → +x
 *                           → norm → GeGLU → norm → +x]
 *     → norm → tied LmHead (→ soft-cap) → logits
 *
 *   every norm scales by (1 + w); QK-norm per head; scores × query_pre_attn_scalar^-1/2
 *   sliding layers: RoPE base rope_local_base_freq, SWA group;  global: rope_theta, Full group
 * </pre>
 *
 * Groups are numbered by first appearance, so with the usual pattern (five sliding layers, then a
 * global one) group 0 is the SWA group and group 1 the Full group.
 */
final class Gemma3Builder {
  private Gemma3Builder() {}

  static CausalLm build(
      Gemma3Config config,
      WeightSource w,
      Checkpoint ckpt,
      String modelId,
      String weightVersion,
      Collective tp,
      Shard shard) {
    DecoderDims d = config.dims();
    int hidden = d.hiddenSize();
    float eps = (float) d.rmsNormEps();
    Tensor embed = w.take("model.embed_tokens.weight", d.vocabSize(), hidden);
    Rope globalRope = new Rope(d.ropeTheta(), d.headDim());
    Rope localRope = new Rope(config.ropeLocalTheta(), d.headDim());
    float scale = (float) (1.0 / Math.sqrt(config.queryPreAttnScalar()));
    float softcap = (float) config.attnLogitSoftcap();
    GroupKind swa = new GroupKind.SlidingWindow(config.slidingWindow());
    GroupKind full = new GroupKind.FullHistory();
    Map<GroupKind, Integer> groups = new LinkedHashMap<>();
    List<SandwichBlock> blocks = new ArrayList<>();
    for (int l = 0; l < d.numLayers(); l++) {
      String p = "model.layers." + l + ".";
      String a = p + "self_attn.";
      boolean sliding = config.isSliding(l);
      int group = groups.computeIfAbsent(sliding ? swa : full, k -> groups.size());
      Attention attention =
          CausalLm.attention(
              w,
              a,
              l,
              group,
              d,
              false,
              false,
              norm(w, a + "q_norm.weight", d.headDim(), eps),
              norm(w, a + "k_norm.weight", d.headDim(), eps),
              sliding ? localRope : globalRope,
              scale,
              softcap,
              shard);
      CachedLayer mixer =
          sliding ? new SlidingAttention(config.slidingWindow(), attention) : attention;
      PackedMatrix[] m = CausalLm.gatedMlp(w, p + "mlp.", d.intermediateSize(), hidden, shard);
      GeGluMlp mlp = new GeGluMlp(m[0], m[1], m[2]);
      blocks.add(
          new SandwichBlock(
              l,
              norm(w, p + "input_layernorm.weight", hidden, eps),
              mixer,
              norm(w, p + "post_attention_layernorm.weight", hidden, eps),
              norm(w, p + "pre_feedforward_layernorm.weight", hidden, eps),
              mlp,
              norm(w, p + "post_feedforward_layernorm.weight", hidden, eps)));
    }
    RmsNorm finalNorm = norm(w, "model.norm.weight", hidden, eps);
    float finalCap = (float) config.finalLogitSoftcap();
    LmHead head =
        CausalLm.lmHead(w, embed, d.tieWordEmbeddings(), d.vocabSize(), hidden, finalCap, shard);
    float embedScale = (float) Math.sqrt(hidden);
    return new CausalLm(
        config,
        ckpt,
        new ModelIdentity(modelId, CausalLm.revisionOf(ckpt), weightVersion),
        new Embedding(embed, embedScale),
        blocks,
        finalNorm,
        head,
        new ArrayList<>(groups.keySet()),
        tp,
        shard);
  }

  private static RmsNorm norm(WeightSource w, String name, int width, float eps) {
    return new RmsNorm(w.take(name, width).toFloatArray(), eps, true);
  }
}

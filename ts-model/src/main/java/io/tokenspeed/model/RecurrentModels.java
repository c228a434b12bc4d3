package io.tokenspeed.model;

import io.tokenspeed.core.GroupKind;
import io.tokenspeed.model.checkpoint.Checkpoint;
import io.tokenspeed.model.checkpoint.Tensor;
import io.tokenspeed.model.checkpoint.WeightSource;
import io.tokenspeed.model.config.DecoderDims;
import io.tokenspeed.model.config.JambaConfig;
import io.tokenspeed.model.config.MambaConfig;
import io.tokenspeed.model.config.MixerDims;
import io.tokenspeed.model.kernel.PackedMatrix;
import io.tokenspeed.model.layer.CachedLayer;
import io.tokenspeed.model.layer.Embedding;
import io.tokenspeed.model.layer.HybridBlock;
import io.tokenspeed.model.layer.LmHead;
import io.tokenspeed.model.layer.MambaBlock;
import io.tokenspeed.model.layer.MambaMixer;
import io.tokenspeed.model.layer.ResidualBlock;
import io.tokenspeed.model.layer.RmsNorm;
import io.tokenspeed.model.layer.SwiGluMlp;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Builds the models with recurrent layers from their checkpoints: Mamba (a stack of Mamba blocks)
 * and Jamba (attention and Mamba mixers, each followed by a dense MLP). Cache groups are numbered
 * by the first layer of each kind, as for the attention-only models.
 */
final class RecurrentModels {
  private RecurrentModels() {}

  /** {@code backbone.*} of MambaForCausalLM. */
  static CausalLm mamba(
      MambaConfig c,
      WeightSource w,
      Checkpoint ckpt,
      String modelId,
      String weightVersion,
      Collective tp,
      Shard shard) {
    int hidden = c.hiddenSize();
    float eps = (float) c.normEps();
    Tensor embed = w.take("backbone.embeddings.weight", c.vocabSize(), hidden);
    Map<GroupKind, Integer> groups = new LinkedHashMap<>();
    List<ResidualBlock> blocks = new ArrayList<>();
    for (int l = 0; l < c.numLayers(); l++) {
      String p = "backbone.layers." + l + ".";
      int group = groups.computeIfAbsent(new GroupKind.StateCheckpoints(), k -> groups.size());
      MambaMixer mixer = mixer(w, p + "mixer.", l, group, c.mixer(), hidden, eps);
      blocks.add(new MambaBlock(l, norm(w, p + "norm.weight", hidden, eps), mixer));
    }
    RmsNorm finalNorm = norm(w, "backbone.norm_f.weight", hidden, eps);
    LmHead head =
        CausalLm.lmHead(w, embed, c.tieWordEmbeddings(), c.vocabSize(), hidden, 0f, shard);
    return new CausalLm(
        c,
        ckpt,
        new ModelIdentity(modelId, CausalLm.revisionOf(ckpt), weightVersion),
        new Embedding(embed, 1f),
        blocks,
        finalNorm,
        head,
        new ArrayList<>(groups.keySet()),
        tp,
        shard);
  }

  /** {@code model.*} of JambaForCausalLM with a dense MLP in every layer. */
  static CausalLm jamba(
      JambaConfig c,
      WeightSource w,
      Checkpoint ckpt,
      String modelId,
      String weightVersion,
      Collective tp,
      Shard shard) {
    DecoderDims d = c.dims();
    int hidden = d.hiddenSize();
    float eps = (float) d.rmsNormEps();
    float scale = (float) (1.0 / Math.sqrt(d.headDim()));
    Tensor embed = w.take("model.embed_tokens.weight", d.vocabSize(), hidden);
    Map<GroupKind, Integer> groups = new LinkedHashMap<>();
    List<ResidualBlock> blocks = new ArrayList<>();
    for (int l = 0; l < d.numLayers(); l++) {
      String p = "model.layers." + l + ".";
      CachedLayer mixer;
      if (c.attentionLayers().get(l)) {
        int group = groups.computeIfAbsent(new GroupKind.FullHistory(), k -> groups.size());
        String a = p + "self_attn.";
        mixer =
            CausalLm.attention(w, a, l, group, d, false, false, null, null, null, scale, 0f, shard);
      } else {
        int group = groups.computeIfAbsent(new GroupKind.StateCheckpoints(), k -> groups.size());
        mixer = mixer(w, p + "mamba.", l, group, c.mixer(), hidden, eps);
      }
      PackedMatrix[] m =
          CausalLm.gatedMlp(w, p + "feed_forward.", d.intermediateSize(), hidden, shard);
      SwiGluMlp mlp = new SwiGluMlp(m[0], m[1], m[2]);
      blocks.add(
          new HybridBlock(
              l,
              norm(w, p + "input_layernorm.weight", hidden, eps),
              mixer,
              norm(w, p + "pre_ff_layernorm.weight", hidden, eps),
              mlp));
    }
    RmsNorm finalNorm = norm(w, "model.final_layernorm.weight", hidden, eps);
    LmHead head =
        CausalLm.lmHead(w, embed, d.tieWordEmbeddings(), d.vocabSize(), hidden, 0f, shard);
    return new CausalLm(
        c,
        ckpt,
        new ModelIdentity(modelId, CausalLm.revisionOf(ckpt), weightVersion),
        new Embedding(embed, 1f),
        blocks,
        finalNorm,
        head,
        new ArrayList<>(groups.keySet()),
        tp,
        shard);
  }

  private static MambaMixer mixer(
      WeightSource w, String p, int layer, int group, MixerDims m, int hidden, float eps) {
    int di = m.innerSize();
    int n = m.stateSize();
    int rank = m.timeStepRank();
    float[] aLog = w.take(p + "A_log", di, n).toFloatArray();
    float[] a = new float[aLog.length];
    for (int i = 0; i < a.length; i++) {
      a[i] = (float) -StrictMath.exp(aLog[i]);
    }
    return new MambaMixer(
        layer,
        group,
        m,
        CausalLm.matrix(w, p + "in_proj.weight", 2 * di, hidden),
        w.take(p + "conv1d.weight", di, 1, m.convKernel()).toFloatArray(),
        m.convBias() ? w.take(p + "conv1d.bias", di).toFloatArray() : null,
        CausalLm.matrix(w, p + "x_proj.weight", rank + 2 * n, di),
        m.innerNorms() ? norm(w, p + "dt_layernorm.weight", rank, eps) : null,
        m.innerNorms() ? norm(w, p + "b_layernorm.weight", n, eps) : null,
        m.innerNorms() ? norm(w, p + "c_layernorm.weight", n, eps) : null,
        CausalLm.matrix(w, p + "dt_proj.weight", di, rank),
        w.take(p + "dt_proj.bias", di).toFloatArray(),
        a,
        w.take(p + "D", di).toFloatArray(),
        CausalLm.matrix(w, p + "out_proj.weight", hidden, di));
  }

  private static RmsNorm norm(WeightSource w, String name, int width, float eps) {
    return new RmsNorm(w.take(name, width).toFloatArray(), eps, false);
  }
}

package io.tokenspeed.model;

import io.tokenspeed.model.checkpoint.Tensor;
import io.tokenspeed.model.config.DecoderDims;
import io.tokenspeed.model.config.ModelConfig;
import java.util.Map;

/**
 * A brute-force reference for decoder-only models, written from the architectures' definitions and
 * nothing of the engine but its tensor reader: double precision, dense causal attention over the
 * whole prompt, no paging, no threads, no vectors. Slow and obvious on purpose.
 */
final class NaiveDecoder {
  private final ModelConfig config;
  private final Map<String, Tensor> w;

  NaiveDecoder(CausalLm model) {
    this.config = model.config();
    this.w = model.checkpoint().tensors();
  }

  /** Logits {@code [position][vocab]} for every position of {@code ids}. */
  double[][] logits(int[] ids) {
    DecoderDims d = config.dims();
    int n = ids.length;
    int hidden = d.hiddenSize();
    int hd = d.headDim();
    double[][] x = new double[n][hidden];
    for (int t = 0; t < n; t++) {
      for (int i = 0; i < hidden; i++) {
        x[t][i] = get("model.embed_tokens.weight", (long) ids[t] * hidden + i);
      }
    }
    for (int l = 0; l < d.numLayers(); l++) {
      String p = "model.layers." + l + ".";
      double[][] h = norm(x, p + "input_layernorm.weight");
      double[][] q = linear(h, p + "self_attn.q_proj", config.qkvBias());
      double[][] k = linear(h, p + "self_attn.k_proj", config.qkvBias());
      double[][] v = linear(h, p + "self_attn.v_proj", config.qkvBias());
      if (config.qkNorm()) {
        headNorm(q, d.numHeads(), p + "self_attn.q_norm.weight");
        headNorm(k, d.numKvHeads(), p + "self_attn.k_norm.weight");
      }
      rope(q, d.numHeads());
      rope(k, d.numKvHeads());
      double[][] attn = new double[n][d.numHeads() * hd];
      for (int t = 0; t < n; t++) {
        for (int head = 0; head < d.numHeads(); head++) {
          int kvh = head / d.groupSize();
          double[] s = new double[t + 1];
          double max = Double.NEGATIVE_INFINITY;
          for (int j = 0; j <= t; j++) {
            double dot = 0;
            for (int i = 0; i < hd; i++) {
              dot += q[t][head * hd + i] * k[j][kvh * hd + i];
            }
            s[j] = dot / Math.sqrt(hd);
            max = Math.max(max, s[j]);
          }
          double sum = 0;
          for (int j = 0; j <= t; j++) {
            s[j] = Math.exp(s[j] - max);
            sum += s[j];
          }
          for (int j = 0; j <= t; j++) {
            for (int i = 0; i < hd; i++) {
              attn[t][head * hd + i] += s[j] / sum * v[j][kvh * hd + i];
            }
          }
        }
      }
      add(x, linear(attn, p + "self_attn.o_proj", config.outputBias()));
      double[][] h2 = norm(x, p + "post_attention_layernorm.weight");
      double[][] g = linear(h2, p + "mlp.gate_proj", false);
      double[][] u = linear(h2, p + "mlp.up_proj", false);
      for (int t = 0; t < n; t++) {
        for (int i = 0; i < g[t].length; i++) {
          g[t][i] = g[t][i] / (1 + Math.exp(-g[t][i])) * u[t][i];
        }
      }
      add(x, linear(g, p + "mlp.down_proj", false));
    }
    double[][] h = norm(x, "model.norm.weight");
    return linear(h, d.tieWordEmbeddings() ? "model.embed_tokens" : "lm_head", false);
  }

  private double get(String name, long index) {
    return w.get(name).getFloat(index);
  }

  private double[][] linear(double[][] x, String prefix, boolean bias) {
    Tensor m = w.get(prefix + ".weight");
    int out = m.dim(0);
    int in = m.dim(1);
    double[][] y = new double[x.length][out];
    for (int t = 0; t < x.length; t++) {
      for (int o = 0; o < out; o++) {
        double s = bias ? get(prefix + ".bias", o) : 0;
        for (int i = 0; i < in; i++) {
          s += x[t][i] * m.getFloat((long) o * in + i);
        }
        y[t][o] = s;
      }
    }
    return y;
  }

  private double[][] norm(double[][] x, String weight) {
    double[][] y = new double[x.length][];
    for (int t = 0; t < x.length; t++) {
      y[t] = x[t].clone();
      normRow(y[t], 0, y[t].length, weight);
    }
    return y;
  }

  private void normRow(double[] row, int off, int n, String weight) {
    double ms = 0;
    for (int i = 0; i < n; i++) {
      ms += row[off + i] * row[off + i];
    }
    double inv = 1 / Math.sqrt(ms / n + config.dims().rmsNormEps());
    for (int i = 0; i < n; i++) {
      row[off + i] = row[off + i] * inv * get(weight, i);
    }
  }

  private void headNorm(double[][] x, int heads, String weight) {
    int hd = config.dims().headDim();
    for (double[] row : x) {
      for (int h = 0; h < heads; h++) {
        normRow(row, h * hd, hd, weight);
      }
    }
  }

  private void rope(double[][] x, int heads) {
    int hd = config.dims().headDim();
    int half = hd / 2;
    for (int t = 0; t < x.length; t++) {
      for (int h = 0; h < heads; h++) {
        for (int i = 0; i < half; i++) {
          double angle = t * Math.pow(config.dims().ropeTheta(), -2.0 * i / hd);
          double a = x[t][h * hd + i];
          double b = x[t][h * hd + half + i];
          x[t][h * hd + i] = a * Math.cos(angle) - b * Math.sin(angle);
          x[t][h * hd + half + i] = b * Math.cos(angle) + a * Math.sin(angle);
        }
      }
    }
  }

  private static void add(double[][] x, double[][] delta) {
    for (int t = 0; t < x.length; t++) {
      for (int i = 0; i < x[t].length; i++) {
        x[t][i] += delta[t][i];
      }
    }
  }
}

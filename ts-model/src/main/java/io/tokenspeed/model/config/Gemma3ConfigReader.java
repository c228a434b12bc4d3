package io.tokenspeed.model.config;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Reads the fields of a Gemma 3 text {@code config.json}, with the defaults of the reference
 * implementation where a field is absent. Both spellings of the RoPE bases are accepted: the older
 * top-level {@code rope_theta} and {@code rope_local_base_freq}, and the newer {@code
 * rope_parameters} keyed by layer type ({@code full_attention}, {@code sliding_attention}).
 */
final class Gemma3ConfigReader {
  static final String SLIDING = "sliding_attention";
  static final String FULL = "full_attention";

  /** Every sixth layer is global when neither {@code layer_types} nor a pattern is given. */
  static final int DEFAULT_SLIDING_WINDOW_PATTERN = 6;

  private Gemma3ConfigReader() {}

  static Gemma3Config read(ConfigFields f) {
    String act = f.optString("hidden_activation", f.optString("hidden_act", "gelu_pytorch_tanh"));
    if (!act.equals("gelu_pytorch_tanh")) {
      throw new IllegalArgumentException(
          "hidden_activation=" + act + " is not supported; allowed: gelu_pytorch_tanh");
    }
    if (f.optBool("attention_bias", false)) {
      throw new IllegalArgumentException("attention_bias=true is not supported for gemma3_text");
    }
    if (f.optBool("use_bidirectional_attention", false)) {
      throw new IllegalArgumentException(
          "use_bidirectional_attention=true is not supported; allowed: false (causal)");
    }
    int layers = f.requireInt("num_hidden_layers");
    double[] thetas = ropeThetas(f);
    DecoderDims dims =
        new DecoderDims(
            f.requireInt("vocab_size"),
            f.requireInt("hidden_size"),
            f.requireInt("intermediate_size"),
            layers,
            f.requireInt("num_attention_heads"),
            f.optInt("num_key_value_heads", f.requireInt("num_attention_heads")),
            f.optInt("head_dim", 256),
            f.optDouble("rms_norm_eps", 1e-6),
            thetas[0],
            f.optInt("max_position_embeddings", 131072),
            f.optBool("tie_word_embeddings", true));
    return new Gemma3Config(
        dims,
        thetas[1],
        f.optInt("sliding_window", 4096),
        slidingLayers(f, layers),
        f.optDouble("query_pre_attn_scalar", 256),
        f.optDouble("attn_logit_softcapping", 0),
        f.optDouble("final_logit_softcapping", 0));
  }

  /** {@code [global θ, local θ]}. */
  private static double[] ropeThetas(ConfigFields f) {
    Map<String, Object> scaling = f.optObject("rope_scaling");
    if (scaling != null) {
      requireDefault("rope_scaling", new ConfigFields(scaling));
    }
    double global = f.optDouble("rope_theta", 1_000_000.0);
    double local = f.optDouble("rope_local_base_freq", 10_000.0);
    Map<String, Object> params = f.optObject("rope_parameters");
    if (params != null) {
      ConfigFields p = new ConfigFields(params);
      if (p.has(FULL) || p.has(SLIDING)) {
        global = theta(p, FULL, global);
        local = theta(p, SLIDING, local);
      } else {
        requireDefault("rope_parameters", p);
        global = p.optDouble("rope_theta", global);
      }
    }
    return new double[] {global, local};
  }

  private static double theta(ConfigFields params, String layerType, double fallback) {
    Map<String, Object> m = params.optObject(layerType);
    if (m == null) {
      return fallback;
    }
    ConfigFields p = new ConfigFields(m);
    requireDefault("rope_parameters." + layerType, p);
    return p.optDouble("rope_theta", fallback);
  }

  private static void requireDefault(String field, ConfigFields p) {
    String type = p.optString("rope_type", p.optString("type", "default"));
    if (!type.equals("default")) {
      throw new IllegalArgumentException(
          field + ".rope_type=" + type + " is not supported; allowed: default");
    }
  }

  private static List<Boolean> slidingLayers(ConfigFields f, int layers) {
    List<?> types = f.optList("layer_types");
    List<Boolean> out = new ArrayList<>();
    if (types != null) {
      if (types.size() != layers) {
        throw new IllegalArgumentException(
            "layer_types has " + types.size() + " entries but num_hidden_layers=" + layers);
      }
      for (int i = 0; i < layers; i++) {
        Object t = types.get(i);
        if (!SLIDING.equals(t) && !FULL.equals(t)) {
          throw new IllegalArgumentException(
              "layer_types["
                  + i
                  + "]="
                  + t
                  + " is not supported; allowed: "
                  + SLIDING
                  + ", "
                  + FULL);
        }
        out.add(SLIDING.equals(t));
      }
      return out;
    }
    String field =
        f.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    int pattern = f.optInt(field, DEFAULT_SLIDING_WINDOW_PATTERN);
    if (pattern < 1) {
      throw new IllegalArgumentException(field + "=" + pattern + " must be at least 1");
    }
    for (int i = 0; i < layers; i++) {
      out.add((i + 1) % pattern != 0);
    }
    return out;
  }
}

package io.tokenspeed.model.config;

import io.tokenspeed.core.OneLine;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Reads a parsed {@code config.json} into the record of its architecture. The architecture comes
 * from {@code architectures} (exactly one entry) and must agree with {@code model_type}. Fields
 * this engine cannot honour yet (sliding windows outside Gemma 3, RoPE scaling, non-SiLU
 * activations outside Gemma 3, MLP biases) are rejected here, by name, rather than silently
 * computed wrong.
 */
public final class ModelConfigs {

  /** Supported {@code architectures} entries and the {@code model_type} each implies. */
  public static final Map<String, String> SUPPORTED =
      new TreeMap<>(
          Map.of(
              "Gemma3ForCausalLM", "gemma3_text",
              "LlamaForCausalLM", "llama",
              "MambaForCausalLM", "mamba",
              "JambaForCausalLM", "jamba",
              "MistralForCausalLM", "mistral",
              "Qwen2ForCausalLM", "qwen2",
              "Qwen3ForCausalLM", "qwen3"));

  private ModelConfigs() {}

  /**
   * Parses {@code json}.
   *
   * @throws IllegalArgumentException naming the field, its value and what is allowed, on one line
   *     (a control character the file carried into the message is written as an escape)
   */
  public static ModelConfig parse(Map<String, Object> json) {
    try {
      return read(json);
    } catch (IllegalArgumentException e) {
      String line = OneLine.of(e.getMessage());
      if (line == null || line.equals(e.getMessage())) {
        throw e;
      }
      throw new IllegalArgumentException(line, e);
    }
  }

  private static ModelConfig read(Map<String, Object> json) {
    ConfigFields f = new ConfigFields(json);
    List<?> architectures = f.optList("architectures");
    if (architectures == null
        || architectures.size() != 1
        || !(architectures.get(0) instanceof String)) {
      throw new IllegalArgumentException(
          "architectures=" + architectures + " must hold exactly one architecture name");
    }
    String architecture = (String) architectures.get(0);
    String modelType = f.optString("model_type", null);
    String expectedType = SUPPORTED.get(architecture);
    if (expectedType == null) {
      throw new IllegalArgumentException(
          "architectures=["
              + architecture
              + "] is not supported; supported: "
              + String.join(", ", SUPPORTED.keySet()));
    }
    if (modelType == null) {
      throw new IllegalArgumentException("model_type is missing");
    }
    if (!SUPPORTED.containsValue(modelType)) {
      throw new IllegalArgumentException(
          "model_type="
              + modelType
              + " is not supported; supported: "
              + String.join(", ", new java.util.TreeSet<>(SUPPORTED.values())));
    }
    if (!expectedType.equals(modelType)) {
      throw new IllegalArgumentException(
          "model_type="
              + modelType
              + " does not match architectures=["
              + architecture
              + "], which needs model_type="
              + expectedType);
    }
    if (modelType.equals("gemma3_text")) {
      return Gemma3ConfigReader.read(f);
    }
    if (modelType.equals("mamba")) {
      return MambaConfig.from(f);
    }
    String act = f.optString("hidden_act", "silu");
    if (!act.equals("silu")) {
      throw new IllegalArgumentException("hidden_act=" + act + " is not supported; allowed: silu");
    }
    if (f.optBool("mlp_bias", false)) {
      throw new IllegalArgumentException("mlp_bias=true is not supported");
    }
    rejectSlidingWindow(f, modelType);
    DecoderDims dims = dims(f);
    checkLayerTypes(f, dims.numLayers());
    return switch (modelType) {
      case "llama", "mistral" ->
          new LlamaConfig(architecture, modelType, dims, f.optBool("attention_bias", false));
      case "qwen2" -> new Qwen2Config(dims);
      case "qwen3" -> new Qwen3Config(dims, f.optBool("attention_bias", false));
      case "jamba" -> JambaConfig.from(f, dims);
      default -> throw new IllegalStateException("model_type=" + modelType + " not wired");
    };
  }

  private static DecoderDims dims(ConfigFields f) {
    int hidden = f.requireInt("hidden_size");
    int heads = f.requireInt("num_attention_heads");
    if (hidden < 1) {
      throw new IllegalArgumentException("hidden_size=" + hidden + " must be at least 1");
    }
    if (heads < 1) {
      throw new IllegalArgumentException("num_attention_heads=" + heads + " must be at least 1");
    }
    int headDim;
    if (f.has("head_dim")) {
      headDim = f.requireInt("head_dim");
    } else {
      if (hidden % heads != 0) {
        throw new IllegalArgumentException(
            "hidden_size="
                + hidden
                + " is not a multiple of num_attention_heads="
                + heads
                + " and head_dim is not given");
      }
      headDim = hidden / heads;
    }
    return new DecoderDims(
        f.requireInt("vocab_size"),
        hidden,
        f.requireInt("intermediate_size"),
        f.requireInt("num_hidden_layers"),
        heads,
        f.optInt("num_key_value_heads", heads),
        headDim,
        f.optDouble("rms_norm_eps", 1e-6),
        ropeTheta(f),
        f.requireInt("max_position_embeddings"),
        f.optBool("tie_word_embeddings", false));
  }

  /**
   * θ from {@code rope_parameters.rope_theta} (newer files) or the top-level {@code rope_theta};
   * the RoPE type must be {@code default} (scaled variants are not implemented yet).
   */
  private static double ropeTheta(ConfigFields f) {
    Map<String, Object> params = f.optObject("rope_parameters");
    Map<String, Object> scaling = f.optObject("rope_scaling");
    for (Map<String, Object> m : java.util.Arrays.asList(params, scaling)) {
      if (m == null) {
        continue;
      }
      ConfigFields p = new ConfigFields(m);
      String type = p.optString("rope_type", p.optString("type", "default"));
      if (!type.equals("default")) {
        throw new IllegalArgumentException(
            "rope_type=" + type + " is not supported; allowed: default");
      }
    }
    if (params != null && new ConfigFields(params).has("rope_theta")) {
      return new ConfigFields(params).optDouble("rope_theta", 10000.0);
    }
    return f.optDouble("rope_theta", 10000.0);
  }

  private static void rejectSlidingWindow(ConfigFields f, String modelType) {
    if (modelType.equals("mistral") && f.has("sliding_window")) {
      throw new IllegalArgumentException(
          "sliding_window="
              + f.raw("sliding_window")
              + " is not supported for mistral yet; allowed: null (full attention)");
    }
    if (f.optBool("use_sliding_window", false)) {
      throw new IllegalArgumentException(
          "use_sliding_window=true is not supported for " + modelType + " yet");
    }
  }

  private static void checkLayerTypes(ConfigFields f, int numLayers) {
    List<?> types = f.optList("layer_types");
    if (types == null) {
      return;
    }
    if (types.size() != numLayers) {
      throw new IllegalArgumentException(
          "layer_types has " + types.size() + " entries but num_hidden_layers=" + numLayers);
    }
    for (int i = 0; i < types.size(); i++) {
      if (!"full_attention".equals(types.get(i))) {
        throw new IllegalArgumentException(
            "layer_types["
                + i
                + "]="
                + types.get(i)
                + " is not supported; allowed: full_attention");
      }
    }
  }
}

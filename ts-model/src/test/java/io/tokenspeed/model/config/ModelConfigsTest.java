package io.tokenspeed.model.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.checkpoint.Json;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class ModelConfigsTest {

  static Map<String, Object> base(String arch, String type) {
    return new LinkedHashMap<>(
        Json.parseObject(
            "{\"architectures\": [\""
                + arch
                + "\"], \"model_type\": \""
                + type
                + "\", \"vocab_size\": 100, \"hidden_size\": 32, \"intermediate_size\": 48,"
                + " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                + " \"num_key_value_heads\": 2, \"max_position_embeddings\": 64,"
                + " \"rope_theta\": 500000.0}"));
  }

  @Test
  void shouldReadEachArchitectureIntoItsRecord() {
    ModelConfig llama = ModelConfigs.parse(base("LlamaForCausalLM", "llama"));
    assertTrue(llama instanceof LlamaConfig);
    assertEquals(8, llama.dims().headDim());
    assertEquals(500000.0, llama.dims().ropeTheta());
    assertEquals(2, llama.dims().groupSize());
    ModelConfig mistral = ModelConfigs.parse(base("MistralForCausalLM", "mistral"));
    assertEquals("mistral", mistral.modelType());
    ModelConfig qwen2 = ModelConfigs.parse(base("Qwen2ForCausalLM", "qwen2"));
    assertTrue(qwen2.qkvBias() && !qwen2.outputBias() && !qwen2.qkNorm());
    Map<String, Object> q3 = base("Qwen3ForCausalLM", "qwen3");
    q3.put("head_dim", 16L);
    ModelConfig qwen3 = ModelConfigs.parse(q3);
    assertTrue(qwen3.qkNorm() && !qwen3.qkvBias());
    assertEquals(16, qwen3.dims().headDim());
  }

  @ParameterizedTest(name = "{0}={1}")
  @CsvSource(
      delimiter = '|',
      value = {
        "num_key_value_heads|3|must be a multiple of num_key_value_heads=3",
        "hidden_size|-1|hidden_size=-1 must be at least 1",
        "vocab_size|\"x\"|vocab_size=x must be an integer",
        "hidden_act|\"gelu\"|hidden_act=gelu is not supported",
        "rope_scaling|{\"rope_type\": \"llama3\"}|rope_type=llama3 is not supported",
        "rope_parameters|{\"rope_type\": \"yarn\", \"rope_theta\": 1e4}|rope_type=yarn is not supported",
        "sliding_window|4096|sliding_window=4096 is not supported for mistral",
        "rms_norm_eps|0|rms_norm_eps=0.0 must be positive",
        "layer_types|[\"sliding_attention\", \"full_attention\"]|layer_types[0]=sliding_attention",
        "architectures|[\"A\", \"B\"]|must hold exactly one architecture",
      })
  void shouldNameTheFieldAndValueWhenTheConfigIsInvalid(String field, String json, String message) {
    Map<String, Object> cfg = base("MistralForCausalLM", "mistral");
    cfg.put(field, Json.parse(json));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> ModelConfigs.parse(cfg));
    assertTrue(e.getMessage().contains(message), e.getMessage());
  }

  @Test
  void shouldReadRopeThetaFromRopeParameters() {
    Map<String, Object> cfg = base("Qwen2ForCausalLM", "qwen2");
    cfg.remove("rope_theta");
    cfg.put(
        "rope_parameters", Json.parse("{\"rope_theta\": 1000000.0, \"rope_type\": \"default\"}"));
    assertEquals(1_000_000.0, ModelConfigs.parse(cfg).dims().ropeTheta());
    cfg.put("use_sliding_window", true);
    assertThrows(IllegalArgumentException.class, () -> ModelConfigs.parse(cfg));
  }
}

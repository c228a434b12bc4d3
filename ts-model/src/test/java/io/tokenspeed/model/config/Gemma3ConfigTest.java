package io.tokenspeed.model.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.checkpoint.Json;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class Gemma3ConfigTest {

  static Map<String, Object> base() {
    return new LinkedHashMap<>(
        Json.parseObject(
            "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"gemma3_text\","
                + " \"vocab_size\": 100, \"hidden_size\": 32, \"intermediate_size\": 48,"
                + " \"num_hidden_layers\": 7, \"num_attention_heads\": 4,"
                + " \"num_key_value_heads\": 1, \"head_dim\": 8, \"max_position_embeddings\": 64,"
                + " \"sliding_window\": 8, \"query_pre_attn_scalar\": 8}"));
  }

  @Test
  void shouldReadTheOlderSpellingWithPatternAndTopLevelRopeBases() {
    Map<String, Object> cfg = base();
    cfg.put("sliding_window_pattern", 3L);
    cfg.put("rope_theta", 500000.0);
    cfg.put("rope_local_base_freq", 20000.0);
    cfg.put("attn_logit_softcapping", 50.0);
    cfg.put("final_logit_softcapping", 30.0);
    Gemma3Config c = (Gemma3Config) ModelConfigs.parse(cfg);
    assertEquals(List.of(true, true, false, true, true, false, true), c.slidingLayers());
    assertEquals(500000.0, c.dims().ropeTheta());
    assertEquals(20000.0, c.ropeLocalTheta());
    assertEquals(8, c.slidingWindow());
    assertEquals(8.0, c.queryPreAttnScalar());
    assertEquals(50.0, c.attnLogitSoftcap());
    assertEquals(30.0, c.finalLogitSoftcap());
    assertTrue(c.dims().tieWordEmbeddings() && c.qkNorm() && !c.qkvBias());
  }

  @Test
  void shouldReadLayerTypesAndRopeParametersPerLayerType() {
    Map<String, Object> cfg = base();
    cfg.put("num_hidden_layers", 2L);
    cfg.put("layer_types", Json.parse("[\"full_attention\", \"sliding_attention\"]"));
    cfg.put(
        "rope_parameters",
        Json.parse(
            "{\"full_attention\": {\"rope_theta\": 1e6, \"rope_type\": \"default\"},"
                + " \"sliding_attention\": {\"rope_theta\": 1e4, \"rope_type\": \"default\"}}"));
    Gemma3Config c = (Gemma3Config) ModelConfigs.parse(cfg);
    assertEquals(List.of(false, true), c.slidingLayers());
    assertEquals(1e6, c.dims().ropeTheta());
    assertEquals(1e4, c.ropeLocalTheta());
    assertEquals(0.0, c.attnLogitSoftcap());
    assertEquals(6, Gemma3ConfigReader.DEFAULT_SLIDING_WINDOW_PATTERN);
  }

  @ParameterizedTest(name = "{0}={1}")
  @CsvSource(
      delimiter = '|',
      value = {
        "sliding_window|0|sliding_window=0 must be at least 1",
        "hidden_activation|\"gelu\"|hidden_activation=gelu is not supported",
        "attention_bias|true|attention_bias=true is not supported",
        "query_pre_attn_scalar|0|query_pre_attn_scalar=0.0 must be positive",
        "attn_logit_softcapping|-1|attn_logit_softcapping=-1.0 must be positive or null",
        "final_logit_softcapping|-2.5|final_logit_softcapping=-2.5 must be positive or null",
        "layer_types|[\"sliding_attention\"]|layer_types has 1 entries but num_hidden_layers=7",
        "sliding_window_pattern|0|sliding_window_pattern=0 must be at least 1",
        "rope_scaling|{\"rope_type\": \"linear\", \"factor\": 8.0}|rope_type=linear is not supported",
        "rope_parameters|{\"full_attention\": {\"rope_type\": \"yarn\"}}|"
            + "rope_parameters.full_attention.rope_type=yarn",
        "use_bidirectional_attention|true|use_bidirectional_attention=true is not supported",
        "model_type|\"gemma3\"|model_type=gemma3 is not supported",
      })
  void shouldNameTheFieldAndValueWhenTheConfigIsInvalid(String field, String json, String message) {
    Map<String, Object> cfg = base();
    cfg.put(field, Json.parse(json));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> ModelConfigs.parse(cfg));
    assertTrue(e.getMessage().contains(message), e.getMessage());
  }
}

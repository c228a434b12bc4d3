package io.tokenspeed.model.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.checkpoint.Json;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** Reading and validating the Mamba and Jamba configs. */
class RecurrentConfigsTest {

  static Map<String, Object> mamba() {
    return new LinkedHashMap<>(
        Json.parseObject(
            "{\"architectures\": [\"MambaForCausalLM\"], \"model_type\": \"mamba\","
                + " \"vocab_size\": 100, \"hidden_size\": 32, \"intermediate_size\": 64,"
                + " \"num_hidden_layers\": 2, \"state_size\": 8, \"conv_kernel\": 4,"
                + " \"time_step_rank\": \"auto\", \"layer_norm_epsilon\": 1e-5}"));
  }

  static Map<String, Object> jamba() {
    Map<String, Object> m = ModelConfigsTest.base("JambaForCausalLM", "jamba");
    m.put("num_hidden_layers", 4L);
    m.put("attn_layer_offset", 1L);
    m.put("attn_layer_period", 2L);
    m.put("mamba_d_state", 8L);
    m.put("mamba_dt_rank", 8L);
    m.put("num_experts", 1L);
    return m;
  }

  @Test
  void shouldReadMambaWithAutoTimeStepRankAndTiedHead() {
    MambaConfig c = (MambaConfig) ModelConfigs.parse(mamba());
    assertEquals(new MixerDims(64, 8, 4, 2, true, false), c.mixer());
    assertTrue(c.tieWordEmbeddings());
    assertEquals(Integer.MAX_VALUE, c.maxPositionEmbeddings());
    assertEquals(32, c.hiddenSize());
    assertEquals(100, c.vocabSize());
    assertThrows(UnsupportedOperationException.class, c::dims);
  }

  @Test
  void shouldPlaceJambaAttentionLayersByOffsetAndPeriodOrByBlockTypes() {
    JambaConfig c = (JambaConfig) ModelConfigs.parse(jamba());
    assertEquals(List.of(false, true, false, true), c.attentionLayers());
    assertEquals(new MixerDims(64, 8, 4, 8, true, true), c.mixer());
    Map<String, Object> typed = jamba();
    typed.put(
        "layers_block_type", Json.parse("[\"attention\", \"mamba\", \"mamba\", \"attention\"]"));
    assertEquals(
        List.of(true, false, false, true),
        ((JambaConfig) ModelConfigs.parse(typed)).attentionLayers());
    assertFalse(c.qkNorm());
  }

  @ParameterizedTest(name = "{0}={1}")
  @CsvSource(
      delimiter = '|',
      value = {
        "mamba|use_bias|true|use_bias=true is not supported",
        "mamba|hidden_act|\"gelu\"|hidden_act=gelu is not supported",
        "mamba|state_size|0|state_size=0 must be at least 1",
        "mamba|conv_kernel|1|conv_kernel=1 must be at least 2",
        "jamba|num_experts|16|num_experts=16 is not supported",
        "jamba|mamba_proj_bias|true|mamba_proj_bias=true is not supported",
        "jamba|attn_layer_offset|2|attn_layer_offset=2 attn_layer_period=2",
        "jamba|layers_block_type|[\"mamba\"]|layers_block_type has 1 entries",
        "jamba|layers_block_type|[\"moe\", \"mamba\", \"mamba\", \"mamba\"]|layers_block_type[0]=moe",
        "jamba|sliding_window|64|sliding_window=64 is not supported for jamba",
      })
  void shouldNameTheFieldAndValueWhenTheConfigIsInvalid(
      String arch, String field, String json, String message) {
    Map<String, Object> cfg = arch.equals("mamba") ? mamba() : jamba();
    cfg.put(field, Json.parse(json));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> ModelConfigs.parse(cfg));
    assertTrue(e.getMessage().contains(message), e.getMessage());
  }
}

package io.tokenspeed.model.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import io.tokenspeed.model.checkpoint.Json;
import io.tokenspeed.model.checkpoint.JsonMutator;
import io.tokenspeed.testkit.DecoderContract;
import java.nio.charset.StandardCharsets;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;

/**
 * The coverage-guided fuzz target (Jazzer) of a checkpoint's {@code config.json}: the module's
 * strict JSON reader ({@link Json#parseObject}, as {@code Checkpoint.readJsonObject} calls it) and
 * then {@link ModelConfigs#parse}. Without {@code JAZZER_FUZZ} it replays the seeds under {@code
 * ModelConfigsGuidedFuzzTestInputs/configJson} (the Hugging Face fixtures' and the synthetic
 * checkpoints' configurations) as a regression test; with it, it fuzzes
 * (docs/reliability/fuzzing.md has the commands and figures).
 *
 * <p>An input's bytes are read as UTF-8 text (a malformed sequence becomes U+FFFD, as the strict
 * file reader never hands the decoder anything else). Every input must give a configuration or an
 * {@link IllegalArgumentException} itself, no subclass (the reader's and the parser's refusal,
 * which the checkpoint loader wraps with the file's name) with a one-line message; never another
 * exception or error, never a hang, never an allocation out of proportion to the input. A
 * configuration that parses names a supported architecture and has positive sizes.
 */
class ModelConfigsGuidedFuzzTest {

  @Test
  void shouldKeepTheMessageOnOneLineWhenTheModelTypeHoldsALineBreak() {
    // Found by this target: a model_type (or architecture) with a line break was quoted as is.
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                ModelConfigs.parse(
                    Json.parseObject(
                        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"ll\\nama\"}")));
    assertEquals(
        "model_type=ll\\u000aama is not supported; supported: gemma3_text, jamba, llama, mamba,"
            + " mistral, qwen2, qwen3",
        e.getMessage());
  }

  @Test
  void shouldKeepTheJsonReadersMessageOnOneLineWhenADuplicateKeyHoldsALineBreak() {
    // Found by this target: the strict JSON reader quoted a duplicate key as is.
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> Json.parseObject("{\"a\\nb\": 1, \"a\\nb\": 2}"));
    assertEquals("malformed JSON at offset 12: duplicate key \"a\\u000ab\"", e.getMessage());
  }

  @FuzzTest(maxDuration = "3m")
  void configJson(byte[] data) {
    String text = new String(data, StandardCharsets.UTF_8);
    Supplier<String> input = () -> JsonMutator.quote(text);
    DecoderContract.Outcome<ModelConfig> o =
        DecoderContract.decode(
            IllegalArgumentException.class,
            4L << 20,
            1024,
            data.length,
            input,
            () -> ModelConfigs.parse(Json.parseObject(text)));
    if (o.refused()) {
      // the refusal itself, not a subclass that escaped from below (a NumberFormatException or a
      // PatternSyntaxException is an IllegalArgumentException too)
      assertEquals(
          IllegalArgumentException.class,
          o.refusal().getClass(),
          () -> "refused with " + o.refusal() + ": " + input.get());
      return;
    }
    ModelConfig c = o.value();
    assertEquals(ModelConfigs.SUPPORTED.get(c.architecture()), c.modelType(), input);
    assertTrue(c.vocabSize() >= 1 && c.hiddenSize() >= 1, input);
    assertTrue(c.maxPositionEmbeddings() >= 1, input);
  }
}

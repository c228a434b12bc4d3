package io.tokenspeed.model.synthetic;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.PagedRunner;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.Json;
import io.tokenspeed.model.checkpoint.TensorShape;
import io.tokenspeed.model.config.ModelConfigs;
import io.tokenspeed.model.kernel.ComputePool;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.List;
import java.util.Random;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class SyntheticCheckpointsTest {

  private static final int PROMPT_TOKENS = 40;

  @TempDir Path root;
  private ComputePool pool;

  @BeforeAll
  void startPool() {
    pool = ComputePool.ofThreads(2);
  }

  @AfterAll
  void stopPool() {
    pool.close();
  }

  /** A scaled-down config of each architecture: the fixtures', plus Qwen3 and Mistral. */
  static String config(String arch) throws IOException {
    String llama = fixtureConfig("llama");
    return switch (arch) {
      case "qwen3" ->
          llama
              .replace("LlamaForCausalLM", "Qwen3ForCausalLM")
              .replace("\"model_type\": \"llama\"", "\"model_type\": \"qwen3\"");
      case "mistral" ->
          llama
              .replace("LlamaForCausalLM", "MistralForCausalLM")
              .replace("\"model_type\": \"llama\"", "\"model_type\": \"mistral\"");
      default -> fixtureConfig(arch);
    };
  }

  private static String fixtureConfig(String name) throws IOException {
    return Files.readString(Fixtures.folder(name).resolve("config.json"), StandardCharsets.UTF_8);
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama", "qwen2", "qwen3", "mistral", "gemma3", "mamba", "jamba"})
  void shouldGenerateLoadAndRunEachArchitectureWithFiniteSpreadLogits(String arch)
      throws IOException {
    Path folder = SyntheticCheckpoints.materialize(arch, config(arch), 7, DType.F32, root);
    try (CausalLm model = CausalLm.load(folder)) {
      assertEquals(
          new TreeSet<>(names(CausalLm.expectedTensors(model.config()))),
          new TreeSet<>(model.checkpoint().tensors().keySet()));
      assertSaneLogits(model, arch);
    }
  }

  @Test
  void shouldGenerateAndRunTheJambaTinyPresetInBf16() {
    Path folder = SyntheticCheckpoints.materialize("synthetic:jamba-tiny", 1, DType.BF16, root);
    try (CausalLm model = CausalLm.load(folder)) {
      assertTrue(
          model.checkpoint().tensors().values().stream().allMatch(t -> t.dtype() == DType.BF16));
      assertEquals(
          "JambaForCausalLM", model.config().architecture(), () -> model.config().toString());
      assertSaneLogits(model, "jamba-tiny");
    }
  }

  @Test
  void shouldWriteByteIdenticalFilesForTheSameSeedAndDifferentOnesForAnother() throws IOException {
    String cfg = config("jamba");
    Path a = SyntheticCheckpoints.materialize("j", cfg, 5, DType.F32, root.resolve("a"));
    Path b = SyntheticCheckpoints.materialize("j", cfg, 5, DType.F32, root.resolve("b"));
    Path c = SyntheticCheckpoints.materialize("j", cfg, 6, DType.F32, root.resolve("a"));
    Path d = SyntheticCheckpoints.materialize("j", cfg, 5, DType.BF16, root.resolve("a"));
    assertEquals(
        -1L, Files.mismatch(a.resolve("model.safetensors"), b.resolve("model.safetensors")));
    assertEquals(a.getFileName(), b.getFileName());
    assertNotEquals(a, c);
    assertNotEquals(a, d);
    long firstDiff = Files.mismatch(a.resolve("model.safetensors"), c.resolve("model.safetensors"));
    assertTrue(firstDiff > 0, "seeds 5 and 6 gave identical weights");
    assertEquals(
        Files.size(a.resolve("model.safetensors")), Files.size(c.resolve("model.safetensors")));
    assertTrue(
        Files.size(d.resolve("model.safetensors")) < Files.size(a.resolve("model.safetensors")));
    assertEquals(cfg, Files.readString(a.resolve("config.json")));
  }

  @Test
  void shouldReuseTheCachedFolderWithoutRewritingIt() throws IOException {
    String cfg = config("llama");
    Path first = SyntheticCheckpoints.materialize("llama", cfg, 3, DType.F32, root);
    Path weights = first.resolve("model.safetensors");
    FileTime old = FileTime.fromMillis(1_000_000L);
    Files.setLastModifiedTime(weights, old);
    Path second = SyntheticCheckpoints.materialize("llama", cfg, 3, DType.F32, root);
    assertEquals(first, second);
    assertEquals(old, Files.getLastModifiedTime(weights));
    try (Stream<Path> entries = Files.list(root)) {
      assertEquals(List.of(first), entries.toList(), "no temporary folder may be left behind");
    }
  }

  @Test
  void shouldHonourTheCacheDirectoryProperty() {
    String before = System.getProperty(SyntheticCheckpoints.DIR_PROPERTY);
    System.setProperty(SyntheticCheckpoints.DIR_PROPERTY, root.resolve("cache").toString());
    try {
      assertEquals(root.resolve("cache"), SyntheticCheckpoints.defaultRoot());
    } finally {
      if (before == null) {
        System.clearProperty(SyntheticCheckpoints.DIR_PROPERTY);
      } else {
        System.setProperty(SyntheticCheckpoints.DIR_PROPERTY, before);
      }
    }
  }

  @Test
  void shouldDescribeTheRealModelsAtTheirPublishedParameterCounts() {
    assertEquals(
        494_032_768L,
        SyntheticCheckpoints.numParameters(SyntheticCheckpoints.presetConfig("qwen2-0.5b")));
    assertEquals(
        268_098_176L,
        SyntheticCheckpoints.numParameters(SyntheticCheckpoints.presetConfig("gemma3-270m")));
    long llama =
        SyntheticCheckpoints.numParameters(SyntheticCheckpoints.presetConfig("llama-100m"));
    assertTrue(llama > 95_000_000L && llama < 115_000_000L, "llama-100m params=" + llama);
    // the shapes of Llama 3.2 1B (tied) and Llama 3 8B
    assertEquals(
        1_235_814_400L,
        SyntheticCheckpoints.numParameters(SyntheticCheckpoints.presetConfig("llama-1b")));
    assertEquals(
        8_030_261_248L,
        SyntheticCheckpoints.numParameters(SyntheticCheckpoints.presetConfig("llama-8b")));
    for (String preset : SyntheticCheckpoints.PRESETS) {
      String cfg = SyntheticCheckpoints.presetConfig(preset);
      assertEquals(
          ModelConfigs.parse(Json.parseObject(cfg)).architecture(),
          ((List<?>) Json.parseObject(cfg).get("architectures")).getFirst(),
          preset);
    }
  }

  @Test
  void shouldNameTheKnownPresetsWhenOneIsUnknown() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> SyntheticCheckpoints.materialize("synthetic:nope", 0, DType.F32, root));
    assertTrue(
        e.getMessage().contains("nope") && e.getMessage().contains("qwen2-0.5b"), e::getMessage);
  }

  @Test
  void shouldRejectAnInvalidConfigNamingIt() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                SyntheticCheckpoints.materialize(
                    "bad", "{\"architectures\": [\"GPT2LMHeadModel\"]}", 0, DType.F32, root));
    assertTrue(e.getMessage().startsWith("synthetic config bad: "), e::getMessage);
  }

  private static List<String> names(List<TensorShape> tensors) {
    return tensors.stream().map(TensorShape::name).toList();
  }

  /** Prefill of a random prompt: every logit finite, each row spread, rows differing. */
  private void assertSaneLogits(CausalLm model, String what) {
    int vocab = model.vocabSize();
    int[] ids = new Random(11).ints(PROMPT_TOKENS, 0, vocab).toArray();
    try (PagedRunner runner = new PagedRunner(model, 16, 16, -1)) {
      float[] logits = runner.prefill(ids, runner.table(runner.rowsFor(ids.length)), 16, pool);
      assertEquals(PROMPT_TOKENS * vocab, logits.length);
      for (int r = 0; r < PROMPT_TOKENS; r++) {
        double sum = 0;
        double sq = 0;
        for (int v = 0; v < vocab; v++) {
          float x = logits[r * vocab + v];
          assertTrue(Float.isFinite(x), what + " row " + r + " logit " + v + "=" + x);
          sum += x;
          sq += (double) x * x;
        }
        double std = Math.sqrt(sq / vocab - (sum / vocab) * (sum / vocab));
        assertTrue(std > 1e-3 && std < 100, what + " row " + r + " logit std=" + std);
      }
      assertNotEquals(
          PagedRunner.argmax(java.util.Arrays.copyOfRange(logits, 0, vocab)) + ":" + logits[0],
          PagedRunner.argmax(
                  java.util.Arrays.copyOfRange(
                      logits, (PROMPT_TOKENS - 1) * vocab, PROMPT_TOKENS * vocab))
              + ":"
              + logits[(PROMPT_TOKENS - 1) * vocab],
          what + ": first and last rows are identical");
    }
  }
}

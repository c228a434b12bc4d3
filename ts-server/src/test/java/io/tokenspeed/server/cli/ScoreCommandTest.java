package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.json.JsonMapper;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@code tokenspeed score} run in-process on ts-model's Hugging Face fixtures: the logits it writes
 * must match the ones transformers computed, and its JSON lines must agree with them.
 */
class ScoreCommandTest {

  /** Absolute tolerance on logits against the transformers reference (float32). */
  static final double TOLERANCE = 1e-4;

  private static final JsonMapper JSON = new JsonMapper();

  @TempDir Path tmp;

  static Stream<Arguments> fixturesAndPrompts() {
    return Stream.of(ModelFixtures.NAMES)
        .flatMap(
            name ->
                Stream.iterate(0, p -> p < ModelFixtures.PROMPTS, p -> p + 1)
                    .map(p -> Arguments.of(name, p)));
  }

  @ParameterizedTest(name = "{0} prompt {1}")
  @MethodSource("fixturesAndPrompts")
  void shouldWriteTheReferenceLogitsAndMatchingTopTokens(String fixture, int prompt)
      throws Exception {
    Path dir = ModelFixtures.extract(fixture, tmp);
    int[] ids = ModelFixtures.ids(dir, prompt);
    float[] want = ModelFixtures.logits(dir, prompt);
    Path out = tmp.resolve("logits.safetensors");
    CliRun run =
        CliRun.of(
            "score",
            "--model",
            dir.toString(),
            "--tokens",
            ModelFixtures.tokenList(ids),
            "--top",
            "3",
            "--threads",
            "2",
            "--logits-out",
            out.toString());
    assertEquals(0, run.exitCode(), run::toString);
    assertEquals("", run.err());
    ModelFixtures.Logits got = ModelFixtures.readLogits(out);
    int vocab = want.length / ids.length;
    assertArrayEquals(new int[] {ids.length, vocab}, got.shape());
    double maxDelta = 0;
    for (int i = 0; i < want.length; i++) {
      maxDelta = Math.max(maxDelta, Math.abs(want[i] - got.values()[i]));
    }
    assertTrue(maxDelta <= TOLERANCE, fixture + " prompt " + prompt + " max |dlogit|=" + maxDelta);
    checkLines(run.outLines(), ids, got.values(), vocab, 3);
  }

  /** Each line: its position, its token, and the K largest logits of its row, largest first. */
  static void checkLines(List<String> lines, int[] ids, float[] logits, int vocab, int k)
      throws Exception {
    assertEquals(ids.length, lines.size(), () -> String.join("\n", lines));
    for (int p = 0; p < ids.length; p++) {
      JsonNode line = JSON.readTree(lines.get(p));
      assertEquals(p, line.get("position").asInt());
      assertEquals(ids[p], line.get("token").asInt());
      JsonNode top = line.get("top");
      assertEquals(k, top.size());
      float previous = Float.POSITIVE_INFINITY;
      for (JsonNode entry : top) {
        int id = entry.get("id").asInt();
        float logit = (float) entry.get("logit").asDouble();
        assertEquals(logits[p * vocab + id], logit, 0f, "position " + p + " id " + id);
        assertTrue(logit <= previous, "top is not in descending order at position " + p);
        previous = logit;
      }
      int larger = 0;
      for (int v = 0; v < vocab; v++) {
        if (logits[p * vocab + v] > previous) {
          larger++;
        }
      }
      assertTrue(larger < k, "position " + p + ": " + larger + " logits beat the listed top " + k);
    }
  }

  @Test
  void shouldScoreTextWithTheByteTokenizerAndSayWhy() throws Exception {
    Path dir = ModelFixtures.extract("llama", tmp);
    Path out = tmp.resolve("text.safetensors");
    CliRun run =
        CliRun.of("score", "--model", dir.toString(), "--text", "héllo", "--logits-out", "" + out);
    assertEquals(0, run.exitCode(), run::toString);
    assertTrue(
        run.err().startsWith("note: --text: ") && run.err().contains("byte tokenizer"), run::err);
    byte[] utf8 = "héllo".getBytes(StandardCharsets.UTF_8);
    int[] ids = new int[utf8.length];
    for (int i = 0; i < ids.length; i++) {
      ids[i] = utf8[i] & 0xff;
    }
    checkLines(run.outLines(), ids, ModelFixtures.readLogits(out).values(), 512, 5);
  }

  @Test
  void shouldGenerateAndScoreASyntheticPreset() throws Exception {
    String before = System.getProperty(SyntheticCheckpoints.DIR_PROPERTY);
    System.setProperty(SyntheticCheckpoints.DIR_PROPERTY, tmp.resolve("synthetic").toString());
    try {
      Path out = tmp.resolve("jamba.safetensors");
      CliRun run =
          CliRun.of(
              "score",
              "--model",
              "synthetic:jamba-tiny",
              "--seed",
              "3",
              "--tokens",
              "5,900,17,1023",
              "--top",
              "2",
              "--logits-out",
              out.toString());
      assertEquals(0, run.exitCode(), run::toString);
      ModelFixtures.Logits got = ModelFixtures.readLogits(out);
      assertArrayEquals(new int[] {4, 1024}, got.shape());
      for (float x : got.values()) {
        assertTrue(Float.isFinite(x), "logit=" + x);
      }
      checkLines(run.outLines(), new int[] {5, 900, 17, 1023}, got.values(), 1024, 2);
      CliRun again =
          CliRun.of(
              "score",
              "--model",
              "synthetic:jamba-tiny",
              "--seed",
              "3",
              "--tokens",
              "5,900,17,1023",
              "--top",
              "2");
      assertEquals(run.out(), again.out(), "the cached synthetic model scores the same");
    } finally {
      if (before == null) {
        System.clearProperty(SyntheticCheckpoints.DIR_PROPERTY);
      } else {
        System.setProperty(SyntheticCheckpoints.DIR_PROPERTY, before);
      }
    }
  }
}

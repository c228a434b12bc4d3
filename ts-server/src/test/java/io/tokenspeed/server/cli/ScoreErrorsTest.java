package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every bad input to {@code tokenspeed score} gives one stderr line, {@code error: ...}, naming the
 * flag and the value, exit 2 for usage and 1 for invalid input, and nothing on stdout.
 */
class ScoreErrorsTest {

  private static final String MODEL = "{model}";

  record Case(String name, List<String> args, int exitCode, List<String> needles) {
    @Override
    public String toString() {
      return name;
    }
  }

  @TempDir Path tmp;

  static Case of(String name, int exitCode, List<String> args, String... needles) {
    List<String> all = new ArrayList<>(List.of("score"));
    all.addAll(args);
    return new Case(name, all, exitCode, List.of(needles));
  }

  static Stream<Case> cases() {
    return Stream.of(
        of(
            "missing model folder",
            1,
            List.of("--model", "/nonexistent/model", "--tokens", "1"),
            "--model=/nonexistent/model",
            "not a directory"),
        of(
            "folder without a checkpoint",
            1,
            List.of("--model", "{tmp}", "--tokens", "1"),
            "--model=",
            "config.json"),
        of(
            "unknown synthetic preset",
            1,
            List.of("--model", "synthetic:gpt5", "--tokens", "1"),
            "--model=synthetic:gpt5",
            "qwen2-0.5b"),
        of("no model", 2, List.of("--tokens", "1"), "--model"),
        of(
            "both prompts",
            2,
            List.of("--model", MODEL, "--tokens", "1", "--text", "a"),
            "--text and --tokens cannot be combined"),
        of("no prompt", 2, List.of("--model", MODEL), "a prompt is required"),
        of(
            "token id not an integer",
            2,
            List.of("--model", MODEL, "--tokens", "1,x"),
            "--tokens: token id=\"x\" at position 1"),
        of(
            "negative token id",
            2,
            List.of("--model", MODEL, "--tokens", "-3"),
            "--tokens: token id=-3 at position 0"),
        of("empty token list", 2, List.of("--model", MODEL, "--tokens", ""), "--tokens=\"\""),
        of(
            "token id past the vocabulary",
            1,
            List.of("--model", MODEL, "--tokens", "1,512"),
            "--tokens: token id=512 at position 1",
            "[0, 512)",
            "vocab_size=512"),
        of("top zero", 2, List.of("--model", MODEL, "--tokens", "1", "--top", "0"), "--top=0"),
        of(
            "bad dtype",
            2,
            List.of("--model", MODEL, "--tokens", "1", "--dtype", "f8"),
            "--dtype=f8",
            "f32, bf16"),
        of(
            "zero threads",
            2,
            List.of("--model", MODEL, "--tokens", "1", "--threads", "0"),
            "--threads=0"));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void shouldExitWithOneNamedErrorLine(Case c) throws Exception {
    Path llama = ModelFixtures.extract("llama", tmp);
    String before = System.getProperty(SyntheticCheckpoints.DIR_PROPERTY);
    System.setProperty(SyntheticCheckpoints.DIR_PROPERTY, tmp.resolve("synthetic").toString());
    try {
      String[] args =
          c.args().stream()
              .map(
                  a ->
                      a.replace(MODEL, llama.toString())
                          .replace("{tmp}", tmp.resolve("empty").toString()))
              .toArray(String[]::new);
      Files.createDirectories(tmp.resolve("empty"));
      CliRun run = CliRun.of(args);
      assertEquals(c.exitCode(), run.exitCode(), run::toString);
      assertEquals("", run.out(), run::toString);
      assertEquals(1, run.err().lines().count(), run::toString);
      assertTrue(run.err().startsWith("error: "), run::toString);
      for (String needle : c.needles()) {
        assertTrue(run.err().contains(needle), () -> "missing '" + needle + "' in " + run);
      }
    } finally {
      if (before == null) {
        System.clearProperty(SyntheticCheckpoints.DIR_PROPERTY);
      } else {
        System.setProperty(SyntheticCheckpoints.DIR_PROPERTY, before);
      }
    }
  }
}

package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every bad input to {@code tokenspeed generate} gives one stderr line, {@code error: ...}, naming
 * the flag or the limit, exit 2 for usage and 1 for invalid input, and nothing on stdout.
 */
class GenerateErrorsTest {

  private static final String LLAMA = "{llama}";

  record Case(String name, List<String> args, int exitCode, List<String> needles) {
    @Override
    public String toString() {
      return name;
    }
  }

  @TempDir Path tmp;

  static Case of(String name, int exitCode, List<String> args, String... needles) {
    List<String> all = new ArrayList<>(List.of("generate"));
    all.addAll(args);
    return new Case(name, all, exitCode, List.of(needles));
  }

  static Case onLlama(String name, int exitCode, List<String> flags, String... needles) {
    List<String> args = new ArrayList<>(List.of("--model", LLAMA, "--tokens", "1,2,3"));
    args.addAll(flags);
    return of(name, exitCode, args, needles);
  }

  static Stream<Case> cases() {
    return Stream.of(
        of("no prompt", 2, List.of("--model", LLAMA), "a prompt is required"),
        of(
            "both prompts",
            2,
            List.of("--model", LLAMA, "--tokens", "1", "--prompt", "a"),
            "--prompt and --tokens cannot be combined"),
        of("no model", 2, List.of("--tokens", "1"), "--model"),
        onLlama("unknown flag", 2, List.of("--beam-width", "4"), "--beam-width"),
        onLlama("temperature not a number", 2, List.of("--temperature", "hot"), "hot"),
        onLlama(
            "negative temperature",
            1,
            List.of("--temperature", "-1"),
            "--temperature=-1.0 must be finite and >= 0"),
        onLlama("top-k below -1", 1, List.of("--top-k", "-2"), "--top-k=-2 must be >= -1"),
        onLlama("top-p zero", 1, List.of("--top-p", "0"), "--top-p=0.0 must be in (0, 1]"),
        onLlama("min-p above one", 1, List.of("--min-p", "1.5"), "--min-p=1.5 must be in [0, 1]"),
        onLlama("max-tokens zero", 1, List.of("--max-tokens", "0"), "--max-tokens=0 must be >= 1"),
        onLlama(
            "negative stop token id",
            1,
            List.of("--stop-token-ids", "5,-1"),
            "--stop-token-ids contains -1"),
        onLlama("stop token id not an integer", 2, List.of("--stop-token-ids", "5,x"), "x"),
        onLlama("zero threads", 2, List.of("--threads", "0"), "--threads=0"),
        onLlama("zero device tokens", 2, List.of("--device-tokens", "0"), "--device-tokens=0"),
        of(
            "token id past the vocabulary",
            1,
            List.of("--model", LLAMA, "--tokens", "1,512"),
            "--tokens: token id=512 at position 1",
            "vocab_size=512"),
        onLlama(
            "request over the single-request limit",
            1,
            List.of("--device-tokens", "64", "--max-tokens", "1000"),
            "prompt of 3 tokens + max_tokens 1000 = 1003 exceeds the single-request limit of"),
        // a lone surrogate: no file-name encoding has bytes for it, whatever the locale
        of(
            "model folder no file name can hold",
            1,
            List.of("--model", "/tmp/model\ud800", "--tokens", "1"),
            "--model=\"/tmp/model\\ud800\" cannot be a file name in this JVM",
            "which cannot represent U+D800"),
        onLlama(
            "store directory no file name can hold",
            2,
            List.of(
                "--kvstore-storage-backend",
                "file",
                "--kvstore-storage-backend-extra-config",
                "{\"path\": \"/tmp/l3\\ud800\"}"),
            "--kvstore-storage-backend-extra-config: path=\"/tmp/l3\\ud800\" cannot be a file"
                + " name in this JVM: its file-name encoding (sun.jnu.encoding) is",
            "which cannot represent U+D800"),
        of(
            "unknown synthetic preset",
            1,
            List.of("--model", "synthetic:gpt5", "--tokens", "1"),
            "--model=synthetic:gpt5"));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void shouldExitWithOneNamedErrorLine(Case c) {
    Path llama = ModelFixtures.extract("llama", tmp);
    String[] args =
        c.args().stream().map(a -> a.replace(LLAMA, llama.toString())).toArray(String[]::new);
    CliRun run = CliRun.of(args);
    assertEquals(c.exitCode(), run.exitCode(), run::toString);
    assertEquals("", run.out(), run::toString);
    assertEquals(1, run.err().lines().count(), run::toString);
    assertTrue(run.err().startsWith("error: "), run::toString);
    for (String needle : c.needles()) {
      assertTrue(run.err().contains(needle), () -> "missing '" + needle + "' in " + run);
    }
  }
}

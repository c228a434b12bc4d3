package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every bad input gives exactly one line on stderr, {@code error: ...}, that names the field and
 * the value, a non-zero exit code (2 for usage, 1 for invalid input) and no stack trace.
 */
class KeysErrorsTest {

  private static final String FILE = "{file}";

  /** A bad input: an optional identity file's text, the arguments, the exit code, the needles. */
  record Case(String name, String fileText, List<String> args, int exitCode, List<String> needles) {
    @Override
    public String toString() {
      return name;
    }
  }

  @TempDir Path tmp;

  static String example() {
    try {
      return Files.readString(KeysCommandTest.EXAMPLE);
    } catch (IOException e) {
      throw new AssertionError(e);
    }
  }

  /** The example identity with one exact piece of text replaced (which must be present). */
  static String exampleWith(String from, String to) {
    String text = example();
    if (!text.contains(from)) {
      throw new AssertionError("example identity has no '" + from + "'");
    }
    return text.replaceFirst(java.util.regex.Pattern.quote(from), to);
  }

  static Case fileCase(String name, String fileText, int exitCode, String... needles) {
    return new Case(
        name,
        fileText,
        List.of("keys", "--identity", FILE, "--text", "hello"),
        exitCode,
        List.of(needles));
  }

  static Case flagsCase(String name, String group, String... needles) {
    return new Case(
        name,
        null,
        List.of(
            "keys",
            "--model-id=m",
            "--checkpoint-revision=r",
            "--weight-version=w",
            "--attention-backend=b",
            "--prefix-granularity=64",
            "--dtype=bf16",
            "--group=" + group,
            "--text=hello"),
        2,
        List.of(needles));
  }

  static Case promptCase(String name, int exitCode, String... argsThenNeedle) {
    List<String> args = new ArrayList<>(List.of("keys", "--identity", FILE));
    args.addAll(List.of(argsThenNeedle).subList(0, argsThenNeedle.length - 1));
    return new Case(
        name, example(), args, exitCode, List.of(argsThenNeedle[argsThenNeedle.length - 1]));
  }

  static Stream<Case> badInputs() {
    return Stream.of(
        // layout
        fileCase(
            "block granularity does not divide P (file)",
            exampleWith("\"block_granularity\": 16", "\"block_granularity\": 48"),
            1,
            "block_granularity=48",
            "prefix_granularity=64"),
        flagsCase(
            "block granularity does not divide P (flags)",
            "kind=full,bg=48,bytes=8",
            "block_granularity=48",
            "prefix_granularity=64"),
        fileCase(
            "window of 0 (file)",
            exampleWith("\"window_tokens\": 128", "\"window_tokens\": 0"),
            1,
            "cache.groups[1]",
            "window_tokens=0"),
        flagsCase("window of 0 (flags)", "kind=swa,bg=32,bytes=8,window=0", "window=0"),
        fileCase(
            "unknown group kind (file)",
            exampleWith("\"kind\": \"swa\"", "\"kind\": \"sliding\""),
            1,
            "kind=sliding",
            "allowed: full, swa, state"),
        flagsCase("unknown group kind (flags)", "kind=sliding,bg=32,bytes=8", "kind=sliding"),
        flagsCase("unknown key in --group", "kind=full,bg=16,byte=8", "unknown key byte=8"),
        flagsCase("non-numeric bg in --group", "kind=full,bg=x,bytes=8", "bg=x"),
        fileCase(
            "shard count that does not divide the TP size",
            exampleWith(
                "\"sharding\": \"head_partitioned\"",
                "\"sharding\": \"page_cyclic\", \"shard_count\": 2"),
            1,
            "shard_count=2",
            "attention_tp_size=1"),
        // identity file
        fileCase(
            "typo in a top-level field",
            exampleWith("\"model_id\"", "\"modle_id\""),
            1,
            "unknown field modle_id"),
        fileCase(
            "typo in a group field",
            exampleWith("\"block_granularity\": 64", "\"blok_granularity\": 64"),
            1,
            "unknown field cache.groups[2].blok_granularity"),
        fileCase(
            "string where an integer belongs",
            exampleWith("\"prefix_granularity\": 64", "\"prefix_granularity\": \"64\""),
            1,
            "cache.prefix_granularity=\"64\"",
            "must be an integer"),
        fileCase(
            "missing identity field",
            exampleWith("\"weight_version\": \"w1\",", ""),
            1,
            "weight_version is missing"),
        fileCase(
            "malformed JSON",
            "{\n  \"model_id\": \"m\",\n  \"cache\": }\n",
            1,
            "malformed JSON at line 3, column 12"),
        fileCase(
            "duplicate key",
            exampleWith(
                "\"model_id\": \"tiny-hybrid\",", "\"model_id\": \"a\", \"model_id\": \"b\","),
            1,
            "malformed JSON at line 2",
            "model_id"),
        fileCase("empty file", "", 1, "malformed JSON", "empty"),
        new Case(
            "missing identity file",
            null,
            List.of("keys", "--identity", "/nonexistent/identity.json", "--text", "a"),
            1,
            List.of("--identity=/nonexistent/identity.json", "no such file")),
        // prompt
        promptCase("empty --text", 2, "--text", "", "--text=\"\""),
        promptCase("empty --tokens", 2, "--tokens", "", "--tokens=\"\""),
        promptCase("negative token id", 2, "--tokens", "1,-5,3", "token id=-5 at position 1"),
        promptCase("non-numeric token id", 2, "--tokens", "1,2,abc", "token id=\"abc\""),
        promptCase("token id beyond 2^31", 2, "--tokens", "1,4294967296", "token id=4294967296"),
        promptCase(
            "token id at the vocabulary size",
            2,
            "--vocab-size",
            "100",
            "--tokens",
            "1,100",
            "token id=100 at position 1 is out of range [0, 100) for --vocab-size=100"),
        promptCase(
            "text byte beyond the vocabulary size",
            2,
            "--vocab-size",
            "100",
            "--text",
            "az",
            "token id=122 at position 1"),
        promptCase("no prompt", 2, "--text"),
        promptCase("both prompt forms", 2, "--text", "a", "--tokens", "1", "--text and --tokens"),
        promptCase("rank beyond the TP size", 2, "--rank", "1", "--text", "a", "--rank=1"),
        promptCase("non-numeric rank", 2, "--rank", "one", "--text", "a", "'one'"),
        promptCase("unknown option", 2, "--txet", "a", "--txet"),
        promptCase("identity twice", 2, "--model-id", "m", "--text", "a", "--model-id"),
        new Case(
            "no identity", null, List.of("keys", "--text", "a"), 2, List.of("--identity FILE")),
        // a lone surrogate: no file-name encoding has bytes for it, whatever the locale
        new Case(
            "identity file no file name can hold",
            null,
            List.of("keys", "--identity", "/tmp/id\ud800.json", "--text", "a"),
            2,
            List.of(
                "Invalid value for option '--identity': \"/tmp/id\\ud800.json\" cannot be a file"
                    + " name in this JVM: its file-name encoding (sun.jnu.encoding) is",
                "which cannot represent U+D800 (half of a surrogate pair")),
        new Case(
            "incomplete identity flags",
            null,
            List.of("keys", "--model-id", "m", "--text", "a"),
            2,
            List.of("--checkpoint-revision is missing")));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("badInputs")
  void shouldPrintOneLineNamingFieldAndValueWhenInputIsBad(Case c) throws IOException {
    Path file = tmp.resolve("identity.json");
    if (c.fileText() != null) {
      Files.writeString(file, c.fileText(), StandardCharsets.UTF_8);
    }
    String[] args =
        c.args().stream().map(a -> a.equals(FILE) ? file.toString() : a).toArray(String[]::new);
    CliRun run = CliRun.of(args);
    assertEquals(c.exitCode(), run.exitCode(), run::toString);
    assertOneErrorLine(run);
    for (String needle : c.needles()) {
      assertTrue(run.err().contains(needle), () -> "missing '" + needle + "' in " + run);
    }
  }

  static void assertOneErrorLine(CliRun run) {
    assertEquals("", run.out(), run::toString);
    assertTrue(run.err().startsWith("error: "), run::toString);
    assertEquals(1, run.err().lines().count(), run::toString);
    assertTrue(run.err().endsWith(System.lineSeparator()), run::toString);
    assertFalse(run.err().contains("Exception"), run::toString);
    assertFalse(run.err().contains("at io."), run::toString);
    assertFalse(run.err().contains("at picocli."), run::toString);
  }

  @Test
  void shouldFailWithUsageWhenNoCommandIsGiven() {
    CliRun run = CliRun.of();
    assertEquals(2, run.exitCode());
    assertOneErrorLine(run);
    assertTrue(run.err().contains("keys"), run::toString);
  }

  @Test
  void shouldPrintHelpAndVersionWithExitZero() {
    CliRun help = CliRun.of("keys", "--help");
    assertEquals(0, help.exitCode());
    assertTrue(help.out().contains("--identity=FILE"), help::toString);
    assertTrue(help.out().startsWith("Usage: tokenspeed keys (--identity"), help::toString);
    assertFalse(help.out().contains("Usage: Usage:"), help::toString);
    CliRun version = CliRun.of("--version");
    assertEquals(0, version.exitCode());
    assertEquals("tokenspeed " + VersionProvider.buildVersion(), version.outLines().getFirst());
    assertFalse(VersionProvider.buildVersion().contains("$"), "resource filtering did not run");
  }
}

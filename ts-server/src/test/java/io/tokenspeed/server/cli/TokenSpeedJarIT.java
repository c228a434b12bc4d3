package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.server.cli.JarProcess.Result;
import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Runs the shaded jar as a separate JVM, the way {@code bin/tokenspeed} does, from an unrelated
 * working directory: the jar must start on its own (manifest, shaded dependencies, resources) and
 * print exactly what the in-process command prints.
 */
class TokenSpeedJarIT {

  private static final long TIMEOUT_SECONDS = 120;

  @TempDir Path workDir;

  private Result runJar(String... args) throws IOException, InterruptedException {
    return runJar(List.of(), args);
  }

  private Result runJar(List<String> jvmOptions, String... args)
      throws IOException, InterruptedException {
    return runJar(jvmOptions, Map.of(), args);
  }

  private Result runJar(List<String> jvmOptions, Map<String, String> env, String... args)
      throws IOException, InterruptedException {
    return JarProcess.run(workDir, jvmOptions, env, List.of(args), TIMEOUT_SECONDS);
  }

  @Test
  void shouldPrintTheSameKeysAsInProcessWhenRunAsJar() throws Exception {
    String[] args = {
      "keys",
      "--identity",
      KeysCommandTest.EXAMPLE.toAbsolutePath().toString(),
      "--text",
      "hello world, this is a prompt long enough for two pages of sixty-four tokens each, "
          + "plus a tail that makes it longer than one hundred and twenty-eight bytes."
    };
    Result jar = runJar(args);
    CliRun inProcess = CliRun.of(args);
    assertEquals(0, jar.exitCode(), jar::toString);
    assertEquals("", jar.err());
    assertEquals(inProcess.out(), jar.out());
    assertTrue(jar.out().startsWith("namespace tsl3-"), jar::out);
    assertTrue(jar.out().contains("\"boundary\":128,"), jar::out);
  }

  @Test
  void shouldExitTwoWithOneLineWhenJarGetsABadTokenList() throws Exception {
    Result jar =
        runJar(
            "keys",
            "--identity",
            KeysCommandTest.EXAMPLE.toAbsolutePath().toString(),
            "--tokens",
            "1,x");
    assertEquals(2, jar.exitCode(), jar::toString);
    assertEquals("", jar.out());
    assertEquals(1, jar.err().lines().count(), jar::err);
    assertTrue(jar.err().startsWith("error: --tokens: token id=\"x\" at position 1"), jar::err);
  }

  @Test
  void shouldPrintVersionWhenRunAsJar() throws Exception {
    Result jar = runJar("--version");
    assertEquals(0, jar.exitCode(), jar::toString);
    assertEquals(
        "tokenspeed " + VersionProvider.buildVersion(), jar.out().lines().findFirst().get());
  }

  /** What bin/tokenspeed adds for commands that run a model. */
  private static final List<String> VECTOR = List.of("--add-modules", "jdk.incubator.vector");

  @org.junit.jupiter.params.ParameterizedTest(name = "{0}")
  @org.junit.jupiter.params.provider.ValueSource(
      strings = {"llama", "qwen2", "gemma3", "mamba", "jamba"})
  void shouldScoreAFixtureToItsReferenceLogitsWhenRunAsJar(String fixture) throws Exception {
    Path dir = ModelFixtures.extract(fixture, workDir.resolve("models"));
    int[] ids = ModelFixtures.ids(dir, 0);
    float[] want = ModelFixtures.logits(dir, 0);
    Path out = workDir.resolve("logits.safetensors");
    Result jar =
        runJar(
            VECTOR,
            "score",
            "--model",
            dir.toString(),
            "--tokens",
            ModelFixtures.tokenList(ids),
            "--logits-out",
            out.toString());
    assertEquals(0, jar.exitCode(), jar::toString);
    assertTrue(
        jar.err().lines().allMatch(l -> l.startsWith("WARNING: Using incubator modules")),
        jar::err);
    float[] got = ModelFixtures.readLogits(out).values();
    assertEquals(want.length, got.length);
    for (int i = 0; i < want.length; i++) {
      assertEquals(want[i], got[i], ScoreCommandTest.TOLERANCE, fixture + " logit " + i);
    }
    ScoreCommandTest.checkLines(jar.out().lines().toList(), ids, got, want.length / ids.length, 5);
  }

  @Test
  void shouldNameTheMissingVectorModuleWhenJarRunsScoreWithoutIt() throws Exception {
    Path dir = ModelFixtures.extract("llama", workDir.resolve("models"));
    Result jar = runJar("score", "--model", dir.toString(), "--tokens", "1,2");
    assertEquals(1, jar.exitCode(), jar::toString);
    assertEquals("", jar.out());
    assertEquals(1, jar.err().lines().count(), jar::err);
    assertTrue(
        jar.err()
            .startsWith("error: score needs the JVM option --add-modules jdk.incubator.vector"),
        jar::err);
  }

  @Test
  void shouldStreamGeneratedTextAndASummaryWhenJarRunsGenerate() throws Exception {
    String model = TinyLlama.model(workDir.resolve("configs"));
    Path synthetic = workDir.resolve("synthetic");
    String[] args = {
      "generate",
      "--model",
      model,
      "--prompt",
      "Hello",
      "--temperature",
      "0",
      "--max-tokens",
      "12",
      "--threads",
      "1"
    };
    Result jar = runJar(VECTOR, Map.of(SyntheticCheckpoints.DIR_ENV, synthetic.toString()), args);
    assertEquals(0, jar.exitCode(), jar::toString);
    List<String> err =
        jar.err().lines().filter(l -> !l.startsWith("WARNING: Using incubator modules")).toList();
    assertTrue(err.getFirst().startsWith("note: --prompt: "), jar::err);
    assertTrue(err.getLast().startsWith("generated 12 tokens (finish: length) | TTFT "), jar::err);
    assertTrue(
        err.getLast().endsWith("reused prefix: device 0, host 0 (from L3 0) of 5 prompt tokens"),
        jar::err);
    String before = System.getProperty(SyntheticCheckpoints.DIR_PROPERTY);
    System.setProperty(SyntheticCheckpoints.DIR_PROPERTY, synthetic.toString());
    try {
      CliRun inProcess = CliRun.of(args);
      assertEquals(0, inProcess.exitCode(), inProcess::toString);
      assertEquals(inProcess.out(), jar.out(), "the jar streams what the in-process run prints");
      assertTrue(jar.out().endsWith(System.lineSeparator()), jar::out);
    } finally {
      if (before == null) {
        System.clearProperty(SyntheticCheckpoints.DIR_PROPERTY);
      } else {
        System.setProperty(SyntheticCheckpoints.DIR_PROPERTY, before);
      }
    }
  }
}

package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.json.JsonMapper;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.model.tokenizer.ByteTokenizer;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@code tokenspeed generate} run in-process: greedy decoding through the engine reproduces the ids
 * transformers generated for ts-model's fixtures, {@code --json} is one object with the same ids
 * and the request's figures, text streams on a synthetic model, and a sampling seed replays.
 */
class GenerateCommandTest {

  private static final JsonMapper JSON = new JsonMapper();

  @TempDir Path tmp;

  private String syntheticDirBefore;

  @BeforeEach
  void useTemporarySyntheticDir() {
    syntheticDirBefore = System.getProperty(SyntheticCheckpoints.DIR_PROPERTY);
    System.setProperty(SyntheticCheckpoints.DIR_PROPERTY, tmp.resolve("synthetic").toString());
  }

  @AfterEach
  void restoreSyntheticDir() {
    if (syntheticDirBefore == null) {
      System.clearProperty(SyntheticCheckpoints.DIR_PROPERTY);
    } else {
      System.setProperty(SyntheticCheckpoints.DIR_PROPERTY, syntheticDirBefore);
    }
  }

  private CliRun greedy(Path fixture, String... extra) {
    int[] ids = ModelFixtures.ids(fixture, 0);
    int steps = ModelFixtures.greedy(fixture, 0).length;
    List<String> args =
        Stream.concat(
                Stream.of(
                    "generate",
                    "--model",
                    fixture.toString(),
                    "--tokens",
                    ModelFixtures.tokenList(ids),
                    "--temperature",
                    "0",
                    "--max-tokens",
                    Integer.toString(steps),
                    "--ignore-eos",
                    "--threads",
                    "2"),
                Stream.of(extra))
            .toList();
    return CliRun.of(args.toArray(String[]::new));
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama", "qwen2", "gemma3"})
  void shouldStreamTheReferenceGreedyIds(String name) {
    Path fixture = ModelFixtures.extract(name, tmp);
    int[] want = ModelFixtures.greedy(fixture, 0);
    CliRun run = greedy(fixture);
    assertEquals(0, run.exitCode(), run::toString);
    assertEquals(1, run.outLines().size(), run::toString);
    int[] got =
        Stream.of(run.outLines().getFirst().split(" ")).mapToInt(Integer::parseInt).toArray();
    assertArrayEquals(want, got, run::toString);
    String summary = run.err().lines().reduce((a, b) -> b).orElseThrow();
    assertTrue(
        summary.startsWith("generated " + want.length + " tokens (finish: length) | TTFT "),
        run::toString);
    assertTrue(summary.contains("tokens/s"), summary);
    assertTrue(
        summary.endsWith(
            "reused prefix: device 0, host 0 (from L3 0) of "
                + ModelFixtures.ids(fixture, 0).length
                + " prompt tokens"),
        summary);
  }

  @Test
  void shouldPrintOneJsonObjectWithTheIdsAndFigures() throws Exception {
    Path fixture = ModelFixtures.extract("qwen2", tmp);
    int[] want = ModelFixtures.greedy(fixture, 0);
    CliRun run = greedy(fixture, "--json");
    assertEquals(0, run.exitCode(), run::toString);
    assertEquals("", run.err(), run::toString);
    assertEquals(1, run.outLines().size(), run::toString);
    JsonNode node = JSON.readTree(run.out());
    int[] got = new int[node.get("tokens").size()];
    for (int i = 0; i < got.length; i++) {
      got[i] = node.get("tokens").get(i).asInt();
    }
    assertArrayEquals(want, got);
    assertEquals("length", node.get("finish_reason").asText());
    assertEquals(ModelFixtures.ids(fixture, 0).length, node.get("prompt_tokens").asInt());
    assertEquals(ByteTokenizer.plain().decode(want), node.get("text").asText());
    double ttft = node.get("ttft_ms").asDouble();
    assertTrue(ttft > 0, "ttft_ms=" + ttft);
    assertTrue(node.get("queue_ms").asDouble() <= ttft, run::out);
    assertTrue(node.get("tpot_ms").asDouble() > 0, run::out);
    assertEquals(0, node.get("reused_device_tokens").asInt());
    assertEquals(0, node.get("reused_host_tokens").asInt());
    assertEquals(6, node.get("warm_up_rounds").asInt(), run::out);
    assertTrue(node.get("warm_up_ttft_ms").asDouble() > 0, run::out);
    assertEquals(
        node.get("prompt_tokens").asInt() + want.length - 1,
        node.get("computed_tokens").asLong(),
        "cold: the prompt, then one decode step per later token");
  }

  @ParameterizedTest(name = "{0} top {1}")
  @CsvSource({"llama, 0", "qwen2, 3", "gemma3, 20"})
  void shouldPrintEachTokensLogprobAsTransformersComputesIt(String name, int top) throws Exception {
    Path fixture = ModelFixtures.extract(name, tmp);
    int[] want = ModelFixtures.greedy(fixture, 0);
    float[] steps = ModelFixtures.steps(fixture, 0);
    int vocab = steps.length / want.length;
    CliRun run = greedy(fixture, "--json", "--logprobs", Integer.toString(top), "--warm-up", "0");
    assertEquals(0, run.exitCode(), run::toString);
    JsonNode node = JSON.readTree(run.out());
    JsonNode logprobs = node.get("logprobs");
    assertEquals(want.length, logprobs.size(), run::out);
    assertEquals(top > 0, node.has("top_logprobs"), run::out);
    for (int k = 0; k < want.length; k++) {
      // transformers' log-softmax of step k's logits, in double
      double max = Double.NEGATIVE_INFINITY;
      for (int v = 0; v < vocab; v++) {
        max = Math.max(max, steps[k * vocab + v]);
      }
      double sum = 0;
      for (int v = 0; v < vocab; v++) {
        sum += Math.exp(steps[k * vocab + v] - max);
      }
      double logSum = max + Math.log(sum);
      double expected = steps[k * vocab + want[k]] - logSum;
      assertEquals(expected, logprobs.get(k).asDouble(), 1e-3, "step " + k + ": " + run.out());
      if (top > 0) {
        JsonNode alternatives = node.get("top_logprobs").get(k);
        assertEquals(top, alternatives.size(), run::out);
        assertEquals(want[k], alternatives.get(0).get("token").asInt(), "greedy: the most likely");
        for (int i = 0; i < top; i++) {
          JsonNode a = alternatives.get(i);
          double lp = steps[k * vocab + a.get("token").asInt()] - logSum;
          assertEquals(lp, a.get("logprob").asDouble(), 1e-3, "step " + k + " top " + i);
          if (i > 0) {
            assertTrue(
                a.get("logprob").asDouble() <= alternatives.get(i - 1).get("logprob").asDouble(),
                "most likely first: " + run.out());
          }
        }
      }
    }
  }

  @ParameterizedTest
  @CsvSource({
    "--logprobs=0, --logprobs prints into the --json object: add --json",
    "'--json,--logprobs=21', --logprobs=21 must be in [0, 20]",
    "'--json,--logprobs=-1', --logprobs=-1 must be in [0, 20]"
  })
  void shouldRefuseLogprobsWithoutJsonOrOutOfRange(String flags, String message) {
    Path fixture = ModelFixtures.extract("llama", tmp);
    CliRun run = greedy(fixture, flags.split(","));
    assertEquals(2, run.exitCode(), run::toString);
    assertTrue(run.err().startsWith("error: " + message), run::toString);
  }

  @Test
  void shouldStreamTheByteTokenizersTextOfASyntheticModel() throws Exception {
    String model = TinyLlama.model(tmp);
    String[] common = {
      "generate",
      "--model",
      model,
      "--prompt",
      "héllo ✓",
      "--temperature",
      "0",
      "--max-tokens",
      "24"
    };
    CliRun json =
        CliRun.of(Stream.concat(Stream.of(common), Stream.of("--json")).toArray(String[]::new));
    assertEquals(0, json.exitCode(), json::toString);
    JsonNode node = JSON.readTree(json.out());
    int[] ids = new int[node.get("tokens").size()];
    for (int i = 0; i < ids.length; i++) {
      ids[i] = node.get("tokens").get(i).asInt();
    }
    assertEquals(24, ids.length, json::toString);
    String text = ByteTokenizer.plain().decode(ids);
    assertEquals(text, node.get("text").asText());

    CliRun run = CliRun.of(common);
    assertEquals(0, run.exitCode(), run::toString);
    assertEquals(text + System.lineSeparator(), run.out(), run::toString);
    List<String> err = run.err().lines().toList();
    assertTrue(err.getFirst().startsWith("note: --prompt: "), run::err);
    assertTrue(err.getFirst().contains("byte tokenizer"), run::err);
    assertTrue(err.getLast().startsWith("generated 24 tokens (finish: length) | TTFT "), run::err);
    assertTrue(
        err.getLast()
            .endsWith(
                " of "
                    + "héllo ✓".getBytes(java.nio.charset.StandardCharsets.UTF_8).length
                    + " prompt tokens"),
        run::err);
  }

  private int[] sampled(String model, long seed) throws Exception {
    CliRun run =
        CliRun.of(
            "generate",
            "--model",
            model,
            "--tokens",
            "1,2,3,4",
            "--max-tokens",
            "16",
            "--temperature",
            "1.5",
            "--top-k",
            "50",
            "--sampling-seed",
            Long.toString(seed),
            "--json");
    assertEquals(0, run.exitCode(), run::toString);
    JsonNode tokens = JSON.readTree(run.out()).get("tokens");
    int[] ids = new int[tokens.size()];
    for (int i = 0; i < ids.length; i++) {
      ids[i] = tokens.get(i).asInt();
    }
    return ids;
  }

  @Test
  void shouldReplayASamplingSeed() throws Exception {
    String model = TinyLlama.model(tmp);
    int[] first = sampled(model, 7);
    assertEquals(16, first.length);
    assertArrayEquals(first, sampled(model, 7), "the same seed samples the same ids");
    Set<String> others = new HashSet<>();
    for (long seed = 8; seed < 11; seed++) {
      others.add(java.util.Arrays.toString(sampled(model, seed)));
    }
    others.add(java.util.Arrays.toString(first));
    assertNotEquals(1, others.size(), "four seeds all sampled " + others);
  }

  @Test
  void shouldRunOnTheCpuByDefaultAndRefuseADeviceItCannotUse() throws Exception {
    Path fixture = ModelFixtures.extract("llama", tmp);
    CliRun cpu = greedy(fixture, "--json", "--device", "cpu");
    assertEquals(0, cpu.exitCode(), cpu::toString);
    CliRun plain = greedy(fixture, "--json");
    assertEquals(JSON.readTree(plain.out()).get("tokens"), JSON.readTree(cpu.out()).get("tokens"));

    CliRun tpu = greedy(fixture, "--device", "tpu");
    assertEquals(2, tpu.exitCode(), tpu::toString);
    assertTrue(
        tpu.err().contains("--device=tpu is not supported; allowed: cpu, cuda, cuda:N (N >= 0)"),
        tpu::toString);
    CliRun negative = greedy(fixture, "--device", "cuda:-1");
    assertEquals(2, negative.exitCode(), negative::toString);

    // this machine has no GPU (the CPU suite runs without one): the error names the device and
    // what CUDA said (a library missing, or no GPU found), not a stack trace
    CliRun gpu = greedy(fixture, "--device", "cuda:0");
    assertEquals(CliErrors.EXIT_INVALID_INPUT, gpu.exitCode(), gpu::toString);
    assertTrue(gpu.err().contains("--device=cuda:0: "), gpu::toString);
    assertTrue(
        gpu.err().contains("not found") || gpu.err().contains("cudaGetDeviceCount"), gpu::toString);
    assertTrue(!gpu.err().contains("\tat "), gpu::toString);
  }

  /**
   * The warm-up runs the request on a throwaway engine first (its line on stderr before the
   * request's), none with --warm-up 0, and the request's output is the same either way.
   */
  @Test
  void shouldWarmUpBeforeTheRequestUnlessToldNot() throws Exception {
    Path fixture = ModelFixtures.extract("llama", tmp);
    int[] want = ModelFixtures.greedy(fixture, 0);
    CliRun warm = greedy(fixture);
    CliRun cold = greedy(fixture, "--warm-up", "0");
    CliRun three = greedy(fixture, "--warm-up", "3");
    for (CliRun run : List.of(warm, cold, three)) {
      assertEquals(0, run.exitCode(), run::toString);
      int[] got =
          Stream.of(run.outLines().getFirst().split(" ")).mapToInt(Integer::parseInt).toArray();
      assertArrayEquals(want, got, run::toString);
    }
    List<String> warmLines = warm.err().lines().toList();
    assertEquals(2, warmLines.size(), warm::toString);
    assertTrue(warmLines.get(0).startsWith("warm-up: 6 rounds in "), warm::toString);
    assertTrue(warmLines.get(1).startsWith("generated "), warm::toString);
    assertTrue(three.err().startsWith("warm-up: 3 rounds in "), three::toString);
    assertEquals(1, cold.err().lines().count(), cold::toString);
    assertTrue(cold.err().startsWith("generated "), cold::toString);
  }

  @ParameterizedTest
  @ValueSource(strings = {"-1", "101"})
  void shouldRefuseAWarmUpOutOfRange(String rounds) {
    Path fixture = ModelFixtures.extract("llama", tmp);
    CliRun run = greedy(fixture, "--warm-up", rounds);
    assertEquals(2, run.exitCode(), run::toString);
    assertTrue(
        run.err().startsWith("error: --warm-up=" + rounds + " must be in [0, 100]"), run::toString);
  }
}

package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.chat.ChatTemplate;
import io.tokenspeed.server.http.Serving;
import io.tokenspeed.server.router.PromptReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import picocli.CommandLine;

/** {@code tokenspeed router}: registered beside {@code serve}, and its usage errors. */
class RouterCommandTest {

  @Test
  void shouldBeListedAmongTheCommandsWithItsOptions() {
    CliRun root = CliRun.of("--help");
    assertEquals(0, root.exitCode(), root.toString());
    assertTrue(root.out().contains("router"), root.out());
    CliRun help = CliRun.of("router", "--help");
    assertEquals(0, help.exitCode(), help.toString());
    for (String option :
        new String[] {
          "--prefill",
          "--decode",
          "--port",
          "--host",
          "--poll-ms",
          "--upstream-timeout-ms",
          "--connect-timeout-ms",
          "--max-body-bytes",
          "--header-timeout",
          "--replicas",
          "--routing",
          "--tokenizer",
          "--kv-index-blocks",
          "--load-tokens"
        }) {
      assertTrue(help.out().contains(option), option + " in\n" + help.out());
    }
  }

  private static final String OK = "--decode http://127.0.0.1:2 --port 0";

  @ParameterizedTest(name = "{0}")
  @CsvSource(
      delimiter = '|',
      value = {
        "another scheme|--prefill ftp://127.0.0.1:1 "
            + OK
            + "|--prefill=ftp://127.0.0.1:1 must be http://HOST:PORT (scheme http)",
        "a path|--prefill http://127.0.0.1:1/v1 "
            + OK
            + "|--prefill=http://127.0.0.1:1/v1 must be http://HOST:PORT (no path",
        "not a URL|--prefill http://127.0.0.1:1 --decode http://[oops --port 0"
            + "|--decode=http://[oops must be http://HOST:PORT",
        "no host|--prefill http://:1 " + OK + "|--prefill=http://:1 must be http://HOST:PORT",
        "a backend port out of range|--prefill http://127.0.0.1:70000 "
            + OK
            + "|--prefill=http://127.0.0.1:70000 must be http://HOST:PORT (port",
        "one backend in both roles|--prefill http://127.0.0.1:2 "
            + OK
            + "|--decode=http://127.0.0.1:2 is a --prefill backend too",
        "a backend twice|--prefill http://127.0.0.1:1,http://127.0.0.1:1/ "
            + OK
            + "|--prefill=http://127.0.0.1:1/ is named twice",
        "a port out of range|--prefill http://127.0.0.1:1 --decode http://127.0.0.1:2 --port 70000"
            + "|--port=70000 must be in [0, 65535]",
        "a poll too frequent|--prefill http://127.0.0.1:1 "
            + OK
            + " --poll-ms 1"
            + "|--poll-ms=1 must be in [10, 3600000]",
        "a timeout of 0|--prefill http://127.0.0.1:1 "
            + OK
            + " --upstream-timeout-ms 0"
            + "|--upstream-timeout-ms=0 must be in [1, 86400000]",
        "a port that is not a number|--prefill http://127.0.0.1:1 --decode http://127.0.0.1:2"
            + " --port eighty|is not an int",
        "replicas beside roles|--replicas http://127.0.0.1:3 --prefill http://127.0.0.1:1 "
            + OK
            + "|--replicas routes fused replicas; it cannot be combined with --prefill or --decode",
        "no backends at all|--port 0|--prefill and --decode (a disaggregated deployment) or"
            + " --replicas (fused replicas) must name the backends",
        "a replica twice|--replicas http://127.0.0.1:3,http://127.0.0.1:3 --port 0"
            + "|--replicas=http://127.0.0.1:3 is named twice",
        "an unknown routing|--replicas http://127.0.0.1:3 --port 0 --routing random"
            + "|--routing=random is not a routing; allowed: prefix, round-robin",
        "an index of no blocks|--replicas http://127.0.0.1:3 --port 0 --kv-index-blocks 0"
            + "|--kv-index-blocks=0 must be in [1, 67108864]",
        "a negative load price|--replicas http://127.0.0.1:3 --port 0 --load-tokens -1"
            + "|--load-tokens=-1 must be in [0, 1048576]",
      })
  void shouldRefuseABadSettingWithAUsageErrorNamingIt(String name, String args, String says) {
    String[] argv = ("router " + args).split(" ");
    CliRun run = CliRun.of(argv);
    assertEquals(CliErrors.EXIT_USAGE, run.exitCode(), run.toString());
    assertTrue(run.err().startsWith("error: "), run.err());
    assertTrue(run.err().contains(says), name + ": " + run.err());
    assertTrue(run.err().contains("tokenspeed router --help"), run.err());
  }

  /**
   * {@code --tokenizer synthetic:NAME} reads text and chats as {@code serve} of that synthetic
   * model tokenizes them (its vocabulary's tokenizer.json, its template), and token-id prompts as
   * they are.
   */
  @Test
  void shouldReadPromptsAsServeOfTheSyntheticModelTokenizesThem(@TempDir Path dir)
      throws Exception {
    Path config = dir.resolve("route-llama.json");
    Files.writeString(config, BenchRouteCommand.DEFAULT_MODEL_CONFIG); // 1,024 ids: words too
    String model = "synthetic:" + config;
    RouterCommand command = new RouterCommand();
    new CommandLine(command)
        .parseArgs("--replicas", "http://127.0.0.1:3", "--port", "0", "--tokenizer", model);
    PromptReader router = command.prompts();
    Path folder =
        SyntheticCheckpoints.materialize(model, SyntheticCheckpoints.DEFAULT_SEED, DType.F32);
    Tokenizer served = ModelOptions.tokenizerOf(folder);
    var chat = Serving.chatPrompt(ChatTemplate.load(folder), served);
    ObjectMapper json = new ObjectMapper();
    for (String text : List.of("hello", "a longer prompt, with punctuation!", "ünïcödé ✓ 語", "")) {
      JsonNode body = json.createObjectNode().put("prompt", text);
      assertArrayEquals(served.encode(text), router.tokens("/v1/completions", body), text);
      JsonNode messages =
          json.readTree(
              "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                  + "{\"role\":\"user\",\"content\":"
                  + json.writeValueAsString(text)
                  + "}]}");
      assertArrayEquals(
          chat.apply(
              List.of(
                  Map.of("role", "system", "content", "be brief"),
                  Map.of("role", "user", "content", text))),
          router.tokens("/v1/chat/completions", messages),
          text);
    }
    assertArrayEquals(
        new int[] {5, 6, 7},
        router.tokens("/v1/completions", json.readTree("{\"prompt\":[[5,6,7],[8]]}")),
        "a batch: its first prompt");
    assertNull(router.tokens("/v1/completions", json.readTree("{\"prompt\":[1,\"x\"]}")));
    PromptReader none = PromptReader.tokenIdsOnly();
    assertNull(none.tokens("/v1/completions", json.readTree("{\"prompt\":\"text\"}")));
    assertNull(none.tokens("/v1/chat/completions", messagesOf(json, "hi")));
    assertArrayEquals(
        new int[] {1, 2}, none.tokens("/v1/completions", json.readTree("{\"prompt\":[1,2]}")));
  }

  private static JsonNode messagesOf(ObjectMapper json, String text) throws Exception {
    return json.readTree(
        "{\"messages\":[{\"role\":\"user\",\"content\":" + json.writeValueAsString(text) + "}]}");
  }

  @Test
  void shouldRefuseATokenizerThatIsNotAModelFolder() {
    CliRun run =
        CliRun.of(
            "router",
            "--replicas",
            "http://127.0.0.1:3",
            "--port",
            "0",
            "--tokenizer",
            "/no/such/model");
    assertEquals(CliErrors.EXIT_USAGE, run.exitCode(), run.toString());
    assertTrue(
        run.err().contains("--tokenizer=/no/such/model is not a directory (nor synthetic:NAME)"),
        run.err());
  }

  @Test
  void shouldRequireBothRolesAndAPort() {
    CliRun noDecode = CliRun.of("router", "--prefill", "http://127.0.0.1:1", "--port", "0");
    assertEquals(CliErrors.EXIT_USAGE, noDecode.exitCode(), noDecode.toString());
    assertTrue(noDecode.err().contains("--decode"), noDecode.err());
    CliRun noPort =
        CliRun.of("router", "--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:2");
    assertEquals(CliErrors.EXIT_USAGE, noPort.exitCode(), noPort.toString());
    assertTrue(noPort.err().contains("--port"), noPort.err());
  }
}

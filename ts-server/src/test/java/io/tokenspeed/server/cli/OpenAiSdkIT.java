package io.tokenspeed.server.cli;

import static io.tokenspeed.server.cli.PdDeployment.json;
import static io.tokenspeed.server.cli.PdDeployment.prompt;
import static io.tokenspeed.server.cli.PdDeployment.startAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The official OpenAI Python SDK ({@code openai}) streams a completion and a chat from the router
 * as from a fused {@code serve}: the same client code, pointed at either by its {@code base_url},
 * prints the same non-empty texts (greedy, on the tiny untied model). The SDK is the client most
 * deployments put in front of an OpenAI-compatible server; it parses the event stream itself, so
 * this checks the router's framing, headers and events as a real client reads them.
 *
 * <p>The SDK comes from the machine's local package index ({@value #INDEX}), never the network,
 * into a virtual environment under the build's target directory ({@code target/openai-venv}), kept
 * between runs once it imports {@code openai}. Without {@code python3} or that index the test fails
 * saying which is missing.
 */
class OpenAiSdkIT {
  /** The local package index the SDK is installed from. */
  static final String INDEX = "file:///opt/pypi/simple";

  /** Tokens each request generates. */
  private static final int MAX_TOKENS = 24;

  private static final String SCRIPT =
      """
      import json, sys
      import openai

      base_url, model, prompt, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
      client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=120)
      # ignore_eos (the servers' extension, sent as an extra field): the texts are never cut short
      extra = {"ignore_eos": True}
      completion = ""
      for chunk in client.completions.create(
          model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
          extra_body=extra):
          for c in chunk.choices:
              completion += c.text or ""
      chat = ""
      for chunk in client.chat.completions.create(
          model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
          temperature=0, stream=True, extra_body=extra):
          for c in chunk.choices:
              if c.delta is not None and c.delta.content:
                  chat += c.delta.content
      print(json.dumps({"completion": completion, "chat": chat, "version": openai.__version__}))
      """;

  @TempDir Path workDir;

  @Test
  void shouldStreamThroughTheRouterAsThroughAFusedServer() throws Exception {
    Path python = venvWithOpenAi();
    Path script = workDir.resolve("sdk_client.py");
    Files.writeString(script, SCRIPT);
    PdDeployment pd = new PdDeployment(workDir);
    List<ServeProcess> engines =
        startAll(
            pd.serve("decode", List.of()), pd.serve("prefill", List.of()), pd.fused(List.of()));
    try (ServeProcess decode = engines.get(0);
        ServeProcess prefill = engines.get(1);
        ServeProcess fused = engines.get(2);
        ServeProcess router = pd.router(List.of(prefill), List.of(decode))) {
      String prompt = prompt(41, 120);
      JsonNode direct = runSdk(python, script, fused, prompt);
      JsonNode routed = runSdk(python, script, router, prompt);
      for (String field : List.of("completion", "chat")) {
        String want = direct.get(field).asText();
        assertFalse(want.isEmpty(), () -> "the fused server's " + field + " is empty: " + direct);
        assertEquals(want, routed.get(field).asText(), field + " through the router vs fused");
      }
    }
  }

  /** Runs the SDK script against {@code server}; returns what it printed. */
  private JsonNode runSdk(Path python, Path script, ServeProcess server, String prompt)
      throws IOException, InterruptedException {
    Path out = workDir.resolve("sdk-" + server.port + ".out");
    Path err = workDir.resolve("sdk-" + server.port + ".err");
    ProcessBuilder b =
        new ProcessBuilder(
                python.toString(),
                script.toString(),
                "http://127.0.0.1:" + server.port + "/v1",
                "tiny",
                prompt,
                Integer.toString(MAX_TOKENS))
            .redirectOutput(out.toFile())
            .redirectError(err.toFile());
    loopbackOnly(b.environment());
    Process p = b.start();
    if (!p.waitFor(120, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      fail("the SDK script did not end within 120 s: " + Files.readString(err));
    }
    if (p.exitValue() != 0) {
      fail("the SDK script exited with " + p.exitValue() + ": " + Files.readString(err));
    }
    return json(Files.readString(out, StandardCharsets.UTF_8));
  }

  // ---------------------------------------------------------------- the virtual environment

  /**
   * The virtual environment's python with {@code openai} importable: the one under the target
   * directory if it already imports it, else a fresh one with the SDK installed from {@value
   * #INDEX}.
   */
  private static Path venvWithOpenAi() throws IOException, InterruptedException {
    Path python3 =
        onPath("python3")
            .orElseThrow(
                () ->
                    new AssertionError(
                        "python3 is missing: OpenAiSdkIT needs it on the PATH ("
                            + System.getenv("PATH")
                            + ") to run the OpenAI Python SDK"));
    Path index = Path.of(java.net.URI.create(INDEX));
    Path venv = targetDirectory().resolve("openai-venv");
    Path python = venv.resolve("bin").resolve("python");
    if (Files.isExecutable(python) && run(List.of(python.toString(), "-c", "import openai"), 60)) {
      return python; // cached from an earlier run
    }
    if (!Files.isDirectory(index.resolve("openai"))) {
      fail(
          "the local package index is missing: OpenAiSdkIT installs the openai package from "
              + INDEX
              + " (no network), and "
              + index.resolve("openai")
              + " does not exist");
    }
    deleteRecursively(venv);
    if (!run(List.of(python3.toString(), "-m", "venv", venv.toString()), 120)) {
      fail("python3 -m venv " + venv + " failed (is the venv module installed?)");
    }
    List<String> pip =
        List.of(
            python.toString(),
            "-m",
            "pip",
            "install",
            "--no-input",
            "--disable-pip-version-check",
            "--index-url",
            INDEX,
            "openai");
    if (!run(pip, 300) || !run(List.of(python.toString(), "-c", "import openai"), 60)) {
      fail("could not install openai from " + INDEX + " into " + venv + " (see the output above)");
    }
    return python;
  }

  /** The build's target directory: where the executable jar is. */
  private static Path targetDirectory() {
    Path jar = Path.of(System.getProperty("tokenspeed.jar", "target/tokenspeed.jar"));
    return jar.toAbsolutePath().getParent();
  }

  /**
   * Runs {@code command} (output to this JVM's) with pip's configuration files and variables out of
   * the way, so that only the index on its command line is used; true when it exits 0 in time.
   */
  private static boolean run(List<String> command, long timeoutSeconds)
      throws IOException, InterruptedException {
    ProcessBuilder b = new ProcessBuilder(command).inheritIO();
    Map<String, String> env = b.environment();
    env.keySet().removeIf(k -> k.toUpperCase(Locale.ROOT).startsWith("PIP_"));
    env.put("PIP_CONFIG_FILE", "/dev/null");
    loopbackOnly(env);
    Process p = b.start();
    if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      System.out.println(String.join(" ", command) + ": not done within " + timeoutSeconds + " s");
      return false;
    }
    return p.exitValue() == 0;
  }

  /** No proxy: the SDK's HTTP client would send even loopback requests through one. */
  private static void loopbackOnly(Map<String, String> env) {
    env.keySet().removeIf(k -> k.toLowerCase(Locale.ROOT).endsWith("_proxy"));
    env.put("NO_PROXY", "127.0.0.1,localhost");
  }

  private static Optional<Path> onPath(String name) {
    String path = System.getenv("PATH");
    if (path == null) {
      return Optional.empty();
    }
    for (String dir : path.split(File.pathSeparator)) {
      Path candidate = Path.of(dir).resolve(name);
      if (Files.isExecutable(candidate)) {
        return Optional.of(candidate);
      }
    }
    return Optional.empty();
  }

  private static void deleteRecursively(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    try (Stream<Path> all = Files.walk(dir)) {
      List<Path> paths = new ArrayList<>(all.sorted(Comparator.reverseOrder()).toList());
      for (Path p : paths) {
        Files.delete(p);
      }
    }
  }
}

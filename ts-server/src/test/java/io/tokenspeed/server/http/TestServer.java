package io.tokenspeed.server.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.PdOptions;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.model.tokenizer.ByteTokenizer;
import io.tokenspeed.model.tokenizer.Tokenizer;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * An engine of a tiny untied Llama (its output depends on the whole context) behind the real HTTP
 * server on a free loopback port, and a real HTTP client ({@code java.net.http}) to talk to it.
 */
final class TestServer implements AutoCloseable {
  static final String MODEL = "tiny-untied";
  static final String ADMIN_TOKEN = "s3cret-admin";
  static final ObjectMapper JSON = new ObjectMapper();

  /**
   * A Llama of 256 ids (every id is one byte of the byte tokenizer) with untied embeddings, so its
   * output depends on the whole context; {@code models/tiny-untied.json} in the test resources.
   */
  static String config() {
    try (var in = TestServer.class.getResourceAsStream("/models/tiny-untied.json")) {
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  final CausalLm model;
  final Tokenizer tokenizer = ByteTokenizer.plain();
  final Engine engine;
  final ServingState state = new ServingState();
  final Serving serving;
  final HttpClient client =
      HttpClient.newBuilder()
          .version(HttpClient.Version.HTTP_1_1)
          .connectTimeout(Duration.ofSeconds(10))
          .build();

  private TestServer(
      CausalLm model,
      Engine engine,
      long maxBodyBytes,
      Function<List<Map<String, Object>>, int[]> chatPrompt,
      long headerTimeoutMs) {
    this.model = model;
    this.engine = engine;
    this.serving =
        Serving.start(
            new Serving.Options(
                engine,
                model.vocabSize(),
                tokenizer,
                chatPrompt == null ? plainChat(tokenizer) : chatPrompt,
                MODEL,
                4096,
                "127.0.0.1",
                0,
                maxBodyBytes,
                ADMIN_TOKEN,
                0,
                state,
                headerTimeoutMs));
  }

  /** A ready server over a fresh engine (no L3 when {@code l3} is null). */
  static TestServer start(Path dir, L3Settings l3) {
    return start(dir, l3, 1 << 20, true);
  }

  static TestServer start(Path dir, L3Settings l3, long maxBodyBytes, boolean ready) {
    return over(load(dir), l3, maxBodyBytes, ready);
  }

  /** A server over a fresh engine of {@code model} (which the server closes). */
  static TestServer over(CausalLm model, L3Settings l3, long maxBodyBytes, boolean ready) {
    return over(model, l3, maxBodyBytes, ready, null);
  }

  /** {@link #over} rendering chat messages with {@code chatPrompt} (null: the plain template). */
  static TestServer over(
      CausalLm model,
      L3Settings l3,
      long maxBodyBytes,
      boolean ready,
      Function<List<Map<String, Object>>, int[]> chatPrompt) {
    return over(model, l3, maxBodyBytes, ready, chatPrompt, 1024);
  }

  /** {@link #over} with an engine that accepts at most {@code maxQueued} requests not running. */
  static TestServer over(
      CausalLm model,
      L3Settings l3,
      long maxBodyBytes,
      boolean ready,
      Function<List<Map<String, Object>>, int[]> chatPrompt,
      int maxQueued) {
    return over(
        model,
        l3,
        maxBodyBytes,
        ready,
        chatPrompt,
        maxQueued,
        HttpFrontend.DEFAULT_HEADER_TIMEOUT_S * 1000L);
  }

  /** {@link #over} with a header timeout of {@code headerTimeoutMs}. */
  static TestServer over(
      CausalLm model,
      L3Settings l3,
      long maxBodyBytes,
      boolean ready,
      Function<List<Map<String, Object>>, int[]> chatPrompt,
      int maxQueued,
      long headerTimeoutMs) {
    Engine engine =
        Engine.start(EngineSettings.of(model, engineConfig(model, maxQueued)).l3(l3).conclude());
    TestServer s = new TestServer(model, engine, maxBodyBytes, chatPrompt, headerTimeoutMs);
    if (ready) {
      s.state.ready();
    }
    return s;
  }

  /**
   * A ready server over a fresh engine of the tiny model in the role {@code pd} gives (docs/pd.md),
   * with L3 when {@code l3} is given.
   */
  static TestServer inRole(Path dir, PdOptions pd, L3Settings l3) {
    CausalLm model = load(dir);
    Engine engine;
    try {
      engine =
          Engine.start(
              EngineSettings.of(model, engineConfig(model, 1024)).l3(l3).pd(pd).conclude());
    } catch (RuntimeException | Error e) {
      model.close();
      throw e;
    }
    TestServer s =
        new TestServer(model, engine, 1 << 20, null, HttpFrontend.DEFAULT_HEADER_TIMEOUT_S * 1000L);
    s.state.ready();
    return s;
  }

  private static EngineConfig engineConfig(CausalLm model, int maxQueued) {
    EngineConfig base = EngineConfig.defaults(Engine.deviceParentsFor(model, 4096));
    return new EngineConfig(
        base.prefixGranularity(),
        base.blockGranularity(),
        base.deviceParents(),
        2.0,
        256,
        48,
        base.demoteBelowFreeParents(),
        2,
        maxQueued);
  }

  static CausalLm load(Path dir) {
    return CausalLm.load(checkpoint(dir));
  }

  /** The folder of the tiny untied checkpoint, generated under {@code dir}. */
  static Path checkpoint(Path dir) {
    try {
      Path config = Files.createDirectories(dir).resolve("tiny-untied.json");
      Files.writeString(config, config());
      return SyntheticCheckpoints.materialize(
          "synthetic:" + config, 7, DType.F32, dir.resolve("checkpoints"));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The plain chat rendering of the serving path, tokenized with the byte tokenizer. */
  static Function<List<Map<String, Object>>, int[]> plainChat(Tokenizer tokenizer) {
    return Serving.chatPrompt(io.tokenspeed.server.chat.ChatTemplate.plain(), tokenizer);
  }

  URI uri(String path) {
    return URI.create("http://127.0.0.1:" + serving.port() + path);
  }

  HttpResponse<String> post(String path, String body) {
    return send(
        HttpRequest.newBuilder(uri(path))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(body))
            .build());
  }

  HttpResponse<String> get(String path) {
    return send(HttpRequest.newBuilder(uri(path)).GET().build());
  }

  HttpResponse<String> send(HttpRequest request) {
    try {
      return client.send(request, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  static JsonNode json(String text) {
    try {
      return JSON.readTree(text);
    } catch (IOException e) {
      throw new UncheckedIOException("not JSON: " + text, e);
    }
  }

  @Override
  public void close() {
    serving.close();
    engine.close();
    model.close();
  }
}

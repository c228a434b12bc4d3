package io.tokenspeed.server.http;

import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.tokenizer.Tokenizer;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.function.Function;

/**
 * Compiles the serving path before the first request. A throwaway engine of the same model (Device
 * and Host tiers only, no L3: nothing reaches the store and the serving engine's caches stay empty)
 * is put behind its own HTTP server on a free loopback port, and a few seeded requests go through
 * it as clients send them — a prefill of several chunks, short prompts decoding together, greedy
 * and sampled, streamed and not, completions and chat (the chat template), with logprobs — until
 * the just-in-time compiler has compiled the kernels, the HTTP server, the JSON code and the
 * tokenizer. The compiled code is shared by every engine and server in the process.
 */
public final class WarmUp {
  private WarmUp() {}

  /**
   * Runs the warm-up and returns its wall time in milliseconds.
   *
   * @param serving the serving engine's configuration (the warm-up engine takes its batch sizes)
   * @param chatPrompt the serving path's chat rendering
   * @param rounds how many times the workload runs (0 skips it)
   */
  public static long run(
      CausalLm model,
      EngineConfig serving,
      OptionalInt eos,
      Tokenizer tokenizer,
      Function<List<Map<String, Object>>, int[]> chatPrompt,
      int rounds)
      throws IOException, InterruptedException {
    long start = System.nanoTime();
    if (rounds <= 0) {
      return 0;
    }
    int promptTokens = Math.min(2 * serving.tokenBudget() + 7, 1024);
    int parents = Engine.deviceParentsFor(model, 4 * (promptTokens + 64));
    EngineConfig config =
        new EngineConfig(
            serving.prefixGranularity(),
            serving.blockGranularity(),
            Math.max(parents, 8),
            1.0,
            serving.tokenBudget(),
            serving.maxRunning(),
            1,
            serving.computeThreads(),
            64);
    ServingState state = new ServingState();
    HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
    try (Engine engine = Engine.start(model, config, eos);
        Serving server =
            Serving.start(
                new Serving.Options(
                    engine,
                    model.vocabSize(),
                    tokenizer,
                    chatPrompt,
                    "warm-up",
                    Integer.MAX_VALUE,
                    "127.0.0.1",
                    0,
                    1 << 20,
                    null,
                    "fused",
                    0,
                    state))) {
      state.ready();
      SplittableRandom random = new SplittableRandom(0x3a7);
      for (int round = 0; round < rounds; round++) {
        List<CompletableFuture<HttpResponse<String>>> answers = new ArrayList<>();
        answers.add(
            post(
                client,
                server,
                "/v1/completions",
                "{\"prompt\":"
                    + ids(random, model.vocabSize(), promptTokens)
                    + ",\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}"));
        for (int i = 0; i < 4; i++) {
          String sampling =
              i % 2 == 0 ? "\"temperature\":0" : "\"temperature\":1,\"top_k\":40,\"top_p\":0.9";
          answers.add(
              post(
                  client,
                  server,
                  "/v1/completions",
                  "{\"prompt\":"
                      + ids(random, model.vocabSize(), 24 + 8 * i)
                      + ",\"max_tokens\":24,\"ignore_eos\":true,\"logprobs\":2,"
                      + sampling
                      + (i < 2 ? ",\"stream\":true}" : "}")));
        }
        answers.add(
            post(
                client,
                server,
                "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"system\",\"content\":\"You are brief.\"},"
                    + "{\"role\":\"user\",\"content\":\"Say hello.\"}],\"max_tokens\":8,"
                    + "\"ignore_eos\":true,\"stream\":true}"));
        for (CompletableFuture<HttpResponse<String>> a : answers) {
          HttpResponse<String> r = a.join();
          if (r.statusCode() != 200) {
            throw new IllegalStateException(
                "a warm-up request failed with " + r.statusCode() + ": " + r.body());
          }
        }
      }
    } finally {
      client.close();
    }
    return (System.nanoTime() - start) / 1_000_000;
  }

  private static CompletableFuture<HttpResponse<String>> post(
      HttpClient client, Serving server, String path, String body) {
    return client.sendAsync(
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + server.port() + path))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(body))
            .build(),
        HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
  }

  private static String ids(SplittableRandom random, int vocab, int n) {
    StringBuilder sb = new StringBuilder("[");
    for (int i = 0; i < n; i++) {
      sb.append(i == 0 ? "" : ",").append(random.nextInt(vocab));
    }
    return sb.append(']').toString();
  }
}

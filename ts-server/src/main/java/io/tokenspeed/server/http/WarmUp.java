package io.tokenspeed.server.http;

import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageExercise;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.tokenizer.Tokenizer;
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
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * Compiles the serving path before the first request. A throwaway engine of the same model (the
 * serving engine's caches stay empty) is put behind its own HTTP server on a free loopback port,
 * and a few seeded requests go through it as clients send them — a prefill of several chunks, short
 * prompts decoding together, greedy and sampled, streamed and not, completions and chat (the chat
 * template), with logprobs — until the just-in-time compiler has compiled the kernels, the HTTP
 * server, the JSON code and the tokenizer. The compiled code is shared by every engine and server
 * in the process.
 *
 * <p>With L3 the throwaway engine has a store client of its own, under a namespace of its own: each
 * round also writes a prompt's pages through and restores them, and then {@link StorageExercise}
 * calls the store many times through an L3 executor over a Host allocation it registers, exactly as
 * the engine's storage commands do (a store that accepts only its registered memory, Mooncake, sees
 * nothing else). A weight update deletes the namespace's objects at the end.
 */
public final class WarmUp {
  private WarmUp() {}

  /**
   * What the warm-up's throwaway engine runs on: a model loaded once, over which engines are
   * started (on the CPU or a GPU), each closed by its starter.
   */
  public interface Engines {
    /** The model's vocabulary size. */
    int vocabSize();

    /** {@link Engine#deviceParentsFor(CausalLm, int)} of the model. */
    int deviceParentsFor(int tokens);

    /** Starts an engine over the model, with L3 when {@code l3} is given (null: none). */
    Engine start(EngineConfig config, OptionalInt eos, L3Settings l3);
  }

  /** The CPU model {@code model}: each engine binds it to compute threads of its own. */
  static Engines onCpu(CausalLm model) {
    return new Engines() {
      @Override
      public int vocabSize() {
        return model.vocabSize();
      }

      @Override
      public int deviceParentsFor(int tokens) {
        return Engine.deviceParentsFor(model, tokens);
      }

      @Override
      public Engine start(EngineConfig config, OptionalInt eos, L3Settings l3) {
        return Engine.start(EngineSettings.of(model, config).eosId(eos).l3(l3).conclude());
      }
    };
  }

  /**
   * Runs the warm-up and returns its wall time in milliseconds.
   *
   * @param serving the serving engine's configuration (the warm-up engine takes its batch sizes)
   * @param chatPrompt the serving path's chat rendering
   * @param l3 opens a store like the serving engine's, or null without L3
   * @param rounds how many times the workload runs (0 skips it)
   */
  public static long run(
      CausalLm model,
      EngineConfig serving,
      OptionalInt eos,
      Tokenizer tokenizer,
      Function<List<Map<String, Object>>, int[]> chatPrompt,
      Supplier<L3Settings> l3,
      int rounds)
      throws Exception {
    return run(onCpu(model), serving, eos, tokenizer, chatPrompt, l3, rounds);
  }

  /**
   * {@link #run(CausalLm, EngineConfig, OptionalInt, Tokenizer, Function, Supplier, int)} with the
   * throwaway engine started over {@code model} (a model on a GPU, say).
   */
  public static long run(
      Engines model,
      EngineConfig serving,
      OptionalInt eos,
      Tokenizer tokenizer,
      Function<List<Map<String, Object>>, int[]> chatPrompt,
      Supplier<L3Settings> l3,
      int rounds)
      throws Exception {
    long start = System.nanoTime();
    if (rounds <= 0) {
      return 0;
    }
    int promptTokens = Math.min(2 * serving.tokenBudget() + 7, 1024);
    int parents = model.deviceParentsFor(4 * (promptTokens + 64));
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
    String namespaceVersion = "warm-up-" + UUID.randomUUID();
    L3Settings storage = l3 == null ? null : l3.get();
    try (Engine engine = model.start(config, eos, storage);
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
                    0,
                    state,
                    HttpFrontend.DEFAULT_HEADER_TIMEOUT_S * 1000L))) {
      if (l3 != null) {
        engine.rotateNamespace(namespaceVersion);
      }
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
          check(a.join());
        }
        if (l3 != null) {
          restore(engine, client, server, ids(random, model.vocabSize(), 3 * 64 + 5));
        }
      }
      if (storage != null) {
        // A client of its own (the engine owns the one above), under the warm-up's namespace.
        StorageExercise.run(
            l3.get(),
            engine.layout(),
            engine.storageNamespace().orElseThrow(),
            STORE_OBJECTS,
            STORE_ROUNDS,
            STORE_EXERCISE_NS);
        engine.updateWeightVersion(namespaceVersion + "-deleted"); // deletes the warm-up's objects
      }
    } finally {
      client.close();
    }
    return (System.nanoTime() - start) / 1_000_000;
  }

  /**
   * The warm-up of a tensor-parallel replica, whose ranks' model shards cannot run in a throwaway
   * engine of one process: the same seeded workload goes straight into the serving replica's leader
   * ({@code engine}), so every rank compiles its forward pass and collective, and a full clear then
   * empties the caches it filled (with L3 its write-through stays in the store, under the serving
   * namespace). The HTTP path is not warmed this way. Returns the wall time in ms.
   */
  public static long onReplica(Engine engine, int vocabSize, EngineConfig serving, int rounds)
      throws Exception {
    long start = System.nanoTime();
    int promptTokens = Math.min(2 * serving.tokenBudget() + 7, 1024);
    SplittableRandom random = new SplittableRandom(0x3a7);
    for (int round = 0; round < rounds; round++) {
      List<RequestHandle> handles = new ArrayList<>();
      handles.add(
          engine.submit(
              random.ints(promptTokens, 0, vocabSize).toArray(),
              SamplingParams.greedy(16).withIgnoreEos(true)));
      for (int i = 0; i < 4; i++) {
        SamplingParams p = SamplingParams.greedy(24).withIgnoreEos(true);
        if (i % 2 == 1) {
          p = p.withTemperature(1.0).withTopK(40).withTopP(0.9);
        }
        handles.add(engine.submit(random.ints(24 + 8 * i, 0, vocabSize).toArray(), p, 2));
      }
      for (RequestHandle h : handles) {
        GenerationResult r = h.result().get();
        if (r.error() != null) {
          throw new IllegalStateException("a warm-up request failed: " + r.error());
        }
      }
    }
    engine.clearCache().get();
    return (System.nanoTime() - start) / 1_000_000;
  }

  /** Writes a prompt's pages to the store, clears the caches and restores them from the store. */
  private static void restore(Engine engine, HttpClient client, Serving server, String prompt)
      throws Exception {
    String body = "{\"prompt\":" + prompt + ",\"max_tokens\":2,\"temperature\":0}";
    check(post(client, server, "/v1/completions", body).join());
    long deadline = System.nanoTime() + STORE_WAIT_NS;
    while (engine.metrics().storage().map(s -> s.pending()).orElse(false)
        && System.nanoTime() < deadline) {
      Thread.sleep(5);
    }
    engine.clearCache().get();
    check(post(client, server, "/v1/completions", body).join());
  }

  /*
   * The store exercise (StorageExercise): one PUT of this many objects under the warm-up's
   * namespace, then rounds of QUERYs and GETs of them, through an L3 executor over a Host
   * allocation registered with the store, as the engine's commands reach it — so that the store
   * client's code is compiled, not only loaded: a handful of restores through the engine would
   * leave it interpreted.
   */
  private static final int STORE_OBJECTS = 16;
  private static final int STORE_ROUNDS = 400;
  private static final long STORE_EXERCISE_NS = 4_000_000_000L;

  /** How long the warm-up waits for its backups before it reads them back. */
  private static final long STORE_WAIT_NS = 5_000_000_000L;

  private static void check(HttpResponse<String> r) {
    if (r.statusCode() != 200) {
      throw new IllegalStateException(
          "a warm-up request failed with " + r.statusCode() + ": " + r.body());
    }
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

package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.engine.RequestMetrics;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.TokenLogprobs;
import io.tokenspeed.model.tokenizer.BpeTokenizer;
import io.tokenspeed.model.tokenizer.StreamingDecoder;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.config.StorageExtraConfig;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.OptionalLong;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed generate}: one request through the {@link Engine}, its output streamed as it is
 * generated and its figures summed up at the end.
 *
 * <pre>
 *   stdout   the generated text as it comes (the ids, space-separated, for --tokens without a
 *            tokenizer.json), then a newline
 *   stderr   "prefilling N prompt tokens: S s" each second until the first token, then one line:
 *            generated 16 tokens (finish: length) | TTFT 41.2 ms | decode 212.5 tokens/s |
 *            reused prefix: device 0, host 0 of 5 prompt tokens
 *   --json   instead of the text, one object on stdout: tokens, text, finish_reason and the
 *            request's figures (with --logprobs N also logprobs, and top_logprobs for N above 0)
 * </pre>
 *
 * <p>The engine's Device is sized for the request: enough parents that its single-request limit
 * covers the prompt plus {@code --max-tokens} and one more page, or {@code --device-tokens} when
 * given (a request over that limit is then refused with the engine's error, which names it).
 */
@Command(
    name = "generate",
    mixinStandardHelpOptions = true,
    versionProvider = VersionProvider.class,
    sortOptions = false,
    customSynopsis = {
      "tokenspeed generate --model=DIR|synthetic:NAME (--prompt=TEXT | --tokens=ID,ID,...)",
      "                           [--max-tokens=N] [--temperature=T] [--top-k=K] [--top-p=P]",
      "                           [--min-p=P] [--sampling-seed=N] [--stop-token-ids=ID,...]",
      "                           [--ignore-eos] [--json [--logprobs=N]] [--device-tokens=N]",
      "                           [--warm-up=N]",
      "                           [--seed=N]",
      "                           [--dtype=f32|bf16] [--threads=N] [--tp=N]",
      "                           [--device=cpu|cuda[:N]] [--deterministic]",
      ""
    },
    description = {
      "Generates a continuation of a prompt with the engine and streams it to stdout as it"
          + " comes; a summary (TTFT, decode speed, tokens, finish reason, reused prefix) follows"
          + " on stderr.",
      "",
      "--model takes a Hugging Face folder (config.json, model.safetensors) or synthetic:NAME,"
          + " a model with seeded random weights generated on first use (presets: qwen2-0.5b,"
          + " gemma3-270m, jamba-tiny, llama-100m; or synthetic:PATH to a config.json of one's"
          + " own)."
    },
    footer = {
      "",
      "Examples:",
      "  tokenspeed generate --model synthetic:llama-100m --prompt \"Hello\" --max-tokens 16",
      "  tokenspeed generate --model ~/models/Qwen2-0.5B --prompt \"The capital of France is\""
          + " --temperature 0",
      "  tokenspeed generate --model ~/models/Qwen2-0.5B --tokens 785,6722,315 --json",
      "  tokenspeed generate --model ~/models/Qwen2-0.5B --prompt \"Hello\" --device cuda",
      "",
      "Synthetic models are cached under $TOKENSPEED_SYNTHETIC_DIR (default"
          + " ${java.io.tmpdir}/tokenspeed-synthetic).",
      "Exit codes: 0 success, 1 invalid input, 2 usage error, 69 a rank of the --tp replica"
          + " failed, 70 internal error."
    })
final class GenerateCommand implements Callable<Integer> {

  /** How often the wait for the first token is reported on stderr. */
  static final long PROGRESS_MS = 1000;

  private static final JsonMapper JSON = new JsonMapper();

  /** SamplingParams' field names, as the flags that set them. */
  private static final Map<String, String> FLAGS =
      Map.of(
          "temperature=", "--temperature=",
          "topK=", "--top-k=",
          "topP=", "--top-p=",
          "minP=", "--min-p=",
          "maxTokens=", "--max-tokens=",
          "stopTokenIds contains ", "--stop-token-ids contains ");

  @Spec private CommandSpec spec;

  @Mixin private ModelOptions modelOptions;

  @Mixin private StorageOptions storageOptions;

  @Mixin private TensorParallelOptions tp;

  @Mixin private DeviceOptions deviceOptions;

  @Option(
      names = "--prompt",
      paramLabel = "TEXT",
      description =
          "The prompt as text, tokenized with the model's tokenizer.json (without one: one token"
              + " per UTF-8 byte).")
  private String prompt;

  @Option(
      names = "--tokens",
      paramLabel = "ID,ID,...",
      description = "The prompt as comma-separated token ids.")
  private String tokens;

  @Option(
      names = "--max-tokens",
      paramLabel = "N",
      description = "Most tokens to generate (default: " + SamplingParams.DEFAULT_MAX_TOKENS + ").")
  private int maxTokens = SamplingParams.DEFAULT_MAX_TOKENS;

  @Option(
      names = "--temperature",
      paramLabel = "T",
      description = "Sampling temperature; 0 is greedy (default: 1).")
  private double temperature = SamplingParams.DEFAULT_TEMPERATURE;

  @Option(
      names = "--top-k",
      paramLabel = "K",
      description = "Keep the K most likely tokens; 0 is off (default: 0).")
  private int topK = SamplingParams.DEFAULT_TOP_K;

  @Option(
      names = "--top-p",
      paramLabel = "P",
      description = "Keep the most likely tokens up to probability P; 1 is off (default: 1).")
  private double topP = SamplingParams.DEFAULT_TOP_P;

  @Option(
      names = "--min-p",
      paramLabel = "P",
      description = "Keep tokens at least P times as likely as the best; 0 is off (default: 0).")
  private double minP = SamplingParams.DEFAULT_MIN_P;

  @Option(
      names = "--sampling-seed",
      paramLabel = "N",
      description = "Seed of the sampling draws (default: one the engine picks).")
  private Long samplingSeed;

  @Option(
      names = "--stop-token-ids",
      paramLabel = "ID,...",
      split = ",",
      description = "Token ids that end the generation when sampled.")
  private List<Integer> stopTokenIds = List.of();

  @Option(names = "--ignore-eos", description = "Go on past the tokenizer's end-of-sequence token.")
  private boolean ignoreEos;

  @Option(
      names = "--json",
      description = "Print one JSON object (ids, text, finish reason, figures) instead of text.")
  private boolean json;

  @Option(
      names = "--logprobs",
      paramLabel = "N",
      description =
          "With --json: each generated token's log probability (\"logprobs\") and, for N above"
              + " 0, the N most likely tokens of each step (\"top_logprobs\"); N in [0, "
              + TokenLogprobs.MAX_TOP_LOGPROBS
              + "] (default: none).")
  private Integer logprobs;

  @Option(
      names = "--device-tokens",
      paramLabel = "N",
      description =
          "Size the Device for requests of N tokens (default: the prompt plus --max-tokens and"
              + " one page).")
  private Integer deviceTokens;

  @Option(
      names = "--warm-up",
      paramLabel = "N",
      description =
          "Before the request, run it N times (greedy, at most "
              + WARM_UP_TOKENS
              + " tokens, no L3) on a throwaway engine over the same weights, so that its TTFT is"
              + " not the JIT compiling the kernels (default: ${DEFAULT-VALUE}; 0: none; one"
              + " rank only).")
  private int warmUp = 6;

  /** Tokens a warm-up round generates at most: the decode step compiles in a few. */
  static final int WARM_UP_TOKENS = 4;

  /** What the warm-up ran: rounds done, its wall time, and the last round's TTFT (NaN: none). */
  private record WarmUpRun(int rounds, double seconds, double lastTtftMs) {}

  private WarmUpRun warmUpRun = new WarmUpRun(0, 0, Double.NaN);

  @Override
  public Integer call() throws InterruptedException, java.io.IOException {
    if (prompt != null && tokens != null) {
      throw modelOptions.usage("--prompt and --tokens cannot be combined: give the prompt one way");
    }
    if (prompt == null && tokens == null) {
      throw modelOptions.usage("a prompt is required: --prompt TEXT or --tokens ID,ID,...");
    }
    if (deviceTokens != null && deviceTokens < 1) {
      throw modelOptions.usage("--device-tokens=" + deviceTokens + " must be at least 1");
    }
    if (logprobs != null && !json) {
      throw modelOptions.usage("--logprobs prints into the --json object: add --json");
    }
    if (logprobs != null && (logprobs < 0 || logprobs > TokenLogprobs.MAX_TOP_LOGPROBS)) {
      throw modelOptions.usage(
          "--logprobs=" + logprobs + " must be in [0, " + TokenLogprobs.MAX_TOP_LOGPROBS + "]");
    }
    if (warmUp < 0 || warmUp > 100) {
      throw modelOptions.usage("--warm-up=" + warmUp + " must be in [0, 100]");
    }
    modelOptions.checkThreads();
    var weightType = modelOptions.weightType();
    SamplingParams params = samplingParams();
    Optional<StorageExtraConfig.Resolved> storage = storageOptions.resolve();
    int[] ids = tokens == null ? null : modelOptions.parseTokens(tokens);
    modelOptions.requireVectorModule();
    deviceOptions.checkTensorParallel(tp);
    Path folder = modelOptions.folder(weightType);
    if (tp.launcher()) {
      return tp.launch(); // every rank runs this command, rank 0 prints
    }
    Tokenizer tokenizer = modelOptions.tokenizer(folder);
    try (EngineModel model = deviceOptions.load(folder, modelOptions.model(), tp)) {
      if (ids == null) {
        ids = modelOptions.tokenize(folder, tokenizer, "--prompt", prompt);
      }
      modelOptions.checkVocab(ids, model.vocabSize(), tokens != null ? "--tokens" : "--prompt");
      if (!json && model.vocabSize() > tokenizer.vocabSize() && printsText(tokenizer)) {
        PrintWriter err = spec.commandLine().getErr();
        err.println(
            "note: the model's vocab_size="
                + model.vocabSize()
                + " exceeds the tokenizer's "
                + tokenizer.vocabSize()
                + " ids; ids past them print nothing (--json lists every id)");
        err.flush();
      }
      int target =
          deviceTokens != null ? deviceTokens : ids.length + params.maxTokens() + pageTokens();
      if (tp.size() == 1) {
        warmUp(model, target, ids, tokenizer.specialTokens().eosId());
      }
      Engine engine = startEngine(model, target, tokenizer.specialTokens().eosId(), storage);
      try {
        if (tp.follower()) {
          return tp.follow(engine);
        }
        generate(engine, ids, params, tokenizer);
      } finally {
        engine.close(); // with L3: after the write-through of the prompt's pages
      }
      tp.reportStorage(engine);
    }
    return 0;
  }

  private SamplingParams samplingParams() {
    try {
      return new SamplingParams(
          temperature,
          topK,
          topP,
          minP,
          samplingSeed == null ? OptionalLong.empty() : OptionalLong.of(samplingSeed),
          maxTokens,
          new HashSet<>(stopTokenIds),
          ignoreEos);
    } catch (IllegalArgumentException e) {
      String message = e.getMessage();
      for (var flag : FLAGS.entrySet()) {
        if (message.startsWith(flag.getKey())) {
          message = flag.getValue() + message.substring(flag.getKey().length());
        }
      }
      throw new IllegalArgumentException(message, e);
    }
  }

  /** Whether the output is decoded text rather than ids. */
  private boolean printsText(Tokenizer tokenizer) {
    return prompt != null || tokenizer instanceof BpeTokenizer;
  }

  private static int pageTokens() {
    return EngineConfig.defaults(2).prefixGranularity();
  }

  /**
   * An engine whose single-request limit covers {@code target} tokens (the fewest Device parents
   * that give it), with L3 under its Host tier when a backend is selected.
   */
  private Engine startEngine(
      EngineModel model,
      int target,
      OptionalInt eos,
      Optional<StorageExtraConfig.Resolved> storage) {
    EngineConfig config;
    try {
      config =
          EngineConfig.defaults(model.deviceParentsFor(target))
              .withComputeThreads(modelOptions.computeThreads());
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(
          "--model=" + modelOptions.model() + ": " + e.getMessage(), e);
    }
    return StorageOptions.startEngine(model, config, eos, storage);
  }

  /**
   * {@code --warm-up} rounds of the request's prompt on a throwaway engine without L3 (its own
   * Device, the same weights); their count, time and the last round's TTFT go on stderr before the
   * summary (with {@code --json}, into the object: {@code warm_up_rounds}, {@code
   * warm_up_ttft_ms}). A round that fails stops the warm-up: the request itself then reports what
   * is wrong.
   */
  private void warmUp(EngineModel model, int target, int[] ids, OptionalInt eos)
      throws InterruptedException {
    if (warmUp == 0) {
      return;
    }
    long start = System.nanoTime();
    double lastTtftMs = Double.NaN;
    int rounds = 0;
    try (Engine engine = startEngine(model, target, eos, Optional.empty())) {
      for (; rounds < warmUp; rounds++) {
        GenerationResult r =
            engine
                .submit(ids, SamplingParams.greedy(Math.min(WARM_UP_TOKENS, maxTokens)))
                .result()
                .join();
        if (r.metrics() == null || r.error() != null) {
          break;
        }
        lastTtftMs = r.metrics().ttftNs() / 1e6;
      }
    } catch (RuntimeException e) {
      // the request itself reports what is wrong
    }
    warmUpRun = new WarmUpRun(rounds, (System.nanoTime() - start) / 1e9, lastTtftMs);
  }

  private void generate(Engine engine, int[] ids, SamplingParams params, Tokenizer tokenizer)
      throws InterruptedException {
    PrintWriter out = spec.commandLine().getOut();
    PrintWriter err = spec.commandLine().getErr();
    StreamingDecoder decoder = printsText(tokenizer) ? tokenizer.newStreamingDecoder(false) : null;
    RequestHandle handle =
        engine.submit(ids, params, logprobs == null ? TokenLogprobs.NO_LOGPROBS : logprobs);
    long startNs = System.nanoTime();
    boolean first = true;
    while (true) {
      OptionalInt next = handle.nextToken(PROGRESS_MS, TimeUnit.MILLISECONDS);
      if (next == null) {
        if (first) {
          err.println(
              "prefilling "
                  + ids.length
                  + " prompt tokens: "
                  + TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - startNs)
                  + " s");
          err.flush();
        }
        continue;
      }
      if (next.isEmpty()) {
        break;
      }
      if (!json) {
        int id = next.getAsInt();
        out.print(decoder != null ? decoder.onToken(id) : (first ? "" : " ") + id);
        out.flush();
      }
      first = false;
    }
    GenerationResult result = handle.result().join();
    if (result.metrics() == null) {
      throw new IllegalArgumentException(result.error());
    }
    if (result.error() != null) {
      tp.failIfStopped(engine);
      throw new IllegalStateException("generation failed: " + result.error());
    }
    if (json) {
      out.println(json(result, tokenizer, handle.logprobs()));
    } else {
      if (decoder != null) {
        out.print(decoder.flush());
      }
      out.println();
      if (warmUpRun.rounds() > 0) {
        err.printf(
            Locale.ROOT,
            "warm-up: %d round%s in %.2f s (last TTFT %.1f ms)%n",
            warmUpRun.rounds(),
            warmUpRun.rounds() == 1 ? "" : "s",
            warmUpRun.seconds(),
            warmUpRun.lastTtftMs());
      }
      err.println(summary(result));
      err.flush();
    }
    out.flush();
  }

  private String json(GenerationResult result, Tokenizer tokenizer, List<TokenLogprobs> steps) {
    RequestMetrics m = result.metrics();
    ObjectNode node = JSON.createObjectNode();
    ArrayNode ids = node.putArray("tokens");
    for (int id : result.tokens()) {
      ids.add(id);
    }
    if (logprobs != null) {
      ArrayNode chosen = node.putArray("logprobs");
      ArrayNode top = logprobs > 0 ? node.putArray("top_logprobs") : null;
      for (TokenLogprobs step : steps) {
        chosen.add(step.logprob());
        if (top != null) {
          ArrayNode alternatives = top.addArray();
          for (int i = 0; i < step.topTokens().length; i++) {
            alternatives
                .addObject()
                .put("token", step.topTokens()[i])
                .put("logprob", step.topLogprobs()[i]);
          }
        }
      }
    }
    node.put("text", tokenizer.decode(result.tokens()));
    node.put("finish_reason", result.finishReason());
    node.put("prompt_tokens", m.promptTokens());
    node.put("queue_ms", m.queueNs() / 1e6);
    node.put("ttft_ms", m.ttftNs() / 1e6);
    node.put("tpot_ms", m.tpotNs() / 1e6);
    node.put("reused_device_tokens", m.reusedDeviceTokens());
    node.put("reused_host_tokens", m.reusedHostTokens());
    node.put("reused_storage_tokens", m.reusedStorageTokens());
    node.put("computed_tokens", m.computedTokens());
    node.put("warm_up_rounds", warmUpRun.rounds());
    if (!Double.isNaN(warmUpRun.lastTtftMs())) {
      node.put("warm_up_ttft_ms", warmUpRun.lastTtftMs());
    }
    return node.toString();
  }

  /** The stderr line that ends a text run. */
  static String summary(GenerationResult result) {
    RequestMetrics m = result.metrics();
    int n = result.tokens().length;
    String decode =
        m.tpotNs() > 0 ? String.format(Locale.ROOT, "%.1f tokens/s", 1e9 / m.tpotNs()) : "n/a";
    return String.format(
        Locale.ROOT,
        "generated %d token%s (finish: %s) | TTFT %.1f ms | decode %s | reused prefix: device %d,"
            + " host %d (from L3 %d) of %d prompt tokens",
        n,
        n == 1 ? "" : "s",
        result.finishReason(),
        m.ttftNs() / 1e6,
        decode,
        m.reusedDeviceTokens(),
        m.reusedHostTokens(),
        m.reusedStorageTokens(),
        m.promptTokens());
  }
}

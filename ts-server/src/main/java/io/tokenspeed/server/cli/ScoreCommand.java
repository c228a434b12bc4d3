package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kv.KvCache;
import io.tokenspeed.model.synthetic.SafetensorsWriter;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed score}: one forward pass over a prompt, printing each position's top-K next
 * tokens and, on request, every logit. It is the command-line view of the model: to compare against
 * another implementation, to check a checkpoint loads and computes, to look at a synthetic model.
 *
 * <pre>
 *   {"position":0,"token":15,"top":[{"id":42,"logit":7.125},{"id":3,"logit":6.5},...]}
 *   ...                                             one line per prompt position
 *   --logits-out FILE: safetensors, tensor "logits", F32 [positions, vocab_size]
 * </pre>
 *
 * <p>The prompt is prefilled in chunks of {@value #CHUNK_TOKENS} tokens through a KV cache sized
 * for it (blocks of {@value #BLOCK_TOKENS} tokens); the forward pass computes the same logits
 * however a prompt is chunked, so the chunk size changes memory, not results.
 */
@Command(
    name = "score",
    mixinStandardHelpOptions = true,
    versionProvider = VersionProvider.class,
    sortOptions = false,
    customSynopsis = {
      "tokenspeed score --model=DIR|synthetic:NAME (--tokens=ID,ID,... | --text=STRING)",
      "                        [--top=K] [--logits-out=FILE] [--seed=N] [--dtype=f32|bf16]",
      "                        [--threads=N]",
      ""
    },
    description = {
      "Runs one forward pass over a prompt and prints, for every position, its token and the"
          + " top-K next-token ids with their logits, one JSON line per position.",
      "",
      "--model takes a Hugging Face folder (config.json, model.safetensors) or synthetic:NAME,"
          + " a model with seeded random weights generated on first use (presets: qwen2-0.5b,"
          + " gemma3-270m, jamba-tiny, llama-100m; or synthetic:PATH to a config.json of one's own)."
    },
    footer = {
      "",
      "Examples:",
      "  tokenspeed score --model synthetic:qwen2-0.5b --tokens 1,2,3 --top 3",
      "  tokenspeed score --model ~/models/Qwen2-0.5B --text \"The capital of France is\"",
      "",
      "Synthetic models are cached under $TOKENSPEED_SYNTHETIC_DIR (default"
          + " ${java.io.tmpdir}/tokenspeed-synthetic).",
      "Exit codes: 0 success, 1 invalid input, 2 usage error, 70 internal error."
    })
final class ScoreCommand implements Callable<Integer> {

  /** Tokens per KV block. */
  static final int BLOCK_TOKENS = 16;

  /** Tokens per prefill chunk. */
  static final int CHUNK_TOKENS = 256;

  /** Top-K when {@code --top} is not given. */
  static final int DEFAULT_TOP = 5;

  private static final JsonMapper JSON = new JsonMapper();

  @Spec private CommandSpec spec;

  @Mixin private ModelOptions modelOptions;

  @Option(
      names = "--tokens",
      paramLabel = "ID,ID,...",
      description = "The prompt as comma-separated token ids.")
  private String tokens;

  @Option(
      names = "--text",
      paramLabel = "STRING",
      description =
          "The prompt as text, tokenized with the model's tokenizer.json (without one: one token"
              + " per UTF-8 byte).")
  private String text;

  @Option(
      names = "--top",
      paramLabel = "K",
      description = "Next tokens listed per position (default: " + DEFAULT_TOP + ").")
  private int top = DEFAULT_TOP;

  @Option(
      names = "--logits-out",
      paramLabel = "FILE",
      description = "Write every position's logits as safetensors (tensor logits, F32 [n, vocab]).")
  private Path logitsOut;

  @Override
  public Integer call() {
    if (text != null && tokens != null) {
      throw usage("--text and --tokens cannot be combined: give the prompt one way");
    }
    if (text == null && tokens == null) {
      throw usage("a prompt is required: --text STRING or --tokens ID,ID,...");
    }
    if (top < 1) {
      throw usage("--top=" + top + " must be at least 1");
    }
    modelOptions.checkThreads();
    DType weightType = modelOptions.weightType();
    int[] ids = tokens == null ? null : modelOptions.parseTokens(tokens);
    modelOptions.requireVectorModule();
    Path folder = modelOptions.folder(weightType);
    try (CausalLm lm = modelOptions.load(folder)) {
      int vocab = lm.vocabSize();
      if (ids == null) {
        ids = modelOptions.tokenize(folder, modelOptions.tokenizer(folder), "--text", text);
      }
      modelOptions.checkVocab(ids, vocab, tokens != null ? "--tokens" : "--text");
      if (logitsOut != null && (long) ids.length * vocab > Integer.MAX_VALUE - 8) {
        throw new IllegalArgumentException(
            "--logits-out="
                + logitsOut
                + ": "
                + ids.length
                + " positions x vocab_size="
                + vocab
                + " logits exceed one array; score a shorter prompt");
      }
      score(lm, ids);
    }
    return 0;
  }

  private void score(CausalLm lm, int[] ids) {
    int vocab = lm.vocabSize();
    int prefixGranularity = BLOCK_TOKENS * 4;
    CacheLayout layout = lm.cacheLayout(prefixGranularity, BLOCK_TOKENS);
    int[][] tables = new int[layout.numGroups()][];
    int numBlocks = 1;
    for (int g = 0; g < tables.length; g++) {
      int rows = Math.ceilDiv(ids.length, layout.group(g).blockGranularity());
      tables[g] = new int[rows];
      for (int r = 0; r < rows; r++) {
        tables[g][r] = r + 1; // block 0 is the null block
      }
      numBlocks = Math.max(numBlocks, rows + 1);
    }
    float[] all = logitsOut == null ? null : new float[ids.length * vocab];
    PrintWriter out = spec.commandLine().getOut();
    try (Arena arena = Arena.ofShared();
        ComputePool pool = modelOptions.computePool()) {
      KvCache kv = KvCache.allocate(layout, numBlocks, arena);
      for (int start = 0; start < ids.length; start += CHUNK_TOKENS) {
        int end = Math.min(ids.length, start + CHUNK_TOKENS);
        float[] logits =
            lm.forward(
                    ForwardBatch.of(
                        new ForwardRequest(
                            Arrays.copyOfRange(ids, start, end), start, tables, true)),
                    kv,
                    pool)
                .logits(0);
        for (int p = start; p < end; p++) {
          out.println(line(p, ids[p], logits, (p - start) * vocab, vocab));
        }
        if (all != null) {
          System.arraycopy(logits, 0, all, start * vocab, (end - start) * vocab);
        }
      }
    }
    out.flush();
    if (all != null) {
      try {
        SafetensorsWriter.writeF32(logitsOut, "logits", new int[] {ids.length, vocab}, all);
      } catch (UncheckedIOException e) {
        throw new UncheckedIOException(
            "--logits-out=" + logitsOut + ": " + e.getCause().getMessage(), e.getCause());
      }
    }
  }

  private String line(int position, int token, float[] logits, int from, int vocab) {
    int k = Math.min(top, vocab);
    int[] best = new int[k];
    int filled = 0;
    for (int v = 0; v < vocab; v++) {
      float x = logits[from + v];
      if (filled == k && !(x > logits[from + best[k - 1]])) {
        continue;
      }
      int i = filled < k ? filled++ : k - 1;
      while (i > 0 && x > logits[from + best[i - 1]]) {
        best[i] = best[i - 1];
        i--;
      }
      best[i] = v;
    }
    ObjectNode line = JSON.createObjectNode();
    line.put("position", position);
    line.put("token", token);
    ArrayNode topNode = line.putArray("top");
    for (int id : best) {
      topNode.addObject().put("id", id).put("logit", logits[from + id]);
    }
    return line.toString();
  }

  private ParameterException usage(String message) {
    return new ParameterException(spec.commandLine(), message);
  }
}

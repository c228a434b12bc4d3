package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.cuda.OnTheGpu;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Mamba and Jamba on the GPU against the CPU model on synthetic checkpoints (the fixtures against
 * transformers are {@link CudaCausalLmGpuTest}'s): prompts prefilled in chunks that start and end
 * off the page boundaries, each chunk resuming the State checkpoint the previous one stored, some
 * checkpoints not asked for (table entries 0, as an engine leaves them), then decode steps in
 * place; a state of 24 values a channel (the kernel that keeps it in memory) and of 16 (in
 * registers). In deterministic mode one token's logits are bit-identical however its prompt is
 * chunked and whatever shares its batch.
 */
class RecurrentGpuTest extends OnTheGpu {

  /** Block and page sizes: a State slot covers a page of {@code PAGE} tokens. */
  static final int BG = 4;

  static final int PAGE = 16;

  /** Mamba with a state of 24 values a channel (mamba_scan), untied. */
  static final String MAMBA =
      """
      {
        "architectures": ["MambaForCausalLM"],
        "model_type": "mamba",
        "conv_kernel": 4,
        "expand": 2,
        "hidden_size": 128,
        "intermediate_size": 256,
        "layer_norm_epsilon": 1e-05,
        "num_hidden_layers": 4,
        "state_size": 24,
        "tie_word_embeddings": false,
        "time_step_rank": 8,
        "use_bias": false,
        "use_conv_bias": true,
        "vocab_size": 1024
      }
      """;

  static Path checkpoint(String name, DType type, Path dir) {
    return name.equals("mamba")
        ? SyntheticCheckpoints.materialize("mamba-gpu-test", MAMBA, 5, type, dir)
        : SyntheticCheckpoints.materialize("synthetic:jamba-tiny", 5, type, dir);
  }

  static int[] prompt(int n, long seed, int vocab) {
    return new java.util.Random(seed).ints(n, 0, vocab).toArray();
  }

  /** Every table of {@code layout} of fresh blocks, for a request of {@code tokens} tokens. */
  static int[][] tables(CudaKvCache kv, long seed, int tokens) {
    return disjointTables(kv, seed, tokens)[0];
  }

  /**
   * The tables of requests of {@code tokens[r]} tokens each, drawn from one shuffle per group, so
   * that no two of them share a block: requests of one batch must not write each other's rows.
   */
  static int[][][] disjointTables(CudaKvCache kv, long seed, int... tokens) {
    CacheLayout layout = kv.layout();
    int[][][] t = new int[tokens.length][layout.numGroups()][];
    for (int g = 0; g < layout.numGroups(); g++) {
      var blocks = new CudaCausalLmGpuTest.Blocks(kv.numBlocks(g), seed + 31L * g);
      for (int r = 0; r < tokens.length; r++) {
        t[r][g] = blocks.table(Math.ceilDiv(tokens[r], layout.group(g).blockGranularity()));
      }
    }
    return t;
  }

  /**
   * The tables of a chunk of positions {@code [start, end)}: every State row but the chunk's input
   * and working rows and every third crossed one left 0 (no checkpoint wanted there).
   */
  static int[][] sparseCheckpoints(CacheLayout layout, int[][] tables, int start, int end) {
    int[][] t = new int[tables.length][];
    for (int g = 0; g < t.length; g++) {
      t[g] = tables[g].clone();
      if (!(layout.group(g).kind() instanceof GroupKind.StateCheckpoints)) {
        continue;
      }
      int input = start == 0 ? -1 : (start - 1) / PAGE;
      int working = (end - 1) / PAGE;
      for (int row = 0; row < t[g].length; row++) {
        if (row != input && row != working && row % 3 != 0) {
          t[g][row] = 0;
        }
      }
    }
    return t;
  }

  @ParameterizedTest
  @CsvSource({"mamba, F32", "mamba, BF16", "jamba, F32", "jamba, BF16"})
  void shouldMatchTheCpuModelChunkAfterChunk(String name, String dtype, @TempDir Path dir) {
    DType type = DType.valueOf(dtype);
    Path folder = checkpoint(name, type, dir);
    int steps = 12;
    int vocab;
    try (CausalLm model = CausalLm.load(folder)) {
      vocab = model.vocabSize();
    }
    int[] ids = prompt(150, 3, vocab);
    AgainstCpu.CpuRun cpu = AgainstCpu.cpu(folder, ids, steps, BG);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, name + "-test", "test");
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(PAGE, BG), 128)) {
      assertEquals(type == DType.BF16, m.bf16());
      int[][] tables = tables(kv, 9, ids.length + steps);
      AgainstCpu.compare(
          "synthetic " + name + ", uneven chunks, sparse checkpoints",
          m,
          kv,
          ids,
          cpu,
          new int[] {23, 9, 40, 1, 33, 44},
          (start, end) -> sparseCheckpoints(kv.layout(), tables, start, end),
          type);
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"mamba", "jamba"})
  void shouldGiveOneTokensBitsWhateverTheChunkingAndBatchInDeterministicMode(
      String name, @TempDir Path dir) {
    Path folder = checkpoint(name, DType.BF16, dir);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, name + "-test", "test", true);
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(PAGE, BG), 256)) {
      AgainstCpu.assertBatchInvariant("synthetic " + name, m, kv);
    }
  }
}

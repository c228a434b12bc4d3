package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.GroupKind;
import io.tokenspeed.cuda.OnTheGpu;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Gemma 3 on the GPU against the CPU model on a synthetic checkpoint whose prompts run far past the
 * sliding window (the fixture against transformers is {@link CudaCausalLmGpuTest}'s): grouped query
 * heads, two RoPE bases, both soft-caps, the sliding layers' group given holes left of each chunk's
 * window as an engine gives them; and, in deterministic mode, one token's logits bit-identical
 * however its prompt is chunked and whatever shares its batch.
 */
class Gemma3GpuTest extends OnTheGpu {

  /** Window 24 over blocks of 4: a 200-token prompt leaves most of its SWA rows behind. */
  static final int WINDOW = 24;

  static final int BG = 4;

  /** A small Gemma 3: GQA 4:2, head size 64, sliding and global layers, both soft-caps. */
  static Path checkpoint(Path dir, DType type) {
    String config =
        """
        {
          "architectures": ["Gemma3ForCausalLM"],
          "model_type": "gemma3_text",
          "attn_logit_softcapping": 50.0,
          "final_logit_softcapping": 30.0,
          "head_dim": 64,
          "hidden_activation": "gelu_pytorch_tanh",
          "hidden_size": 256,
          "intermediate_size": 512,
          "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                          "sliding_attention", "sliding_attention", "full_attention"],
          "max_position_embeddings": 4096,
          "num_attention_heads": 4,
          "num_hidden_layers": 6,
          "num_key_value_heads": 2,
          "query_pre_attn_scalar": 64,
          "rms_norm_eps": 1e-06,
          "rope_local_base_freq": 10000.0,
          "rope_theta": 1000000.0,
          "sliding_window": %d,
          "tie_word_embeddings": true,
          "vocab_size": 2048
        }
        """
            .formatted(WINDOW);
    return SyntheticCheckpoints.materialize("gemma3-gpu-test", config, 7, type, dir);
  }

  static int[] prompt(int n, long seed, int vocab) {
    Random rnd = new Random(seed);
    int[] ids = new int[n];
    for (int i = 0; i < n; i++) {
      ids[i] = rnd.nextInt(vocab);
    }
    return ids;
  }

  /**
   * The tables of a chunk starting at {@code start}: the SWA group's rows wholly left of the
   * chunk's first window are holes (0), as {@link ForwardRequest} allows.
   */
  static int[][] withHoles(int[][] tables, int swaGroup, int start) {
    int[][] t = new int[tables.length][];
    for (int g = 0; g < t.length; g++) {
      t[g] = tables[g].clone();
    }
    int firstSeen = Math.max(0, start - WINDOW + 1);
    for (int row = 0; (row + 1) * BG <= firstSeen; row++) {
      t[swaGroup][row] = 0;
    }
    return t;
  }

  @ParameterizedTest
  @ValueSource(strings = {"F32", "BF16"})
  void shouldMatchTheCpuModelFarPastTheWindow(String dtype, @TempDir Path dir) {
    DType type = DType.valueOf(dtype);
    Path folder = checkpoint(dir, type);
    int[] ids = prompt(200, 11, 2048);
    int steps = 12;
    AgainstCpu.CpuRun cpu = AgainstCpu.cpu(folder, ids, steps, BG);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, "gemma3-test", "test");
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(4 * BG, BG), 128)) {
      assertEquals(type == DType.BF16, m.bf16());
      assertEquals("cuda-paged-f32", m.attentionName(), "sliding windows: per-token attention");
      assertEquals(2, kv.layout().numGroups());
      int swa = kv.layout().group(0).kind() instanceof GroupKind.SlidingWindow ? 0 : 1;
      int[][] tables = CudaCausalLmGpuTest.tables(kv, 3, Math.ceilDiv(ids.length + steps, BG));
      AgainstCpu.compare(
          "synthetic gemma3, window " + WINDOW + ", chunks of 40 with holes",
          m,
          kv,
          ids,
          cpu,
          new int[] {40},
          (start, end) -> withHoles(tables, swa, start),
          type);
    }
  }

  @Test
  void shouldGiveOneTokensBitsWhateverTheChunkingAndBatchInDeterministicMode(@TempDir Path dir) {
    Path folder = checkpoint(dir, DType.BF16);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, "gemma3-test", "test", true);
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(4 * BG, BG), 512)) {
      AgainstCpu.assertBatchInvariant("synthetic gemma3", m, kv);
    }
  }

  @Test
  void shouldRefuseTheTensorCoreAttentionForSlidingWindows(@TempDir Path dir) {
    Path folder = checkpoint(dir, DType.BF16);
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                CudaCausalLm.load(
                    device,
                    folder,
                    "gemma3-test",
                    "test",
                    false,
                    CudaCausalLm.Attention.TENSOR_CORE));
    assertTrue(e.getMessage().contains("per-token"), e.getMessage());
  }
}

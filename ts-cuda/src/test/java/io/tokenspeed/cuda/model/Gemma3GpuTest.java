package io.tokenspeed.cuda.model;

import static io.tokenspeed.cuda.model.CudaCausalLmGpuTest.BF16_RELATIVE;
import static io.tokenspeed.cuda.model.CudaCausalLmGpuTest.F32_RELATIVE;
import static io.tokenspeed.cuda.model.CudaCausalLmGpuTest.argmax;
import static io.tokenspeed.cuda.model.CudaCausalLmGpuTest.relative;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.GroupKind;
import io.tokenspeed.cuda.OnTheGpu;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.PagedRunner;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Locale;
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
    float[] cpu;
    float[] cpuSteps = new float[steps * 2048];
    int[] cpuIds = new int[steps];
    try (CausalLm model = CausalLm.load(folder);
        PagedRunner runner = new PagedRunner(model, BG, 128, 1);
        ComputePool pool = ComputePool.ofCores()) {
      int[][] table = runner.table(runner.rowsFor(ids.length + steps));
      cpu = runner.prefill(ids, table, 64, pool);
      int next = argmax(cpu, (ids.length - 1) * 2048, 2048);
      for (int s = 0; s < steps; s++) {
        cpuIds[s] = next;
        float[] row = runner.decode(next, ids.length + s, table, pool);
        System.arraycopy(row, 0, cpuSteps, s * 2048, 2048);
        next = PagedRunner.argmax(row);
      }
    }
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, "gemma3-test", "test");
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(4 * BG, BG), 128)) {
      assertEquals(type == DType.BF16, m.bf16());
      assertEquals("cuda-paged-f32", m.attentionName(), "sliding windows: per-token attention");
      assertEquals(2, kv.layout().numGroups());
      int swa = kv.layout().group(0).kind() instanceof GroupKind.SlidingWindow ? 0 : 1;
      int[][] tables = CudaCausalLmGpuTest.tables(kv, 3, Math.ceilDiv(ids.length + steps, BG));
      int vocab = m.vocabSize();
      float[] gpu = new float[ids.length * vocab];
      int chunk = 40;
      for (int start = 0; start < ids.length; start += chunk) {
        int n = Math.min(chunk, ids.length - start);
        ForwardResult r =
            m.forward(
                ForwardBatch.of(
                    new ForwardRequest(
                        Arrays.copyOfRange(ids, start, start + n),
                        start,
                        withHoles(tables, swa, start),
                        true)),
                kv);
        System.arraycopy(r.logits(0), 0, gpu, start * vocab, n * vocab);
      }
      double err = relative(gpu, cpu);
      float[] gpuSteps = new float[steps * vocab];
      int same = 0;
      for (int s = 0; s < steps; s++) {
        int pos = ids.length + s;
        ForwardResult r =
            m.forward(
                ForwardBatch.of(
                    new ForwardRequest(
                        new int[] {cpuIds[s]}, pos, withHoles(tables, swa, pos), false)),
                kv);
        System.arraycopy(r.logits(0), 0, gpuSteps, s * vocab, vocab);
        same += argmax(gpuSteps, s * vocab, vocab) == argmax(cpuSteps, s * vocab, vocab) ? 1 : 0;
      }
      double stepErr = relative(gpuSteps, cpuSteps);
      System.out.printf(
          Locale.ROOT,
          "synthetic gemma3 %s, window %d: prefill (chunks of %d, holes) vs the CPU model %.2e,"
              + " decode %.2e, next ids equal at %d of %d steps%n",
          dtype,
          WINDOW,
          chunk,
          err,
          stepErr,
          same,
          steps);
      double bound = type == DType.BF16 ? BF16_RELATIVE : F32_RELATIVE;
      assertTrue(err <= bound, dtype + " prefill: " + err);
      assertTrue(stepErr <= bound, dtype + " decode: " + stepErr);
      if (type == DType.F32) {
        assertEquals(steps, same, "float32: the CPU model's greedy ids");
      }
    }
  }

  @Test
  void shouldGiveOneTokensBitsWhateverTheChunkingAndBatchInDeterministicMode(@TempDir Path dir) {
    Path folder = checkpoint(dir, DType.BF16);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, "gemma3-test", "test", true);
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(4 * BG, BG), 512)) {
      int vocab = m.vocabSize();
      int[] a = prompt(150, 21, vocab);
      int[] b = prompt(90, 22, vocab);
      int rows = Math.ceilDiv(a.length, BG);
      float[] whole =
          CudaCausalLmGpuTest.prefill(m, kv, a, CudaCausalLmGpuTest.tables(kv, 1, rows), a.length);
      float[] chunked =
          CudaCausalLmGpuTest.prefill(m, kv, a, CudaCausalLmGpuTest.tables(kv, 2, rows), 17);
      assertArrayEquals(whole, chunked, "chunks of 17 vs the whole prompt");
      // a's last 30 tokens batched with b's prefill, a's first 120 already in other blocks
      int[][] ta = CudaCausalLmGpuTest.tables(kv, 3, rows);
      CudaCausalLmGpuTest.prefill(m, kv, Arrays.copyOf(a, 120), ta, 120);
      ForwardResult r =
          m.forward(
              ForwardBatch.of(
                  new ForwardRequest(
                      b, 0, CudaCausalLmGpuTest.tables(kv, 4, Math.ceilDiv(b.length, BG)), false),
                  new ForwardRequest(Arrays.copyOfRange(a, 120, 150), 120, ta, true)),
              kv);
      assertArrayEquals(
          Arrays.copyOfRange(whole, 120 * vocab, 150 * vocab),
          r.logits(1),
          "batched with another prompt's prefill");
      System.out.printf(
          Locale.ROOT,
          "synthetic gemma3, deterministic: 150 positions bit-identical whole, in chunks of 17 and"
              + " batched%n");
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

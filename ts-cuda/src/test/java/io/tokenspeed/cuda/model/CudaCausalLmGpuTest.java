package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.OnTheGpu;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.PagedRunner;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.SafetensorsFile;
import io.tokenspeed.model.checkpoint.TensorShape;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.synthetic.SafetensorsWriter;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.lang.foreign.Arena;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The GPU forward pass against references: Hugging Face transformers on the same GPU (float32, TF32
 * off; {@code -Dgpu.reference} names the folder {@code hf_reference.py} wrote), the fixtures' CPU
 * reference outputs, and the project's CPU model on synthetic checkpoints, in float32 and bf16.
 */
class CudaCausalLmGpuTest extends OnTheGpu {

  /** Float32: max |Δ| over the reference's largest magnitude. */
  static final double F32_RELATIVE = 1e-3;

  /**
   * Bf16 weights: the GPU rounds every GEMM input to bf16 (8 significant bits, relative step 2^-8),
   * the CPU model computes with float32 activations over the same bf16 weights.
   */
  static final double BF16_RELATIVE = 5e-2;

  /** Tables of fresh blocks from a shuffled free list, as an engine hands them out. */
  static final class Blocks {
    final List<Integer> free = new ArrayList<>();

    Blocks(int numBlocks, long seed) {
      for (int b = 1; b < numBlocks; b++) {
        free.add(b);
      }
      Collections.shuffle(free, new Random(seed));
    }

    int[] table(int rows) {
      int[] t = new int[rows];
      for (int i = 0; i < rows; i++) {
        t[i] = free.removeFirst();
      }
      return t;
    }
  }

  /** Prefills {@code ids} in chunks of {@code chunk}; returns every position's logits. */
  static float[] prefill(CudaCausalLm m, CudaKvCache kv, int[] ids, int[] table, int chunk) {
    return prefill(m, kv, ids, new int[][] {table}, chunk);
  }

  /** {@link #prefill(CudaCausalLm, CudaKvCache, int[], int[], int)} with a table per group. */
  static float[] prefill(CudaCausalLm m, CudaKvCache kv, int[] ids, int[][] tables, int chunk) {
    int vocab = m.vocabSize();
    float[] all = new float[ids.length * vocab];
    for (int start = 0; start < ids.length; start += chunk) {
      int n = Math.min(chunk, ids.length - start);
      int[] part = java.util.Arrays.copyOfRange(ids, start, start + n);
      ForwardResult r =
          m.forward(ForwardBatch.of(new ForwardRequest(part, start, tables, true)), kv);
      System.arraycopy(r.logits(0), 0, all, start * vocab, n * vocab);
    }
    return all;
  }

  /**
   * A table of {@code rows} fresh blocks for every group of {@code kv}, shuffled by {@code seed}.
   */
  static int[][] tables(CudaKvCache kv, long seed, int rows) {
    int[][] t = new int[kv.layout().numGroups()][];
    for (int g = 0; g < t.length; g++) {
      t[g] = new Blocks(kv.numBlocks(g), seed + 31L * g).table(rows);
    }
    return t;
  }

  static int argmax(float[] v, int from, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) {
      if (v[from + i] > v[from + best]) {
        best = i;
      }
    }
    return best;
  }

  /** max |a − b| / max |b|. */
  static double relative(float[] a, float[] b) {
    assertEquals(b.length, a.length, "lengths");
    double diff = 0;
    double scale = 0;
    for (int i = 0; i < a.length; i++) {
      diff = Math.max(diff, Math.abs((double) a[i] - b[i]));
      scale = Math.max(scale, Math.abs(b[i]));
    }
    return diff / Math.max(scale, 1e-30);
  }

  @ParameterizedTest
  @ValueSource(strings = {"llama", "qwen2", "gemma3", "mamba", "jamba"})
  void shouldMatchTransformersOnTheSameGpuAndTheCpuReference(String name, @TempDir Path dir)
      throws Exception {
    String refDir = System.getProperty("gpu.reference");
    assertNotNull(refDir, "-Dgpu.reference must name the folder hf_reference.py wrote");
    Path folder = Fixtures.extract(name, dir);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, name, "test");
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(16, 4), 256);
        Arena arena = Arena.ofConfined()) {
      SafetensorsFile gpuRef =
          SafetensorsFile.open(Path.of(refDir).resolve(name + ".safetensors"), arena);
      CpuReference cpuRef =
          new CpuReference(SafetensorsFile.open(folder.resolve("reference.safetensors"), arena));
      int vocab = m.vocabSize();
      for (int p = 0; p < Fixtures.PROMPTS; p++) {
        int[] ids = cpuRef.ids(p);
        int[][] table = tables(kv, p, Math.ceilDiv(ids.length + 16, 4));
        float[] logits = prefill(m, kv, ids, table, ids.length);
        double vsGpu = relative(logits, gpuRef.tensor("logits_" + p).toFloatArray());
        double vsCpu = relative(logits, cpuRef.logits(p));
        System.out.printf(
            Locale.ROOT,
            "%s prompt %d (%d tokens): prefill logits vs transformers on the GPU %.2e, vs the"
                + " CPU reference %.2e%n",
            name,
            p,
            ids.length,
            vsGpu,
            vsCpu);
        assertTrue(vsGpu <= F32_RELATIVE, name + " prompt " + p + " vs GPU: " + vsGpu);
        assertTrue(vsCpu <= F32_RELATIVE, name + " prompt " + p + " vs CPU: " + vsCpu);
        // greedy decode with the KV cache
        int[] greedy = new int[16];
        float[] steps = new float[16 * vocab];
        int next = argmax(logits, (ids.length - 1) * vocab, vocab);
        for (int s = 0; s < 16; s++) {
          greedy[s] = next;
          ForwardResult r =
              m.forward(
                  ForwardBatch.of(
                      new ForwardRequest(new int[] {next}, ids.length + s, table, false)),
                  kv);
          System.arraycopy(r.logits(0), 0, steps, s * vocab, vocab);
          next = argmax(r.logits(0), 0, vocab);
        }
        assertArrayEquals(cpuRef.greedy(p), greedy, name + " greedy vs CPU reference");
        // the reference's step s holds the logits that chose greedy[s] (step 0: the prompt's last
        // row); ours, those after feeding greedy[s], which chose greedy[s + 1]
        double stepErr =
            relative(
                java.util.Arrays.copyOf(steps, 15 * vocab),
                java.util.Arrays.copyOfRange(cpuRef.steps(p), vocab, 16 * vocab));
        assertTrue(stepErr <= F32_RELATIVE, name + " decode steps: " + stepErr);
        // transformers on the GPU may part from the CPU's continuation where two logits tie: ids
        // equal up to the first step where its own logits hold a tie between its id and ours
        int[] gpuGreedy = gpuRef.tensor("greedy_" + p).toIntArray();
        float[] gpuSteps = gpuRef.tensor("steps_" + p).toFloatArray();
        for (int s = 0; s < greedy.length; s++) {
          if (gpuGreedy[s] == greedy[s]) {
            continue;
          }
          float theirs = gpuSteps[s * vocab + gpuGreedy[s]];
          float ours = gpuSteps[s * vocab + greedy[s]];
          double scale = 0;
          for (int i = 0; i < vocab; i++) {
            scale = Math.max(scale, Math.abs(gpuSteps[s * vocab + i]));
          }
          double gap = (theirs - ours) / scale;
          System.out.printf(
              Locale.ROOT,
              "%s prompt %d: transformers on the GPU parts at step %d (%d, ours %d), a tie of"
                  + " %.2e relative in its own logits%n",
              name,
              p,
              s,
              gpuGreedy[s],
              greedy[s],
              gap);
          assertTrue(gap <= F32_RELATIVE, name + " greedy vs GPU: no tie at step " + s);
          break;
        }
      }
    }
  }

  /**
   * The fixtures with bf16 weights (each float32 weight rounded to nearest even, as transformers
   * rounds when it loads them in bfloat16) against transformers in bfloat16 on the same GPU and
   * against the float32 reference: both within the bf16 bound. The argmax of each prompt's last row
   * is printed beside; bf16 may resolve a near tie of the tiny fixtures either way.
   */
  @ParameterizedTest
  @ValueSource(strings = {"llama", "qwen2", "gemma3", "mamba", "jamba"})
  void shouldMatchTransformersInBf16OnTheSameGpu(String name, @TempDir Path dir) throws Exception {
    String refDir = System.getProperty("gpu.reference");
    assertNotNull(refDir, "-Dgpu.reference must name the folder hf_reference.py wrote");
    Path folder = bf16Copy(Fixtures.extract(name, dir), dir.resolve(name + "-bf16"));
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, name, "test");
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(16, 4), 256);
        Arena arena = Arena.ofConfined()) {
      assertTrue(m.bf16(), "the copy's weights are bf16");
      SafetensorsFile gpuRef =
          SafetensorsFile.open(Path.of(refDir).resolve(name + ".safetensors"), arena);
      int vocab = m.vocabSize();
      for (int p = 0; gpuRef.tensors().containsKey("bf16_logits_" + p); p++) {
        int[] ids = Fixtures.referenceInts(folder, "ids_" + p);
        int[][] table = tables(kv, p, Math.ceilDiv(ids.length, 4));
        float[] logits = prefill(m, kv, ids, table, ids.length);
        float[] theirs = gpuRef.tensor("bf16_logits_" + p).toFloatArray();
        float[] f32 = gpuRef.tensor("logits_" + p).toFloatArray();
        double vsBf16 = relative(logits, theirs);
        double vsF32 = relative(logits, f32);
        int last = (ids.length - 1) * vocab;
        System.out.printf(
            Locale.ROOT,
            "%s prompt %d bf16: prefill logits vs transformers bf16 on the GPU %.2e, vs its"
                + " float32 %.2e (its bf16 vs its float32 %.2e); last row's argmax ours %d,"
                + " transformers bf16 %d, float32 %d%n",
            name,
            p,
            vsBf16,
            vsF32,
            relative(theirs, f32),
            argmax(logits, last, vocab),
            argmax(theirs, last, vocab),
            argmax(f32, last, vocab));
        assertTrue(vsBf16 <= BF16_RELATIVE, name + " prompt " + p + " vs bf16: " + vsBf16);
        assertTrue(vsF32 <= BF16_RELATIVE, name + " prompt " + p + " vs float32: " + vsF32);
      }
    }
  }

  /** A copy of checkpoint {@code src} (config.json, reference.safetensors) with bf16 weights. */
  static Path bf16Copy(Path src, Path dst) throws java.io.IOException {
    java.nio.file.Files.createDirectories(dst);
    for (String f : new String[] {"config.json", "reference.safetensors"}) {
      java.nio.file.Files.copy(src.resolve(f), dst.resolve(f));
    }
    try (Arena arena = Arena.ofConfined()) {
      SafetensorsFile weights = SafetensorsFile.open(src.resolve("model.safetensors"), arena);
      List<TensorShape> shapes = new ArrayList<>();
      for (var t : weights.tensors().values()) {
        shapes.add(new TensorShape(t.name(), t.shape()));
      }
      SafetensorsWriter.write(
          dst.resolve("model.safetensors"),
          DType.BF16,
          shapes,
          shape -> {
            float[] values = weights.tensor(shape.name()).toFloatArray();
            int[] at = {0};
            return (out, count) -> {
              System.arraycopy(values, at[0], out, 0, count);
              at[0] += count;
            };
          });
    }
    return dst;
  }

  /** The fixture's reference outputs (transformers on the CPU), from its extracted folder. */
  record CpuReference(SafetensorsFile file) {
    int[] ids(int p) {
      return file.tensor("ids_" + p).toIntArray();
    }

    float[] logits(int p) {
      return file.tensor("logits_" + p).toFloatArray();
    }

    int[] greedy(int p) {
      return file.tensor("greedy_" + p).toIntArray();
    }

    float[] steps(int p) {
      return file.tensor("steps_" + p).toFloatArray();
    }
  }

  @Test
  void shouldGiveTheSameLogitsWhateverTheChunkingBatchAndBlocks(@TempDir Path dir) {
    Path folder = Fixtures.extract("llama", dir);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, "llama", "test");
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(16, 4), 512)) {
      Random rnd = new Random(7);
      int[] ids = new int[150];
      for (int i = 0; i < ids.length; i++) {
        ids[i] = rnd.nextInt(m.vocabSize());
      }
      Blocks blocks = new Blocks(kv.numBlocks(0), 11);
      float[] whole = prefill(m, kv, ids, blocks.table(38), ids.length);
      float[] chunked = prefill(m, kv, ids, blocks.table(38), 7);
      double chunkErr = relative(chunked, whole);
      // the same prompt again, batched with another request
      int[] other = new int[40];
      for (int i = 0; i < other.length; i++) {
        other[i] = rnd.nextInt(m.vocabSize());
      }
      ForwardResult batched =
          m.forward(
              new ForwardBatch(
                  List.of(
                      new ForwardRequest(other, 0, new int[][] {blocks.table(10)}, false),
                      new ForwardRequest(ids, 0, new int[][] {blocks.table(38)}, true))),
              kv);
      double batchErr = relative(batched.logits(1), whole);
      System.out.printf(
          Locale.ROOT, "chunks of 7 vs whole %.2e; batched vs alone %.2e%n", chunkErr, batchErr);
      assertTrue(chunkErr <= 1e-5, "chunked: " + chunkErr);
      assertTrue(batchErr <= 1e-5, "batched: " + batchErr);
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"F32", "BF16"})
  void shouldMatchTheCpuModelOnASyntheticLlama(String dtype, @TempDir Path dir) {
    DType type = DType.valueOf(dtype);
    Path folder = SyntheticCheckpoints.materialize("synthetic:llama-100m", 3, type, dir);
    int[] ids = new int[200];
    Random rnd = new Random(5);
    for (int i = 0; i < ids.length; i++) {
      ids[i] = rnd.nextInt(32000);
    }
    float[] cpu;
    try (CausalLm model = CausalLm.load(folder);
        PagedRunner runner = new PagedRunner(model, 16, 64, 1);
        ComputePool pool = ComputePool.ofCores()) {
      cpu = runner.prefill(ids, runner.table(runner.rowsFor(ids.length)), 64, pool);
    }
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, "llama-100m", "test");
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(64, 16), 64)) {
      assertEquals(type == DType.BF16, m.bf16());
      float[] gpu = prefill(m, kv, ids, new Blocks(64, 2).table(13), 64);
      double err = relative(gpu, cpu);
      int vocab = m.vocabSize();
      int same = 0;
      for (int t = 0; t < ids.length; t++) {
        same += argmax(gpu, t * vocab, vocab) == argmax(cpu, t * vocab, vocab) ? 1 : 0;
      }
      System.out.printf(
          Locale.ROOT,
          "synthetic llama-100m %s: GPU vs CPU model %.2e; argmax equal at %d of %d positions%n",
          dtype,
          err,
          same,
          ids.length);
      assertTrue(err <= (type == DType.BF16 ? BF16_RELATIVE : F32_RELATIVE), dtype + ": " + err);
    }
  }

  /**
   * The tiled and the per-token float32 attention give the same bits: on the Llama family, and on
   * Gemma 3 (the fixture's window of 16 positions; the 270m shape's head size of 256, whose tiles
   * take more than the default 48 KiB of shared memory) and Jamba, which take the tiled kernel with
   * {@code -Dtokenspeed.cuda.hybridattention=tiled}.
   */
  @ParameterizedTest
  @ValueSource(
      strings = {"llama", "synthetic:llama-100m", "gemma3", "jamba", "synthetic:gemma3-270m"})
  void shouldComputeTheSameBitsWithTheTiledAndThePerTokenAttention(String name, @TempDir Path dir) {
    Path folder =
        name.startsWith("synthetic:")
            ? SyntheticCheckpoints.materialize(name, 4, DType.BF16, dir)
            : Fixtures.extract(name, dir);
    Random rnd = new Random(13);
    try (CudaCausalLm m =
            CudaCausalLm.load(
                device, folder, "tiles", "test", false, CudaCausalLm.Attention.TILED);
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(16, 4), 512)) {
      int[] a = new int[77];
      int[] b = new int[130];
      for (int i = 0; i < a.length; i++) {
        a[i] = rnd.nextInt(m.vocabSize());
      }
      for (int i = 0; i < b.length; i++) {
        b[i] = rnd.nextInt(m.vocabSize());
      }
      Blocks blocks = new Blocks(kv.numBlocks(0), 3);
      int[] ta = blocks.table(30);
      int[] tb = blocks.table(40);
      float[][] got = new float[2][];
      for (int pass = 0; pass < 2; pass++) {
        m.useAttention(pass == 0 ? CudaCausalLm.Attention.TILED : CudaCausalLm.Attention.PER_TOKEN);
        // a prefill chunk of one request beside another's first 70 tokens, then a mixed batch
        ForwardResult first =
            m.forward(
                new ForwardBatch(
                    List.of(
                        new ForwardRequest(a, 0, new int[][] {ta}, true),
                        new ForwardRequest(
                            java.util.Arrays.copyOf(b, 70), 0, new int[][] {tb}, true))),
                kv);
        ForwardResult second =
            m.forward(
                new ForwardBatch(
                    List.of(
                        new ForwardRequest(new int[] {5}, a.length, new int[][] {ta}, false),
                        new ForwardRequest(
                            java.util.Arrays.copyOfRange(b, 70, b.length),
                            70,
                            new int[][] {tb},
                            true))),
                kv);
        int vocab = m.vocabSize();
        float[] all = new float[(a.length + 70 + 1 + 60) * vocab];
        System.arraycopy(first.logits(0), 0, all, 0, a.length * vocab);
        System.arraycopy(first.logits(1), 0, all, a.length * vocab, 70 * vocab);
        System.arraycopy(second.logits(0), 0, all, (a.length + 70) * vocab, vocab);
        System.arraycopy(second.logits(1), 0, all, (a.length + 71) * vocab, 60 * vocab);
        got[pass] = all;
      }
      int differ = 0;
      for (int i = 0; i < got[0].length; i++) {
        differ += Float.floatToRawIntBits(got[0][i]) != Float.floatToRawIntBits(got[1][i]) ? 1 : 0;
      }
      System.out.printf(
          Locale.ROOT,
          "%s: tiled vs per-token attention: %d of %d logits differ in any bit, max |Δ| rel %.2e%n",
          name,
          differ,
          got[0].length,
          relative(got[0], got[1]));
      assertEquals(0, differ, name + ": logits that differ in any bit");
    }
  }

  /** Random token ids below {@code vocab}. */
  static int[] randomIds(Random rnd, int n, int vocab) {
    int[] ids = new int[n];
    for (int i = 0; i < n; i++) {
      ids[i] = rnd.nextInt(vocab);
    }
    return ids;
  }

  /**
   * The configuration of the attention tests' synthetic model: llama-100m's shape (12 query heads
   * of 64 on 4 KV heads), or at head size 128 4 layers of 6 heads on 2.
   */
  static String attentionConfig(int headDim) {
    String config = SyntheticCheckpoints.presetConfig("llama-100m");
    if (headDim == 128) {
      config =
          config
              .replaceFirst("\"head_dim\": 64", "\"head_dim\": 128")
              .replaceFirst("\"num_attention_heads\": 12", "\"num_attention_heads\": 6")
              .replaceFirst("\"num_key_value_heads\": 4", "\"num_key_value_heads\": 2")
              .replaceFirst("\"num_hidden_layers\": 12", "\"num_hidden_layers\": 4");
      assertTrue(
          config.contains("\"head_dim\": 128") && config.contains("\"num_hidden_layers\": 4"));
    }
    return config;
  }

  /**
   * The tensor-core attention's name a model takes on this device without {@code
   * tokenspeed.cuda.flash}: the wgmma kernel's on compute capability 9.0, the mma kernel's
   * elsewhere.
   */
  static String defaultFlashName() {
    return "sm_90".equals(device.arch()) ? "cuda-flash-wgmma-bf16" : "cuda-flash-bf16";
  }

  /**
   * The tensor-core attention against the float32 one on a bf16 model: within what bf16 queries,
   * keys, values and probabilities allow, the same argmax nearly everywhere; and batch-invariant:
   * in deterministic mode a request's logits are bit-identical alone in one chunk or in chunks
   * beside others (a prefill of another request, decodes), with 3 query heads per KV head.
   */
  @ParameterizedTest
  @ValueSource(ints = {64, 128})
  void shouldMatchTheFloat32AttentionAndStayBatchInvariantOnTheTensorCores(
      int headDim, @TempDir Path dir) {
    String config = attentionConfig(headDim);
    Path folder = SyntheticCheckpoints.materialize("flash-" + headDim, config, 6, DType.BF16, dir);
    Random rnd = new Random(17 + headDim);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, "flash", "test", true);
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(16, 16), 256);
        CudaCausalLm f32m =
            CudaCausalLm.load(device, folder, "flash", "test", true, CudaCausalLm.Attention.TILED);
        CudaKvCache f32kv = new CudaKvCache(device, f32m.cacheLayout(16, 16), 256)) {
      assertEquals(defaultFlashName(), m.attentionName());
      // the gate | up product writes bf16 on the wgmma tiles, and the deployment identity says so
      assertEquals(
          CudaCausalLm.BF16_MLP && device.wgmma(),
          m.fixedOrderBits().endsWith("-bf16mlp"),
          m.fixedOrderBits());
      // deterministic: decode-only batches on the same kernel as the others
      assertEquals(m.flash(), m.decodeFlash());
      assertEquals(CudaCausalLm.KV_BF16, m.cacheLayout(16, 16).dtype());
      assertEquals(
          2 * m.cacheLayout(16, 16).group(0).bytesPerBlock(),
          f32m.cacheLayout(16, 16).group(0).bytesPerBlock());
      int vocab = m.vocabSize();
      int[] a = randomIds(rnd, 300, vocab);
      int[] b = randomIds(rnd, 90, vocab);
      Blocks blocks = new Blocks(kv.numBlocks(0), 5);
      int[] ta = blocks.table(20);
      int[] tb = blocks.table(8);
      float[] alone = prefill(m, kv, a, ta, a.length);
      float[] f32 = prefill(f32m, f32kv, a, ta, a.length);
      double err = relative(alone, f32);
      int same = 0;
      for (int t = 0; t < a.length; t++) {
        same += argmax(alone, t * vocab, vocab) == argmax(f32, t * vocab, vocab) ? 1 : 0;
      }
      // a in chunks of 7, 128 and the rest, beside b's prefill and then b's decodes
      float[] mixed = new float[a.length * vocab];
      int[][] cuts = {{0, 7}, {7, 135}, {135, a.length}};
      for (int c = 0; c < cuts.length; c++) {
        int from = cuts[c][0];
        int to = cuts[c][1];
        ForwardRequest other =
            c == 0
                ? new ForwardRequest(b, 0, new int[][] {tb}, true)
                : new ForwardRequest(new int[] {c}, b.length + c - 1, new int[][] {tb}, false);
        ForwardResult r =
            m.forward(
                new ForwardBatch(
                    List.of(
                        other,
                        new ForwardRequest(
                            java.util.Arrays.copyOfRange(a, from, to),
                            from,
                            new int[][] {ta},
                            true))),
                kv);
        System.arraycopy(r.logits(1), 0, mixed, from * vocab, (to - from) * vocab);
      }
      int differ = 0;
      for (int i = 0; i < mixed.length; i++) {
        differ += Float.floatToRawIntBits(mixed[i]) != Float.floatToRawIntBits(alone[i]) ? 1 : 0;
      }
      System.out.printf(
          Locale.ROOT,
          "head size %d: tensor-core vs float32 attention %.2e relative, argmax equal at %d of"
              + " %d; chunked and batched vs alone: %d of %d logits differ in any bit%n",
          headDim,
          err,
          same,
          a.length,
          differ,
          mixed.length);
      assertTrue(err <= BF16_RELATIVE, "tensor cores vs float32: " + err);
      assertTrue(same >= a.length * 95 / 100, "argmax equal at " + same + " of " + a.length);
      assertEquals(0, differ, "logits that differ in any bit");
    }
  }
}

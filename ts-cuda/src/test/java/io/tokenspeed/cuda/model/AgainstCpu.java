package io.tokenspeed.cuda.model;

import static io.tokenspeed.cuda.model.CudaCausalLmGpuTest.BF16_RELATIVE;
import static io.tokenspeed.cuda.model.CudaCausalLmGpuTest.F32_RELATIVE;
import static io.tokenspeed.cuda.model.CudaCausalLmGpuTest.argmax;
import static io.tokenspeed.cuda.model.CudaCausalLmGpuTest.relative;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.PagedRunner;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.kernel.ComputePool;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Locale;

/**
 * A prompt through the CPU model (prefill, then greedy decode) and the same tokens through the GPU
 * model, chunk by chunk with the tables a test shapes (holes, checkpoints not asked for), compared
 * logit for logit: float32 within {@link CudaCausalLmGpuTest#F32_RELATIVE} and the CPU's greedy
 * ids, bf16 within {@link CudaCausalLmGpuTest#BF16_RELATIVE}.
 */
final class AgainstCpu {
  private AgainstCpu() {}

  /** The CPU model's logits of every prompt position, of each decode step, and its greedy ids. */
  record CpuRun(float[] prefill, float[] steps, int[] ids) {}

  /** The tables of a chunk of positions {@code [start, end)}. */
  interface Tables {
    int[][] of(int start, int end);
  }

  /** {@code ids} prefilled in chunks of 64, then {@code steps} greedy steps, on the CPU. */
  static CpuRun cpu(Path folder, int[] ids, int steps, int blockTokens) {
    try (CausalLm model = CausalLm.load(folder);
        PagedRunner runner = new PagedRunner(model, blockTokens, 128, 1);
        ComputePool pool = ComputePool.ofCores()) {
      int vocab = model.vocabSize();
      int[][] table = runner.table(runner.rowsFor(ids.length + steps));
      float[] prefill = runner.prefill(ids, table, 64, pool);
      float[] logits = new float[steps * vocab];
      int[] greedy = new int[steps];
      int next = argmax(prefill, (ids.length - 1) * vocab, vocab);
      for (int s = 0; s < steps; s++) {
        greedy[s] = next;
        float[] row = runner.decode(next, ids.length + s, table, pool);
        System.arraycopy(row, 0, logits, s * vocab, vocab);
        next = PagedRunner.argmax(row);
      }
      return new CpuRun(prefill, logits, greedy);
    }
  }

  /**
   * {@code ids} through {@code m} in chunks of {@code chunks} (cycled), then the CPU's greedy ids
   * one a step, every chunk with {@code tables}; asserts the bounds and prints the errors as {@code
   * what}.
   */
  static void compare(
      String what,
      CudaCausalLm m,
      CudaKvCache kv,
      int[] ids,
      CpuRun cpu,
      int[] chunks,
      Tables tables,
      DType type) {
    int vocab = m.vocabSize();
    float[] gpu = new float[ids.length * vocab];
    int start = 0;
    for (int c = 0; start < ids.length; c++) {
      int end = Math.min(ids.length, start + chunks[c % chunks.length]);
      float[] rows =
          m.forward(
                  ForwardBatch.of(
                      new ForwardRequest(
                          Arrays.copyOfRange(ids, start, end), start, tables.of(start, end), true)),
                  kv)
              .logits(0);
      System.arraycopy(rows, 0, gpu, start * vocab, (end - start) * vocab);
      start = end;
    }
    int steps = cpu.ids().length;
    float[] gpuSteps = new float[steps * vocab];
    int same = 0;
    for (int s = 0; s < steps; s++) {
      int pos = ids.length + s;
      float[] row =
          m.forward(
                  ForwardBatch.of(
                      new ForwardRequest(
                          new int[] {cpu.ids()[s]}, pos, tables.of(pos, pos + 1), false)),
                  kv)
              .logits(0);
      System.arraycopy(row, 0, gpuSteps, s * vocab, vocab);
      same += argmax(gpuSteps, s * vocab, vocab) == argmax(cpu.steps(), s * vocab, vocab) ? 1 : 0;
    }
    double err = relative(gpu, cpu.prefill());
    double stepErr = relative(gpuSteps, cpu.steps());
    System.out.printf(
        Locale.ROOT,
        "%s %s: prefill vs the CPU model %.2e, decode %.2e, next ids equal at %d of %d steps%n",
        what,
        type,
        err,
        stepErr,
        same,
        steps);
    double bound = type == DType.BF16 ? BF16_RELATIVE : F32_RELATIVE;
    assertTrue(err <= bound, what + " " + type + " prefill: " + err);
    assertTrue(stepErr <= bound, what + " " + type + " decode: " + stepErr);
    if (type == DType.F32) {
      assertEquals(steps, same, what + ", float32: the CPU model's greedy ids");
    }
  }

  /**
   * In deterministic mode, one prompt's logits bit-identical whole, in chunks of 17, and with its
   * last 30 tokens batched with another prompt's prefill (the two requests' blocks disjoint: the
   * other's prefill must not write its rows).
   */
  static void assertBatchInvariant(String name, CudaCausalLm m, CudaKvCache kv) {
    int vocab = m.vocabSize();
    int[] a = RecurrentGpuTest.prompt(150, 21, vocab);
    int[] b = RecurrentGpuTest.prompt(90, 22, vocab);
    float[] whole =
        CudaCausalLmGpuTest.prefill(m, kv, a, RecurrentGpuTest.tables(kv, 1, a.length), a.length);
    float[] chunked =
        CudaCausalLmGpuTest.prefill(m, kv, a, RecurrentGpuTest.tables(kv, 2, a.length), 17);
    assertArrayEquals(whole, chunked, "chunks of 17 vs the whole prompt");
    // a's last 30 tokens batched with b's prefill, a's first 120 already in other blocks
    int[][][] disjoint = RecurrentGpuTest.disjointTables(kv, 3, a.length, b.length);
    int[][] ta = disjoint[0];
    CudaCausalLmGpuTest.prefill(m, kv, Arrays.copyOf(a, 120), ta, 120);
    ForwardResult r =
        m.forward(
            ForwardBatch.of(
                new ForwardRequest(b, 0, disjoint[1], false),
                new ForwardRequest(Arrays.copyOfRange(a, 120, 150), 120, ta, true)),
            kv);
    assertArrayEquals(
        Arrays.copyOfRange(whole, 120 * vocab, 150 * vocab),
        r.logits(1),
        "batched with another prompt's prefill");
    System.out.printf(
        Locale.ROOT,
        "%s, deterministic: 150 positions bit-identical whole, in chunks of 17 and batched%n",
        name);
  }
}

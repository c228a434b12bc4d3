package io.tokenspeed.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.model.kernel.ComputePool;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The exactness contract: a token's logits are bit-identical whatever the prefill chunking, the
 * other requests of the batch, the thread count and the physical blocks holding its KV. Compared as
 * raw float bits against one baseline: the whole prompt in one chunk, alone, on one thread, in
 * ascending blocks, followed by greedy decode steps.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ForwardExactnessTest {
  static final int BLOCK_TOKENS = 16;
  static final int DECODE_STEPS = 4;

  private final List<CausalLm> models = new ArrayList<>();
  private ComputePool oneThread;
  private ComputePool allCores;

  @BeforeAll
  void load() {
    models.add(CausalLm.load(Fixtures.folder("llama")));
    models.add(CausalLm.load(Fixtures.folder("qwen2")));
    models.add(CausalLm.load(Fixtures.folder("gemma3")));
    oneThread = ComputePool.ofThreads(1);
    allCores = ComputePool.ofThreads(Math.max(3, Runtime.getRuntime().availableProcessors()));
  }

  @AfterAll
  void close() {
    oneThread.close();
    allCores.close();
    models.forEach(CausalLm::close);
  }

  Stream<Arguments> cases() {
    return Stream.of(
        Arguments.of(0, "llama", 11L),
        Arguments.of(1, "qwen2", 23L),
        Arguments.of(2, "gemma3", 31L));
  }

  /** Prompt tokens and their greedy continuation, as one row per computed token. */
  record Trace(float[] promptLogits, float[][] stepLogits) {
    void assertBitIdentical(Trace other, String what) {
      assertArrayEquals(bits(promptLogits), bits(other.promptLogits), what + ": prompt logits");
      for (int s = 0; s < stepLogits.length; s++) {
        assertArrayEquals(bits(stepLogits[s]), bits(other.stepLogits[s]), what + ": step " + s);
      }
    }
  }

  static int[] bits(float[] a) {
    int[] out = new int[a.length];
    for (int i = 0; i < a.length; i++) {
      out[i] = Float.floatToRawIntBits(a[i]);
    }
    return out;
  }

  int[] prompt(long seed, int length, int vocab) {
    Random rnd = new Random(seed);
    int[] ids = new int[length];
    for (int i = 0; i < length; i++) {
      ids[i] = rnd.nextInt(vocab);
    }
    return ids;
  }

  Trace run(CausalLm model, int[] ids, int chunk, ComputePool pool, long blockSeed) {
    try (PagedRunner runner = new PagedRunner(model, BLOCK_TOKENS, 40, blockSeed)) {
      int[][] table = runner.table(runner.rowsFor(ids.length + DECODE_STEPS));
      float[] prompt = runner.prefill(ids, table, chunk, pool);
      int vocab = model.vocabSize();
      float[] last = Arrays.copyOfRange(prompt, prompt.length - vocab, prompt.length);
      float[][] steps = new float[DECODE_STEPS][];
      for (int s = 0; s < DECODE_STEPS; s++) {
        steps[s] = runner.decode(PagedRunner.argmax(last), ids.length + s, table, pool);
        last = steps[s];
      }
      return new Trace(prompt, steps);
    }
  }

  Trace baseline(CausalLm model, int[] ids) {
    return run(model, ids, ids.length, oneThread, -1);
  }

  @ParameterizedTest(name = "{1} seed {2}")
  @MethodSource("cases")
  void shouldGiveBitIdenticalLogitsWhateverThePrefillChunking(int m, String name, long seed) {
    CausalLm model = models.get(m);
    int[] ids = prompt(seed, 133, model.vocabSize());
    Trace base = baseline(model, ids);
    for (int chunk : new int[] {1, 7, 64}) {
      base.assertBitIdentical(run(model, ids, chunk, oneThread, -1), name + " chunk " + chunk);
    }
  }

  @ParameterizedTest(name = "{1} seed {2}")
  @MethodSource("cases")
  void shouldGiveBitIdenticalLogitsOnOneThreadAndAllCores(int m, String name, long seed) {
    CausalLm model = models.get(m);
    int[] ids = prompt(seed, 133, model.vocabSize());
    Trace base = baseline(model, ids);
    base.assertBitIdentical(
        run(model, ids, ids.length, allCores, -1), name + " threads=" + allCores.threads());
    base.assertBitIdentical(run(model, ids, 7, allCores, -1), name + " chunk 7 on all threads");
  }

  @ParameterizedTest(name = "{1} seed {2}")
  @MethodSource("cases")
  void shouldGiveBitIdenticalLogitsWhenKvLivesInShuffledBlocks(int m, String name, long seed) {
    CausalLm model = models.get(m);
    int[] ids = prompt(seed, 133, model.vocabSize());
    Trace base = baseline(model, ids);
    for (long blockSeed = seed; blockSeed < seed + 3; blockSeed++) {
      base.assertBitIdentical(
          run(model, ids, 64, allCores, blockSeed),
          name + " blocks shuffled with seed " + blockSeed);
    }
  }

  /**
   * Request A computed alone, then A's chunks computed inside batches holding other requests: one
   * in prefill, one decoding, placed before and after A, with their own (shuffled) blocks.
   */
  @ParameterizedTest(name = "{1} seed {2}")
  @MethodSource("cases")
  void shouldGiveBitIdenticalLogitsWhenBatchedWithOtherRequests(int m, String name, long seed) {
    CausalLm model = models.get(m);
    int vocab = model.vocabSize();
    int[] a = prompt(seed, 70, vocab);
    int[] b = prompt(seed + 1, 90, vocab);
    int[] c = prompt(seed + 2, 20, vocab);
    float[] alone;
    try (PagedRunner runner = new PagedRunner(model, BLOCK_TOKENS, 40, -1)) {
      alone = runner.prefill(a, runner.table(runner.rowsFor(a.length)), a.length, oneThread);
    }
    try (PagedRunner runner = new PagedRunner(model, BLOCK_TOKENS, 40, seed)) {
      int[][] ta = runner.table(runner.rowsFor(a.length));
      int[][] tb = runner.table(runner.rowsFor(b.length));
      int[][] tc = runner.table(runner.rowsFor(c.length + 8));
      runner.prefill(c, tc, c.length, allCores);
      float[] batched = new float[a.length * vocab];
      int chunk = 30;
      int bAt = 0;
      int cAt = c.length;
      for (int start = 0, round = 0; start < a.length; start += chunk, round++) {
        int end = Math.min(a.length, start + chunk);
        ForwardRequest ra = new ForwardRequest(Arrays.copyOfRange(a, start, end), start, ta, true);
        int bEnd = Math.min(b.length, bAt + 25);
        ForwardRequest rb = new ForwardRequest(Arrays.copyOfRange(b, bAt, bEnd), bAt, tb, true);
        ForwardRequest rc = new ForwardRequest(new int[] {(round * 37) % vocab}, cAt, tc, false);
        List<ForwardRequest> reqs = round % 2 == 0 ? List.of(rb, ra, rc) : List.of(rc, rb, ra);
        ForwardResult r = model.forward(new ForwardBatch(reqs), runner.kv(), allCores);
        float[] la = r.logits(reqs.indexOf(ra));
        assertEquals((end - start) * vocab, la.length);
        System.arraycopy(la, 0, batched, start * vocab, la.length);
        bAt = bEnd;
        cAt++;
      }
      assertArrayEquals(bits(alone), bits(batched), name + ": A alone vs batched");
    }
  }
}

package io.tokenspeed.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kv.PagedKvPool;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The State group of the recurrent models (Mamba, Jamba): logits are bit-identical whatever the
 * prefill chunking, the batch, the thread count and the physical slots and blocks; a request that
 * resumes from a published page-boundary checkpoint (copied to another slot) computes exactly what
 * one whole prefill computes; and an early token reaches the final logits through the state.
 *
 * <p>Pages are {@code P = 4 · 16 = 64} tokens ({@link PagedRunner}'s layout): the State group has
 * one slot per page, row i holding the checkpoint at boundary {@code (i+1)·P}.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class RecurrentStateTest {
  static final int BLOCK_TOKENS = 16;
  static final int PAGE = BLOCK_TOKENS * 4;
  static final int DECODE_STEPS = 4;

  private final Map<String, CausalLm> models = new java.util.TreeMap<>();
  private ComputePool oneThread;
  private ComputePool allCores;

  @BeforeAll
  void load() {
    models.put("mamba", CausalLm.load(Fixtures.folder("mamba")));
    models.put("jamba", CausalLm.load(Fixtures.folder("jamba")));
    oneThread = ComputePool.ofThreads(1);
    allCores = ComputePool.ofThreads(Math.max(3, Runtime.getRuntime().availableProcessors()));
  }

  @AfterAll
  void close() {
    oneThread.close();
    allCores.close();
    models.values().forEach(CausalLm::close);
  }

  Stream<Arguments> cases() {
    return Stream.of(Arguments.of("mamba", 31L), Arguments.of("jamba", 37L));
  }

  /** Prompt logits and the logits of greedy decode steps after it. */
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

  static int[] prompt(long seed, int length, int vocab) {
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

  @ParameterizedTest(name = "{0} seed {1}")
  @MethodSource("cases")
  void shouldGiveBitIdenticalLogitsWhateverThePrefillChunking(String name, long seed) {
    CausalLm model = models.get(name);
    int[] ids = prompt(seed, 133, model.vocabSize());
    Trace base = baseline(model, ids);
    for (int chunk : new int[] {1, 7, 64}) {
      base.assertBitIdentical(run(model, ids, chunk, oneThread, -1), name + " chunk " + chunk);
    }
  }

  @ParameterizedTest(name = "{0} seed {1}")
  @MethodSource("cases")
  void shouldGiveBitIdenticalLogitsOnOneThreadAndAllCores(String name, long seed) {
    CausalLm model = models.get(name);
    int[] ids = prompt(seed, 133, model.vocabSize());
    Trace base = baseline(model, ids);
    base.assertBitIdentical(
        run(model, ids, ids.length, allCores, -1), name + " threads=" + allCores.threads());
    base.assertBitIdentical(run(model, ids, 7, allCores, -1), name + " chunk 7 on all threads");
  }

  @ParameterizedTest(name = "{0} seed {1}")
  @MethodSource("cases")
  void shouldGiveBitIdenticalLogitsWhenStateLivesInOtherSlots(String name, long seed) {
    CausalLm model = models.get(name);
    int[] ids = prompt(seed, 133, model.vocabSize());
    Trace base = baseline(model, ids);
    for (long blockSeed = seed; blockSeed < seed + 3; blockSeed++) {
      base.assertBitIdentical(
          run(model, ids, 50, allCores, blockSeed),
          name + " slots and blocks shuffled with seed " + blockSeed);
    }
  }

  /** A computed alone, then A's chunks inside batches with a prefilling and a decoding request. */
  @ParameterizedTest(name = "{0} seed {1}")
  @MethodSource("cases")
  void shouldGiveBitIdenticalLogitsWhenBatchedWithOtherRequests(String name, long seed) {
    CausalLm model = models.get(name);
    int vocab = model.vocabSize();
    int[] a = prompt(seed, 140, vocab);
    int[] b = prompt(seed + 1, 150, vocab);
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

  /**
   * Request 1 prefills in chunks of {@code chunk} tokens (crossing page boundaries inside chunks),
   * publishing a checkpoint at every multiple of P. Request 2 starts at {@code P·k} from that
   * checkpoint copied to a fresh slot (its other state rows are holes: the two-slot contract),
   * shares request 1's KV blocks below {@code P·k}, and prefills the rest: its logits and decode
   * steps are bit-identical to one whole prefill's.
   */
  @ParameterizedTest(name = "{0} seed {1}")
  @MethodSource("cases")
  void shouldResumeBitIdenticallyFromAPublishedPageBoundaryCheckpoint(String name, long seed) {
    CausalLm model = models.get(name);
    int vocab = model.vocabSize();
    int[] ids = prompt(seed, 133, vocab);
    Trace whole = baseline(model, ids);
    int stateGroup = stateGroup(model);
    for (int[] kc : new int[][] {{1, 50}, {2, 64}, {2, 33}, {1, 1}}) {
      int k = kc[0];
      int chunk = kc[1];
      int boundary = PAGE * k;
      try (PagedRunner runner = new PagedRunner(model, BLOCK_TOKENS, 40, seed + k)) {
        int[][] first = runner.table(runner.rowsFor(ids.length));
        runner.prefill(ids, first, chunk, allCores);

        int[][] second = runner.table(runner.rowsFor(ids.length + DECODE_STEPS));
        for (int g = 0; g < second.length; g++) {
          int bg = runner.kv().layout().group(g).blockGranularity();
          if (g == stateGroup) {
            Arrays.fill(second[g], 0, k - 1, 0);
            int copy = runner.block(g);
            PagedKvPool pool = runner.kv().pool(g);
            MemorySegment.copy(
                pool.block(first[g][k - 1]), 0, pool.block(copy), 0, pool.bytesPerBlock());
            second[g][k - 1] = copy;
          } else {
            System.arraycopy(first[g], 0, second[g], 0, boundary / bg);
          }
        }
        int[] rest = Arrays.copyOfRange(ids, boundary, ids.length);
        float[] got =
            model
                .forward(
                    ForwardBatch.of(new ForwardRequest(rest, boundary, second, true)),
                    runner.kv(),
                    oneThread)
                .logits(0);
        String what = name + " resumed at " + boundary + " after chunks of " + chunk;
        assertArrayEquals(
            bits(Arrays.copyOfRange(whole.promptLogits(), boundary * vocab, ids.length * vocab)),
            bits(got),
            what);
        float[] last = Arrays.copyOfRange(got, got.length - vocab, got.length);
        for (int s = 0; s < DECODE_STEPS; s++) {
          last = runner.decode(PagedRunner.argmax(last), ids.length + s, second, allCores);
          assertArrayEquals(bits(whole.stepLogits()[s]), bits(last), what + ": step " + s);
        }
      }
    }
  }

  /** Changing one early token changes the last logits, carried only by the state (and KV). */
  @ParameterizedTest(name = "{0} seed {1}")
  @MethodSource("cases")
  void shouldChangeFinalLogitsWhenOneEarlyTokenChanges(String name, long seed) {
    CausalLm model = models.get(name);
    int vocab = model.vocabSize();
    int[] ids = prompt(seed, 133, vocab);
    int changed = 2;
    int[] other = ids.clone();
    other[changed] = (ids[changed] + 1 + new Random(seed).nextInt(vocab - 1)) % vocab;
    float[] base;
    float[] altered;
    try (PagedRunner runner = new PagedRunner(model, BLOCK_TOKENS, 40, seed)) {
      base = runner.prefill(ids, runner.table(runner.rowsFor(ids.length)), 64, allCores);
      altered = runner.prefill(other, runner.table(runner.rowsFor(ids.length)), 64, allCores);
    }
    assertArrayEquals(
        bits(Arrays.copyOf(base, changed * vocab)),
        bits(Arrays.copyOf(altered, changed * vocab)),
        "positions before the change must not move");
    float[] lastBase = Arrays.copyOfRange(base, base.length - vocab, base.length);
    float[] lastAltered = Arrays.copyOfRange(altered, altered.length - vocab, altered.length);
    double delta = HfFixtureTestBase.maxAbsDelta(lastBase, lastAltered);
    assertTrue(delta > 1e-6, name + " final logits moved by only " + delta);
  }

  @Test
  void shouldDeriveStateGroupNextToFullGroupForJamba() {
    CacheLayout layout = models.get("jamba").cacheLayout(PAGE, BLOCK_TOKENS);
    assertEquals(2, layout.numGroups());
    CacheGroupSpec state = layout.group(0);
    assertEquals(new GroupKind.StateCheckpoints(), state.kind());
    assertEquals(PAGE, state.blockGranularity());
    assertEquals(new Sharding.Replicated(), state.sharding());
    long conv = 128L * 3 * 4;
    long ssm = 128L * 8 * 4;
    assertEquals(
        List.of(
            new CacheField("layers.0.conv", conv),
            new CacheField("layers.0.ssm", ssm),
            new CacheField("layers.2.conv", conv),
            new CacheField("layers.2.ssm", ssm)),
        state.fields());
    CacheGroupSpec full = layout.group(1);
    assertEquals(new GroupKind.FullHistory(), full.kind());
    assertEquals(BLOCK_TOKENS, full.blockGranularity());
    long kv = 2L * BLOCK_TOKENS * 16 * 4;
    assertEquals(
        List.of(
            new CacheField("layers.1.k", kv),
            new CacheField("layers.1.v", kv),
            new CacheField("layers.3.k", kv),
            new CacheField("layers.3.v", kv)),
        full.fields());
    assertEquals("float32", layout.dtype());

    CacheLayout mamba = models.get("mamba").cacheLayout(PAGE, BLOCK_TOKENS);
    assertEquals(1, mamba.numGroups());
    assertEquals(new GroupKind.StateCheckpoints(), mamba.group(0).kind());
    assertEquals(2 * (conv + ssm), mamba.group(0).bytesPerBlock());
  }

  @Test
  void shouldRejectAResumeWithoutAnInputCheckpoint() {
    CausalLm model = models.get("mamba");
    try (PagedRunner runner = new PagedRunner(model, BLOCK_TOKENS, 8, -1)) {
      int[][] table = runner.table(runner.rowsFor(2 * PAGE));
      table[0][0] = 0;
      ForwardRequest req = new ForwardRequest(new int[] {1, 2}, PAGE, table, false);
      IllegalArgumentException e =
          assertThrows(
              IllegalArgumentException.class,
              () -> model.forward(ForwardBatch.of(req), runner.kv(), oneThread));
      assertTrue(e.getMessage().contains("state row 0 slot id=0"), e.getMessage());
    }
  }

  private static int stateGroup(CausalLm model) {
    CacheLayout layout = model.cacheLayout(PAGE, BLOCK_TOKENS);
    List<Integer> found = new ArrayList<>();
    for (int g = 0; g < layout.numGroups(); g++) {
      if (layout.group(g).kind() instanceof GroupKind.StateCheckpoints) {
        found.add(g);
      }
    }
    assertEquals(1, found.size());
    return found.getFirst();
  }
}

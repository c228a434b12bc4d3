package io.tokenspeed.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.kernel.ComputePool;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Checks a model against the outputs Hugging Face transformers produced for the same checkpoint:
 * logits at every prompt position, the greedy continuation computed with the paged KV cache (one
 * token per step), and the logits of every decode step, all within {@link #TOLERANCE}.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class HfFixtureTestBase {
  /** Absolute tolerance on logits (float32, different summation orders). */
  static final double TOLERANCE = 1e-4;

  static final int BLOCK_TOKENS = 16;

  private CausalLm model;
  private Fixtures.Reference reference;
  private ComputePool pool;
  private double maxPrefillDelta;
  private double maxStepDelta;

  /** The fixture folder name. */
  abstract String fixture();

  @BeforeAll
  void load() {
    model = CausalLm.load(Fixtures.folder(fixture()));
    reference = new Fixtures.Reference(fixture());
    pool = ComputePool.ofCores();
  }

  @AfterAll
  void report() {
    System.out.printf(
        "%s: max |dlogit| prefill=%.3g decode=%.3g%n", fixture(), maxPrefillDelta, maxStepDelta);
    pool.close();
    reference.close();
    model.close();
  }

  @ParameterizedTest(name = "prompt {0}")
  @ValueSource(ints = {0, 1, 2})
  void shouldMatchReferenceLogitsAtEveryPromptPosition(int prompt) {
    int[] ids = reference.ids(prompt);
    float[] want = reference.logits(prompt);
    try (PagedRunner runner = new PagedRunner(model, BLOCK_TOKENS, 64, prompt)) {
      float[] got = runner.prefill(ids, runner.table(runner.rowsFor(ids.length)), ids.length, pool);
      assertEquals(want.length, got.length);
      double delta = maxAbsDelta(want, got);
      maxPrefillDelta = Math.max(maxPrefillDelta, delta);
      assertTrue(
          delta <= TOLERANCE,
          fixture() + " prompt " + prompt + " max |dlogit|=" + delta + " > " + TOLERANCE);
    }
  }

  @ParameterizedTest(name = "prompt {0}")
  @ValueSource(ints = {0, 1, 2})
  void shouldMatchReferenceGreedyContinuationAndStepLogits(int prompt) {
    int[] ids = reference.ids(prompt);
    int[] wantIds = reference.greedy(prompt);
    float[] wantSteps = reference.steps(prompt);
    int vocab = model.vocabSize();
    int steps = wantIds.length;
    int[] gotIds = new int[steps];
    try (PagedRunner runner = new PagedRunner(model, BLOCK_TOKENS, 64, 100 + prompt)) {
      int[][] table = runner.table(runner.rowsFor(ids.length + steps));
      float[] prefill = runner.prefill(ids, table, ids.length, pool);
      float[] logits =
          java.util.Arrays.copyOfRange(prefill, (ids.length - 1) * vocab, ids.length * vocab);
      for (int s = 0; s < steps; s++) {
        float[] want = java.util.Arrays.copyOfRange(wantSteps, s * vocab, (s + 1) * vocab);
        double delta = maxAbsDelta(want, logits);
        maxStepDelta = Math.max(maxStepDelta, delta);
        assertTrue(
            delta <= TOLERANCE,
            fixture() + " prompt " + prompt + " step " + s + " max |dlogit|=" + delta);
        gotIds[s] = PagedRunner.argmax(logits);
        if (s + 1 < steps) {
          logits = runner.decode(gotIds[s], ids.length + s, table, pool);
        }
      }
    }
    assertArrayEquals(wantIds, gotIds, fixture() + " prompt " + prompt + " greedy ids");
  }

  static double maxAbsDelta(float[] a, float[] b) {
    double m = 0;
    for (int i = 0; i < a.length; i++) {
      m = Math.max(m, Math.abs((double) a[i] - b[i]));
    }
    return m;
  }
}

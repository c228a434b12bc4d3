package io.tokenspeed.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.kernel.ComputePool;
import java.util.Arrays;
import java.util.Random;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The forward pass really reads the paged KV: changing one early token of a long prompt changes the
 * final logits (through attention alone: the last token is unchanged), while positions before the
 * change stay bit-identical (causality).
 */
class DependenceTest {

  @ParameterizedTest(name = "{0} seed {1} changed position {2}")
  @CsvSource({"llama, 5, 3", "qwen2, 6, 1", "llama, 7, 20"})
  void shouldChangeFinalLogitsWhenOneEarlyTokenChanges(String fixture, long seed, int changed) {
    try (CausalLm model = CausalLm.load(Fixtures.folder(fixture));
        ComputePool pool = ComputePool.ofCores()) {
      int vocab = model.vocabSize();
      Random rnd = new Random(seed);
      int[] ids = new int[133];
      for (int i = 0; i < ids.length; i++) {
        ids[i] = rnd.nextInt(vocab);
      }
      int[] other = ids.clone();
      other[changed] = (ids[changed] + 1 + rnd.nextInt(vocab - 1)) % vocab;
      float[] base;
      float[] altered;
      try (PagedRunner runner = new PagedRunner(model, 16, 24, seed)) {
        base = runner.prefill(ids, runner.table(runner.rowsFor(ids.length)), 64, pool);
        altered = runner.prefill(other, runner.table(runner.rowsFor(ids.length)), 64, pool);
      }
      assertArrayEquals(
          Arrays.copyOf(base, changed * vocab),
          Arrays.copyOf(altered, changed * vocab),
          "positions before the change must not move");
      float[] lastBase = Arrays.copyOfRange(base, base.length - vocab, base.length);
      float[] lastAltered = Arrays.copyOfRange(altered, altered.length - vocab, altered.length);
      double delta = HfFixtureTestBase.maxAbsDelta(lastBase, lastAltered);
      assertTrue(delta > 1e-6, "final logits moved by only " + delta);
    }
  }
}
